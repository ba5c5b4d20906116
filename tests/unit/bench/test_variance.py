"""The noise decomposition on arms whose components are known by construction."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from flows.bench.report import ArmReport, Point, Sample, write_arm
from flows.bench.variance import decompose, decompose_all, roles_of
from flows.cli import main


def arm(label: str, level: float, spread: float, role: str = "candidate") -> ArmReport:
    """Samples level*exp(±spread) and level: a within-arm log SD of exactly `spread`."""
    values = [level * math.exp(-spread), level, level * math.exp(spread)]
    return ArmReport(
        label=label, source="sparkgate", url="http://127.0.0.1:1", suite="tiny",
        started_utc="2026-12-03T00:00:00+00:00", identity={"role": role},
        points={"single/c1": Point(workload="single_stream", gate=["engine_cpu_ms"],
                                   samples=[Sample(metrics={"engine_cpu_ms": v}) for v in values])},
    )  # fmt: skip


def test_within_arm_noise_alone_leaves_no_boot_component() -> None:
    arms = [arm(f"A{i}", 10.0, 0.01) for i in range(4)]
    found = decompose(arms, roles_of(arms), "single/c1", "engine_cpu_ms")
    assert found is not None
    assert found.within_sd_pct == pytest.approx(100 * math.expm1(0.01), rel=1e-6)
    assert found.within_df == 8
    assert found.boot_df == 2  # four arms less intercept and drift
    assert found.boot_sd_pct == 0.0
    assert found.drift_pct_per_arm == pytest.approx(0.0, abs=1e-9)


def test_boot_to_boot_scatter_and_drift_are_told_apart() -> None:
    offsets = [0.02, -0.02, -0.02, 0.02, 0.0]  # boot effects orthogonal to a linear trend
    levels = [10.0 * math.exp(0.01 * i + o) for i, o in enumerate(offsets)]
    arms = [arm(f"A{i}", level, 0.001) for i, level in enumerate(levels)]
    found = decompose(arms, roles_of(arms), "single/c1", "engine_cpu_ms")
    assert found is not None
    assert found.drift_pct_per_arm == pytest.approx(100 * math.expm1(0.01), abs=0.05)
    expected = math.sqrt(float(np.sum(np.square(offsets))) / 3)
    assert found.arm_sd_pct == pytest.approx(100 * math.expm1(expected), rel=0.05)
    assert found.boot_sd_pct is not None
    assert found.boot_sd_pct > 2 * found.within_sd_pct / math.sqrt(3)


def test_a_session_takes_the_candidates_change_out_before_the_scatter() -> None:
    # C, P, C, P, C: the candidate is 10 % slower, and that is not noise.
    arms = [
        arm(f"{i}", 11.0 if role == "candidate" else 10.0, 0.001, role)
        for i, role in enumerate(["candidate", "previous", "candidate", "previous", "candidate"])
    ]
    assert roles_of(arms) == [True, False, True, False, True]
    (found,) = decompose_all(arms, roles_of(arms))
    assert found.arm_sd_pct == pytest.approx(0.0, abs=1e-6)
    assert found.boot_df == 2


def test_the_variance_command_prints_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = [write_arm(arm(f"A{i}", 10.0 + i / 10, 0.01), tmp_path / f"a{i}") for i in range(3)]
    assert main(["bench", "variance", *map(str, paths)]) == 0
    err = capsys.readouterr().err
    assert "single/c1" in err
    assert "engine" in err
    assert main(["bench", "variance", str(paths[0])]) == 2
