"""The noise of a series of sessions per point: what a suite reads to choose the points that gate.

A steady point and a point whose boots scatter must come out in that order, with the scatter
each was given, whether summarised from decompositions or read from recorded session folders.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from flows.bench.report import ArmReport, Point, Sample, write_arm
from flows.bench.variance import Components
from flows.research.noise import main, session_components, summarise

ROLES = ["candidate", "previous"] * 3 + ["candidate"]


def _row(point: str, arm_sd: float | None, within: float = 1.0) -> Components:
    return Components(
        point=point, metric="engine_cpu_ms", arms=7, samples=3, within_sd_pct=within,
        within_df=14, arm_sd_pct=arm_sd, boot_sd_pct=arm_sd, boot_df=4, drift_pct_per_arm=0.0,
    )  # fmt: skip


def test_each_point_is_summarised_over_the_sessions_that_could_estimate_it() -> None:
    sessions = [
        [_row("step/grid", 4.0), _row("single/c1", 9.0, within=7.0)],
        [_row("step/grid", 5.0), _row("single/c1", None)],  # too few arms of a role there
        [_row("step/grid", 3.0), _row("single/c1", 8.0, within=6.0)],
    ]

    rows = {row.point: row for row in summarise(sessions, "engine_cpu_ms")}

    assert rows["step/grid"].sessions == 3
    assert rows["step/grid"].arm_sd_median_pct == pytest.approx(4.0)
    assert rows["step/grid"].arm_sd_max_pct == pytest.approx(5.0)
    assert rows["single/c1"].sessions == 2
    assert rows["single/c1"].arm_sd_median_pct == pytest.approx(8.5)
    assert rows["single/c1"].within_sd_median_pct == pytest.approx(6.5)
    assert summarise(sessions, "tps") == []


def _arm(rng: np.random.Generator, boot_sd: dict[str, float]) -> ArmReport:
    points = {}
    for name, sd in boot_sd.items():
        level = 2.0 * np.exp(rng.normal(0.0, sd))
        samples = [Sample(metrics={"engine_cpu_ms": level * np.exp(rng.normal(0.0, 0.001))})
                   for _ in range(3)]  # fmt: skip
        points[name] = Point(workload="step_grid", gate=["engine_cpu_ms"], samples=samples)
    return ArmReport(label="arm", source="test", url="http://127.0.0.1:1", suite="release",
                     started_utc="2026-12-05T00:00:00+00:00", points=points)  # fmt: skip


def test_recorded_sessions_are_read_and_the_scattering_point_comes_out_noisier(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(7)
    for session in (1, 2):
        folder = tmp_path / "r1-vs-r1" / f"session-{session}"
        for index, role in enumerate(ROLES, 1):
            arm = _arm(rng, {"step/grid": 0.005, "single/c1": 0.10})
            write_arm(arm, folder / "arms" / f"{index}-{role}")

    components = session_components(tmp_path / "r1-vs-r1" / "session-1")
    assert main([str(tmp_path / "r1-vs-r1")]) == 0

    arm_sd = {row.point: row.arm_sd_pct or 0.0 for row in components}
    assert arm_sd["single/c1"] > 4 * arm_sd["step/grid"]
    printed = capsys.readouterr().out
    assert printed.index("step/grid") < printed.index("single/c1")  # steadiest first
    with pytest.raises(SystemExit, match="no session-N folders"):
        main([str(tmp_path / "nothing")])
