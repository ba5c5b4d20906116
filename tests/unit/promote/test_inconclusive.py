"""An inconclusive benchmark goes to a person, never silently anywhere (issue 27, item 3).

The rules as pure functions (the verdict, the refusal and its remedy, what the log must keep,
the answer the server checks), then `promote --accept-inconclusive` and the in-flow approval on
record.json files in a private project (no Prefect server: the pause is replaced where it is
called).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from prefect.utilities import schema_tools

from flows.bench.compare import SessionDecision
from flows.cli import main
from flows.errors import InconclusiveError, PromotionError
from flows.gates.base import GateResult, Outcome
from flows.gates.benchmark.rules import session_outcome
from flows.pipeline.stages import verdict
from flows.promotion import decision, promote
from flows.promotion.decision import decide_promotion
from flows.promotion.models import LOG_FILE, LogEntry
from flows.promotion.paused import Decision, InconclusiveDecision, refused_answer
from flows.promotion.rules import refusal_reasons
from flows.promotion.store import read_log, read_pointer
from flows.record.decisions import acceptance_problems, decision_of, needs_acceptance
from flows.record.model import Record
from flows.spec.release import load_release
from tests.support.paths import ROOT
from tests.support.promotion_records import DIGEST, GATE_NAMES, record_document, stage

UNDECIDED = "inconclusive after 7 arms (max_arms 7): step/grid engine_cpu_ms"


def _stages(benchmark: str = "inconclusive", **others: str) -> dict[str, dict[str, Any]]:
    stages = {name: stage(name) for name in GATE_NAMES}
    stages["benchmark"] = stage("benchmark", benchmark, UNDECIDED)
    stages.update({name: stage(name, outcome, f"{name} {outcome}") for name, outcome in
                   others.items()})  # fmt: skip
    return stages


def _record(benchmark: str = "inconclusive", verdict_text: str = UNDECIDED) -> Record:
    document = record_document("r2", stages=_stages(benchmark), verdict=verdict_text)
    return Record.model_validate(document)


def _result(gate: str, outcome: Outcome, reason: str) -> GateResult:
    return GateResult(
        gate=gate, outcome=outcome, reason=reason, started_at=datetime.now(UTC), seconds=1.0
    )


# -- the verdict: inconclusive is neither passed nor failed ----------------------------------


def test_an_undecided_session_is_inconclusive_not_failed() -> None:
    assert session_outcome(SessionDecision.FAIL_INCONCLUSIVE) is Outcome.INCONCLUSIVE
    assert session_outcome(SessionDecision.FAIL_SLOWER) is Outcome.FAILED
    assert session_outcome(SessionDecision.FAIL_LOST) is Outcome.FAILED
    assert session_outcome(SessionDecision.PASS) is Outcome.PASSED


def test_the_verdict_of_an_inconclusive_benchmark_names_no_failed_gate() -> None:
    results = {name: _result(name, Outcome.PASSED, "ok") for name in GATE_NAMES}
    results["benchmark"] = _result("benchmark", Outcome.INCONCLUSIVE, UNDECIDED)
    text, failed = verdict(results)
    assert (text, failed) == (UNDECIDED, None)
    assert "failed" not in text
    assert not results["benchmark"].passed  # never counted as a pass either


def test_a_failed_gate_still_wins_over_an_inconclusive_one() -> None:
    results = {name: _result(name, Outcome.PASSED, "ok") for name in GATE_NAMES}
    results["cold_boots"] = _result("cold_boots", Outcome.FAILED, "rank 1 compiled")
    results["benchmark"] = _result("benchmark", Outcome.INCONCLUSIVE, UNDECIDED)
    assert verdict(results) == ("failed at cold_boots: rank 1 compiled", "cold_boots")


# -- promotion: refused without a person's reason -------------------------------------------


def test_an_inconclusive_record_is_refused_naming_the_flag() -> None:
    release = load_release(ROOT / "releases/r2.yaml")
    reasons = refusal_reasons(_record(), release, DIGEST)
    assert len(reasons) == 1
    assert "gate benchmark was inconclusive in record 2026-12-02-r2" in reasons[0]
    assert '--accept-inconclusive "REASON"' in reasons[0]
    assert refusal_reasons(_record(), release, DIGEST, accept_inconclusive="   ") == reasons


def test_a_reason_accepts_an_inconclusive_record_and_nothing_else() -> None:
    release = load_release(ROOT / "releases/r2.yaml")
    assert refusal_reasons(_record(), release, DIGEST, accept_inconclusive="docs only") == []
    # a benchmark that failed (slower, or an older record's inconclusive-as-failed) stays failed
    slower = _record("failed", "failed at benchmark: slower beyond 3%")
    assert refusal_reasons(slower, release, DIGEST, accept_inconclusive="docs only") == [
        f"gate benchmark failed in record 2026-12-02-r2: {UNDECIDED}"
    ]


def test_an_inconclusive_record_awaits_a_person_while_a_failed_one_does_not() -> None:
    assert needs_acceptance(_record())
    assert decision_of(_record(), []) == "awaiting"
    assert not needs_acceptance(_record("failed"))
    assert decision_of(_record("failed", "failed at benchmark: slower"), []) == "—"


# -- the answer the server checks before it resumes the run --------------------------------


def _form_schema(form: type[Decision]) -> dict[str, Any]:
    from prefect._internal.pydantic.v2_schema import create_v2_schema  # noqa: PLC0415

    made = form.with_initial_data(description="d", decision="approve")
    return create_v2_schema(made.__name__, model_base=made)


def _accepted(schema: dict[str, Any], answer: Decision) -> bool:
    """Whether the server's own check (as its resume endpoint runs it) takes the answer."""
    try:
        schema_tools.validate(answer.model_dump(mode="json"), schema, raise_on_error=True)
    except schema_tools.ValidationError:
        return False
    return True


def test_the_inconclusive_form_refuses_a_plain_approval_and_takes_a_rejection() -> None:
    schema = _form_schema(InconclusiveDecision)
    plain = Decision(decision="approve", by="ana")
    blank = InconclusiveDecision(decision="approve", by="ana", accept_inconclusive="  ")
    given = InconclusiveDecision(decision="approve", by="ana", accept_inconclusive="docs only")
    rejected = Decision(decision="reject", by="ana", reason="too noisy")
    assert not _accepted(schema, plain)
    assert not _accepted(schema, blank)
    assert _accepted(schema, given)
    assert _accepted(schema, rejected)
    # a qualified run's form has no such field: an acceptance sent to it is refused, not kept
    assert not _accepted(_form_schema(Decision), given)
    assert _accepted(_form_schema(Decision), plain)


def test_the_servers_refusal_is_told_with_the_flag() -> None:
    missing = "Cannot resume this run: Reason: 'accept_inconclusive' is a required property"
    said = refused_answer("r2", missing)
    assert 'sparkgate approve r2 --accept-inconclusive "REASON"' in said
    assert "still waits" in said
    extra = "Cannot resume this run: Reason: Additional properties are not allowed "
    extra += "('accept_inconclusive' was unexpected)"
    assert "was not inconclusive" in refused_answer("r2", extra)


# -- what the log keeps, and what verify asks of it ------------------------------------------


def _promoted(reason: str | None, by: str = "ana") -> dict[str, Any]:
    entry = LogEntry(
        at=datetime(2026, 12, 2, 12, tzinfo=UTC), action="promoted", release="r2", by=by,
        reason="", record="experiments/2026-12-02-r2", accepted_inconclusive=reason,
    )  # fmt: skip
    return dict(json.loads(entry.model_dump_json()))


def test_verify_asks_who_accepted_an_inconclusive_record_and_why() -> None:
    assert acceptance_problems(_record(), [_promoted("docs only")]) == []
    problems = acceptance_problems(_record(), [_promoted(None)])
    assert len(problems) == 1
    assert "benchmark was inconclusive, with no reason for accepting it" in problems[0]
    assert acceptance_problems(_record(), [_promoted(" ")]) != []
    assert acceptance_problems(_record("passed", "qualified"), [_promoted(None)]) == []


def test_verify_reads_an_inconclusive_record_as_neither_passed_nor_failed() -> None:
    from flows.record.verify import _check_verdict  # noqa: PLC0415 - the rule under test

    assert _check_verdict(_record()) == []
    called_qualified = _record(verdict_text="qualified")
    assert _check_verdict(called_qualified) == [
        "verdict 'qualified', but a gate was inconclusive and none failed"
    ]
    called_failed = _record(verdict_text="failed at benchmark: inconclusive after 7 arms")
    assert _check_verdict(called_failed) != []


# -- promote --accept-inconclusive and the in-flow approval ---------------------------------


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> None:
    """The build of every release has digest DIGEST."""
    monkeypatch.setattr(promote, "build_release", lambda *_a, **_k: SimpleNamespace(digest=DIGEST))


def test_promote_refuses_then_keeps_who_accepted_and_why(
    project: Path, write_record: Callable[..., Path], built: None,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    write_record("r2", stages=_stages(), verdict=UNDECIDED)
    assert main(["promote", "r2", "--by", "ana"]) == 1
    assert '--accept-inconclusive "REASON"' in capsys.readouterr().err
    assert not (project / LOG_FILE).exists()

    code = main(["promote", "r2", "--by", "ana", "--accept-inconclusive", "a docs-only change"])
    assert code == 0, capsys.readouterr().err
    pointer = read_pointer(project)
    assert pointer is not None
    assert (pointer.current.by, pointer.current.accepted_inconclusive) == (
        "ana", "a docs-only change",
    )  # fmt: skip
    [line] = read_log(project)
    assert (line.action, line.by, line.accepted_inconclusive) == (
        "promoted", "ana", "a docs-only change",
    )  # fmt: skip


def _release_file(project: Path) -> str:
    return str(project / "releases/r2.yaml")


def test_the_pause_shows_the_inconclusive_form_and_an_accepted_approval_promotes(
    project: Path, write_record: Callable[..., Path], built: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    record = write_record("r2", stages=_stages(), verdict=UNDECIDED)
    asked: list[type[Decision]] = []
    answer = InconclusiveDecision(decision="approve", by="ana", accept_inconclusive="docs only")

    def pause(**kwargs: Any) -> Decision:
        asked.append(kwargs["wait_for_input"])
        return answer

    monkeypatch.setattr(decision, "pause_flow_run", pause)
    said: list[str] = []
    release = load_release(project / "releases/r2.yaml")
    done = decide_promotion(_release_file(project), release, record, wait=True, say=said.append)
    assert done == "promoted by ana, inconclusive benchmark accepted: docs only"
    assert issubclass(asked[0], InconclusiveDecision)
    assert any("--accept-inconclusive" in line for line in said)
    [line] = read_log(project)
    assert (line.action, line.accepted_inconclusive) == ("promoted", "docs only")


def test_an_inconclusive_wait_nobody_answered_exits_3_saying_how_to_accept(
    project: Path, write_record: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from prefect.exceptions import FlowPauseTimeout  # noqa: PLC0415

    record = write_record("r2", stages=_stages(), verdict=UNDECIDED)

    def pause(**_kwargs: object) -> None:
        raise FlowPauseTimeout("Flow run was paused and never resumed.")

    monkeypatch.setattr(decision, "pause_flow_run", pause)
    release = load_release(project / "releases/r2.yaml")
    with pytest.raises(InconclusiveError, match="r2: inconclusive, but no decision") as raised:
        decide_promotion("releases/r2.yaml", release, record, wait=True, say=print)
    assert '--accept-inconclusive "REASON"' in str(raised.value)
    assert raised.value.exit_code == 3
    assert not isinstance(raised.value, PromotionError)
    assert [e.action for e in read_log(project)] == ["no-decision"]
