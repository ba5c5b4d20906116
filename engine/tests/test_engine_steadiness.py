"""The steadiness tool's arithmetic, and one short run of it against a real TP2 cluster."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from sparkengine.steadiness import block_means, group_means, relative_sd


def test_relative_sd_is_a_percentage_of_the_mean() -> None:
    assert relative_sd([9.0, 11.0]) == pytest.approx(100 * 2**0.5 / 10)
    assert relative_sd([5.0]) == 0.0


def test_samples_fall_into_blocks_by_their_start_time() -> None:
    samples = [(0.1, 1.0), (4.9, 3.0), (5.0, 10.0), (12.0, 4.0), (14.9, 6.0)]
    assert block_means(samples, 5.0) == [2.0, 10.0, 5.0]


def test_only_whole_groups_are_averaged() -> None:
    assert group_means([1.0, 3.0, 5.0, 7.0, 9.0], 2) == [2.0, 6.0]


@pytest.mark.slow
@pytest.mark.integration
def test_the_command_boots_measures_and_reports_json() -> None:
    """`python -m sparkengine.steadiness` as docs/statistics.md shows it, with short times."""
    argv = [sys.executable, "-m", "sparkengine.steadiness", "--boots", "2", "--seconds", "6",
            "--probe-seconds", "1", "--pin", "--json"]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=True)
    spreads = {row["name"]: row for row in json.loads(done.stdout)}
    assert set(spreads) == {"compute", "memory", "engine"}
    engine = spreads["engine"]
    assert engine["count"] == 2
    assert 0 < engine["mean"] < 1000  # milliseconds of CPU per decode step
    assert engine["short_sd"] > 0  # two 5 s blocks or more per boot, never identical
