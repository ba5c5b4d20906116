"""Session files read as documented, and a replay's per-turn numbers come from receipts alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.bench.client import RequestSpec
from flows.bench.report import Receipt
from flows.bench.session_file import (
    Session,
    SessionHeader,
    Turn,
    header_line,
    parse_session,
    read_session,
    turn_line,
)
from flows.bench.session_replay import (
    TurnResult,
    engine_cached_share,
    replay,
    salt_for,
    session_metrics,
    turn_numbers,
    turn_request,
    usage_cached_share,
)
from flows.cli import main
from flows.errors import SpecError

HEADER = SessionHeader(recorded_utc="2026-12-06T23:00:00+00:00", upstream="http://e")


def _turn(index: int, gap: float = 0.0, produced: int = 8, **kw: object) -> Turn:
    body = {
        "model": "recorded-model",
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": f"q{index}"},
        ],
        "max_tokens": 64,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    values: dict[str, object] = {
        "index": index, "path": "/v1/chat/completions", "body": body, "sent_s": index,
        "gap_s": gap, "status": 200, "duration_s": 0.5,
        "usage": {"prompt_tokens": 100, "completion_tokens": produced},
    }  # fmt: skip
    return Turn.model_validate(values | kw)


def _file(tmp_path: Path, turns: list[Turn]) -> Path:
    path = tmp_path / "s.jsonl"
    path.write_text(header_line(HEADER) + "".join(turn_line(t) for t in turns))
    return path


def test_a_session_round_trips_through_its_file(tmp_path: Path) -> None:
    turns = [_turn(0), _turn(1, gap=2.0)]
    assert read_session(_file(tmp_path, turns)) == Session(header=HEADER, turns=turns)


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("", ":1: kind: empty file"),
        ("{not json\n", ":1: (line): not JSON"),
        ('{"kind": "turn"}\n', ":1: kind: Input should be 'session'"),
        (header_line(HEADER) + '{"kind": "turn", "index": 0}\n', ":2: path: Field required"),
        (header_line(HEADER) + turn_line(_turn(1)), ":2: index: turn index 1 out of order"),
    ],
)
def test_a_bad_session_file_names_the_file_line_and_key(text: str, where: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_session(Path("s.jsonl"), text)
    assert str(caught.value).startswith("s.jsonl" + where), str(caught.value)


def test_replay_of_a_bad_session_file_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("[]\n")
    assert main(["bench", "replay", "http://127.0.0.1:9", str(bad)]) == 2


def test_a_turn_is_replayed_with_the_served_model_its_produced_tokens_and_a_salt() -> None:
    spec = turn_request(_turn(3, produced=17), model="served", salt="[s]\n", default_tokens=64)
    assert spec.path == "/v1/chat/completions"
    assert spec.body["model"] == "served"
    assert spec.body["max_tokens"] == 17
    assert spec.body["ignore_eos"] is True
    assert "stream" not in spec.body  # the client adds its own stream fields
    messages = spec.body["messages"]
    assert isinstance(messages, list)
    assert messages[0] == {"role": "system", "content": "[s]\nsys"}
    assert messages[1] == {"role": "user", "content": "q3"}


def test_salts_differ_from_their_first_character_and_have_one_length() -> None:
    a, b = salt_for("nonce", "session/s0/a1"), salt_for("nonce", "session/s1/a1")
    assert a != b
    assert len(a) == len(b)
    assert a == salt_for("nonce", "session/s0/a1")


def test_replay_sends_turns_in_order_waits_recorded_gaps_and_skips_failed_ones() -> None:
    turns = [_turn(0), _turn(1, gap=5.0), _turn(2, gap=200.0, status=500), _turn(3, gap=90.0)]
    session = Session(header=HEADER, turns=turns)
    sent: list[RequestSpec] = []
    slept: list[float] = []
    counters = iter(range(100))

    def send(spec: RequestSpec) -> Receipt:
        sent.append(spec)
        return Receipt(ok=True, sent_s=0.0)

    def scrape() -> dict[str, float]:
        return {"prefix_cache_hits": float(next(counters))}

    results = replay(
        session, send=send, scrape=scrape, pace="recorded", max_gap_s=60.0, sleep=slept.append
    )
    assert [r.turn for r in results] == [0, 1, 3]
    assert slept == [5.0, 60.0]  # the failed turn is not sent; long gaps are capped
    assert results[1].before == {"prefix_cache_hits": 2.0}
    assert results[1].after == {"prefix_cache_hits": 3.0}
    assert replay(session, send=send, turns=2, sleep=slept.append)[-1].turn == 1
    assert slept == [5.0, 60.0]  # back to back waits for nothing


def _result(turn: int, prompt: int, cached: int, hits: float, queries: float) -> TurnResult:
    receipt = Receipt(
        ok=True, sent_s=0.0, ttft_s=0.01, first_token_s=0.2, last_token_s=0.5, end_s=0.51,
        prompt_tokens=prompt, cached_tokens=cached, completion_tokens=4,
    )  # fmt: skip
    before = {"prefix_cache_hits": 10.0, "prefix_cache_queries": 20.0}
    after = {"prefix_cache_hits": 10.0 + hits, "prefix_cache_queries": 20.0 + queries}
    return TurnResult(turn=turn, receipt=receipt, before=before, after=after)


def test_turn_numbers_take_ttft_from_the_first_token_not_the_role_chunk() -> None:
    numbers = turn_numbers(_result(0, prompt=100, cached=60, hits=60, queries=100))
    assert numbers.ttft_s == numbers.prefill_s == 0.2
    assert numbers.prefill_tps == pytest.approx(40 / 0.2)  # uncached tokens only
    assert numbers.decode_tps == pytest.approx(1 / 0.1)  # 3 tokens after the first in 0.3 s
    assert (numbers.engine_hits, numbers.engine_queries) == (60.0, 100.0)
    assert numbers.draft_acceptance_len is None  # the engine drafts nothing


def test_cached_shares_from_usage_and_from_the_engine_counters() -> None:
    turns = [
        turn_numbers(_result(0, prompt=100, cached=0, hits=0, queries=100)),
        turn_numbers(_result(1, prompt=300, cached=96, hits=96, queries=300)),
    ]
    assert usage_cached_share(turns) == engine_cached_share(turns) == pytest.approx(96 / 400)
    metrics = session_metrics(turns)
    assert metrics["ttft_s"] == pytest.approx(0.2)
    assert metrics["tpot_ms"] == pytest.approx(100.0)
    assert metrics["cached_share"] == pytest.approx(0.24)
    assert metrics["engine_cached_share"] == pytest.approx(0.24)
    assert metrics["cached_tokens@t01"] == 96
    assert metrics["prompt_tokens@t00"] == 100


def test_record_into_an_existing_file_and_an_unknown_pace_exit_2(tmp_path: Path) -> None:
    taken = _file(tmp_path, [_turn(0)])
    assert main(["bench", "record", "http://127.0.0.1:9", "--out", str(taken)]) == 2
    assert main(["bench", "replay", "http://127.0.0.1:9", str(taken), "--pace", "fast"]) == 2
    assert read_session(taken).turns == [_turn(0)]  # untouched


def test_a_turn_reports_draft_acceptance_where_the_engine_counts_drafts() -> None:
    result = _result(0, prompt=100, cached=0, hits=0, queries=100)
    counters = {"spec_drafts": 10.0, "spec_accepted_tokens": 5.0}
    grown = {"spec_drafts": 30.0, "spec_accepted_tokens": 35.0}
    drafting = result.model_copy(
        update={"before": result.before | counters, "after": result.after | grown}
    )
    assert turn_numbers(drafting).draft_acceptance_len == pytest.approx(1 + 30 / 20)


def test_an_engine_profile_names_the_prefix_cache_and_draft_counters_a_replay_reads() -> None:
    from flows.commands.bench import _endpoint  # noqa: PLC0415 - the command's own helper

    root = Path(__file__).resolve().parents[3]
    endpoint = _endpoint("http://127.0.0.1:9", root / "config/engines/vllm-recipe.yaml", None)
    assert endpoint.optional_names["prefix_cache_hits"] == "vllm:prefix_cache_hits_total"
    assert endpoint.optional_names["prefix_cache_queries"] == "vllm:prefix_cache_queries_total"
    assert endpoint.optional_names["spec_drafts"] == "vllm:spec_decode_num_drafts_total"
    default = _endpoint("http://127.0.0.1:9", None, None)
    assert default.optional_names["prefix_cache_hits"] == "sparkengine_prefix_cache_hits_total"
