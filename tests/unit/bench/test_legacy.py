"""Importing the recipe's own reports reproduces the recipe's stored numbers.

The recipe's bench.json files (../shared/data/recipe-bench) store describe() summaries per point
and its bench.txt prints per-point lines and Welch changes; an import that lost or altered a
receipt would not reproduce them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from flows.bench.compare import compare_arms
from flows.bench.legacy import import_recipe_report
from flows.bench.present import recipe_line, recipe_text
from flows.bench.report import ArmReport, read_arm, write_arm
from flows.bench.stats import describe, difference
from flows.errors import BenchError

# Copies of ../shared/data/recipe-bench: reports of the recipe's own `bin/spark bench`.
DATA = Path(__file__).resolve().parent / "data" / "recipe-bench"
R6D = DATA / "2026-10-10-karmic-kraken-r6d-tp4.json"
R6 = DATA / "2026-10-05-karmic-kraken-r6-tp4.json"
TP3 = DATA / "2026-10-05-r6-tp3-bench.json"
R5P = DATA / "2026-10-05-karmic-kraken-r5p.json"


@pytest.fixture(scope="module")
def r6d() -> ArmReport:
    return import_recipe_report(R6D)


@pytest.fixture(scope="module")
def r6() -> ArmReport:
    return import_recipe_report(R6, label="r6")


@pytest.mark.parametrize("path", [R6D, R6, TP3, R5P], ids=lambda p: p.stem)
def test_every_stored_summary_is_reproduced_from_the_samples(path: Path) -> None:
    arm = import_recipe_report(path)
    checked = 0
    for name, point in arm.points.items():
        for metric, stored in point.stored.items():
            values = point.values(metric)
            if not values:  # e.g. per-request summaries, or r5p's step_ms without samples
                continue
            summary = point.summary(metric)
            assert summary is not None
            assert summary.rounded() == stored, f"{name} {metric}"
            checked += 1
    assert checked >= 30


def test_every_receipt_is_kept(r6d: ArmReport) -> None:
    raw = json.loads(R6D.read_text())["suites"]
    expected = sum(len(s["requests"]) for v in raw["decode"]["samples"].values() for s in v)
    expected += sum(len(v) for v in raw["prefill"]["samples"].values())
    kept = sum(len(s.legacy_receipts) for p in r6d.points.values() for s in p.samples)
    assert kept == expected
    first = r6d.points["decode/prose-c1"].samples[0].legacy_receipts[0]
    assert first == raw["decode"]["samples"]["prose-c1"][0]["requests"][0]


def test_round_trip_through_arm_json(r6d: ArmReport, tmp_path: Path) -> None:
    assert read_arm(write_arm(r6d, tmp_path)) == r6d


def test_welch_from_receipts_matches_welch_from_the_recipes_stored_points(
    r6d: ArmReport, r6: ArmReport
) -> None:
    """Every decode and prefill row: same change and interval to the printed decimal."""
    comparison = compare_arms([r6d], [r6])
    assert len(comparison.points) == 23  # 10 decode points x (tps, step_ms) + 3 prefill sizes
    for row in comparison.points:
        stored_new = r6d.points[row.point].stored[row.metric]
        stored_old = r6.points[row.point].stored[row.metric]
        recipe = difference(stored_new, stored_old)
        assert recipe is not None
        assert row.welch is not None
        ours = (round(row.welch.pct, 1), round(row.welch.low, 1), round(row.welch.high, 1))
        assert ours == (round(recipe.pct, 1), round(recipe.low, 1), round(recipe.high, 1))
    assert comparison.unmatched == ["prefill/1000000"]


def test_named_points_of_r6d_against_r6(r6d: ArmReport, r6: ArmReport) -> None:
    """The numbers the r6d baseline quotes: steps 31.59/34.65 vs 31.79/34.75, prefill level."""
    rows = {(r.point, r.metric): r for r in compare_arms([r6d], [r6]).points}
    prose = rows["decode/prose-c1", "step_ms"]
    assert (round(prose.new.mean, 2), round(prose.old.mean, 2)) == (31.59, 31.79)
    assert prose.welch is not None
    assert (round(prose.welch.low, 1), round(prose.welch.high, 1)) == (-1.4, 0.2)
    assert prose.recipe_verdict == "same"
    code = rows["decode/code-c1", "step_ms"]
    assert (round(code.new.mean, 2), round(code.old.mean, 2)) == (34.65, 34.75)
    big = rows["prefill/32768", "prefill_tps"]
    assert (round(big.new.mean), round(big.old.mean)) == (5755, 5836)
    assert big.welch is not None
    assert f"{big.welch.pct:+.1f} [{big.welch.low:+.1f}, {big.welch.high:+.1f}]" == (
        "-1.4 [-8.5, +5.7]"
    )
    for size, new, old in [("262144", 5426, 5471), ("500000", 5026, 5072)]:
        row = rows[f"prefill/{size}", "prefill_tps"]
        assert (round(row.new.mean), round(row.old.mean)) == (new, old)
        assert row.recipe_verdict == "same"
    only_new = r6d.points["prefill/1000000"].summary("prefill_tps")
    assert only_new is not None
    assert round(only_new.mean) == 4334


def _txt_lines() -> list[str]:
    return (DATA / "2026-10-05-r6-tp3-bench.txt").read_text().splitlines()


def test_tp3_bench_txt_lines_are_reproduced() -> None:
    """Left half of every tok/s, step-time and prefill line of the recipe's own bench.txt."""
    arm = import_recipe_report(TP3)
    sections = {
        "decode (aggregate tok/s, 95% CI):": ("decode/{}", "tps", 1),
        "step time (ms": ("decode/{}", "step_ms", 2),
        "prefill (tok/s):": ("prefill/{}", "prefill_tps", 1),
    }
    current = None
    checked = 0
    for line in _txt_lines():
        header = next((v for k, v in sections.items() if line.startswith(k)), None)
        if header or not line.startswith("  ") or "primaries" in line:
            current = header
            continue
        if current is None:
            continue
        match = re.match(r"^(  \S+(?: tokens)?\s+\S+ ±\s*\S+% n=\d+)", line)
        assert match, line
        label = line.split()[0]
        template, metric, decimals = current
        summary = arm.points[template.format(label)].summary(metric)
        assert summary is not None
        assert recipe_line(
            f"{label} tokens" if "prefill" in template else label, summary, decimals=decimals
        ).rstrip() == match.group(1)
        checked += 1
    assert checked == 19  # 8 tok/s + 8 step + 3 prefill


def test_recipe_text_has_the_recipes_layout(r6d: ArmReport, r6: ArmReport) -> None:
    text = recipe_text(compare_arms([r6d], [r6]))
    assert "  32768 tokens          5754.6 ± 5.8% n=2   ref   5835.9   -1.4% [-8.5, +5.7] same" in (
        text.splitlines()
    )


def test_a_file_that_is_not_a_recipe_report_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": 2}')
    with pytest.raises(BenchError, match="schema 1"):
        import_recipe_report(bad)
    bad.write_text("{not json")
    with pytest.raises(BenchError, match="not JSON"):
        import_recipe_report(bad)


@pytest.mark.parametrize("path", [R6D, R6, TP3], ids=lambda p: p.stem)
def test_per_request_summaries_are_reproduced_from_the_kept_receipts(path: Path) -> None:
    """per_stream_decode_tps and ttft_s summarize every request (receipts rounded to 4 dp)."""
    arm = import_recipe_report(path)
    for name, point in arm.points.items():
        if point.workload != "decode":
            continue
        receipts = [r for s in point.samples for r in s.legacy_receipts]
        for metric, field in (("per_stream_decode_tps", "decode_tps"), ("ttft_s", "ttft_s")):
            values = [float(r[field]) for r in receipts if r[field] is not None]  # type: ignore[arg-type]
            ours, stored = describe(values).rounded(), point.stored[metric]
            assert ours.n == stored.n
            assert ours.mean == pytest.approx(stored.mean, abs=0.0015), (name, metric)
            assert ours.sd == pytest.approx(stored.sd, abs=0.0015), (name, metric)


def test_workloads_the_candidate_never_ran_are_not_lost(r6d: ArmReport, r6: ArmReport) -> None:
    """An arm with only prefill points compares with a full recipe report on prefill alone."""
    prefill = {k: v for k, v in r6d.points.items() if k.startswith("prefill/")}
    only_prefill = r6d.model_copy(update={"points": prefill})
    comparison = compare_arms([only_prefill], [r6])
    assert not comparison.failed
    assert len(comparison.not_compared) == 10
    assert {r.point for r in comparison.points} == {
        "prefill/32768",
        "prefill/262144",
        "prefill/500000",
    }
    del prefill["prefill/500000"]
    lost = compare_arms([r6d.model_copy(update={"points": prefill})], [r6])
    assert lost.missing == ["prefill/500000"]
    assert lost.failed
