"""The local transport runs argv literally, enforces timeouts and tracks background processes."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from flows.cluster.transport import LocalTransport, shell_command
from flows.cluster.transport.base import background_command, parse_pid, ps_state_alive
from flows.errors import TransportError
from tests.support.waiting import wait_until

HOSTILE = ["x; rm -rf /", "$(touch {canary})", "`touch {canary}`", "a'b\"c", "*", "--x", "\n"]


def hostile_args(canary: Path) -> list[str]:
    return [item.format(canary=canary) for item in HOSTILE]


def test_run_returns_output_and_rc(tmp_path: Path) -> None:
    transport = LocalTransport("n0")
    result = transport.run(["sh", "-c", "echo out; echo err >&2; exit 3"], cwd=str(tmp_path))
    assert (result.rc, result.stdout, result.stderr) == (3, "out\n", "err\n")
    assert result.node == "n0"
    with pytest.raises(TransportError, match=r"n0: .* exited 3: err"):
        result.check()


def test_env_and_cwd_are_applied(tmp_path: Path) -> None:
    result = LocalTransport().run(
        ["sh", "-c", 'echo "$SG_X"; pwd'], env={"SG_X": "v a l"}, cwd=str(tmp_path)
    )
    assert result.stdout.splitlines() == ["v a l", str(tmp_path)]


def test_invalid_env_name_is_refused() -> None:
    with pytest.raises(TransportError, match="invalid environment variable name"):
        LocalTransport().run(["true"], env={"A;B": "1"})


def test_timeout_kills_and_raises() -> None:
    began = time.monotonic()
    with pytest.raises(TransportError, match=r"timed out after 0\.5 s"):
        LocalTransport().run(["sleep", "30"], timeout=0.5)
    assert time.monotonic() - began < 20


def test_missing_program_is_a_transport_error() -> None:
    with pytest.raises(TransportError, match="cannot run"):
        LocalTransport().run(["/nonexistent/program"])


def test_hostile_arguments_are_passed_literally(tmp_path: Path) -> None:
    canary = tmp_path / "pwned"
    args = hostile_args(canary)
    result = LocalTransport().run(["printf", "%s\\0", *args], check=True)
    assert result.stdout.split("\0")[:-1] == args
    assert not canary.exists()


def test_shell_command_text_is_literal_under_a_real_shell(tmp_path: Path) -> None:
    """What the ssh transport sends is run by the remote shell: check it with a real sh."""
    canary = tmp_path / "pwned"
    args = hostile_args(canary)
    text = shell_command(["printf", "%s\\0", *args], env={"SG_Y": "$(touch x)"}, cwd=str(tmp_path))
    out = subprocess.run(["sh", "-c", text], capture_output=True, check=True, text=True).stdout
    assert out.split("\0")[:-1] == args
    assert not canary.exists()
    assert list(tmp_path.iterdir()) == []


def test_background_command_text_is_literal_and_prints_group_pid(tmp_path: Path) -> None:
    canary = tmp_path / "pwned"
    weird_dir = tmp_path / "d; touch pwned"
    weird_dir.mkdir()
    log = weird_dir / "out $(x).log"
    text = background_command(
        ["sh", "-c", 'echo "$0|$SG_Z"; echo e >&2; exec sleep 30', f"$(touch {canary})"],
        stdout_path=str(log),
        env={"SG_Z": "`touch x`"},
        cwd=str(weird_dir),
    )
    out = subprocess.run(["sh", "-c", text], capture_output=True, check=True, text=True).stdout
    pid = parse_pid("n", out)
    try:
        pgid = int(
            subprocess.run(
                ["ps", "-o", "pgid=", "-p", str(pid)], capture_output=True, text=True, check=True
            ).stdout
        )
        assert pgid == pid
        wait_until(lambda: log.read_text().count("\n") >= 2, 10, "two log lines", interval_s=0.05)
        assert sorted(log.read_text().splitlines()) == sorted([f"$(touch {canary})|`touch x`", "e"])
        assert not canary.exists()
        assert sorted(p.name for p in weird_dir.iterdir()) == [log.name]
    finally:
        LocalTransport().kill(pid, signal.SIGKILL)


def test_start_is_alive_and_kill_group(tmp_path: Path) -> None:
    transport = LocalTransport()
    out = tmp_path / "out.log"
    err = tmp_path / "err.log"
    pid = transport.start(
        ["sh", "-c", "echo hello; echo oops >&2; sleep 30 & wait"],
        stdout_path=str(out),
        stderr_path=str(err),
    )
    assert transport.is_alive(pid)
    wait_until(lambda: out.exists() and err.read_text(), 10, "both outputs", interval_s=0.05)
    transport.kill(pid, signal.SIGTERM)
    wait_until(lambda: not transport.is_alive(pid), 10, "the group to end", interval_s=0.05)
    assert out.read_text() == "hello\n"
    assert err.read_text() == "oops\n"
    group = subprocess.run(["pgrep", "-g", str(pid)], check=False, capture_output=True, text=True)
    survivors = [int(item) for item in group.stdout.split()]
    assert not [item for item in survivors if transport.is_alive(item)]  # zombies may linger
    transport.kill(pid)  # already gone: not an error


def test_is_alive_of_foreign_pid() -> None:
    transport = LocalTransport()
    assert transport.is_alive(1)
    assert not transport.is_alive(2**22 + 12345)


def test_files_roundtrip(tmp_path: Path) -> None:
    transport = LocalTransport()
    source = tmp_path / "a.txt"
    source.write_text("data")
    transport.put(source, str(tmp_path / "b.txt"))
    transport.get(str(tmp_path / "b.txt"), tmp_path / "c.txt")
    assert (tmp_path / "c.txt").read_text() == "data"
    transport.write_text(str(tmp_path / "d.txt"), "text")
    assert transport.read_text(str(tmp_path / "d.txt")) == "text"
    with pytest.raises(TransportError, match="cannot read"):
        transport.read_text(str(tmp_path / "missing"))


@pytest.mark.parametrize(
    ("ps_output", "alive"), [("S\n", True), ("R+", True), ("Z", False), ("", False), ("X", False)]
)
def test_ps_state(ps_output: str, alive: bool) -> None:
    assert ps_state_alive(ps_output) is alive


def test_parse_pid_rejects_garbage() -> None:
    assert parse_pid("n", "noise\n123\n") == 123
    with pytest.raises(TransportError, match="no pid"):
        parse_pid("n", "sh: setsid: not found\n")
