"""The operator's example of the recipe (examples/spark-ds41f/) validates and renders as documented.

docs/recipe.md walks an operator from a fresh checkout to r6y on the triangle with these files;
the commands it shows that run without a Spark cluster are run here through the real CLI entry,
and what they show is checked against the recipe's facts: the recipe's argv and environment, no
DSpark cost directory (r6v+), the build command and the line that names its image.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from flows.cli import main
from flows.cluster.build.adopted_image import tag_from_output
from flows.spec.cluster import Cluster
from flows.spec.load import load_model
from flows.spec.release import Release

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = Path("examples/spark-ds41f")
R6X, R6Y = EXAMPLE / "releases/r6x.yaml", EXAMPLE / "releases/r6y.yaml"
TRIANGLE, RING = EXAMPLE / "clusters/tp3-triangle.yaml", EXAMPLE / "clusters/tp4-ring.yaml"
COST_DIR = "SPARK3_DSPARK_COST_DIR"


@pytest.fixture(autouse=True)
def _in_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    """The commands run from the checkout's root, as the walkthrough shows them."""
    monkeypatch.chdir(ROOT)


def _render(capsys: pytest.CaptureFixture[str], release: Path, cluster: Path) -> dict[str, Any]:
    """`sparkgate render RELEASE --cluster C --json --show-secrets`, parsed."""
    capsys.readouterr()
    code = main(["render", str(release), "--cluster", str(cluster), "--json", "--show-secrets"])
    out = capsys.readouterr().out
    assert code == 0, out
    document: dict[str, Any] = json.loads(out)
    return document


def test_validate_examples_passes_every_file(capsys: pytest.CaptureFixture[str]) -> None:
    """`sparkgate validate examples/`: exit 0 and one `ok` line per YAML file under it."""
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "examples").rglob("*.yaml"))
    capsys.readouterr()
    code = main(["validate", "examples/"])
    captured = capsys.readouterr()
    lines = (captured.out + captured.err).splitlines()
    assert code == 0, lines
    assert len(files) >= 7
    assert sorted(line.split(": ")[0] for line in lines) == files
    assert all(": ok (" in line for line in lines), lines


def test_render_r6y_on_the_triangle_shows_the_recipe_launch_as_r6x_publishes_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Each rank gets the triangle's r6x argv: 1M context, no cost scale, no cost directory."""
    r6y = _render(capsys, R6Y, TRIANGLE)
    assert [p["node"] for p in r6y["plans"]] == ["dgx1", "dgx2", "dgx3"]
    for plan in r6y["plans"]:
        assert COST_DIR not in plan["env"]
        assert "SPARKNET_ROCE_SPIN_LIMIT" not in plan["env"]
        argv = " ".join(plan["argv"])
        for recipe in (  # R3 (r6d-tp3.json) serve_args, with r6x's context (docs/recipe.md)
            "--tensor-parallel-size 3",
            "--nnodes 3",
            "--max-model-len 1048576",
            "--max-num-seqs 8",
            "--max-num-batched-tokens 4096",
            "--long-prefill-token-threshold 4048",
            "--max-cudagraph-capture-size 48",
            "--distributed-executor-backend mp",
        ):
            assert recipe in argv
        spec = json.loads(plan["argv"][plan["argv"].index("--speculative-config") + 1])
        assert spec["adaptive_verification_row_cost"] == 0.035
        assert "adaptive_verification_cost_scale" not in spec
        assert plan["env"]["PYTHONPATH"] == "/opt/spark3/candidate/vllm:/opt/spark3/candidate/b12x"
    assert "--headless" not in r6y["plans"][0]["argv"]
    assert all("--headless" in p["argv"] for p in r6y["plans"][1:])


def test_render_r6y_on_the_ring_has_no_cost_directory_and_the_tp4_suite(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The ring's r6y (releases/ring/) builds the one image both shapes serve, gates on
    release-tp4, and gives every rank its exact `=` NCCL_IB_HCA."""
    ring = _render(capsys, EXAMPLE / "releases/ring/r6y.yaml", RING)
    assert len(ring["plans"]) == 4
    assert all(COST_DIR not in plan["env"] for plan in ring["plans"])
    assert all("--tensor-parallel-size 4" in " ".join(p["argv"]) for p in ring["plans"])
    assert ring["release"]["gates"]["benchmark"]["suite"] == ["release-tp4", "single-stream"]
    assert (
        "--cluster-config config/cluster.json build image" in ring["release"]["build"]["command"][2]
    )
    exact = "=roceP2p1s0f0,roceP2p1s0f1,rocep1s0f0,rocep1s0f1"
    assert all(plan["env"]["NCCL_IB_HCA"] == exact for plan in ring["plans"])


def test_render_shows_the_build_command_and_the_adopted_image(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The human view names where the engine comes from and the cluster's shape."""
    capsys.readouterr()
    assert main(["render", str(R6Y), "--cluster", str(TRIANGLE), "--node", "dgx1"]) == 0
    said = " ".join(capsys.readouterr().err.split())
    command = "sh -c 'bin/spark build prepare &&"
    assert f"build: command `{command}" in said
    assert "on the head in /home/swank/projects/spark-ds41f" in said
    assert "shape: tp3-triangle" in said
    assert COST_DIR not in said
    capsys.readouterr()
    assert main(["render", str(R6X), "--cluster", str(TRIANGLE), "--node", "dgx1"]) == 0
    said = " ".join(capsys.readouterr().err.split())
    assert "build: image vllm-ds41f-kkref:19f2c20ed4d6-r6x, adopted as is" in said


def test_image_line_takes_the_tag_bin_spark_prints() -> None:
    """The line `bin/spark build image --apply` prints once the image is built and labelled
    (`built {tag} {image id} in {s}s; lowest MemAvailable {gib} GiB`, bin/spark
    command_build_image); its earlier `building {tag} from ...` line must not match."""
    build = load_model(R6Y, Release).build
    assert build.image_line is not None
    folder = ".work/build/vllm-19f2c20ed4d6-b12x-0123456789ab-89abcdef"
    tag = "vllm-ds41f-kkref:19f2c20ed4d6-r6y"
    output = "\n".join(
        [
            f"build inputs ready: {folder}",
            f"building {tag} from {folder}: 4 compile jobs x 4 NVCC threads",
            f"built {tag} sha256:{'ab' * 32} in 612s; lowest MemAvailable 61.0 GiB",
        ]
    )
    assert tag_from_output(build.image_line, output) == tag
    assert tag_from_output(build.image_line, output.rsplit("\n", 1)[0]) is None


def test_r6x_and_r6y_hash_alike_and_share_the_classification() -> None:
    """r6y compares its determinism hashes with r6x's: the settings that shape them are equal."""
    r6x, r6y = load_model(R6X, Release), load_model(R6Y, Release)
    assert r6y.previous == "r6x"
    assert r6x.gates.determinism == r6y.gates.determinism
    assert r6x.gates.release_tests == r6y.gates.release_tests
    assert r6x.gates.benchmark.suite == r6y.gates.benchmark.suite
    assert r6y.gates.benchmark.suite == ["release-tp3", "single-stream"]
    assert r6y.build.cwd == "/home/swank/projects/spark-ds41f"


@pytest.mark.parametrize("shape", ["tp3-triangle", "tp4-ring"])
def test_the_driver_fact_asks_nvidia_smi_for_the_bare_value(shape: str) -> None:
    """An unquoted `--format=csv,noheader` in a YAML flow list splits at the comma: nvidia-smi
    then prints its header and the fact could never match on a Spark (found by the lab test
    tests/lab/test_recipe_probes_on_the_double.py)."""
    cluster = load_model(ROOT / "config" / "examples" / f"{shape}.yaml", Cluster)
    driver = next(fact for fact in cluster.probes.facts if "driver" in fact.name.lower())
    assert driver.argv == ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
    for fact in [*cluster.probes.facts, *cluster.probes.samples]:
        assert "noheader" not in fact.argv, fact.name  # a stray word of a split option
