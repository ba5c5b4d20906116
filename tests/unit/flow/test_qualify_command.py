"""How `sparkgate qualify` reads the flow's final state: a verdict, or an error to exit with."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prefect.states import Completed, Failed
from rich.console import Console

from flows.cli import main
from flows.commands import qualify as qualify_command
from flows.commands.qualify import _outcome, conclude, verdict_error
from flows.errors import GateFailedError, InconclusiveError, LockHeldError, PromotionError
from flows.gates.base import GateResult, Outcome
from flows.gates.benchmark.summary import BenchmarkSummary
from flows.pipeline.qualify import QualifyOutcome, benchmark_decision

ROOT = Path(__file__).resolve().parents[3]
OUTCOME = QualifyOutcome(
    release="r2", verdict="failed at benchmark: slower", failed_gate="benchmark",
    record="experiments/2026-12-02-r2", gates={"benchmark": "failed"},
    stages={"benchmark": "failed"}, seconds={"benchmark": 12.5},
)  # fmt: skip


def test_a_failed_gate_still_gives_the_outcome_for_the_summary() -> None:
    state = Failed(message="r2 failed at benchmark", data=OUTCOME)
    assert _outcome("r2", state) == OUTCOME


def test_a_passing_run_gives_its_outcome() -> None:
    passed = OUTCOME.model_copy(update={"verdict": "qualified", "failed_gate": None})
    assert _outcome("r2", Completed(data=passed)) == passed


def test_a_refusal_is_raised_as_itself() -> None:
    with pytest.raises(LockHeldError, match="held by"):
        _outcome("r2", Failed(data=LockHeldError("cluster local is held by alice")))


def test_a_crash_is_raised_as_a_failed_qualification_naming_the_release() -> None:
    with pytest.raises(GateFailedError, match="r2: qualification failed: boom"):
        _outcome("r2", Failed(data=RuntimeError("boom")))


def test_an_inconclusive_benchmark_not_promoted_exits_3_distinct_from_failed() -> None:
    """--no-wait (or a wait nobody answered): not failed, not promoted, awaiting a person."""
    undecided = OUTCOME.model_copy(
        update={"benchmark": "fail-inconclusive", "failed_gate": None,
                "verdict": "inconclusive after 4 arms (max_arms 4): step/grid engine_cpu_ms",
                "promotion": "r2 inconclusive ...; not promoted, awaiting a person's decision"}
    )  # fmt: skip
    assert undecided.inconclusive
    error = verdict_error(undecided, "r2 inconclusive after 4 arms; awaiting a decision")
    assert isinstance(error, InconclusiveError)
    assert error.exit_code == 3
    assert "awaiting a person's decision" in str(error)


def test_an_inconclusive_benchmark_rejected_exits_1_as_any_rejection() -> None:
    rejected = OUTCOME.model_copy(
        update={"benchmark": "fail-inconclusive", "failed_gate": None, "refused": True,
                "promotion": "r2 rejected by ana: too noisy"}
    )  # fmt: skip
    error = verdict_error(rejected, "")
    assert error is not None
    assert (error.exit_code, str(error)) == (1, "r2 rejected by ana: too noisy")


def test_an_inconclusive_benchmark_a_person_accepted_exits_0() -> None:
    accepted = OUTCOME.model_copy(
        update={"benchmark": "fail-inconclusive", "failed_gate": None,
                "promotion": "promoted by ana, inconclusive benchmark accepted: docs only"}
    )  # fmt: skip
    assert verdict_error(accepted, "") is None


def test_a_slower_benchmark_or_another_failed_gate_exits_1() -> None:
    slower = OUTCOME.model_copy(update={"benchmark": "fail-slower"})
    assert type(verdict_error(slower, "slower")) is GateFailedError
    # an inconclusive benchmark that did not fail the run (an earlier gate failed) is not exit 3
    earlier = OUTCOME.model_copy(
        update={"failed_gate": "determinism", "benchmark": "fail-inconclusive"}
    )
    assert type(verdict_error(earlier, "determinism")) is GateFailedError
    error = verdict_error(slower, "slower")
    assert error is not None
    assert error.exit_code == 1


def test_a_rejected_promotion_exits_1_with_the_runs_one_line_message() -> None:
    """The flow ends Failed with the rejection as its state message (no exception): the
    outcome comes back for the summary, and the message is the one line the command exits with."""
    rejected = OUTCOME.model_copy(update={
        "verdict": "qualified", "failed_gate": None, "promotion": "r2 rejected by bob: not today",
        "refused": True,
    })  # fmt: skip
    state = Failed(message="r2 rejected by bob: not today", data=rejected)
    assert _outcome("r2", state) == rejected
    error = verdict_error(rejected, str(state.message))
    assert isinstance(error, PromotionError)
    assert (str(error), error.exit_code) == ("r2 rejected by bob: not today", 1)


def test_a_qualified_release_exits_0() -> None:
    passed = OUTCOME.model_copy(update={"verdict": "qualified", "failed_gate": None})
    assert verdict_error(passed.model_copy(update={"benchmark": "pass"}), "") is None


def test_the_outcome_carries_the_benchmark_decision() -> None:
    result = GateResult(
        gate="benchmark", outcome=Outcome.FAILED, reason="inconclusive after 4 arms",
        started_at=datetime.now(UTC), seconds=1.0,
        summary=BenchmarkSummary(decision="fail-inconclusive"),
    )  # fmt: skip
    assert benchmark_decision({"benchmark": result}) == "fail-inconclusive"
    assert benchmark_decision({}) == ""


def test_a_release_whose_previous_has_no_record_on_the_shape_is_refused_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """r2 compares its outputs with r1's record on tp2-local; with none, exit 2 and say how."""
    monkeypatch.setenv("SPARKGATE_ROOT", str(tmp_path))
    monkeypatch.setenv("SPARKGATE_STATE_DIR", str(tmp_path / ".sparkgate"))
    release = ROOT / "releases" / "r2.yaml"

    code = main(["qualify", str(release), "-c", str(ROOT / "config" / "local.yaml")])

    error = " ".join(capsys.readouterr().err.split())
    assert code == 2
    assert "no published record of r1 on that shape" in error
    assert f"sparkgate qualify {ROOT / 'releases' / 'r1.yaml'} -c local" in error
    assert not (tmp_path / ".sparkgate").exists()  # no Prefect home, no build, no lock
    assert not (tmp_path / "experiments").exists()


@pytest.mark.parametrize(
    ("outcome", "message", "last"),
    [
        (OUTCOME, "r2 failed at benchmark: slower (record: experiments/2026-12-02-r2)",
         "r2 failed at benchmark: slower (record: experiments/2026-12-02-r2)"),
        (OUTCOME.model_copy(update={"verdict": "qualified", "failed_gate": None,
                                    "promotion": "promoted by alice"}), "",
         "r2: qualified, promoted by alice"),
    ],
    ids=["failed", "promoted"],
)  # fmt: skip
def test_the_verdict_is_said_once_as_the_last_line(
    outcome: QualifyOutcome, message: str, last: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plain output (CI): the stages table, the record, then the verdict, once."""
    screen = Console(file=io.StringIO(), width=200, color_system=None)
    monkeypatch.setattr(qualify_command, "err_console", screen)
    try:
        conclude("r2", outcome, message)
    except GateFailedError as error:  # the CLI prints it as the run's last line
        screen.print(str(error))
    said = screen.file.getvalue().splitlines()  # type: ignore[attr-defined]
    assert said[-1] == last
    assert "\n".join(said).count(outcome.verdict) == 1, said
    assert said[-2] == f"record: {outcome.record}"
