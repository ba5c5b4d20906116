"""The ssh transport against real sshd hosts: commands, quoting, files, processes, host keys."""

from __future__ import annotations

import logging
import signal
import threading
import time
from pathlib import Path

import pytest

from flows.cluster.transport import SshTransport
from flows.errors import HostKeyError, TransportError
from tests.support.lab import Lab
from tests.support.waiting import wait_until

pytestmark = pytest.mark.lab

HOSTILE = ["x; rm -rf /", "$(touch {canary})", "`touch {canary}`", "a'b\"c", "*", "\n|&<>"]


def test_commands_run_on_each_host(lab: Lab) -> None:
    for index, host in enumerate(lab.state.hosts):
        transport = lab.transport(index)
        try:
            result = transport.run(["ip", "-4", "-o", "addr", "show", "dev", "eth0"], check=True)
            assert f"inet {host.address}/" in result.stdout
            failed = transport.run(["sh", "-c", "echo bad >&2; exit 7"])
            assert (failed.rc, failed.stderr) == (7, "bad\n")
        finally:
            transport.close()


def test_hostile_arguments_env_and_cwd_stay_literal(lab: Lab, tmp_path: Path) -> None:
    canary = tmp_path / "pwned"
    args = [item.format(canary=canary) for item in HOSTILE]
    weird = tmp_path / "dir; touch pwned; $(touch pwned)"
    weird.mkdir()
    transport = lab.transport(0)
    try:
        result = transport.run(
            ["sh", "-c", 'printf "%s\\0" "$@"; printf "%s\\0" "$SG_V" "$PWD"', "sh", *args],
            env={"SG_V": f"$(touch {canary})"},
            cwd=str(weird),
            check=True,
        )
    finally:
        transport.close()
    assert result.stdout.split("\0")[:-1] == [*args, f"$(touch {canary})", str(weird)]
    assert not canary.exists()
    assert list(weird.iterdir()) == []


def test_files_roundtrip_over_sftp(lab: Lab, tmp_path: Path) -> None:
    source = tmp_path / "in.bin"
    source.write_bytes(bytes(range(256)) * 1000)
    remote = str(tmp_path / "remote $(x).bin")
    transport = lab.transport(1)
    try:
        transport.put(source, remote)
        transport.get(remote, tmp_path / "back.bin")
        transport.write_text(str(tmp_path / "t.txt"), "héllo\n")
        assert transport.read_text(str(tmp_path / "t.txt")) == "héllo\n"
        with pytest.raises(TransportError, match="cannot read"):
            transport.read_text(str(tmp_path / "missing"))
    finally:
        transport.close()
    assert (tmp_path / "back.bin").read_bytes() == source.read_bytes()


def test_background_process_lives_in_its_own_group_and_is_killed(lab: Lab, tmp_path: Path) -> None:
    log = tmp_path / "rank.log"
    transport = lab.transport(2)
    try:
        pid = transport.start(
            ["sh", "-c", 'echo "started $SG_R"; sleep 60 & wait'],
            stdout_path=str(log),
            env={"SG_R": "2"},
        )
        assert transport.is_alive(pid)
        pgid = transport.run(["ps", "-o", "pgid=", "-p", str(pid)], check=True).stdout
        assert int(pgid) == pid
        wait_until(lambda: "started" in log.read_text(), 10, "the log line", interval_s=0.05)
        transport.close()  # the process must survive the connection
        assert transport.is_alive(pid)
        transport.kill(pid, signal.SIGTERM)
        wait_until(lambda: not transport.is_alive(pid), 10, "the group to end", interval_s=0.05)
        transport.kill(pid)  # gone already: fine
    finally:
        transport.close()
    assert log.read_text() == "started 2\n"


def test_a_timeout_does_not_break_commands_running_beside_it(lab: Lab) -> None:
    transport = lab.transport(0)
    try:
        transport.run(["true"])
        results: list[str] = []
        beside = threading.Thread(
            target=lambda: results.append(
                transport.run(["sh", "-c", "sleep 2; echo done"], check=True).stdout
            )
        )
        beside.start()
        with pytest.raises(TransportError, match="timed out"):
            transport.run(["sleep", "10"], timeout=0.5)
        beside.join()
        assert results == ["done\n"]
    finally:
        transport.close()


def test_one_connection_is_shared_by_threads(lab: Lab) -> None:
    transport = lab.transport(0)
    outputs: list[str] = []
    try:
        transport.run(["true"])
        first_client = transport._client

        def work(index: int) -> None:
            outputs.append(transport.run(["echo", str(index)], check=True).stdout.strip())

        threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert transport._client is first_client
    finally:
        transport.close()
    assert sorted(outputs, key=int) == [str(i) for i in range(8)]


def test_a_timed_out_command_does_not_keep_running_on_the_node(lab: Lab) -> None:
    transport = lab.transport(1)
    marker = "sg-timeout-marker"
    try:
        with pytest.raises(TransportError, match=r"timed out after 1 s"):
            transport.run(["sh", "-c", f"sleep 60; echo {marker}", marker], timeout=1)
        pattern = f"[s]leep 60; echo {marker}"  # [s] keeps pgrep from matching its own wrapper
        wait_until(
            lambda: transport.run(["pgrep", "-f", pattern]).rc == 1, 15,
            "the timed-out command to be gone", interval_s=0.2,
            detail=lambda: transport.run(["pgrep", "-af", pattern]).stdout,
        )  # fmt: skip
    finally:
        transport.close()


def test_unknown_host_key_is_refused(lab: Lab, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    transport = lab.transport(0, known_hosts=empty)
    with pytest.raises(HostKeyError, match=r"unknown .*SHA256:.*accept_unknown_host_keys"):
        transport.run(["true"])
    assert empty.read_text() == ""  # nothing was recorded


def test_unknown_host_key_accepted_only_when_configured(
    lab: Lab, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    transport = lab.transport(0, known_hosts=empty, accept_unknown_host_keys=True)
    with caplog.at_level(logging.WARNING):
        assert transport.run(["true"]).ok
    transport.close()
    assert "accepting unknown host key" in caplog.text


def test_changed_host_key_is_refused(lab: Lab, tmp_path: Path) -> None:
    host0, host1 = lab.state.hosts[0], lab.state.hosts[1]
    lines = lab.known_hosts.read_text().splitlines()
    key_of_1 = next(line.split(" ", 1)[1] for line in lines if line.startswith(host1.address))
    forged = tmp_path / "known_hosts"
    forged.write_text(f"{host0.address} {key_of_1}\n")
    transport = lab.transport(0, known_hosts=forged, accept_unknown_host_keys=True)
    with pytest.raises(HostKeyError, match="CHANGED"):
        transport.run(["true"])


def test_ssh_config_is_honoured(lab: Lab, tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    config.write_text(
        f"""Host lab-alias
    HostName {lab.state.hosts[1].address}
    User root
    IdentityFile {lab.client_key}
    UserKnownHostsFile {lab.known_hosts}
"""
    )
    transport = SshTransport(
        "alias",
        lab.settings(1).model_copy(
            update={
                "host": "lab-alias",
                "user": None,
                "key_file": None,
                "known_hosts": None,
                "ssh_config": config,
            }
        ),
    )
    try:
        result = transport.run(["ip", "-4", "-o", "addr", "show", "dev", "eth0"], check=True)
    finally:
        transport.close()
    assert lab.state.hosts[1].address in result.stdout


@pytest.mark.slow
def test_cut_link_fails_clearly_within_the_timeout(lab: Lab) -> None:
    transport = lab.transport(2, connect_timeout_s=2, connect_attempts=2, retry_backoff_s=0.2)
    try:
        assert transport.run(["true"]).ok
        with lab.cut(2):
            began = time.monotonic()
            with pytest.raises(TransportError, match=r"sg-t-2: .*timed out after 3 s"):
                transport.run(["sleep", "0"], timeout=3)
            assert time.monotonic() - began < 3 + 5
            began = time.monotonic()
            with pytest.raises(TransportError, match=r"cannot reach .* after 2 attempts"):
                transport.run(["true"], timeout=3)
            assert time.monotonic() - began < 2 * 2 + 0.2 + 5
        assert transport.run(["true"]).ok  # reconnects once the link is back
    finally:
        transport.close()
