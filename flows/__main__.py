"""`python -m flows` is the same as the `sparkgate` command."""

import sys

from flows.cli import main

sys.exit(main())
