"""Attack: the SSH transport put env values in the remote command text (public on the node).

The ssh transport now builds its exec request from `env_over_stdin` + `shell_command`: the text
names no value, and the values travel on stdin. Here that very text and stdin are run by a real
`sh`, as sshd runs them, with hostile values; the lab test `tests/lab/test_secrets_ssh_env.py`
does the same through real sshd hosts.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from flows.cluster.transport.base import background_command, env_over_stdin, shell_command
from flows.errors import TransportError
from tests.support.waiting import wait_until

SECRET = "hf_ssh-env-secret-value-7c1e"
HOSTILE = [SECRET, "a'b\"c", "$(touch {canary})", "`touch {canary}`", "x\ny\n", "", "\\n;|&"]


def test_ssh_env_values_travel_on_stdin_not_in_the_command_text(tmp_path: Path) -> None:
    canary = tmp_path / "pwned"
    values = {f"SG_V{i}": item.format(canary=canary) for i, item in enumerate(HOSTILE)}
    prelude, stdin = env_over_stdin(values)
    names = " ".join(f'"${name}"' for name in values)
    text = prelude + shell_command(
        ["sh", "-c", f'printf "%s\\0" {names} "$PWD"'], cwd=str(tmp_path)
    )
    assert SECRET not in text
    done = subprocess.run(["sh", "-c", text], input=stdin, capture_output=True, check=True)
    assert done.stdout.decode().split("\0")[:-1] == [*values.values(), str(tmp_path)]
    assert not canary.exists()


def test_ssh_env_over_stdin_reaches_a_background_process(tmp_path: Path) -> None:
    log = tmp_path / "out.log"
    prelude, stdin = env_over_stdin({"HF_TOKEN": SECRET})
    text = prelude + background_command(
        ["sh", "-c", 'printf "%s" "$HF_TOKEN"'], stdout_path=str(log)
    )
    assert SECRET not in text
    done = subprocess.run(["sh", "-c", text], input=stdin, capture_output=True, check=True)
    pid = int(done.stdout.split()[-1])
    assert pid > 0
    wait_until(lambda: log.read_text() == SECRET, 10, "the background process's output")


def test_ssh_env_names_cannot_smuggle_shell() -> None:
    assert env_over_stdin(None) == ("", b"")
    with pytest.raises(TransportError, match="invalid environment variable name"):
        env_over_stdin({"X=1; touch /tmp/p #": "v"})
