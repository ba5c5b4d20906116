"""README, index and table readings: the lines a reviewer reads, and verdicts recomputed."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from flows.bench.stats import SlowerRule
from flows.gates.benchmark.story import bench_problems, bench_verdicts, tolerance_pct
from flows.gates.benchmark.summary import BenchmarkSummary, PointRow
from flows.gates.cold_boots.story import boots_problems
from flows.gates.cold_boots.summary import BootRow
from flows.gates.determinism.summary import FirstDifference, PreviousReport, ScenarioRow
from flows.gates.release_tests.summary import FileRow
from flows.gates.summaries import GateSummary
from flows.record import read_record, render_index, render_readme, write_index
from flows.record.model import Record, StageEntry
from flows.record.writer import RecordWriter
from tests.support import summaries


def test_readme_reads_verdict_first_and_every_table(
    published: Callable[..., RecordWriter],
) -> None:
    text = (published().path / "README.md").read_text()
    lines = text.splitlines()
    assert lines[0] == "# r2: passed"
    # the decision and what the benchmark found lead, then its largest intervals (issue 27)
    assert lines[2] == "**Verdict: passed.** Benchmark: **faster**."
    assert lines[4:8] == [
        "Largest gated changes [95% interval]:",
        "",
        "- decode/prose-c1 step_ms: -6.4% [-8.7, -4.1] faster",
        "- prefill/2k prefill_tps: +0.2% [-0.6, +1.0] level",
    ]
    assert lines[9].startswith("Release `r2` on cluster `local`")
    expected = [
        "| release_tests | passed | 3 passed, 0 failed | 5.50 s |",
        "- Previous: `r1`",
        (
            "- Declared outputs: unchanged (outputs must equal the previous release's, token for "
            "token)"
        ),
        "- Engine options: `mlp_kernel=fused`",
        "| workload | previous | candidate (change [95% interval]) | verdict | gated |",
        (
            "| decode/prose-c1 (step_ms, lower is better) | 40.84 | 38.21 (**-6.4%** [-8.7, -4.1]) "
            "| faster | gates |"
        ),
        (
            "| prefill/2k (prefill_tps, higher is better) | 4,033.5 | 4,040.1 (level: +0.2% "
            "[-0.6, +1.0]) | level | gates |"
        ),
        "| boot | ready | what happened |",
        "| all-kernels | 7.25 s | 12 kernels compiled before the rendezvous |",
        "| scenario | identical | first difference |",
        "| staggered | 4/4 | — |",
        "Against r1 (outputs declared unchanged): 4/4 responses identical, tokens and logprobs.",
        "3 passed, 0 failed, 0 errors, 1 skipped in 0.400 s on local0",
        "| tests/test_gpu_only.py | needs a GPU the CI lacks |",
        "![benchmark](plots/benchmark.png)",
        "![boots](plots/boots.png)",
        "- Hosts: local0, local1",
    ]
    for line in expected:
        assert line in lines, line
    order = [
        text.index(title)
        for title in (
            "## What changed",
            "## Release tests",
            "## Determinism",
            "## Cold boots",
            "## Benchmark",
        )
    ]
    assert order == sorted(order)


def _record(
    stages: dict[str, tuple[str, GateSummary | None]], *, verdict: str = "failed at determinism"
) -> Record:
    now = datetime(2026, 12, 2, tzinfo=UTC)
    entries = {
        name: StageEntry.model_validate(
            {
                "stage": name,
                "outcome": outcome,
                "reason": "why",
                "started_at": now,
                "seconds": 1.0,
                "result": {"path": f"{name}/result.json", "sha256": "0" * 64, "bytes": 1},
                "result_type": "flows.gates.base:GateResult",
                "summary": summary,
            }
        )
        for name, (outcome, summary) in stages.items()
    }
    return Record(
        name="2026-12-02-r3", status="published", release_name="r3",
        release={"outputs": {"change": "changed", "reason": "new sampler"}},
        cluster_name="local", cluster={}, previous="r2", build_digest="sha256:x",
        stages=entries, stage_order=["release_tests", "determinism", "cold_boots", "benchmark"],
        verdict=verdict, created_at=now, updated_at=now, published_at=now,
    )  # fmt: skip


def test_readme_shows_failures_differences_and_gates_not_run() -> None:
    determinism = summaries.determinism(
        scenarios=[
            ScenarioRow(name="all-at-once", identical=3, differing=1,
                        first_difference=FirstDifference(prompt="p2", index=7)),
        ],
        against_previous=PreviousReport(mode="changed", identical=1, total=4,
                                        top_token_agreement=0.875, reason="new sampler"),
    )  # fmt: skip
    tests = summaries.release_tests(
        passed=1, skipped=0, seconds=1.0, excluded=[],
        files=[FileRow(file="tests/test_x.py", outcome="passed", tests=1, seconds=1.0)],
    )  # fmt: skip
    lines = render_readme(
        _record({"release_tests": ("passed", tests), "determinism": ("failed", determinism)})
    )
    assert lines.startswith("# r3: failed at determinism\n")
    assert "- Declared outputs: changed (new sampler)" in lines
    assert "| all-at-once | 3/4 | prompt p2, token 7 |" in lines
    assert (
        "Against r2 (outputs declared changed): 1/4 responses identical, top-token agreement "
        "87.5%; new sampler" in lines
    )
    assert "## Cold boots\n\nNot run." in lines
    assert "| benchmark | not run |  | — |" in lines


def test_bench_verdicts_are_recomputed_from_intervals() -> None:
    point = summaries.point("x", "tps", higher_is_better=True, change=-0.5, low=-2.0, high=1.0)
    older = summaries.benchmark(slower_rule=SlowerRule.INTERVAL)
    current = summaries.benchmark(slower_rule=SlowerRule.SIGNIFICANT)

    def verdicts(row: PointRow, summary: BenchmarkSummary = older) -> set[str]:
        return bench_verdicts(row, 0.03, summary)

    assert verdicts(point) == {"level"}
    assert verdicts(point.model_copy(update={"low": 0.5, "change": 1.0})) == {"faster"}
    beyond = point.model_copy(update={"low": -8.0, "high": -4.0, "change": -6.0})
    assert verdicts(beyond) == {"slower"}
    assert verdicts(point.model_copy(update={"low": -4.0})) == {"inconclusive"}
    lower = summaries.point("x", "ms", higher_is_better=False, change=6.0, low=4.0, high=8.0)
    assert verdicts(lower) == {"slower"}
    assert verdicts(summaries.point("x", "tps", low=None, high=None)) == {"inconclusive"}
    # Surely slower, the estimate beyond 3 % but the interval not: slower by the current rule.
    clear_of_zero = point.model_copy(update={"low": -9.0, "high": -1.0, "change": -5.0})
    assert verdicts(clear_of_zero) == {"inconclusive"}
    assert verdicts(clear_of_zero, current) == {"slower"}
    assert verdicts(clear_of_zero.model_copy(update={"change": -2.0}), current) == {"inconclusive"}
    # A session whose split among its gated rows was stricter than the shown interval may have
    # left a slower reading undecided: with three rows, not with two (2 x alpha / 2 is alpha).
    assert verdicts(clear_of_zero, current.model_copy(update={"looks": 5})) == {"slower"}
    third = summaries.point("x3", "tps")
    divided = current.model_copy(update={"looks": 5, "points": [*current.points, third]})
    assert verdicts(clear_of_zero, divided) == {"slower", "inconclusive"}
    older_divided = older.model_copy(update={"looks": 5})
    assert verdicts(beyond, older_divided) == {"slower", "inconclusive"}
    assert abs(tolerance_pct(0.03) - 3.0) < 1e-9
    assert tolerance_pct(3.0) == 3.0
    summary = summaries.benchmark(points=[point.model_copy(update={"verdict": "faster"})])
    assert bench_problems(summary, "failed") == [
        (
            "benchmark: x: verdict 'faster', but its interval [-2.0, +1.0] at tolerance 3% "
            "gives 'level'"
        )
    ]


def test_a_passed_outcome_with_a_failing_boot_is_a_problem() -> None:
    boots = summaries.cold_boots(
        boots=[BootRow(mode="all-jit", ready_s=5.0, compiles_after_preparation=2,
                       spot_check="identical")]
    )  # fmt: skip
    assert boots_problems(boots, "passed") == [
        "cold_boots: outcome passed, but boot all-jit: 2 compiles after preparation"
    ]
    assert boots_problems(boots, "failed") == []


def test_index_lists_published_records_newest_first(
    published: Callable[..., RecordWriter],
) -> None:
    first = published()
    second = published(digest="sha256:bbb")
    path = write_index(first.path.parent)
    text = path.read_text()
    assert path.name == "README.md"
    assert text.index(f"[{second.path.name}]") < text.index(f"[{first.path.name}]")
    assert (
        "| 2026-12-02 | [2026-12-02-r2](2026-12-02-r2/README.md) | r2 | r1 | passed: 3 passed, "
        "0 failed | passed: 5/5 scenarios identical; vs previous 4/4 |" in text
    )
    assert (
        "passed: 2 gated at 3%: 1 faster, 1 level; largest decode/prose-c1 step_ms -6.4% "
        "[-8.7, -4.1] faster | passed |" in text
    )
    assert "No published records yet." in render_index([])
    assert read_record(first.path).status == "published"


def test_a_gate_without_figures_shows_only_its_reason() -> None:
    text = render_readme(_record({"release_tests": ("skipped", None)}, verdict="qualified"))
    assert "| release_tests | skipped |  | 1.00 s |" in text
    assert "## Release tests\n\n**skipped**: why\n\n## Determinism" in text


def test_verify_checks_a_row_at_its_own_tolerance_and_never_fails_on_a_reported_row() -> None:
    """A suite workload's 20 % (or a metric's own) tolerance decided the row; so does verify."""
    own = summaries.point(
        "poisson/r1", "tpot_p50_ms", higher_is_better=False, change=8.0, low=5.0, high=12.0
    )
    own = own.model_copy(update={"verdict": "level", "tolerance_pct": 20.0})
    reported = summaries.point("sampled/c4", "tps", change=-7.0, low=-9.0, high=-5.0)
    reported = reported.model_copy(update={"verdict": "slower", "gated": False})
    summary = summaries.benchmark(points=[own, reported])
    assert bench_problems(summary, "passed") == []
    unchecked = summaries.benchmark(points=[own.model_copy(update={"tolerance_pct": None})])
    assert bench_problems(unchecked, "passed") == [
        (
            "benchmark: poisson/r1: verdict 'level', but its interval [+5.0, +12.0] at "
            "tolerance 3% gives 'slower'"
        ),
        "benchmark: outcome passed, but points do not pass: poisson/r1",
    ]


def test_the_readme_says_what_slower_meant_by_the_rule_the_record_was_decided_by() -> None:
    def rendered(rule: SlowerRule) -> str:
        summary = summaries.benchmark(slower_rule=rule)
        return render_readme(_record({"benchmark": ("passed", summary)}, verdict="qualified"))

    assert "or slower (the whole interval beyond the tolerance);" in rendered(SlowerRule.INTERVAL)
    assert (
        "or slower (the whole interval on the bad side of no change and the change beyond the "
        "tolerance);" in rendered(SlowerRule.SIGNIFICANT)
    )
