"""The recipe example carries r6x's published values, read back from the example files themselves.

Why: the examples described r6d while the recipe serves r6x; an operator qualifying them would
have served the wrong checkpoint at half the triangle's context. Every expected value below is
quoted from the recipe's public release thread (shared/reference/forum/000_3c0b897c1f318ae4.txt)
or from a file of christopherowen/spark-ds41f, named beside it; docs/recipe.md lists them all.
`qualify --plan --json` is run through the real CLI, so what is checked is what a boot would get.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from flows.cli import main
from flows.spec.cluster import Cluster
from flows.spec.load import load_model
from flows.spec.release import Release
from flows.spec.suite import ClosedLoop, Prefill, SingleStream, Suite

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "spark-ds41f"
TRIANGLE = EXAMPLE / "clusters" / "tp3-triangle.yaml"
RING = EXAMPLE / "clusters" / "tp4-ring.yaml"
SUITES = ROOT / "config" / "suites"
# Thread, r6v post "Upgrading" step 2 (hf download ... --revision ...).
CHECKPOINT = "deepseek-ai/DeepSeek-V4.1-Flash-1017"
REVISION = "1bae0e1088993b9b82de08f59de5be5a34e42170"
# ds41f:config/nodes.example.json (triangle) and config/examples/nodes-ring4.json (ring).
TRIANGLE_ROUTES = {
    "dgx1": {"1": ["rocep1s0f0", "roceP2p1s0f0"], "2": ["rocep1s0f1", "roceP2p1s0f1"]},
    "dgx2": {"0": ["rocep1s0f1", "roceP2p1s0f1"], "2": ["rocep1s0f0", "roceP2p1s0f0"]},
    "dgx3": {"0": ["rocep1s0f0", "roceP2p1s0f0"], "1": ["rocep1s0f1", "roceP2p1s0f1"]},
}
RING_ROUTES = {
    "dgx1": {"3": ["rocep1s0f1", "roceP2p1s0f1"], "1": ["rocep1s0f0", "roceP2p1s0f0"]},
    "dgx2": {"0": ["rocep1s0f1", "roceP2p1s0f1"], "2": ["rocep1s0f0", "roceP2p1s0f0"]},
    "dgx3": {"1": ["rocep1s0f1", "roceP2p1s0f1"], "3": ["rocep1s0f0", "roceP2p1s0f0"]},
    "dgx4": {"2": ["rocep1s0f1", "roceP2p1s0f1"], "0": ["rocep1s0f0", "roceP2p1s0f0"]},
}


@pytest.fixture(autouse=True)
def _in_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


def _rank_containers(capsys: pytest.CaptureFixture[str], release: str) -> list[dict[str, Any]]:
    """Every rank container the first boot of `qualify --plan --json` would start."""
    capsys.readouterr()
    path = EXAMPLE / "releases" / release
    assert main(["qualify", str(path), "--cluster", str(TRIANGLE), "--plan", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    starts = [s for s in plan["steps"] if str(s["action"]).startswith("start rank")]
    first = starts[0]["stage"]
    return [s["detail"]["container"] for s in starts if s["stage"] == first]


def _mount_sources(container: dict[str, Any]) -> dict[str, str]:
    """Target -> source of every mount and bind (docker-run parity creates the cluster's mounts
    as `--volume` binds, the run arguments' `--mount` as a mount)."""
    sources = {m["Target"]: m["Source"] for m in container.get("mounts", [])}
    for bind in container.get("volumes", []):
        source, target, _mode = bind.rsplit(":", 2)
        sources[target] = source
    return sources


@pytest.mark.parametrize("release", ["r6x.yaml", "r6y.yaml"])
def test_the_triangle_plan_serves_1017_at_1m_with_no_cost_scale(
    capsys: pytest.CaptureFixture[str], release: str
) -> None:
    """r6x post: 1M on three Sparks, rows priced by adaptive_verification_row_cost 0.035, no
    cost scale and no cost directory; r6n report: SPARKNET_ROCE_SPIN_LIMIT no longer set."""
    containers = _rank_containers(capsys, release)
    assert len(containers) == 3
    for container in containers:
        argv = list(container["command"])
        assert argv[argv.index("--max-model-len") + 1] == "1048576"
        spec = json.loads(argv[argv.index("--speculative-config") + 1])
        assert spec["adaptive_verification_row_cost"] == 0.035
        assert "adaptive_verification_cost_scale" not in spec
        env = container["environment"]
        assert "SPARK3_DSPARK_COST_DIR" not in env
        assert "SPARKNET_ROCE_SPIN_LIMIT" not in env
        sources = _mount_sources(container)
        snapshot = f"models--deepseek-ai--DeepSeek-V4.1-Flash-1017/snapshots/{REVISION}"
        assert sources["/models"].endswith(snapshot)
    for name in ("r6x.yaml", "r6y.yaml"):
        model = load_model(EXAMPLE / "releases" / name, Release).model
        assert (model.checkpoint, model.revision) == (CHECKPOINT, REVISION)


def test_the_kv_pools_hold_the_threads_token_counts() -> None:
    """r6x post: triangle 4,765,898 KV tokens (4.55x 1M); TP4 8,580,566 (8.18x 1M), unchanged."""
    triangle = {k: int(v) for k, v in load_model(TRIANGLE, Cluster).engine.options.items()
                if k in ("max_model_len", "kv_cache_tokens", "max_num_seqs")}  # fmt: skip
    ring = {k: int(v) for k, v in load_model(RING, Cluster).engine.options.items()
            if k in ("max_model_len", "kv_cache_tokens", "max_num_seqs")}  # fmt: skip
    assert triangle == {"max_model_len": 1048576, "kv_cache_tokens": 4765898, "max_num_seqs": 8}
    assert ring == {"max_model_len": 1048576, "kv_cache_tokens": 8580566, "max_num_seqs": 16}
    assert round(4765898 / 1048576, 2) == 4.55
    assert round(8580566 / 1048576, 2) == 8.18


@pytest.mark.parametrize(
    ("cluster", "routes", "topology"),
    [(TRIANGLE, TRIANGLE_ROUTES, "direct"), (RING, RING_ROUTES, "ring4")],
)
def test_every_node_gets_the_fabric_environment_the_recipe_renders(
    cluster: Path, routes: dict[str, dict[str, list[str]]], topology: str
) -> None:
    """The recipe renders peer routes per node (sparknet render.py node_environment) and, on a
    ring only, NCCL_IB_HCA as '=' + the routed HCAs sorted (ds41f:scripts/topology.py)."""
    spec = load_model(cluster, Cluster)
    assert [node.name for node in spec.nodes] == list(routes)
    for node in spec.nodes:
        env = node.overrides.env
        assert json.loads(str(env["SPARKNET_ROCE_PEER_HCAS"])) == routes[node.name]
        assert env["SPARKNET_ROCE_PEER_HCAS"] == json.dumps(
            routes[node.name], separators=(",", ":")
        )
        assert env["SPARKNET_ROCE_TOPOLOGY"] == topology
        hcas = sorted({h for route in routes[node.name].values() for h in route})
        if topology == "ring4":
            assert env["NCCL_IB_HCA"] == "=" + ",".join(hcas)
        else:
            assert "NCCL_IB_HCA" not in env


def _workloads(name: str) -> dict[str, Any]:
    return {w.name: w for w in load_model(SUITES / f"{name}.yaml", Suite).workloads}


def test_the_suites_have_the_threads_sizes() -> None:
    """The thread's release tables: prefill at 128K and, on the triangle, 1M; 16/8 streams
    (TP4) and 8/4 (TP3); sampled at 16/8 (TP4) and 8 (TP3); a single-stream suite of 100
    requests on distinct prompts; 256 output tokens."""
    tp4, tp3 = _workloads("release-tp4"), _workloads("release-tp3")
    for suite in (tp4, tp3):
        prefill = suite["prefill"]
        assert isinstance(prefill, Prefill)
        assert 131072 in prefill.depths
    assert isinstance(tp3["prefill"], Prefill)
    assert max(tp3["prefill"].depths) == 1000000
    streams = {name: s["streams"] for name, s in (("tp4", tp4), ("tp3", tp3))}
    sampled = {name: s["sampled"] for name, s in (("tp4", tp4), ("tp3", tp3))}
    assert all(isinstance(w, ClosedLoop) for w in (*streams.values(), *sampled.values()))
    assert (streams["tp4"].concurrency, streams["tp3"].concurrency) == ([8, 16], [4, 8])
    assert (sampled["tp4"].concurrency, sampled["tp3"].concurrency) == ([8, 16], [8])
    assert sampled["tp4"].temperature == sampled["tp3"].temperature == 1.0
    assert (tp4["poisson"].rate, tp3["poisson"].rate) == (0.7, 0.42)
    single = load_model(SUITES / "single-stream.yaml", Suite)
    [workload] = single.workloads
    assert isinstance(workload, SingleStream)
    assert single.samples_of(workload) * workload.requests == 100
    assert workload.max_tokens == 256
