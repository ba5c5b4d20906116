"""Attack: `extends:` naming a FIFO hung `validate` forever (the read waits for a writer), and
a device never ends. Spec files are now opened without blocking and refused, with exit 2 naming
the file, unless they are regular files: the file given on the command line and every
`extends` target alike."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.overlays import ROOT


def validate(path: Path) -> subprocess.CompletedProcess[str]:
    """`sparkgate validate PATH` in its own process: a hang is a timeout, not a stuck suite."""
    return subprocess.run(
        [sys.executable, "-m", "flows", "validate", str(path)],
        capture_output=True, text=True, timeout=60, cwd=ROOT, check=False,
    )  # fmt: skip


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    (tmp_path / "config").mkdir()
    path = tmp_path / "config" / "base.yaml"
    os.mkfifo(path)
    return path


def test_an_extends_naming_a_fifo_is_refused_not_waited_on(fifo: Path) -> None:
    overlay = fifo.parent / "cluster.yaml"
    overlay.write_text("extends: base.yaml\nset:\n  name: x\n")
    done = validate(overlay)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "not a regular file" in done.stderr
    assert "base.yaml" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_fifo_given_as_the_spec_is_refused(fifo: Path) -> None:
    done = validate(fifo)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "not a regular file" in done.stderr
