"""The determinism gate's chat probes: request bodies, canonical responses, comparison, hashes."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from flows.fileio import sha256_file
from flows.gates.base import GateResult, Outcome
from flows.gates.determinism.chat import canonical, content_hash, output_from_chat, output_of
from flows.gates.determinism.rules import (
    against_previous,
    chat_hashes,
    compare_outputs,
    determinism_verdict,
    judge,
    stored_hashes,
)
from flows.gates.outputs import Output, hashes
from flows.gates.prompts import (
    CHAT_JSON_ID,
    CHAT_TOOL_ID,
    CITY_SCHEMA,
    TOOLS,
    chat_body,
    chat_probes,
    long_prompt,
    named_prompts,
)
from flows.gates.traffic import Answered
from flows.promotion.rules import spot_check_prompts
from flows.record import verify
from flows.record.writer import open_record
from flows.spec.cluster import Cluster
from flows.spec.load import load_model
from flows.spec.release import DeterminismGate, load_release


def tool_body(
    arguments: str = '{"city": "Oslo", "unit": "celsius"}',
    *,
    call_id: str = "chatcmpl-tool-1",
    tokens: list[int] | None = None,
    logprobs: list[float] | None = None,
) -> dict[str, Any]:
    """A non-streamed chat body as vLLM answers a tool call (reasoning included)."""
    tokens = [7, 8, 9] if tokens is None else tokens
    values = logprobs if logprobs is not None else [-0.5, -0.25, -0.125]
    return {
        "id": "chatcmpl-x",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "reasoning_content": "The user wants weather.",
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": arguments},
                        }
                    ],
                },
                "logprobs": {
                    "content": [
                        {
                            "token": "a",
                            "logprob": v,
                            "bytes": [97],
                            "top_logprobs": [{"token": "a", "logprob": v, "bytes": [97]}],
                        }
                        for v in values
                    ]
                },
                "finish_reason": "tool_calls",
                "token_ids": tokens,
            }
        ],
        "usage": {"prompt_tokens": 9, "completion_tokens": 3},
    }


def json_body(content: str, tokens: list[int]) -> dict[str, Any]:
    return {
        "choices": [
            {
                "message": {"role": "assistant", "content": content},
                "finish_reason": "length",
                "token_ids": tokens,
                "logprobs": {"content": [{"token": "x", "logprob": -1.0, "top_logprobs": []}]},
            }
        ],
        "usage": {"prompt_tokens_details": {"cached_tokens": 16}},
    }


def test_the_probes_ask_for_a_tool_call_and_a_json_schema_response() -> None:
    tool, schema = chat_probes(12)
    assert (tool.id, tool.kind, schema.id, schema.kind) == (
        CHAT_TOOL_ID,
        "tool_call",
        CHAT_JSON_ID,
        "json_schema",
    )
    body = chat_body(tool, "m", 3)
    assert body["tools"] == TOOLS
    assert body["tool_choice"] == "auto"
    assert body["temperature"] == 0.0
    assert (body["logprobs"], body["top_logprobs"], body["max_tokens"]) == (True, 3, 12)
    assert body["messages"] == [{"role": "user", "content": tool.text}]
    fmt = chat_body(schema, "m", 0)["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["schema"] == CITY_SCHEMA
    assert "tools" not in chat_body(schema, "m", 0)


def test_canonical_response_ignores_call_ids_and_argument_spelling() -> None:
    one = canonical(tool_body('{"city": "Oslo", "unit": "celsius"}', call_id="a"))
    two = canonical(tool_body('{"unit":"celsius","city":"Oslo"}', call_id="b"))
    assert one == two
    parsed = json.loads(one)
    assert parsed["tool_calls"] == [
        {"name": "get_weather", "arguments": {"city": "Oslo", "unit": "celsius"}}
    ]
    assert parsed["reasoning"] == "The user wants weather."
    assert parsed["finish_reason"] == "tool_calls"
    assert canonical(tool_body('{"city": "Bergen", "unit": "celsius"}')) != one
    assert json.loads(canonical(tool_body("not json")))["tool_calls"][0]["arguments"] == "not json"


def test_a_chat_output_has_its_tokens_logprobs_and_canonical_response() -> None:
    output = output_from_chat(CHAT_TOOL_ID, tool_body())
    assert output.token_ids == [7, 8, 9]
    assert output.logprobs == [-0.5, -0.25, -0.125]
    assert output.top == [[("a", -0.5)], [("a", -0.25)], [("a", -0.125)]]
    assert output.text == canonical(tool_body())
    answered = Answered(CHAT_JSON_ID, 0.0, 1.0, json_body('{"a": 1}', [5]))
    assert output_of(answered).cached_tokens == 16
    assert json.loads(output_of(answered).text)["content"] == '{"a": 1}'


def test_a_different_tool_call_with_equal_tokens_is_a_content_difference() -> None:
    reference = {CHAT_TOOL_ID: output_from_chat(CHAT_TOOL_ID, tool_body())}
    moved = output_from_chat(CHAT_TOOL_ID, tool_body('{"city": "Oslo", "unit": "fahrenheit"}'))
    report = compare_outputs("all_at_once", reference, [moved])
    assert report.differing == 1
    first = report.first_difference
    assert first is not None
    assert (first.prompt, first.what) == (CHAT_TOOL_ID, "content")
    assert reference[CHAT_TOOL_ID].text[: first.index] == moved.text[: first.index]
    assert reference[CHAT_TOOL_ID].text[first.index] != moved.text[first.index]
    passed, reason = determinism_verdict(
        [report], against_previous([], None, change="changed", change_reason=None)
    )
    assert not passed
    assert "all_at_once differs for chat_tool (content" in reason


def test_token_and_logprob_differences_of_a_chat_probe_come_first() -> None:
    reference = {CHAT_TOOL_ID: output_from_chat(CHAT_TOOL_ID, tool_body())}
    flipped = output_from_chat(CHAT_TOOL_ID, tool_body(tokens=[7, 9, 9]))
    nudged = output_from_chat(CHAT_TOOL_ID, tool_body(logprobs=[-0.5, -0.25, -0.126]))
    report = compare_outputs("staggered", reference, [flipped, nudged])
    assert [(d.what, d.index) for d in report.differences] == [("token", 1), ("logprob", 2)]
    same = output_from_chat(CHAT_TOOL_ID, tool_body(call_id="other"))
    assert compare_outputs("again", reference, [same]).differing == 0


def test_completions_are_not_compared_by_text() -> None:
    a = Output(prompt="p0", token_ids=[5], logprobs=[-1.0], text="x")
    b = Output(prompt="p0", token_ids=[5], logprobs=[-1.0], text="y")
    assert compare_outputs("again", {"p0": a}, [b]).differing == 0


def _completion(prompt: str, tokens: list[int]) -> Output:
    return Output(prompt=prompt, token_ids=tokens, logprobs=[-1.0] * len(tokens))


def test_against_previous_compares_chat_probes_only_where_the_previous_has_them() -> None:
    chat = output_from_chat(CHAT_TOOL_ID, tool_body())
    current = [_completion("p0", [5, 6]), chat]
    old_record = hashes([_completion("p0", [5, 6])])  # a record from before the chat probes
    report = against_previous(current, old_record, change="unchanged", change_reason=None)
    assert report.passed, report.reason
    assert (report.identical, report.total, report.chat_total) == (1, 1, 0)
    same = hashes([_completion("p0", [5, 6])]) | chat_hashes([chat])
    report = against_previous(current, same, change="unchanged", change_reason=None)
    assert report.passed
    assert (report.chat_identical, report.chat_total) == (1, 1)
    assert "and 1 chat probes" in report.reason
    other = output_from_chat(CHAT_TOOL_ID, tool_body('{"city": "Rome", "unit": "celsius"}'))
    moved = hashes([_completion("p0", [5, 6])]) | chat_hashes([other])
    report = against_previous(current, moved, change="unchanged", change_reason=None)
    assert not report.passed
    assert report.differing == [CHAT_TOOL_ID]
    assert (report.identical, report.total, report.chat_identical) == (1, 1, 0)
    assert CHAT_TOOL_ID in report.reason


def test_stored_hashes_keep_chat_probes_apart_from_spot_check_prompts() -> None:
    prompts = named_prompts(["a"], 2)
    long = long_prompt(10, 2)
    probes = chat_probes(2)
    alone = [
        Answered(
            "p0",
            0.0,
            0.1,
            {
                "choices": [
                    {
                        "text": "xy",
                        "token_ids": [5, 6],
                        "logprobs": {"token_logprobs": [-1.0, -2.0]},
                    }
                ]
            },
        ),
        Answered(CHAT_TOOL_ID, 0.1, 0.2, tool_body()),
        Answered(CHAT_JSON_ID, 0.2, 0.3, json_body('{"a": 1}', [5, 6])),
    ]
    stored = stored_hashes(alone, prompts, long, probes)
    tool = stored[CHAT_TOOL_ID]
    assert tool["content"] == content_hash(output_from_chat(CHAT_TOOL_ID, tool_body()))
    assert (tool["kind"], tool["chat"], tool["token_ids"]) == (
        "tool_call",
        probes[0].text,
        [7, 8, 9],
    )
    assert "prompt" not in tool
    assert "content" not in stored["p0"]
    assert [p.id for p in spot_check_prompts(stored, 3)] == ["p0"]


@pytest.mark.parametrize("value", [True, False])
def test_the_chat_probes_are_a_setting(value: bool) -> None:
    assert DeterminismGate(chat=value).chat is value
    assert DeterminismGate().chat is True


ROOT = Path(__file__).resolve().parents[3]


def _record_with_chat(tmp_path: Path) -> Path:
    """A published record whose determinism stage has completions and both chat probes."""
    release = load_release(ROOT / "releases/r1.yaml")
    cluster = load_model(ROOT / "config/local.yaml", Cluster)
    writer = open_record(tmp_path, release, build_digest="d", cluster=cluster, previous=None)
    out = writer.stage_dir("determinism")
    completion = {
        "choices": [{"token_ids": [5, 6], "logprobs": {"token_logprobs": [-1.0, -2.0]}}],
    }
    answers = {
        "p0": completion,
        CHAT_TOOL_ID: tool_body(),
        CHAT_JSON_ID: json_body('{"a": 1}', [5]),
    }
    runs = {
        name: [Answered(p, 0.01 * i, 0.5, answers[p]) for i, p in enumerate(answers)]
        for name in ("alone", "all_at_once")
    }
    files = []
    for name, run in runs.items():
        raw = [
            {"prompt": a.prompt, "sent_s": a.sent_s, "answered_s": a.answered_s,
             "response": a.response}
            for a in run
        ]  # fmt: skip
        (out / "scenarios").mkdir(exist_ok=True)
        (out / "scenarios" / f"{name}.json").write_text(json.dumps(raw))
        files.append(f"scenarios/{name}.json")
    summary, outcome, reason = judge(
        runs, release.gates.determinism, release.outputs, previous=None, previous_hashes=None
    )
    assert outcome == Outcome.PASSED, reason
    assert set(summary.chat_hashes) == {CHAT_TOOL_ID, CHAT_JSON_ID}
    result = GateResult(
        gate="determinism", outcome=outcome, reason=reason, started_at=datetime.now(UTC),
        seconds=1.0, summary=summary, files=files,
    )  # fmt: skip
    writer.save_stage(result)
    return writer.publish(verdict="qualified", stage_order=["determinism"], versions={})


def test_verify_judges_the_chat_probes_again_from_the_raw_responses(tmp_path: Path) -> None:
    path = _record_with_chat(tmp_path)
    assert verify(path) == []
    relative = "determinism/scenarios/all_at_once.json"
    raw = json.loads((path / relative).read_text())
    call = raw[1]["response"]["choices"][0]["message"]["tool_calls"][0]["function"]
    call["arguments"] = '{"city": "Rome", "unit": "celsius"}'  # tokens and logprobs unchanged
    (path / relative).write_text(json.dumps(raw))
    record = json.loads((path / "record.json").read_text())
    for entry in record["stages"]["determinism"]["files"]:
        if entry["path"] == relative:
            entry["sha256"] = sha256_file(path / relative)
            entry["bytes"] = (path / relative).stat().st_size
    (path / "record.json").write_text(json.dumps(record))
    assert verify(path) == [
        "determinism: scenarios differs from the one the raw responses give",
        "determinism: outcome passed, the raw responses give failed",
    ]


def test_verify_recomputes_the_chat_hashes_a_summary_claims(tmp_path: Path) -> None:
    """A record whose summary claims other chat hashes than its raw answers give is caught (the
    previous release's chat comparison reads them)."""
    path = _record_with_chat(tmp_path)

    def forged(summary: dict[str, Any]) -> None:
        first = next(iter(summary["chat_hashes"].values()))
        for key, value in first.items():
            if isinstance(value, str):
                first[key] = "0" * len(value)

    result = json.loads((path / "determinism" / "result.json").read_text())
    forged(result["summary"])
    (path / "determinism" / "result.json").write_text(json.dumps(result))
    record = json.loads((path / "record.json").read_text())
    forged(record["stages"]["determinism"]["summary"])
    for entry in record["stages"]["determinism"]["files"]:
        if entry["path"] == "determinism/result.json":
            entry["sha256"] = sha256_file(path / entry["path"])
            entry["bytes"] = (path / entry["path"]).stat().st_size
    (path / "record.json").write_text(json.dumps(record))
    assert "determinism: chat_hashes differs from the one the raw responses give" in verify(path)
