"""Issue 26 item 11: the recipe's startup and steady memory guards where ranks start."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from flows.cluster.runtime import docker as docker_ranks
from flows.cluster.runtime.memory_guard import RankGuard, mem_available_kib, shortfall
from flows.cluster.transport.base import CommandResult
from flows.errors import BootError
from flows.spec.cluster import Cluster, MemoryGuard
from flows.spec.launch import render_all
from flows.spec.load import load_model
from flows.spec.release import Release

ROOT = Path(__file__).resolve().parents[3]
RECIPE = ROOT / "examples" / "spark-ds41f"

RECIPE_GUARD = MemoryGuard(startup_gib=5, steady_gib=3)  # the thread's r6x post; cluster.json


def meminfo(gib: float) -> str:
    return f"MemTotal: 128000000 kB\nMemAvailable: {int(gib * 1024 * 1024)} kB\n"


def test_mem_available_is_read_from_proc_meminfo() -> None:
    assert mem_available_kib(meminfo(4)) == 4 * 1024 * 1024
    assert mem_available_kib("MemTotal: 1 kB\n") is None


def test_below_the_startup_threshold_a_rank_is_refused_and_unreadable_memory_fails_closed() -> None:
    assert shortfall(6 * 1024 * 1024, 5, "startup") is None
    reason = shortfall(4 * 1024 * 1024, 5, "startup")
    assert reason == "MemAvailable 4.0 GiB is below the startup memory guard of 5 GiB"
    assert "failing closed" in str(shortfall(None, 5, "startup"))


@pytest.mark.parametrize(("ready", "available", "killed"), [
    (False, 4.0, True),   # starting: 4 GiB is below the 5 GiB startup guard
    (True, 4.0, False),   # serving: the steady guard (3 GiB) lets 4 GiB run
    (True, 2.5, True),    # serving below 3 GiB
])  # fmt: skip
def test_the_guard_kills_below_the_threshold_of_its_phase(
    ready: bool, available: float, killed: bool
) -> None:
    kills: list[bool] = []
    guard = RankGuard(
        RECIPE_GUARD, read=lambda: meminfo(available), kill=lambda: kills.append(True),
        ready=lambda: ready,
    )  # fmt: skip
    guard.check()
    assert bool(kills) is killed
    assert guard.phase == ("steady" if ready else "startup")
    if killed:
        assert guard.tripped is not None
        assert f"below the {guard.phase} memory guard" in guard.tripped


class ShortNode:
    """dgx1 with 4 GiB available (under the 5 GiB startup guard)."""

    node = "dgx1"

    def run(self, argv: list[str], **_: object) -> CommandResult:
        assert argv == ["cat", "/proc/meminfo"], argv  # nothing else may happen
        return CommandResult(
            node="dgx1", argv=tuple(argv), rc=0, stdout=meminfo(4), stderr="", duration=0
        )


class RecipeImageDaemon:
    """A node daemon that only answers what the recipe image's entrypoint is (`vllm serve`,
    checked before a docker-run start)."""

    def __init__(self) -> None:
        self.api = self

    def inspect_image(self, image: str) -> dict[str, Any]:
        return {"Config": {"Entrypoint": ["vllm", "serve"]}}


def test_the_docker_runtime_refuses_to_start_a_rank_below_the_startup_guard(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = load_model(RECIPE / "clusters" / "tp3-triangle.yaml", Cluster)
    runtime_spec = cluster.runtime.model_copy(update={"memory_guard": RECIPE_GUARD})
    cluster = cluster.model_copy(update={"runtime": runtime_spec})
    release = load_model(RECIPE / "releases" / "r6x.yaml", Release)
    monkeypatch.setattr(docker_ranks, "connect", lambda endpoint: RecipeImageDaemon())
    monkeypatch.setattr(docker_ranks, "run_rank", lambda *a: pytest.fail("a rank was started"))
    runtime = docker_ranks.DockerRanks(
        cluster,
        {"dgx1": ShortNode()},
        release=release,
        image="i",  # type: ignore[dict-item]
    )
    with pytest.raises(BootError, match=r"refusing to start rank 0: MemAvailable 4\.0 GiB"):
        runtime.start(render_all(cluster, release)[0])
