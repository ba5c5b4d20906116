"""Attack: the SSH transport passed env values on the command line.

`env -- HF_TOKEN=... prog` was the text of the ssh exec request, so the value stood in the
remote shell's command line (`ps`, /proc/*/cmdline, readable by every user of the node) and in
any log of exec requests. Now a command's environment travels on the session's stdin, which the
remote shell reads and exports before it runs the command; the exec request names no value.

Against the lab's real sshd hosts: every exec request is captured as paramiko sends it, every
command line on the machine is searched while the process runs, and the remote process must still
see the value (its /proc/PID/environ, and what a command prints).
"""

from __future__ import annotations

import signal
from pathlib import Path

import paramiko
import pytest

from tests.support.lab import Lab
from tests.support.waiting import wait_until

pytestmark = pytest.mark.lab

SECRET = "hf_ssh-env-secret-value-7c1e"
HOSTILE = f'{SECRET}\n\'$(touch pwned)`x` "q"; exit 9'


@pytest.fixture
def exec_requests(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every command string the transport sends in an exec request."""
    sent: list[str] = []
    original = paramiko.Channel.exec_command

    def record(channel: paramiko.Channel, command: str | bytes) -> None:
        sent.append(command.decode() if isinstance(command, bytes) else command)
        original(channel, command)

    monkeypatch.setattr(paramiko.Channel, "exec_command", record)
    return sent


def _command_lines_holding(value: str) -> list[str]:
    """Command lines of every process on this machine (the lab hosts share its pids) that
    hold `value`."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile
            continue
        if value in text:
            found.append(f"{cmdline.parent.name}: {text}")
    return found


def test_ssh_env_values_never_reach_the_remote_command_line(
    lab: Lab, exec_requests: list[str], tmp_path: Path
) -> None:
    transport = lab.transport(0)
    log = tmp_path / "sleeper.log"
    pid = 0
    try:
        printed = transport.run(
            ["sh", "-c", 'printf "%s" "$HF_TOKEN"; printf "|%s" "$PWD"'],
            env={"HF_TOKEN": HOSTILE, "SG_PLAIN": "1"},
            cwd=str(tmp_path),
            check=True,
        )
        assert printed.stdout == f"{HOSTILE}|{tmp_path}"
        pid = transport.start(
            ["sh", "-c", 'echo "started ${#HF_TOKEN}"; exec sleep 60'],
            stdout_path=str(log),
            env={"HF_TOKEN": SECRET},
        )
        wait_until(lambda: log.is_file() and "started" in log.read_text(), 10, "the sleeper")
        assert log.read_text() == f"started {len(SECRET)}\n"
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert f"HF_TOKEN={SECRET}".encode() in environ  # the remote process sees it
        assert _command_lines_holding(SECRET) == []
    finally:
        if pid:
            transport.kill(pid, signal.SIGKILL)
        transport.close()
    assert exec_requests, "no exec request was captured"
    assert [text for text in exec_requests if SECRET in text] == []
    assert not (tmp_path / "pwned").exists()
