"""A host-change release through the real `sparkgate qualify` on the real engine: the layer is on
while the gates run, the record names it and keeps every switch, and the cluster is left as it
was found, after a pass and after a layer that does not take.

The change is a sysfs-like file in each node's workdir (`knob`), read by the cluster's fact probe
and written by the layer's apply and revert commands. The gates are trimmed to determinism
(`tests/support/project.py`), plus a short benchmark whose arms alternate the layer; its
decision is in tests/unit/cluster/test_host_layers.py and, over SSH,
tests/lab/test_host_layers_over_ssh.py, where the knob sets the arms' level.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from flows.record import read_record, verify
from tests.support.overlays import overlay, release_overlay, write_yaml
from tests.support.project import (
    SHORT_SUITE,
    TRIMMED_DETERMINISM,
    TRIMMED_GATES,
    Project,
    ProjectKind,
    projects,
)
from tests.unit.cluster.test_host_layers import KNOB_FACT, LAYER

pytestmark = [
    pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1200),
    projects(ProjectKind("hostlayers", server=False)),
]  # fmt: skip


def _setup(project: Project, layer: dict[str, Any], **gates: Any) -> tuple[Path, Path]:
    for workdir in project.workdirs:
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "knob").write_text("0\n")
    cluster = overlay(project.root / "cluster-knob.yaml", project.cluster,
                      probes={"facts": [KNOB_FACT]})  # fmt: skip
    project.release("r1", "releases/r1.yaml")
    project.release("r2", "releases/r2.yaml")
    release = release_overlay(
        project.root / "releases" / "r3.yaml", "releases/r2.yaml", name="r3", previous="r2",
        description="the knob on every node", host=[layer],
        gates={**TRIMMED_GATES, "determinism": {**TRIMMED_DETERMINISM, "against_previous": False},
               **gates},
    )  # fmt: skip
    return release, cluster


def _knobs(project: Project) -> list[str]:
    return [(workdir / "knob").read_text().strip() for workdir in project.workdirs]


def test_a_host_change_is_qualified_with_its_layer_on_and_left_reverted(project: Project) -> None:
    release, cluster = _setup(project, LAYER)
    done = project.run("qualify", str(release), "-c", str(cluster), "--no-wait", "--json",
                       timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    outcome = json.loads(done.stdout)
    record = Path(outcome["record"])
    assert _knobs(project) == ["0", "0"]
    host = json.loads((record / "host.json").read_text())
    steps = [(step["action"], [r["value"] for r in step["readings"]]) for step in host["steps"]]
    assert steps == [("revert", [0, 0]), ("apply", [1, 1]), ("revert", [0, 0])]
    readme = (record / "README.md").read_text()
    named = (
        "- Host layer `knob-on` (reversible): the knob set to 1 (a sysfs setting); facts after "
        "it: knob at least 1"
    )
    assert named in readme
    assert read_record(record).stages["determinism"].outcome == "passed"
    assert verify(record) == []


def test_a_layer_that_does_not_take_stops_the_run_before_any_gate(project: Project) -> None:
    stuck = LAYER | {
        "apply": ["sh", "-c", "case {node} in *1) ;; *) echo 1 > {workdir}/knob;; esac"]
    }
    release, cluster = _setup(project, stuck)
    done = project.run("qualify", str(release), "-c", str(cluster), "--no-wait", timeout=900)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "host layer knob-on: hostlayers1: knob-on apply: knob is 0, expected at least 1" in (
        done.stderr
    )
    assert _knobs(project) == ["0", "0"]


def test_the_benchmark_alternates_arms_with_the_layer_on_and_off(project: Project) -> None:
    """The real benchmark on the real engine: C with the knob at 1, P at 0, C at 1, in one
    session; the knob does not change the engine's speed, so any decision is acceptable here."""
    suite = write_yaml(project.root / "suites" / "short.yaml", SHORT_SUITE)
    release, cluster = _setup(
        project, LAYER, benchmark={"enabled": True, "suite": str(suite), "max_arms": 3}
    )
    done = project.run("qualify", str(release), "-c", str(cluster), "--no-wait", "--json",
                       timeout=1100)  # fmt: skip
    assert done.returncode in (0, 1, 3), done.stderr[-3000:]
    record = Path(json.loads(done.stdout)["record"])
    arms = record / "benchmark" / "arms"
    states = {
        folder.name: json.loads((folder / "arm.json").read_text())["identity"]["host_layers"]
        for folder in sorted(arms.iterdir())
    }
    assert states == {"1-candidate": "applied", "2-previous": "reverted", "3-candidate": "applied"}
    host = json.loads((record / "host.json").read_text())
    assert [(step["action"], step["arm"]) for step in host["steps"]] == [
        ("revert", None), ("apply", None), ("apply", 1), ("revert", 2), ("apply", 3),
        ("revert", None),
    ]  # fmt: skip
    assert _knobs(project) == ["0", "0"]
    assert verify(record) == []
