"""The refusal rules, pointer updates and spot-check comparison (pure functions)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from flows.errors import PromotionError
from flows.promotion.models import PromotedEntry
from flows.promotion.rules import (
    promoted,
    refusal_reasons,
    rolled_back,
    spot_check_differences,
    spot_check_prompts,
)
from flows.record.model import Record
from flows.spec.release import Release, load_release
from tests.support.paths import ROOT
from tests.support.promotion_records import DIGEST, GATE_NAMES, record_document, stage


def _release(**gates: bool) -> Release:
    shipped = load_release(ROOT / "releases/r2.yaml")
    update = {
        name: getattr(shipped.gates, name).model_copy(update={"enabled": enabled})
        for name, enabled in gates.items()
    }
    return shipped.model_copy(update={"gates": shipped.gates.model_copy(update=update)})


def _record(**outcomes: str) -> Record:
    stages = {name: stage(name, outcome) for name, outcome in outcomes.items()}
    return Record.model_validate(record_document("r2", stages=stages))


ALL_PASSED = dict.fromkeys(GATE_NAMES, "passed")


def test_every_gate_passed_for_the_same_build_is_promotable() -> None:
    assert refusal_reasons(_record(**ALL_PASSED), _release(), DIGEST) == []


def test_no_record_is_refused() -> None:
    assert refusal_reasons(None, _release(), DIGEST) == [
        "r2: no published record; qualify it first"
    ]


def test_a_missing_gate_is_named() -> None:
    outcomes = {name: "passed" for name in GATE_NAMES if name != "cold_boots"}
    reasons = refusal_reasons(_record(**outcomes), _release(), DIGEST)
    assert reasons == ["gate cold_boots missing from record 2026-12-02-r2"]


def test_a_failed_gate_is_named_with_its_reason() -> None:
    record = Record.model_validate(
        record_document(
            "r2",
            stages={
                **{name: stage(name) for name in GATE_NAMES},
                "benchmark": stage("benchmark", "failed", "decode tok/s 4.8 % slower"),
            },
            verdict="failed at benchmark: decode tok/s 4.8 % slower",
        )
    )
    reasons = refusal_reasons(record, _release(), DIGEST)
    assert reasons == ["gate benchmark failed in record 2026-12-02-r2: decode tok/s 4.8 % slower"]


def test_a_different_build_digest_is_refused() -> None:
    reasons = refusal_reasons(_record(**ALL_PASSED), _release(), "b" * 64)
    assert len(reasons) == 1
    assert "qualified build aaaaaaaaaaaa" in reasons[0]
    assert "deployed now is bbbbbbbbbbbb" in reasons[0]


def test_a_skipped_gate_counts_only_when_the_release_disables_it() -> None:
    record = _record(**{**ALL_PASSED, "release_tests": "skipped"})
    assert refusal_reasons(record, _release(release_tests=False), DIGEST) == []
    assert refusal_reasons(record, _release(), DIGEST) == [
        "gate release_tests was skipped in record 2026-12-02-r2"
    ]


def test_a_record_whose_verdict_is_not_qualified_is_refused() -> None:
    record = Record.model_validate(
        record_document(
            "r2", stages={n: stage(n) for n in GATE_NAMES}, verdict="incomplete: x not run"
        )
    )
    assert refusal_reasons(record, _release(), DIGEST) == [
        "record 2026-12-02-r2 verdict is 'incomplete: x not run'"
    ]


def _entry(release: str) -> PromotedEntry:
    return PromotedEntry(
        release=release, release_file=f"releases/{release}.yaml", build_digest=DIGEST,
        record=f"experiments/2026-12-02-{release}", at=datetime(2026, 12, 2, tzinfo=UTC),
        by="alice", reason="all gates passed",
    )  # fmt: skip


def test_promotion_pushes_the_current_release_into_history_and_rollback_pops_it() -> None:
    pointer = promoted(promoted(promoted(None, _entry("r1")), _entry("r2")), _entry("r3"))
    assert [e.release for e in [pointer.current, *pointer.history]] == ["r3", "r2", "r1"]
    back = rolled_back(pointer)
    assert back.current.release == "r2"
    assert [e.release for e in back.history] == ["r1"]
    assert rolled_back(back).current.release == "r1"


def test_rollback_without_a_previous_release_is_refused() -> None:
    with pytest.raises(PromotionError, match="no previous promoted release"):
        rolled_back(promoted(None, _entry("r1")))
    with pytest.raises(PromotionError):
        rolled_back(None)


def test_spot_check_takes_short_prompts_in_order_and_names_differences() -> None:
    hashes = {
        "p0": {"tokens": "t0", "logprobs": "l0", "prompt": "Hello", "max_tokens": 8},
        "long": {"tokens": "tl", "logprobs": "ll", "prompt": "<long>", "max_tokens": 8},
        "p1": {"tokens": "t1", "logprobs": "l1", "prompt": "World", "max_tokens": 4},
        "p2": {"tokens": "t2", "logprobs": "l2", "prompt": "Again", "max_tokens": 4},
    }
    prompts = spot_check_prompts(hashes, 2)
    assert [(p.id, p.text, p.max_tokens) for p in prompts] == [
        ("p0", "Hello", 8),
        ("p1", "World", 4),
    ]
    got = {"p0": {"tokens": "t0", "logprobs": "l0"}, "p1": {"tokens": "t1", "logprobs": "XX"}}
    assert spot_check_differences(hashes, got) == ["p1: logprobs differ from the record"]


def test_entries_store_paths_relative_to_the_project(tmp_path: Path) -> None:
    from flows.promotion.rules import relative_to_root  # noqa: PLC0415

    assert relative_to_root(tmp_path / "releases/r1.yaml", tmp_path) == "releases/r1.yaml"
    assert relative_to_root(Path("/elsewhere/r1.yaml"), tmp_path) == "/elsewhere/r1.yaml"


def test_a_paused_run_is_matched_by_its_file_when_a_file_is_given(tmp_path: Path) -> None:
    from flows.promotion.paused import matches_release  # noqa: PLC0415

    mine = tmp_path / "releases/r1.yaml"
    mine.parent.mkdir()
    mine.write_text("")
    other = {"release_file": "/elsewhere/releases/r1.yaml"}
    assert matches_release(str(mine), {"release_file": str(mine.resolve())})
    assert not matches_release(str(mine), other)
    assert matches_release("r1", other)
    assert not matches_release("r2", other)
