"""Startup: prepare -> freeze -> meet on liveness. Cold and warm boots, a slow rank that still
boots, dead and stalled ranks named at once, and a corrupt model refused by name.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sparkengine.errors import ModelError
from sparkengine.model import WEIGHTS, make_model, verify_manifest

pytestmark = pytest.mark.integration

PHASES = ["start", "loaded", "prepared", "frozen", "rendezvous", "warmup"]


def test_warm_boot_logs_every_phase_and_loads_every_kernel(start_cluster: Any) -> None:
    cluster = start_cluster()
    cluster.wait_ready()
    for rank in (0, 1):
        names = [e["event"] for e in cluster.events[rank] if e["event"] in PHASES]
        assert names == PHASES
        prepared = cluster.named(rank, "prepared")[0]
        assert prepared["cached"] == prepared["kernels"] > 0
        assert prepared["compiled"] == 0
        assert all(e["rank"] == rank and e["ts"].endswith("+00:00") for e in cluster.events[rank])
    assert cluster.named(0, "ready")[0]["port"] == cluster.port


@pytest.mark.slow
def test_cold_boot_compiles_everything_and_nothing_after_freeze(start_cluster: Any) -> None:
    # one rank keeps this affordable on a shared 2-core machine; the mechanism is per rank
    cold = start_cluster(nnodes=1, cold=True)
    cold.wait_ready(timeout=300)
    cold_prep = cold.named(0, "prepared")[0]
    assert cold_prep["compiled"] == cold_prep["kernels"] > 0
    assert cold_prep["cached"] == 0
    warm = start_cluster(nnodes=1)
    warm.wait_ready()
    assert cold_prep["seconds"] > warm.named(0, "prepared")[0]["seconds"]
    assert not cold.named(0, "compile_after_freeze")


@pytest.mark.slow
def test_one_ranks_kernel_cache_empty_only_that_rank_compiles(start_cluster: Any) -> None:
    cluster = start_cluster(empty=frozenset({(1, "kernels")}))
    cluster.wait_ready()
    head, worker = cluster.named(0, "prepared")[0], cluster.named(1, "prepared")[0]
    assert head["compiled"] == 0
    assert 0 < worker["compiled"] < worker["kernels"]  # its jit cache stayed warm


@pytest.mark.slow
def test_slow_but_live_rank_still_boots(start_cluster: Any) -> None:
    cluster = start_cluster(
        env={"SPARKENGINE_FAULT_PREPARE_DELAY": "1:4"}, args=["--stall-timeout", "3"]
    )
    cluster.wait_ready()
    waiting = cluster.named(0, "waiting")
    assert waiting
    assert waiting[0]["missing"] == [1]


def test_killing_a_rank_during_rendezvous_fails_the_head_at_once_naming_it(
    start_cluster: Any,
) -> None:
    cluster = start_cluster(env={"SPARKENGINE_FAULT_PREPARE_DELAY": "1:60"})
    deadline = time.monotonic() + 120
    while not any(  # rank 0 waits in the rendezvous while rank 1 is connected and preparing
        e["phases"].get("1", "").startswith("prepare") for e in cluster.named(0, "waiting")
    ):
        assert time.monotonic() < deadline, cluster.log()
        time.sleep(0.1)
    os.kill(cluster.procs[1].pid, signal.SIGKILL)
    killed_at = time.monotonic()
    assert cluster.wait_exit(0, timeout=30) != 0
    assert time.monotonic() - killed_at < 10
    failure = cluster.wait_event(0, "peer_failure")
    assert failure["peer"] == 1
    assert cluster.named(0, "fatal")


def test_stalled_rank_is_named(start_cluster: Any) -> None:
    cluster = start_cluster(
        env={"SPARKENGINE_FAULT_STALL": "1@prepare"}, args=["--stall-timeout", "2"]
    )
    assert cluster.wait_exit(0, timeout=60) != 0
    failure = cluster.wait_event(0, "peer_failure")
    assert failure["peer"] == 1
    assert "stopped advancing" in failure["reason"]


def test_crashed_rank_is_named(start_cluster: Any) -> None:
    cluster = start_cluster(env={"SPARKENGINE_FAULT_CRASH": "1@load"})
    assert cluster.wait_exit(1, timeout=60) != 0
    assert cluster.wait_exit(0, timeout=60) != 0
    assert cluster.wait_event(0, "peer_failure")["peer"] == 1


def test_corrupt_model_is_a_named_error_and_a_non_zero_exit(
    model_dir: Path, tmp_path: Path, start_cluster: Any
) -> None:
    bad = tmp_path / "bad-model"
    shutil.copytree(model_dir, bad)
    with (bad / WEIGHTS).open("r+b") as fh:
        fh.seek(-4, 2)
        fh.write(b"\x00\x01\x02\x03")
    with pytest.raises(ModelError, match="SHA-256"):
        verify_manifest(bad)
    cluster = start_cluster(nnodes=1, model=bad)
    assert cluster.wait_exit(0) != 0
    assert cluster.wait_event(0, "fatal")["error"] == "ModelError"


def test_taken_http_port_is_a_named_failure(start_cluster: Any) -> None:
    cluster = start_cluster(nnodes=1)
    with socket.create_server(("127.0.0.1", cluster.port)):  # taken before rank 0 gets there
        assert cluster.wait_exit(0, timeout=120) != 0
    assert cluster.wait_event(0, "fatal")["error"] == "OSError"
    assert not cluster.named(0, "ready")


def test_rank_with_another_model_is_refused_by_name(start_cluster: Any, tmp_path: Path) -> None:
    other = make_model(tmp_path / "other-model", seed=999)
    cluster = start_cluster(rank_args={1: ["--model", str(other)]})
    assert cluster.wait_exit(0, timeout=120) != 0
    failure = cluster.wait_event(0, "peer_failure")
    assert failure["peer"] == 1
    assert "model digest" in failure["reason"]
    assert cluster.wait_exit(1, timeout=60) != 0
    assert "refused" in cluster.wait_event(1, "fatal")["message"]


def test_each_rank_runs_on_the_cpus_it_is_given(start_cluster: Any) -> None:
    cluster = start_cluster(rank_env={0: {"SPARKENGINE_CPUS": "0"}, 1: {"SPARKENGINE_CPUS": "1"}})
    cluster.wait_ready()
    for rank, cpu in ((0, 0), (1, 1)):
        assert os.sched_getaffinity(cluster.procs[rank].pid) == {cpu}


def test_a_cpu_list_that_does_not_exist_is_refused_by_name(start_cluster: Any) -> None:
    cluster = start_cluster(nnodes=1, args=["--cpus", "4096"])
    assert cluster.wait_exit(0, timeout=60) == 2
    assert "--cpus [4096]" in cluster.log()


def _resident_bytes() -> int:
    """This process's resident memory now (/proc/self/statm counts pages)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


def test_the_kv_cache_is_mapped_at_start_up_not_by_the_first_request_that_writes_it() -> None:
    """A lazily zeroed KV cache made whichever request first wrote a new stretch of it pay the
    page faults (a stalled huge-page fault: one prefill sample in three took +35 to +120 % CPU);
    the forward pass's caches are resident before any request, as a GPU engine's are."""
    from sparkengine.forward import resident_zeros  # noqa: PLC0415

    size = 64 << 20
    shape = (size // 4 // 1024, 1024)
    before = _resident_bytes()
    lazy = np.zeros(shape, np.float32)
    assert _resident_bytes() - before < size // 4  # np.zeros maps nothing yet: the contrast
    before = _resident_bytes()
    eager = resident_zeros(shape)
    assert _resident_bytes() - before > size * 9 // 10
    assert (eager.shape, eager.dtype) == (shape, np.float32)
    assert not eager.any()
    del lazy
