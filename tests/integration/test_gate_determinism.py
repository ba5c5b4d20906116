"""The determinism gate on a private local cluster of the real engine, as the flow calls it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from flows.cluster.boot.session import load_session
from flows.cluster.transport.local import LocalTransport
from flows.gates.base import GateResult, Outcome, PreviousOutputs
from flows.gates.determinism.chat import canonical
from flows.gates.determinism.runner import run_determinism
from flows.spec.cluster import Cluster
from flows.spec.load import load_model
from flows.spec.release import DeterminismGate, Release
from tests.support.local_cluster import context_for
from tests.support.paths import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SHORT = DeterminismGate(
    prompts=[
        "The quick brown fox jumps over the lazy dog, and then",
        "Once upon a time, in a village by the sea, there lived",
        "SELECT name, total FROM orders WHERE total > 100 ORDER BY",
    ],
    max_tokens=20,
    long_prompt_tokens=300,
    stagger_ms=50,
    top_logprobs=3,
    sampled_streams=2,
    timeout_s=300,
)


def _summary(result: GateResult) -> dict[str, Any]:
    """The gate's typed summary, as the JSON the record keeps."""
    assert result.summary is not None, result.reason
    return result.summary.model_dump(mode="json")


def test_r1_passes_and_r2_matches_its_hashes(
    local_cluster: Cluster,
    transports: dict[str, LocalTransport],
    state: Path,
    release_r1: Release,
    tmp_path: Path,
) -> None:
    first = run_determinism(
        context_for(local_cluster, transports, state, release_r1), SHORT, tmp_path / "r1"
    )
    assert first.outcome == Outcome.PASSED, first.reason
    assert load_session(state, local_cluster.name) is None  # stopped after the gate
    summary = _summary(first)
    assert summary["prompts"] == 4
    names = [s["name"] for s in summary["scenarios"]]
    assert names == ["all_at_once", "staggered", "mixed", "cached", "sampled", "again"]
    assert all(s["differing"] == 0 and s["first_difference"] is None for s in summary["scenarios"])
    assert summary["against_previous"]["mode"] == "none"
    assert set(summary["hashes"]) == {"p0", "p1", "p2", "long"}
    assert summary["chat_probes"] == 2
    assert set(summary["chat_hashes"]) == {"chat_tool", "chat_json"}
    assert all(c and c > 0 for c in summary["cached_tokens"])
    stored = json.loads((tmp_path / "r1/hashes.json").read_text())
    assert stored["p0"]["tokens"] == summary["hashes"]["p0"]["tokens"]
    assert len(stored["p0"]["token_ids"]) == SHORT.max_tokens
    raw = json.loads((tmp_path / "r1/scenarios/mixed.json").read_text())
    assert {r["prompt"] for r in raw} == {"p0", "p1", "p2", "long", "chat_tool", "chat_json"}
    for name in ("all_at_once", "staggered", "cached", "sampled", "again"):
        sent = json.loads((tmp_path / f"r1/scenarios/{name}.json").read_text())
        assert {"chat_tool", "chat_json"} <= {r["prompt"] for r in sent}, name
    alone = {
        r["prompt"]: r["response"]
        for r in json.loads((tmp_path / "r1/scenarios/alone.json").read_text())
    }
    tool = alone["chat_tool"]["choices"][0]
    assert tool["finish_reason"] == "tool_calls"
    call = tool["message"]["tool_calls"][0]["function"]
    assert call["name"] in ("get_weather", "get_time")
    assert json.loads(call["arguments"])["city"]
    answer = json.loads(alone["chat_json"]["choices"][0]["message"]["content"])
    assert set(answer) == {"name", "country", "population", "coastal", "districts"}
    assert stored["chat_tool"]["content"] == summary["chat_hashes"]["chat_tool"]["content"]
    assert "scenarios/staggered.json" in first.files

    r2 = load_model(ROOT / "releases/r2.yaml", Release)
    second = run_determinism(
        context_for(local_cluster, transports, state, r2, previous=release_r1),
        SHORT, tmp_path / "r2", previous=PreviousOutputs(record="r1-record", hashes=stored),
    )  # fmt: skip
    assert second.outcome == Outcome.PASSED, second.reason
    previous = _summary(second)["against_previous"]
    assert previous["mode"] == "unchanged"
    assert previous["identical"] == previous["total"] == 4
    assert previous["chat_identical"] == previous["chat_total"] == 2
    kept = json.loads((tmp_path / "r2/previous-hashes.json").read_text())
    assert (kept["release"], kept["record"]) == ("r1", "r1-record")  # named by History


def test_chat_probes_off_sends_only_completions(
    local_cluster: Cluster,
    transports: dict[str, LocalTransport],
    state: Path,
    release_r1: Release,
    tmp_path: Path,
) -> None:
    settings = SHORT.model_copy(update={"chat": False, "sampled_streams": 0})
    result = run_determinism(
        context_for(local_cluster, transports, state, release_r1), settings, tmp_path
    )
    assert result.outcome == Outcome.PASSED, result.reason
    summary = _summary(result)
    assert (summary["chat_probes"], summary["chat_hashes"]) == (0, {})
    raw = json.loads((tmp_path / "scenarios/again.json").read_text())
    assert {r["prompt"] for r in raw} == {"p0", "p1", "p2", "long"}


def test_the_nondeterministic_release_fails_naming_prompts(
    local_cluster: Cluster,
    transports: dict[str, LocalTransport],
    state: Path,
    tmp_path: Path,
) -> None:
    faulty = load_model(ROOT / "releases/faulty/nondeterministic.yaml", Release)
    result = run_determinism(context_for(local_cluster, transports, state, faulty), SHORT, tmp_path)
    assert result.outcome == Outcome.FAILED
    assert load_session(state, local_cluster.name) is None
    failing = [s for s in _summary(result)["scenarios"] if s["differing"]]
    assert failing, _summary(result)
    assert "all_at_once" in {s["name"] for s in failing}
    first = failing[0]["first_difference"]
    assert first["prompt"] in result.reason
    assert failing[0]["name"] in result.reason
    assert isinstance(first["index"], int)
    diverged = {d["prompt"] for s in failing for d in s["differences"]}
    assert {"chat_tool", "chat_json"} <= diverged, failing
    scenarios = {
        name: {
            r["prompt"]: r["response"]
            for r in json.loads((tmp_path / f"scenarios/{name}.json").read_text())
        }
        for name in ("alone", "all_at_once")
    }
    for probe in ("chat_tool", "chat_json"):  # the answers themselves, not only their logprobs
        assert canonical(scenarios["alone"][probe]) != canonical(scenarios["all_at_once"][probe])
    at_once = next(s for s in failing if s["name"] == "all_at_once")
    if {d["prompt"] for d in at_once["differences"]} >= {"chat_tool", "chat_json"}:
        assert "chat_tool (" in result.reason
        assert "chat_json (" in result.reason


def test_a_boot_failure_is_a_failed_result_with_evidence(
    local_cluster: Cluster,
    transports: dict[str, LocalTransport],
    state: Path,
    tmp_path: Path,
) -> None:
    crash = load_model(ROOT / "releases/faulty/crash-on-boot.yaml", Release)
    result = run_determinism(context_for(local_cluster, transports, state, crash), SHORT, tmp_path)
    assert result.outcome == Outcome.FAILED
    assert result.reason.startswith("boot failed:")
    assert result.reason.count("boot failed") == 1, result.reason  # named once, not stuttered
    assert "rank 1" in result.reason
    assert len(result.evidence) == 1
    assert Path(result.evidence[0]).is_dir()
    assert load_session(state, local_cluster.name) is None
