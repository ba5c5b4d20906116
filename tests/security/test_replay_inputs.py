"""Attacks on `sparkgate replay LOG`: a JSON line 200,000 levels deep raised RecursionError, a
log naming /dev/zero ran out of memory, a 1 GiB log took 2.1 GB, and a matched line's raw ANSI
escapes reached the terminal. Logs are now read bounded (a regular file, at most 64 MiB, lines
cut at 64 KiB), a line too deep to read is a clean exit 2, and printed lines show escapes
instead of obeying them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.overlays import ROOT

VLLM = ROOT / "config" / "engines" / "vllm-recipe.yaml"


def replay(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flows", "replay", *args],
        capture_output=True, text=True, timeout=120, cwd=ROOT, check=False,
    )  # fmt: skip


def test_a_line_nested_200k_deep_is_no_event_and_no_crash(tmp_path: Path) -> None:
    # The boot-log reader treats such a line like any unparseable one (as the cold-boots gate
    # does, flows/cluster/boot/timeline.py): before, json.loads raised RecursionError out of it.
    log = tmp_path / "n0.log"
    log.write_text('{"event": "start"}\n' + "[" * 200_000 + "]" * 200_000 + "\n")
    done = replay(str(log))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert "RecursionError" not in done.stdout + done.stderr
    assert "boot replayed through" in done.stdout


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_a_device_is_refused_not_read(device: str) -> None:
    done = replay(device)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "not a regular file" in done.stderr


def test_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "n0.log"
    os.mkfifo(fifo)
    done = replay(str(fifo))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "not a regular file" in done.stderr


def test_a_log_over_the_cap_is_refused_before_it_is_held(tmp_path: Path) -> None:
    log = tmp_path / "n0.log"
    with log.open("wb") as stream:  # sparse: 1 GiB on paper, nothing on disk
        stream.truncate(1 << 30)
    done = subprocess.run(  # 600 MB of address space could not hold it twice, or once decoded
        ["sh", "-c", f'ulimit -v 1200000; exec "{sys.executable}" -m flows replay "{log}"'],
        capture_output=True, text=True, timeout=120, cwd=ROOT, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "log over 64 MiB" in done.stderr


def test_escapes_in_a_matched_line_are_shown_not_obeyed(tmp_path: Path) -> None:
    log = tmp_path / "dgx\x1b[2J1.log"
    log.write_text("JIT compilation during inference \x1b]0;owned\x07 \x1b[2J\r\x9b31m\n")
    done = replay(str(log), "--engine", str(VLLM))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "JIT compilation during inference" in done.stdout
    for raw in ("\x1b", "\x07", "\r", "\x9b"):
        assert raw not in done.stdout + done.stderr
    assert "\\x1b[2J" in done.stdout
