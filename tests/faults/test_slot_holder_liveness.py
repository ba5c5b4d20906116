"""Faults: how a run on the slot holder's host judges the holder it finds recorded with the slot
(flows/cluster/ops/slot_holder.py), against real processes: running, stopped (SIGSTOP), killed,
a pid now used by another process, and a holder on another host, which is never judged gone."""

from __future__ import annotations

import signal
import subprocess

from flows.cluster.ops.slot_holder import SlotHolder, liveness, this_process
from tests.support.waiting import wait_until


def _holder(pid: int) -> SlotHolder:
    return this_process(pid=pid, lease_id="0" * 32, run_id=None, command="qualify r6x")


def test_a_running_then_stopped_then_killed_holder_is_judged_so() -> None:
    child = subprocess.Popen(["sleep", "60"])
    try:
        holder = _holder(child.pid)
        assert liveness(holder) == "running"
        child.send_signal(signal.SIGSTOP)
        wait_until(lambda: liveness(holder) == "stopped", 10, "the holder to show as stopped")
        assert holder.describe("stopped").startswith(f"pid {child.pid} on ")
        assert "running `qualify r6x`" in holder.describe("stopped")
    finally:
        child.kill()
        child.wait()
    assert liveness(holder) == "gone"


def test_a_pid_reused_by_another_process_is_gone() -> None:
    child = subprocess.Popen(["sleep", "60"])
    try:
        reused = _holder(child.pid).model_copy(update={"started": 1})  # another start time
        assert liveness(reused) == "gone"
    finally:
        child.kill()
        child.wait()


def test_a_holder_on_another_host_is_never_judged_gone() -> None:
    elsewhere = _holder(999_999_999).model_copy(update={"host": "spark-other"})
    assert liveness(elsewhere) == "elsewhere"
    assert "(on another host)" in elsewhere.describe("elsewhere")
    rebooted = _holder(999_999_999).model_copy(update={"boot_id": "an-earlier-boot"})
    assert liveness(rebooted) == "elsewhere"
