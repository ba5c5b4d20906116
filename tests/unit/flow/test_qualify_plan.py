"""`sparkgate qualify --plan`: every step per stage and node, from the specs alone.

An operator reviews what four Sparks would run before spending an hour of them, so the plan must
name the real commands and containers, say which previous record the determinism gate needs on
this shape (or why it would refuse), and touch nothing: no node, no lock, no build, no folder.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flows.cli import main
from tests.support.overlays import overlay, release_overlay

ROOT = Path(__file__).resolve().parents[3]
IMAGE_ID = "sha256:" + "cd" * 32
TITLES = (
    "cluster lock", "preflight", "build once", "distribute + verify", "release tests",
    "determinism gate", "cold boots", "benchmark", "record",
)  # fmt: skip


def _plan(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    capsys.readouterr()
    assert main(["qualify", *argv, "--plan", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert isinstance(document, dict)
    return document


def test_the_plan_of_r2_names_every_stage_its_argv_and_the_missing_previous_record(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["qualify", str(ROOT / "releases" / "r2.yaml"), "-c",
                 str(ROOT / "config" / "local.yaml"), "--plan"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert out.startswith("qualify r2 on local (tp2-local): plan, nothing is run")
    for title in TITLES:
        assert title in out, title
    assert "- --mlp-kernel\n      - fused" in out  # the candidate's own argv
    assert "no published record of r1 on that shape" in " ".join(out.split())
    # r2's benchmark: C, P, C and up to 7 arms, so five looks at Pocock's level each
    assert "looks: 5, each decided at 1.58 % two-sided (Pocock)" in out
    assert not (project / ".sparkgate").exists()  # nothing built, locked or started
    assert not (project / "experiments").exists()


def test_an_adopted_image_on_a_docker_cluster_plans_its_containers(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = overlay(
        project / "config" / "docker.yaml", "config/local.yaml", name="dock",
        runtime={"kind": "docker", "daemon": "unix:///run/dock-{node}.sock",
                 "container_name": "rank-{node}", "python": "python3",
                 "run_args": ["--ipc=host", "--device-cgroup-rule=c 226:* rw"]},
    )  # fmt: skip
    image = {"kind": "image", "image": "vllm-ds41f-kkref:19f2c20ed4d6-r6x", "image_id": IMAGE_ID}
    release = release_overlay(project / "releases" / "r1.yaml", build=image)
    (project / "releases" / "r1.yaml").write_text(
        (project / "releases" / "r1.yaml").read_text() + "unset: [build.source]\n"
    )

    plan = _plan(capsys, str(release), "-c", str(cluster))

    steps = plan["steps"]
    assert isinstance(steps, list)
    assert [s["stage"] for s in steps][:3] == ["lock", "preflight", "preflight"]
    build = next(s for s in steps if s["stage"] == "build")
    assert (build["node"], build["detail"]["image_id"]) == ("local0", IMAGE_ID)
    ranks = [s for s in steps if s["stage"] == "determinism" and "container" in s["detail"]]
    assert [r["node"] for r in ranks] == ["local0", "local1"]
    container = ranks[0]["detail"]["container"]
    assert container["image"] == "vllm-ds41f-kkref:19f2c20ed4d6-r6x"
    assert container["name"] == "rank-local0"
    assert container["device_cgroup_rules"] == ["c 226:* rw"]
    assert container["network_mode"] == "host"
    assert not (project / ".sparkgate").exists()


@pytest.mark.parametrize(
    ("release", "cluster", "ranks"),
    [
        ("releases/r6y.yaml", "clusters/tp3-triangle.yaml", 3),
        ("releases/ring/r6y.yaml", "clusters/tp4-ring.yaml", 4),
    ],
)
def test_the_recipe_example_plans_its_build_command_tests_root_and_previous_record(
    project: Path, capsys: pytest.CaptureFixture[str], release: str, cluster: str, ranks: int
) -> None:
    """issue 12: r6y's plan on both example clusters, as an operator reviews it."""
    example = ROOT / "examples" / "spark-ds41f"
    plan = _plan(capsys, str(example / release), "-c", str(example / cluster))

    steps = plan["steps"]
    assert isinstance(steps, list)
    build = next(s for s in steps if s["stage"] == "build")
    assert build["action"] == "run the release's build command"
    assert "build image --apply" in build["detail"]["argv"][-1]
    tests = next(s for s in steps if s["stage"] == "release_tests")
    assert tests["detail"]["tests_root"] == "/opt/spark3/candidate/vllm"
    containers = [s["detail"]["container"] for s in steps if "container" in s["detail"]]
    assert len(containers) == ranks
    assert all("SPARK3_DSPARK_COST_DIR" not in c["environment"] for c in containers)
    assert all("vllm" in " ".join(c["command"]) for c in containers)
    compared = next(s for s in steps if s["stage"] == "determinism" and "previous" in s["detail"])
    shape = plan["shape"]
    assert (compared["detail"]["previous"], compared["detail"]["shape"]) == ("r6x", shape)
    assert "no published record of r6x on that shape" in compared["detail"]["refused"]
