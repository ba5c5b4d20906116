"""Launch plans: placeholders filled per node, layering profile < release < node overrides."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flows.cli import main
from flows.errors import SpecError
from flows.spec.cluster import Cluster
from flows.spec.launch import render_all, render_launch
from flows.spec.load import load_model
from flows.spec.release import Release, load_previous, load_release
from flows.spec.template import fill, placeholders

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def local() -> Cluster:
    return load_model(ROOT / "config" / "local.yaml", Cluster)


@pytest.fixture
def r2() -> Release:
    return load_release(ROOT / "releases" / "r2.yaml")


def test_each_rank_gets_its_own_values(local: Cluster, r2: Release) -> None:
    head, worker = render_all(local, r2)
    assert (head.rank, worker.rank) == (0, 1)
    argv = worker.argv
    assert argv[argv.index("--rank") + 1] == "1"
    assert argv[argv.index("--nnodes") + 1] == "2"
    assert argv[argv.index("--head") + 1] == "127.0.0.1:29517"
    assert argv[argv.index("--mlp-kernel") + 1] == "fused"
    assert f"kernels={worker.cache_dirs['kernels']}" in argv
    assert worker.cache_dirs["kernels"] == str(ROOT / ".sparkgate/nodes/local1/cache/kernels")
    assert worker.model_dir.endswith("/local1/models/tiny-s0")
    assert head.ready_url == "http://127.0.0.1:8017/health"
    assert worker.ready_url is None
    assert head.kernel_cache == "kernels"


def test_profile_default_option_applies_without_release_value(local: Cluster) -> None:
    r1 = load_release(ROOT / "releases" / "r1.yaml")
    plan = render_launch(local, r1, "local0")
    assert plan.argv[plan.argv.index("--mlp-kernel") + 1] == "reference"
    assert plan.argv[plan.argv.index("--collective-timeout") + 1] == "10"


def test_release_and_node_layers_add_env_and_args(local: Cluster, r2: Release) -> None:
    release = r2.model_copy(
        update={
            "engine": r2.engine.model_copy(update={"env": {"A": "{rank}"}, "serve_args": ["--x"]})
        }
    )
    node = local.nodes[1]
    overrides = node.overrides.model_copy(update={"env": {"A": "node"}, "args": ["--y={node}"]})
    cluster = local.model_copy(
        update={"nodes": [local.nodes[0], node.model_copy(update={"overrides": overrides})]}
    )
    head, worker = render_all(cluster, release)
    assert head.env["A"] == "0"
    assert worker.env["A"] == "node"
    assert worker.argv[-2:] == ["--x", "--y=local1"]
    assert head.argv[-1] == "--x"


def test_unknown_release_option_is_a_spec_error(r2: Release) -> None:
    ring = load_model(ROOT / "config" / "examples" / "tp4-ring.yaml", Cluster)
    with pytest.raises(SpecError, match="not an option of engine profile vllm-recipe") as caught:
        render_launch(ring, r2, "dgx1")
    assert caught.value.key == "engine.options.mlp_kernel"


def test_vllm_plans_follow_the_recipe(r2: Release) -> None:
    ring = load_model(ROOT / "config" / "examples" / "tp4-ring.yaml", Cluster)
    release = r2.model_copy(update={"engine": r2.engine.model_copy(update={"options": {}})})
    plans = render_all(ring, release)
    head, last = plans[0], plans[-1]
    assert "--headless" not in head.argv
    assert last.argv[-1] == "--headless"
    assert last.argv[last.argv.index("--node-rank") + 1] == "3"
    assert last.env["VLLM_HOST_IP"] == "10.0.1.74"
    assert last.env["NCCL_IB_GID_INDEX"] == "3"
    spec = json.loads(head.argv[head.argv.index("--speculative-config") + 1])
    assert spec["draft_tensor_parallel_size"] == 4
    assert head.ready_url == "http://127.0.0.1:8000/v1/models"
    assert head.kernel_cache == "tilelang"


def test_triangle_overrides_the_ring_sizes(r2: Release) -> None:
    triangle = load_model(ROOT / "config" / "examples" / "tp3-triangle.yaml", Cluster)
    release = r2.model_copy(update={"engine": r2.engine.model_copy(update={"options": {}})})
    plan = render_launch(triangle, release, "dgx3")
    assert plan.argv[plan.argv.index("--tensor-parallel-size") + 1] == "3"
    assert plan.argv[plan.argv.index("--max-model-len") + 1] == "1048576"
    assert plan.argv[plan.argv.index("--max-num-seqs") + 1] == "8"
    assert "SPARK3_DSPARK_COST_DIR" not in plan.env
    assert plan.env["SPARKNET_ROCE_TOPOLOGY"] == "direct"


def test_previous_release_is_loaded(r2: Release) -> None:
    previous = load_previous(ROOT / "releases" / "r2.yaml", r2)
    assert previous is not None
    assert previous.name == "r1"


def test_placeholders_leave_json_and_go_templates_alone() -> None:
    text = '{"a":{"b":{rank}}} {{.State.Running}}'
    assert placeholders(text) == ["rank"]
    assert fill(text, {"rank": "2"}) == '{"a":{"b":2}} {{.State.Running}}'


def test_render_json_on_stdout(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(ROOT)
    assert main(["render", "releases/r2.yaml", "--node", "local1", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["release"]["name"] == "r2"
    assert document["cluster"]["name"] == "local"
    assert [plan["node"] for plan in document["plans"]] == ["local1"]


def test_render_unknown_node_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(ROOT)
    assert main(["render", "releases/r2.yaml", "--node", "nope"]) == 2
    assert "no node 'nope'" in capsys.readouterr().err


def test_schema_command_writes_every_kind(tmp_path: Path) -> None:
    assert main(["schema", "--out", str(tmp_path)]) == 0
    written = sorted(path.name for path in tmp_path.iterdir())
    assert {"cluster.schema.json", "release.schema.json", "engine.schema.json"} <= set(written)
    cluster = json.loads((tmp_path / "cluster.schema.json").read_text(encoding="utf-8"))
    assert "extends" in cluster["properties"]
    assert cluster["anyOf"][1] == {"required": ["extends"]}


def test_committed_schemas_are_current(tmp_path: Path) -> None:
    main(["schema", "--out", str(tmp_path)])
    for path in tmp_path.iterdir():
        committed = ROOT / "config" / "schema" / path.name
        assert committed.read_text(encoding="utf-8") == path.read_text(encoding="utf-8"), (
            f"{committed} is stale: run `sparkgate schema`"
        )


def test_render_points_an_unknown_option_at_the_release_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(ROOT)
    code = main(["render", "releases/r2.yaml", "--cluster", "config/examples/tp4-ring.yaml"])
    assert code == 2
    err = " ".join(capsys.readouterr().err.split())
    assert err.startswith("releases/r2.yaml:12: engine.options.mlp_kernel: not an option")
