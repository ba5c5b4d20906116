"""Every faulty release fails the whole qualification at its own gate, and an unchanged one passes.

Each release in releases/faulty/ switches on one engine fault. Here each is qualified by the
real `sparkgate qualify`, trimmed but otherwise as shipped, after the trimmed baseline r1 whose
record its determinism gate compares against. The record must end `failed at <its gate>` with a
clear reason; every gate before it passed; nothing after it ran; a failed boot keeps an
evidence folder with every node's logs; and no rank is left running.

The same benchmark, on the same calibration, must also let through what maintainers mostly ship:
a release that changes no kernel (here a copy of r1 whose only change is its description) is
"qualified", every gated point read level or faster, not merely "not slower".
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from flows.bench.stats import SlowerRule
from flows.gates.benchmark.summary import BenchmarkSummary
from flows.pipeline.stages import GATES
from flows.record import latest_record, read_record
from tests.support.overlays import release_overlay, write_yaml
from tests.support.project import (
    TRIMMED_COLD_BOOTS,
    TRIMMED_GATES,
    Project,
    ProjectKind,
    projects,
)

pytestmark = [
    pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1800),
    pytest.mark.prefect_server, projects(ProjectKind("faultytest", server=True)),
]  # fmt: skip

# The benchmark suite of the slower release: the steady points that config/suites/release-local.yaml
# gates (the engine grid and the prefix replay), judged on engine CPU at 20 %, not its 15 %:
# CI runs on machines noisier than the one the 15 % was measured on, and qualify refuses a
# tolerance the module's four-arm calibration says the cluster cannot resolve within max_arms
# (docs/statistics.md). A CI machine of 2026-12-07 calibrated step/grid at 10.2 % SD, where 15 %
# is not provable in 15 arms (exit 2); 20 % in 20 arms is provable up to about 13.5 % SD (more
# arms than 20 resolve less: each look then holds a stricter level). The fault adds 30 % of a
# step's wall time as work (a 20 % fault measured +19 to +21 % of engine CPU), so it stays a
# regression that matters here too: beyond 20 %, and at most twice it. A point is slower when its
# interval, at Pocock's level for the session's looks and split one-sided among the gated points,
# lies wholly on the slow side of no change and its estimate beyond the tolerance (the recipe's
# own regression rule); arms past that decision are never run. The client-shaped decode points
# (closed-loop streams) are left out: they share two cores with the load generator and scattered
# 5.5-8.8 % between boots over 20 real A/A sessions (docs/statistics.md).
SLOWDOWN_SUITE = {
    "kind": "suite", "name": "slowdown", "description": "engine grid and prefix, steady points",
    "seed": 0, "samples": 3, "warmup": 1, "tolerances": {"engine_cpu_ms": 0.20},
    "workloads": [
        {"kind": "step_grid", "name": "step", "concurrency": [1, 4], "context": [128, 1024],
         "max_tokens": 16},
        {"kind": "prefix", "name": "prefix", "prompt_tokens": 2048, "warm_replays": 2},
    ],
}  # fmt: skip


class Fault:
    """A faulty release, the gates it needs on, and how its failure must read."""

    def __init__(
        self,
        name: str,
        gate: str,
        says: tuple[str, ...],
        exits: tuple[int, ...] = (1,),
        **gates: Any,
    ) -> None:
        self.name, self.gate, self.says, self.exits, self.gates = name, gate, says, exits, gates

    def __repr__(self) -> str:
        return self.name


FAULTS = [
    Fault("failing-test", "release_tests", ("test_",), release_tests={"enabled": True}),
    Fault("nondeterministic", "determinism", ("differ",)),
    Fault("crash-on-boot", "determinism", ("boot failed", "rank 1")),
    Fault("lazy-kernel", "cold_boots", ("compiles after preparation", "mlp"),
          cold_boots=TRIMMED_COLD_BOOTS),
    Fault("slower", "benchmark", ("slower beyond 20%", "engine_cpu_ms"),
          cold_boots=TRIMMED_COLD_BOOTS,
          benchmark={"enabled": True, "suite": "SLOWDOWN", "max_arms": 20}),
]  # fmt: skip


@pytest.fixture(scope="module", autouse=True)
def r1_calibrated(project: Project) -> None:
    """In the module's project the trimmed r1 qualified and was calibrated on the slowdown
    suite, as the README has a user do before a benchmark."""
    suite = write_yaml(project.root / "suites/slowdown.yaml", SLOWDOWN_SUITE)
    r1 = project.release("r1", "releases/r1.yaml", benchmark={"suite": str(suite)})
    done = project.qualify(r1)
    assert done.returncode == 0, done.stdout + done.stderr
    calibrated = project.run("calibrate", str(r1), "-c", str(project.cluster), "--arms", "4",
                             timeout=900)  # fmt: skip
    assert calibrated.returncode == 0, calibrated.stdout + calibrated.stderr


@pytest.mark.parametrize("fault", FAULTS, ids=repr)
def test_a_faulty_release_fails_at_its_own_gate(project: Project, fault: Fault) -> None:
    suite = project.root / "suites/slowdown.yaml"
    gates = {
        gate: {**settings, "suite": str(suite)} if settings.get("suite") == "SLOWDOWN" else settings
        for gate, settings in fault.gates.items()
    }
    release = project.release(fault.name, f"releases/faulty/{fault.name}.yaml", **gates)

    done = project.qualify(release, timeout=1500)

    output = done.stdout + done.stderr
    assert done.returncode in fault.exits, output
    latest = latest_record(project.root / "experiments", fault.name)
    assert latest is not None, output
    found = project.root / "experiments" / latest.name
    record = read_record(found)
    assert record.verdict.startswith(f"failed at {fault.gate}:"), record.verdict
    for phrase in fault.says:
        assert phrase in record.verdict, record.verdict
    order = list(GATES)
    before, after = order[: order.index(fault.gate)], order[order.index(fault.gate) + 1 :]
    outcomes = {name: stage.outcome for name, stage in record.stages.items()}
    assert outcomes[fault.gate] == "failed"
    assert all(outcomes.get(gate) in ("passed", "skipped") for gate in before), outcomes
    assert not any(gate in outcomes for gate in after), outcomes
    if "boot failed" in fault.says:
        _assert_evidence_of_every_node(record.stages[fault.gate].evidence, found)
    if fault.gate == "benchmark":
        _assert_slower(record.stages[fault.gate].summary_as(BenchmarkSummary))
    _assert_nothing_running(project)


def test_an_unchanged_release_qualifies_against_the_release_it_copies(project: Project) -> None:
    """A copy of r1 with a new description, judged as `slower` is, passes its benchmark."""
    suite = project.root / "suites/slowdown.yaml"
    unchanged = release_overlay(
        project.root / "releases/r1-docs.yaml", "releases/r1.yaml",
        name="r1-docs", previous="r1",
        description="The baseline engine; its release notes reworded, nothing else changed.",
        gates={**TRIMMED_GATES, "cold_boots": TRIMMED_COLD_BOOTS,
               "benchmark": {"enabled": True, "suite": str(suite), "max_arms": 20}},
    )  # fmt: skip

    done = project.qualify(unchanged, timeout=1500)

    output = done.stdout + done.stderr
    assert "this cluster resolves ±" in output  # said before the first arm
    assert done.returncode == 0, output
    latest = latest_record(project.root / "experiments", "r1-docs")
    assert latest is not None, output
    record = read_record(project.root / "experiments" / latest.name)
    assert record.verdict.startswith("qualified"), record.verdict
    summary = record.stages["benchmark"].summary_as(BenchmarkSummary)
    assert summary is not None
    assert summary.decision == "pass", summary
    gated = [row for row in summary.points if row.gated]
    assert {row.unit for row in gated} == {"engine_cpu_ms"}, gated
    assert all(row.tolerance_pct == 20.0 for row in gated), gated
    assert all(row.verdict in ("level", "faster") for row in gated), gated
    _assert_nothing_running(project)


def _assert_slower(summary: BenchmarkSummary | None) -> None:
    """Decided slower, by the current rule, on a gated point whose estimate grew: never a pass,
    never inconclusive, never a point read level or faster."""
    assert summary is not None
    assert summary.slower_rule is SlowerRule.SIGNIFICANT
    gated = [row for row in summary.points if row.gated]
    assert {row.unit for row in gated} == {"engine_cpu_ms"}, gated
    assert summary.looks == 18  # planned: after C1, P, C2 and after each of 17 more arms
    assert summary.decision == "fail-slower", (summary.decision, gated)
    assert all(row.verdict in ("slower", "inconclusive") for row in gated), gated
    slower = [row for row in gated if row.verdict == "slower"]
    assert slower, gated
    assert all(row.tolerance_pct == 20.0 for row in gated), gated  # the suite's, not the 3 %
    assert all(row.change is not None and row.change > 20.0 for row in slower), slower
    assert all(row.low is not None and row.low > 0.0 for row in slower), slower


def _assert_evidence_of_every_node(evidence: list[str], record: Path) -> None:
    assert evidence, "a failed boot keeps its evidence"
    folder = record / evidence[0]
    for node in ("faultytest0", "faultytest1"):
        logs = list(folder.glob(f"{node}*/*.log")) + list(folder.glob(f"{node}*.log"))
        assert logs, f"no log of {node} in {sorted(p.name for p in folder.rglob('*'))}"


def _assert_nothing_running(project: Project) -> None:
    ranks = subprocess.run(
        ["pgrep", "-f", str(project.root / "n0")], check=False, capture_output=True
    )
    assert ranks.stdout == b"", "a rank is still running"
