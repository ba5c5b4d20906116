"""The recipe example files use the first-contact fixes (issue 26), read back through the CLI.

Why: the fixes (the display device kept beside the cluster's mounts, the launcher's exact
container, memory guards, the lock outside the recipe's checkout, the operator's own launcher)
only help an operator who qualifies the example files; these tests run `sparkgate qualify
--plan --json` on the example files themselves, so a file that drops a fix fails here. Values:
christopherowen/spark-ds41f config/cluster.json (`host` memguard settings, `distributed`), its
docker/Dockerfile (no ENTRYPOINT of its own: the vllm/vllm-openai base's), and the release
thread's r6x post (the 5 GiB startup guard); docs/recipe.md "First-contact fixes".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from flows.cli import main
from flows.spec.cluster import Cluster, DockerRuntime, MemoryGuard, OperatorRuntime
from flows.spec.load import load_model

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "spark-ds41f"
TRIANGLE = EXAMPLE / "clusters" / "tp3-triangle.yaml"
OPERATOR = EXAMPLE / "clusters" / "tp3-triangle-operator.yaml"
CLUSTERS = [
    TRIANGLE,
    EXAMPLE / "clusters" / "tp4-ring.yaml",
    OPERATOR,
    ROOT / "config" / "examples" / "tp3-triangle.yaml",
    ROOT / "config" / "examples" / "tp4-ring.yaml",
]
DISPLAY = "/dev/dri/card0"
RECIPE_GUARD = MemoryGuard(startup_gib=5, steady_gib=3, startup_interval_s=0.25, interval_s=2)


@pytest.fixture(autouse=True)
def _in_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


def _plan(capsys: pytest.CaptureFixture[str], cluster: Path) -> dict[str, Any]:
    capsys.readouterr()
    release = EXAMPLE / "releases" / "r6x.yaml"
    assert main(["qualify", str(release), "--cluster", str(cluster), "--plan", "--json"]) == 0
    plan: dict[str, Any] = json.loads(capsys.readouterr().out)
    return plan


@pytest.mark.parametrize("path", CLUSTERS, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_every_example_cluster_creates_the_launchers_container_under_its_guards(
    path: Path,
) -> None:
    runtime = load_model(path, Cluster).runtime
    assert isinstance(runtime, DockerRuntime)
    assert runtime.memory_guard == RECIPE_GUARD, "not the recipe's memguard (5/3 GiB)"
    assert runtime.create_as == "docker-run", "not the recipe launcher's docker run"
    assert runtime.image_entrypoint == ["vllm", "serve"]


def test_every_rank_of_r6x_on_the_triangle_gets_the_display_device(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """SPARK3_DISPLAY_CARVEOUT_WEIGHTS=1 refuses a worker without /dev/dri/card0."""
    plan = _plan(capsys, TRIANGLE)
    starts = [s for s in plan["steps"] if str(s["action"]).startswith("start rank")]
    assert len(starts) >= 3
    for step in starts:
        container = step["detail"]["container"]
        targets = [m["Target"] for m in container["mounts"]]
        assert DISPLAY in targets, f"{step['action']}: the display device was dropped"
        assert "entrypoint" not in container, "the image's own entrypoint must run"
        assert container["environment"]["SPARK3_DISPLAY_CARVEOUT_WEIGHTS"] == "1"
    ranks = [s for s in plan["steps"] if s["stage"] == "ranks"]
    assert len(ranks) == 3
    for step in ranks:
        assert any(m.endswith(f"-> {DISPLAY} (rw, bind)") for m in step["detail"]["mounts"])


def test_the_rank_arguments_end_the_command_as_the_launcher_appends_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """bin/spark's expected command: serve_args, then --node-rank R --master-addr A
    --master-port P (config/cluster.json `distributed`), then --headless on workers."""
    plan = _plan(capsys, TRIANGLE)
    ranks = [s["detail"] for s in plan["steps"] if s["stage"] == "ranks"]
    for rank, detail in enumerate(ranks):
        tail = ["--node-rank", str(rank), "--master-addr", "10.0.1.71", "--master-port", "9999"]
        tail += ["--headless"] if rank else []
        assert detail["command"][-len(tail) :] == tail, f"rank {rank}: rank arguments mid-argv"
        assert detail["command"][0] == "/models", "argv after the image's `vllm serve`"


@pytest.mark.parametrize("cluster", [TRIANGLE, OPERATOR], ids=["docker", "operator"])
def test_the_lock_is_outside_the_recipe_checkout(
    capsys: pytest.CaptureFixture[str], cluster: Path
) -> None:
    """bin/spark build image refuses untracked files; cluster start a dirty checkout."""
    plan = _plan(capsys, cluster)
    [lock] = [s for s in plan["steps"] if s["stage"] == "lock"]
    checkout = load_model(cluster, Cluster).head.workdir.rstrip("/")
    path = lock["detail"]["path"]
    assert not path.startswith(checkout + "/"), f"lock {path} inside the checkout {checkout}"
    assert path == f"{checkout}.sparkgate/sparkgate.lock"


def test_the_operator_example_runs_the_recipes_own_launcher(
    capsys: pytest.CaptureFixture[str],
) -> None:
    cluster = load_model(OPERATOR, Cluster)
    assert isinstance(cluster.runtime, OperatorRuntime)
    plan = _plan(capsys, OPERATOR)
    ranks = [s["detail"] for s in plan["steps"] if s["stage"] == "ranks"]
    assert len(ranks) == 3
    config = ["bin/spark", "--cluster-config", "config/cluster.json", "cluster"]
    for detail in ranks:
        assert detail["start"] == [*config, "start", "--apply", "--replace"]
        assert detail["stop"] == [*config, "stop", "--apply"]
        assert (detail["cwd"], detail["on"]) == (cluster.head.workdir, "dgx1")
        assert detail["container"] == "dsv41-karmic-kraken"
