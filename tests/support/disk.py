"""A real full disk for fault tests: a 64 KiB tmpfs (root only), so ENOSPC comes from a kernel
filesystem rather than a mock, and a way to take every free block of it."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs mounted under the test's folder, unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(folder: Path) -> None:
    """Take every free block of the filesystem holding `folder`."""
    try:
        with (folder / "filler").open("wb", buffering=0) as stream:
            while True:
                stream.write(b"\0" * 4096)
    except OSError as error:
        if error.errno != errno.ENOSPC:
            raise
