"""Replaying recorded sessions with a known slowdown: the gate's own rules over stored arms.

The tool's claim is "what the gate would have decided had the candidate been this much slower",
so these check it against sessions whose answer is plain: quiet arms and a large slowdown must
fail as slower, quiet arms with none must pass, and a session that runs out of recorded arms
must say so instead of inventing a decision.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pydantic import JsonValue

from flows.bench.ledger import Ledger, write_ledger
from flows.bench.report import ArmReport, Point, Sample, write_arm
from flows.gates.benchmark.rules import LEDGER_FILE, Role
from flows.research.shifted import (
    OUT_OF_ARMS,
    main,
    read_session,
    replay,
    report_only,
    slowed,
)
from flows.spec.release import load_release

ROOT = Path(__file__).resolve().parents[3]
SETTINGS = load_release(ROOT / "releases" / "r2.yaml").gates.benchmark  # C, P, C; 7 arms; 3 %
ROLES: list[Role] = ["candidate", "previous"] * 3 + ["candidate"]


def _sample(noise: float) -> Sample:
    return Sample(metrics={"engine_cpu_ms": 2.0 * np.exp(noise), "tps": 400 / np.exp(noise)})


def _arm(rng: np.random.Generator, label: str, sd: float) -> ArmReport:
    points = {
        name: Point(
            workload="single_stream", gate=["engine_cpu_ms", "tps"],
            samples=[_sample(float(noise)) for noise in rng.normal(0.0, sd, 3)],
        )
        for name in ("single/c1", "streams/c2")
    }  # fmt: skip
    suite: dict[str, JsonValue] = {"workloads": [{"name": "single"}, {"name": "streams"}]}
    return ArmReport(label=label, source="test", url="http://127.0.0.1:1", suite="release",
                     started_utc="2026-12-05T00:00:00+00:00", points=points,
                     workload=suite)  # fmt: skip


def _session(seed: int, sd: float, count: int = 7) -> tuple[list[tuple[Role, ArmReport]], Ledger]:
    rng = np.random.default_rng(seed)
    arms = [(role, _arm(rng, f"{i}-{role}", sd)) for i, role in enumerate(ROLES[:count], 1)]
    ledger = Ledger().with_session(_arm(rng, "a", sd), _arm(rng, "b", sd))
    return arms, ledger


def test_a_slowed_arm_takes_longer_and_serves_fewer_tokens() -> None:
    (_, arm), *_ = _session(1, 0.01)[0]
    slow = slowed(arm, 0.10)
    before, after = arm.points["single/c1"].samples[0], slow.points["single/c1"].samples[0]
    assert after.metrics["engine_cpu_ms"] == pytest.approx(before.metrics["engine_cpu_ms"] * 1.1)
    assert after.metrics["tps"] == pytest.approx(before.metrics["tps"] / 1.1)


def test_quiet_arms_pass_unslowed_and_fail_as_slower_when_a_slowdown_is_multiplied_in() -> None:
    arms, ledger = _session(2, 0.002)

    level = replay("s", arms, SETTINGS, ledger, 0.0)
    slow = replay("s", arms, SETTINGS, ledger, 0.20)

    assert (level.decision, level.arms, level.slower_points) == ("pass", 3, [])
    assert (slow.decision, slow.arms) == ("fail-slower", 3)
    assert "single/c1 engine_cpu_ms" in slow.slower_points  # the gated metric, named


def test_a_workload_replayed_as_report_only_is_compared_but_no_longer_decides() -> None:
    arms, ledger = _session(2, 0.002)

    both = replay("s", arms, SETTINGS, ledger, 0.20)
    streams_only = replay("s", arms, SETTINGS, ledger, 0.20, reported_only={"single"})

    assert {p.split()[0] for p in both.slower_points} == {"single/c1", "streams/c2"}
    assert {p.split()[0] for p in streams_only.slower_points} == {"streams/c2"}
    regated = report_only(arms[0][1], {"single"})
    assert regated.workload["workloads"] == [{"name": "single", "gate": False}, {"name": "streams"}]
    assert arms[0][1].workload["workloads"] == [{"name": "single"}, {"name": "streams"}]


def test_a_session_needing_more_arms_than_were_recorded_ends_out_of_arms() -> None:
    arms, ledger = _session(3, 0.3, count=3)  # far too noisy to decide on three arms

    replayed = replay("s", arms, SETTINGS, ledger, 0.05)

    assert (replayed.decision, replayed.arms) == (OUT_OF_ARMS, 3)


def test_recorded_folders_are_read_in_arm_order_and_the_command_prints_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    arms, ledger = _session(4, 0.002)
    folder = tmp_path / "r1-vs-r1" / "session-1"
    for index, (role, arm) in enumerate(arms, 1):
        write_arm(arm, folder / "arms" / f"{index}-{role}")
    write_ledger(ledger, folder / LEDGER_FILE)

    read, kept = read_session(folder)

    assert [role for role, _ in read] == ROLES
    assert [arm.label for _, arm in read] == [arm.label for _, arm in arms]
    assert kept == ledger
    assert main([str(ROOT / "releases" / "r2.yaml"), str(tmp_path / "r1-vs-r1"),
                 "--slowdown", "0", "0.2"]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    assert "pass 1" in printed
    assert "fail-slower 1" in printed
    with pytest.raises(SystemExit, match="no workload named prefill"):
        main([str(ROOT / "releases" / "r2.yaml"), str(tmp_path / "r1-vs-r1"),
              "--report-only", "prefill"])  # fmt: skip
