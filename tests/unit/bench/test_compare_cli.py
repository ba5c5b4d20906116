"""`sparkgate bench import/compare/ledger-add`: files written, exit codes, clean errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flows.bench.compare import SessionDecision, compare_arms, session_decision
from flows.bench.ledger import read_ledger
from flows.bench.report import ArmReport, Point, Receipt, Sample, read_arm, write_arm
from flows.cli import main

# Copies of ../shared/data/recipe-bench: reports of the recipe's own `bin/spark bench`.
DATA = Path(__file__).resolve().parent / "data" / "recipe-bench"


def _arm(label: str, step_ms: list[float], tps: list[float]) -> ArmReport:
    samples = [Sample(metrics={"step_ms": s, "tps": t}) for s, t in zip(step_ms, tps, strict=True)]
    point = Point(workload="decode", gate=["step_ms", "tps"], samples=samples)
    return ArmReport(
        label=label,
        source="sparkgate",
        url="http://x",
        suite="t",
        started_utc="2026-12-02T00:00Z",
        points={"decode/prose-c1": point},
    )


def _session(tmp_path: Path, candidate_factor: float) -> list[str]:
    """C1, P, C2 arm folders; candidate step times scaled by candidate_factor."""
    base = [40.0, 40.2, 39.9, 40.1]
    c1 = _arm("c1", [v * candidate_factor for v in base], [25.0, 25.1, 24.9, 25.0])
    p = _arm("p", base, [25.0, 25.1, 24.9, 25.0])
    c2 = _arm("c2", [v * candidate_factor * 1.001 for v in base], [25.0, 25.0, 25.1, 24.9])
    return [str(write_arm(a, tmp_path / a.label).parent) for a in (c1, p, c2)]


def _ledger(tmp_path: Path) -> str:
    ledger = tmp_path / "ledger.json"
    for i in range(6):
        jitter = 1 + 0.002 * (-1) ** i
        a = _arm(f"a{i}", [40.0, 40.1, 39.9], [25.0, 25.1, 24.9])
        b = _arm(f"b{i}", [40.0 * jitter, 40.1 * jitter, 39.9 * jitter], [25.0, 25.1, 24.9])
        paths = [str(write_arm(x, tmp_path / "aa" / x.label).parent) for x in (a, b)]
        assert main(["bench", "ledger-add", *paths, "--ledger", str(ledger)]) == 0
    return str(ledger)


def test_slower_candidate_fails_with_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    c1, p, c2 = _session(tmp_path, 1.10)  # step time 10 % longer
    code = main(["bench", "compare", c1, p, "--again", c2, "--ledger", _ledger(tmp_path)])
    assert code == 1
    assert "slower beyond 3%: decode/prose-c1 step_ms" in capsys.readouterr().err


def test_level_candidate_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    c1, p, c2 = _session(tmp_path, 1.0)
    out = tmp_path / "cmp"
    code = main(
        [
            "bench",
            "compare",
            c1,
            p,
            "--again",
            c2,
            "--ledger",
            _ledger(tmp_path),
            "--out",
            str(out),
            "--json",
        ]
    )
    assert code == 0
    printed = json.loads(capsys.readouterr().out)
    assert {r["verdict"] for r in printed["points"]} <= {"level", "faster"}
    assert (out / "changes.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((out / "compare.json").read_text()) == printed


def test_two_arms_without_ledger_are_inconclusive_exit_3(tmp_path: Path) -> None:
    c1, p, _ = _session(tmp_path, 1.0)
    assert main(["bench", "compare", c1, p]) == 3


def test_import_then_compare_recipe_reports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    new, old = tmp_path / "r6d", tmp_path / "r6"
    assert (
        main(
            [
                "bench",
                "import",
                str(DATA / "2026-10-10-karmic-kraken-r6d-tp4.json"),
                "--out",
                str(new),
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "bench",
                "import",
                str(DATA / "2026-10-05-karmic-kraken-r6-tp4.json"),
                "--out",
                str(old),
            ]
        )
        == 0
    )
    assert main(["bench", "compare", str(new), str(old), "--out", str(tmp_path / "cmp")]) == 3
    err = capsys.readouterr().err
    assert (
        "  prose-c1               31.59 ± 0.7% n=3   ref    31.79   -0.6% [-1.4, +0.2] same" in err
    )
    assert (tmp_path / "cmp" / "bench.txt").is_file()


def test_bad_report_is_a_clean_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "x.json"
    bad.write_text("[]")
    assert main(["bench", "compare", str(bad), str(bad)]) == 2  # bad input: exit 2
    err = " ".join(capsys.readouterr().err.split())
    assert "x.json: not a sparkgate arm report: (top level): Input should be" in err
    assert "Traceback" not in err


def test_a_candidate_that_lost_measurements_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Failed requests, or a point the previous release measured and the candidate did not."""
    c1, p, c2 = _session(tmp_path, 1.0)
    broken = read_arm(Path(c1))
    point = broken.points["decode/prose-c1"]
    failed = Sample(metrics={}, receipts=[Receipt(ok=False, sent_s=0.0, error="HTTP 500")])
    lost = broken.model_copy(
        update={
            "points": {
                "decode/prose-c1": point.model_copy(update={"samples": [*point.samples, failed]})
            }
        }
    )
    write_arm(lost, tmp_path / "lost")
    code = main(["bench", "compare", str(tmp_path / "lost"), p, "--again", c2])
    assert code == 1
    assert "decode/prose-c1 (1 failed)" in " ".join(capsys.readouterr().err.split())
    empty = broken.model_copy(update={"points": {}})
    write_arm(empty, tmp_path / "empty")
    assert main(["bench", "compare", str(tmp_path / "empty"), p]) == 1


def test_session_decision_adds_arms_until_decided_then_fails_inconclusive(tmp_path: Path) -> None:
    c1, p, c2 = (read_arm(Path(x)) for x in _session(tmp_path, 1.0))
    two = compare_arms([c1], [p])
    assert session_decision(two, arms_run=2, max_arms=7) is SessionDecision.ADD_CANDIDATE
    wide = _arm("c2w", [41.6, 41.8, 41.5, 41.7], [24.0, 24.1, 23.9, 24.0])  # C2 4 % off C1
    three = compare_arms([c1, wide], [p])
    assert session_decision(three, arms_run=3, max_arms=7) is SessionDecision.ADD_PREVIOUS
    assert session_decision(three, arms_run=7, max_arms=7) is SessionDecision.FAIL_INCONCLUSIVE
    slow = [read_arm(Path(x)) for x in _session(tmp_path / "slow", 1.2)]
    ledger = read_ledger(Path(_ledger(tmp_path)))
    decided = compare_arms([slow[0], slow[2]], [slow[1]], ledger=ledger)
    assert session_decision(decided, arms_run=3, max_arms=7) is SessionDecision.FAIL_SLOWER
    level = compare_arms([c1, c2], [p], ledger=ledger)
    assert session_decision(level, arms_run=3, max_arms=7) is SessionDecision.PASS
