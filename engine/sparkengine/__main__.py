"""`python -m sparkengine`."""

import sys

from sparkengine.cli import main

sys.exit(main())
