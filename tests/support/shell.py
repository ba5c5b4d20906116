"""A command line run as a person pastes it into a terminal: by bash, `sparkgate` on PATH."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path


def paste(command: str, env: Mapping[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run `command` with bash in `cwd`, this interpreter's scripts (`sparkgate`) first on PATH."""
    path = f"{Path(sys.executable).parent}:{env.get('PATH', os.environ.get('PATH', ''))}"
    return subprocess.run(
        ["bash", "-c", command], env={**env, "PATH": path}, cwd=cwd, capture_output=True,
        text=True, timeout=120, check=False,
    )  # fmt: skip
