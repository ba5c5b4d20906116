# PARKED, not collected (the name does not start with test_): issue 27's check that an
# unchanged release qualifies. It passed in CI on 2026-12-06 morning (117 s) and once that
# afternoon after 8 arms (548 s), but on a quiet run of 2026-12-06 evening it ended
# "inconclusive after 15 arms": step/grid engine_cpu_ms +0.1 % [-12.9, +15.2] against the 15 %
# tolerance, the arms scattering about twice the 4.7 % SD the calibration's three gaps had
# given (docs/statistics.md). A statistical claim that holds in some sessions is no CI test;
# run it on demand with `pytest tests/integration/pending/unchanged_release.py`, and measure
# the rate with `python -m flows.research.sessions`. Move it back to
# tests/integration/test_unchanged_release.py once the gate qualifies an unchanged release in
# nearly every session on this machine.
"""A release that changes no kernel qualifies: a copy of r2 whose only change is its description.

Most releases a maintainer ships are like this one (a parser fix, a doc change), and before the
tolerance fit the cluster every such release ended "failed at benchmark: inconclusive after 7
arms". Here it is qualified by the real `sparkgate qualify` against r2, as the README says, after
r2 qualified and was calibrated on the suite, trimmed to the engine grid (the steadiest point
`release-local` gates) at the bundled suite's engine CPU tolerance (15 %, docs/statistics.md).
The verdict must be "qualified" (not merely "not slower"): the benchmark decided every gated
point level or faster, at that tolerance, and said beforehand what the cluster resolves.
"""

from __future__ import annotations

import pytest

from flows.gates.benchmark.summary import BenchmarkSummary
from flows.record import latest_record, read_record
from flows.spec.load import load_model
from flows.spec.suite import Suite
from tests.support.overlays import release_overlay, write_yaml
from tests.support.project import TRIMMED_DETERMINISM, TRIMMED_GATES, Project, ProjectKind, projects

pytestmark = [
    pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(2400),
    pytest.mark.prefect_server, projects(ProjectKind("sametest", server=True)),
]  # fmt: skip

# The engine grid of release-local at its tolerance. Fifteen arms at most, and a four-arm
# calibration (three gaps): at the 4-5 % this machine's gated points scatter between boots the
# gate resolves about +-7 % after fifteen arms, and qualify would refuse the 15 % only if the
# calibration's arms scattered by more than about 9 %. A run of 2026-12-06 on this machine, loaded
# by a CI run and other suites, passed it after 8 arms: engine_cpu_ms -0.4 % [-13.4, +14.5], 548 s.
STEADY_SUITE = {
    "kind": "suite", "name": "steady", "description": "the engine grid of release-local",
    "seed": 0, "samples": 3, "warmup": 1, "tolerances": {"engine_cpu_ms": 0.15},
    "workloads": [
        {"kind": "step_grid", "name": "step", "concurrency": [1, 4], "context": [128, 1024],
         "max_tokens": 16},
    ],
}  # fmt: skip


def test_a_copy_of_r2_with_a_new_description_qualifies_against_r2(project: Project) -> None:
    suite = write_yaml(project.root / "suites/steady.yaml", STEADY_SUITE)
    assert load_model(suite, Suite).tolerances == {"engine_cpu_ms": 0.15}
    project.release("r1", "releases/r1.yaml")  # r2's previous, never qualified here
    r2 = project.release(
        "r2", "releases/r2.yaml", determinism={**TRIMMED_DETERMINISM, "against_previous": False},
        benchmark={"enabled": False, "suite": str(suite)},
    )  # fmt: skip
    done = project.qualify(r2)
    assert done.returncode == 0, done.stdout + done.stderr
    calibrated = project.run("calibrate", str(r2), "-c", str(project.cluster), "--arms", "4",
                             timeout=900)  # fmt: skip
    assert calibrated.returncode == 0, calibrated.stdout + calibrated.stderr
    same = release_overlay(
        project.root / "releases/r2-docs.yaml", "releases/r2.yaml",
        name="r2-docs", previous="r2",
        description="Fused MLP kernel; the release notes reworded, nothing else changed.",
        gates={**TRIMMED_GATES, "determinism": TRIMMED_DETERMINISM,
               "benchmark": {"enabled": True, "suite": str(suite), "max_arms": 15}},
    )  # fmt: skip

    done = project.qualify(same, timeout=1500)

    output = done.stdout + done.stderr
    assert "this cluster resolves ±" in output  # said before the arms ran
    assert done.returncode == 0, output
    latest = latest_record(project.root / "experiments", "r2-docs")
    assert latest is not None, output
    record = read_record(project.root / "experiments" / latest.name)
    assert record.verdict.startswith("qualified"), record.verdict
    summary = record.stages["benchmark"].summary_as(BenchmarkSummary)
    assert summary is not None
    assert summary.decision == "pass", summary
    gated = [row for row in summary.points if row.gated]
    assert gated, summary.points
    assert {row.unit for row in gated} == {"engine_cpu_ms"}
    assert all(row.tolerance_pct == 15.0 for row in gated), gated
    assert all(row.verdict in ("level", "faster") for row in gated), gated
