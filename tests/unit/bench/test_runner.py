"""`run_arm` against a fake OpenAI engine: every workload, integrity, distinct prompts."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from flows.bench.client import Scheduled
from flows.bench.report import ArmReport, ClientStats, Receipt, read_arm
from flows.bench.runner import run_arm
from flows.bench.shards import ShardPool
from flows.cli import main
from flows.engine_api.endpoint import Endpoint
from flows.errors import BenchError
from flows.spec.suite import Suite
from tests.support.servers import serving

NAMES = {
    "running": "fake_running",
    "waiting": "fake_waiting",
    "prompt_tokens": "fake_prompt_total",
    "generation_tokens": "fake_generation_total",
}


class FakeEngine:
    """Streams max_tokens token chunks; counts tokens; can inject foreign traffic once."""

    def __init__(self) -> None:
        self.prompts: list[tuple[int, ...]] = []
        self.counters = {"fake_prompt_total": 0, "fake_generation_total": 0}
        self.foreign_once = 0
        self.running = 0
        self.max_len: int | None = None
        self.busy_after: int | None = None
        self.sampling: list[tuple[float, float | None, int | None]] = []
        self.extra_metrics = ""

    async def models(self, _: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "fake", "max_model_len": self.max_len}]})

    async def tokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        tokens = [ord(c) % 100 for c in body["prompt"]]
        return web.json_response({"tokens": tokens, "count": len(tokens)})

    async def metrics(self, _: web.Request) -> web.Response:
        lines = [f"fake_running {self.running}", "fake_waiting 0"]
        lines += [f"{k} {v}" for k, v in self.counters.items()]
        return web.Response(text="\n".join(lines) + "\n" + self.extra_metrics)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body: dict[str, Any] = await request.json()
        prompt = tuple(body["prompt"])
        assert body["model"] == "fake"
        assert body["ignore_eos"] is True
        if self.busy_after is not None and len(self.prompts) >= self.busy_after:
            self.running = 1  # from this request on the engine never gets idle
        cached = len(prompt) - 1 if prompt in self.prompts else 0
        self.sampling.append((body["temperature"], body.get("top_p"), body.get("seed")))
        self.prompts.append(prompt)
        n = body["max_tokens"]
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for i in range(n):
            await asyncio.sleep(0.001)
            choice = {"index": 0, "text": "a", "token_ids": [i], "finish_reason": None}
            await response.write(b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n")
        usage = {"prompt_tokens": len(prompt), "completion_tokens": n,
                 "prompt_tokens_details": {"cached_tokens": cached}}  # fmt: skip
        self.counters["fake_prompt_total"] += len(prompt)
        self.counters["fake_generation_total"] += n + self.foreign_once
        self.foreign_once = 0
        final = {"choices": [], "usage": usage}
        await response.write(b"data: " + json.dumps(final).encode() + b"\n\ndata: [DONE]\n\n")
        return response


@pytest.fixture
def engine() -> Iterator[tuple[FakeEngine, str]]:
    fake = FakeEngine()
    app = web.Application()
    app.router.add_get("/v1/models", fake.models)
    app.router.add_post("/tokenize", fake.tokenize)
    app.router.add_get("/metrics", fake.metrics)
    app.router.add_post("/v1/completions", fake.completions)
    with serving(app) as url:
        yield fake, url


SUITE = {
    "name": "tiny",
    "samples": 2,
    "warmup": 1,
    "workloads": [
        {
            "kind": "single_stream",
            "name": "single",
            "requests": 2,
            "prompt_tokens": 40,
            "max_tokens": 4,
        },
        {
            "kind": "closed_loop",
            "name": "streams",
            "concurrency": [1, 3],
            "prompt_tokens": 40,
            "max_tokens": 4,
        },
        {
            "kind": "poisson",
            "name": "poisson",
            "rate": 40.0,
            "requests": 3,
            "prompt_tokens": 40,
            "max_tokens": 3,
        },
        {"kind": "prefill", "name": "prefill", "depths": [64, 128]},
        {
            "kind": "step_grid",
            "name": "step",
            "concurrency": [1, 2],
            "context": [32],
            "max_tokens": 4,
        },
        {"kind": "prefix", "name": "prefix", "prompt_tokens": 64, "warm_replays": 2},
    ],
}


def test_every_workload_produces_gated_values_on_distinct_prompts(
    engine: tuple[FakeEngine, str],
) -> None:
    fake, url = engine
    ticks: list[tuple[int, int]] = []
    arm = run_arm(
        Endpoint(url, metric_names=NAMES), Suite.model_validate(SUITE), label="c1",
        on_sample=lambda done, total: ticks.append((done, total)),
    )  # fmt: skip
    samples = 8 * (1 + 2)  # eight points, one warm-up and two samples each
    assert ticks == [(done, samples) for done in range(1, samples + 1)]
    assert sorted(arm.points) == [
        "poisson/r40", "prefill/128", "prefill/64", "prefix/64", "single/c1",
        "step/grid", "streams/c1", "streams/c3",
    ]  # fmt: skip
    for name, point in arm.points.items():
        assert len(point.samples) == 2, name
        assert len(point.warmup) == 1, name
        for sample in point.samples:
            assert set(point.gate) <= set(sample.metrics), (name, sample.metrics)
            assert all(r.ok for r in sample.receipts)
    prefix = arm.points["prefix/64"].samples[0]
    assert prefix.metrics["warm_hit_rate"] == pytest.approx(63 / 64)
    replays = 2 * 3  # two warm replays in each of 1 warm-up + 2 samples of the prefix point
    assert len(fake.prompts) - len(set(fake.prompts)) == replays  # only warm replays repeat
    assert arm.points["prefill/128"].samples[0].receipts[0].prompt_tokens == 128
    # No foreign traffic here: a sample may only be repeated because this loaded machine starved
    # the client itself (a saturation repeat), never for another reason.
    assert all(entry.get("client_saturated") for entry in arm.discarded), arm.discarded
    assert arm.client is not None
    assert arm.client.chunks > 0


def test_a_workloads_own_warmup_wins_over_the_suites(engine: tuple[FakeEngine, str]) -> None:
    """`warmup: 0` on a workload whose path an earlier one warmed: its points take no discarded
    sample, the others keep the suite's, and the progress counts exactly what runs."""
    _, url = engine
    single, streams = SUITE["workloads"][:2]
    suite = Suite.model_validate(
        {**SUITE, "workloads": [single, {**streams, "warmup": 0}]}
    )  # fmt: skip
    ticks: list[tuple[int, int]] = []
    arm = run_arm(
        Endpoint(url, metric_names=NAMES), suite, label="c1",
        on_sample=lambda done, total: ticks.append((done, total)),
    )  # fmt: skip
    assert [len(arm.points[name].warmup) for name in ("single/c1", "streams/c1", "streams/c3")] == [
        1, 0, 0,
    ]  # fmt: skip
    assert ticks[-1] == (1 + 2 + 2 + 2, 7)  # single: a warm-up and two samples; streams: two each


def test_foreign_traffic_repeats_the_sample_and_is_logged(engine: tuple[FakeEngine, str]) -> None:
    fake, url = engine
    suite = Suite.model_validate(
        {**SUITE, "warmup": 0, "samples": 1, "workloads": SUITE["workloads"][:1]}
    )
    fake.foreign_once = 50  # another client's 50 tokens land during the first sample
    lines: list[str] = []
    arm = run_arm(Endpoint(url, metric_names=NAMES), suite, label="c1", say=lines.append)
    assert arm.discarded == [
        {"point": "single/c1", "sample": "single/c1/s0", "attempt": 1, "generation_tokens": 50.0}
    ]
    assert arm.points["single/c1"].samples[0].attempts == 2
    assert any("foreign traffic" in line for line in lines)


def test_a_busy_engine_is_an_error_not_a_sample(engine: tuple[FakeEngine, str]) -> None:
    fake, url = engine
    fake.running = 1  # someone else's request never finishes
    suite = Suite.model_validate(
        {**SUITE, "idle": {"timeout_s": 0.3}, "workloads": SUITE["workloads"][:1]}
    )
    with pytest.raises(BenchError, match=r"not idle after 0\.3s"):
        run_arm(Endpoint(url, metric_names=NAMES), suite, label="c1")


def test_bench_run_cli_refuses_a_bad_suite_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: suite\nname: x\nworkloads: []\n")
    code = main(["bench", "run", "http://127.0.0.1:9", "--suite", str(bad), "--out", str(tmp_path)])
    assert code == 2
    assert "bad.yaml:3: workloads" in capsys.readouterr().err


def test_missing_metrics_are_reported(engine: tuple[FakeEngine, str]) -> None:
    _, url = engine
    names = {**NAMES, "waiting": "not_exported_waiting"}
    suite = Suite.model_validate(
        {**SUITE, "warmup": 0, "samples": 1, "workloads": SUITE["workloads"][:1]}
    )
    lines: list[str] = []
    arm = run_arm(Endpoint(url, metric_names=names), suite, label="c1", say=lines.append)
    assert arm.identity["metrics_missing"] == ["waiting"]
    assert any("does not export waiting" in line for line in lines)


def test_bench_run_cli_takes_metric_names_from_an_engine_profile(
    engine: tuple[FakeEngine, str], tmp_path: Path
) -> None:
    _, url = engine
    root = Path(__file__).resolve().parents[3]
    profile = tmp_path / "fake-engine.yaml"
    profile.write_text(
        f"extends: {root / 'config/engines/sparkengine.yaml'}\n"
        "set:\n  metrics:\n" + "".join(f"    {key}: {name}\n" for key, name in NAMES.items())
    )
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        "kind: suite\nname: t\nsamples: 1\nwarmup: 0\nworkloads:\n"
        "  - {kind: prefill, name: prefill, depths: [32]}\n"
    )
    out = tmp_path / "arm"
    code = main(
        ["bench", "run", url, "--suite", str(suite), "--out", str(out), "--engine", str(profile)]
    )
    assert code == 0
    arm = read_arm(out)
    assert arm.identity["metrics_missing"] == []
    assert arm.points["prefill/32"].samples[0].metrics["prefill_tps"] > 0


def test_a_suite_that_does_not_fit_the_served_context_is_refused_first(
    engine: tuple[FakeEngine, str],
) -> None:
    fake, url = engine
    fake.max_len = 100  # prefill depth 128 cannot fit
    with pytest.raises(BenchError, match="workload prefill needs 129 tokens"):
        run_arm(Endpoint(url, metric_names=NAMES), Suite.model_validate(SUITE), label="c1")
    assert fake.prompts == []  # nothing was sent


def test_a_cpu_bound_client_is_scaled_out_and_the_sample_repeated(
    engine: tuple[FakeEngine, str],
) -> None:
    _, url = engine
    suite = Suite.model_validate(
        {
            **SUITE,
            "warmup": 0,
            "samples": 1,
            "client": {"max_cpu_share": 0.0, "max_processes": 2},  # any CPU counts as saturated
            "workloads": [SUITE["workloads"][1] | {"concurrency": [2]}],
        }
    )
    arm = run_arm(Endpoint(url, metric_names=NAMES), suite, label="c1")
    assert arm.discarded == [
        {"point": "streams/c2", "sample": "streams/c2/s0", "attempt": 1, "client_saturated": True}
    ]
    sample = arm.points["streams/c2"].samples[0]
    assert sample.attempts == 2
    assert all(r.ok for r in sample.receipts)
    assert arm.client is not None
    assert arm.client.processes == 2


def test_an_aborted_arm_keeps_its_finished_workloads(
    engine: tuple[FakeEngine, str], tmp_path: Path
) -> None:
    fake, url = engine
    fake.busy_after = 2  # the single-stream sample (2 requests) finishes, then it is stuck
    suite = Suite.model_validate(
        {
            **SUITE,
            "warmup": 0,
            "samples": 1,
            "idle": {"timeout_s": 0.3},
            "workloads": SUITE["workloads"][:2],
        }
    )
    saved: list[ArmReport] = []
    with pytest.raises(BenchError, match="not idle"):
        run_arm(Endpoint(url, metric_names=NAMES), suite, label="c1", checkpoint=saved.append)
    assert [list(r.points) for r in saved] == [["single/c1"], ["single/c1"]]
    assert saved[0].aborted is None
    assert saved[-1].aborted is not None
    assert "not idle" in saved[-1].aborted
    assert saved[-1].finished_utc is None


def _sharded_batches(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, ...]]:
    """The client process ids of every batch an arm sends over client processes, in order."""
    seen: list[tuple[int, ...]] = []
    run = ShardPool.run

    def spy(
        pool: ShardPool, items: Sequence[Scheduled], processes: int, **kwargs: float
    ) -> tuple[list[Receipt], ClientStats]:
        result = run(pool, items, processes, **kwargs)
        assert pool.last_start is not None
        seen.append(pool.last_start.pids)
        return result

    monkeypatch.setattr(ShardPool, "run", spy)
    return seen


SHARDED = {
    **SUITE,
    "warmup": 0,
    "samples": 2,
    "client": {"processes": 2, "max_processes": 2},
    "workloads": [SUITE["workloads"][1] | {"concurrency": [2, 3]}],
}


def test_an_arm_sends_every_sharded_batch_on_the_same_client_processes(
    engine: tuple[FakeEngine, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`client.processes: 2` starts two processes once per arm (not a pool per batch), and the
    arm's end stops them."""
    _, url = engine
    seen = _sharded_batches(monkeypatch)
    arm = run_arm(Endpoint(url, metric_names=NAMES), Suite.model_validate(SHARDED), label="c1")
    assert all(r.ok for p in arm.points.values() for s in p.samples for r in s.receipts)
    assert len(seen) == 4  # two points, two samples each
    assert len(set(seen)) == 1
    assert len(set(seen[0])) == 2
    assert multiprocessing.active_children() == []


def test_an_arm_that_stops_on_an_error_stops_its_client_processes(
    engine: tuple[FakeEngine, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The arm's client processes are stopped when a sample raises, not left for the next arm."""
    fake, url = engine
    fake.busy_after = 4  # the second batch is sent, then the engine never gets idle
    seen = _sharded_batches(monkeypatch)
    suite = Suite.model_validate({**SHARDED, "idle": {"timeout_s": 0.3}})
    with pytest.raises(BenchError, match="not idle"):
        run_arm(Endpoint(url, metric_names=NAMES), suite, label="c1")
    assert len(seen) == 2
    assert seen[0] == seen[1]
    assert multiprocessing.active_children() == []


SAMPLED = {
    "name": "sampled",
    "samples": 2,
    "warmup": 0,
    "workloads": [
        {"kind": "closed_loop", "name": "greedy", "concurrency": [2], "prompt_tokens": 40,
         "max_tokens": 3},
        {"kind": "closed_loop", "name": "sampled", "concurrency": [2], "prompt_tokens": 40,
         "max_tokens": 3, "temperature": 1.0, "top_p": 0.95, "gate": False},
    ],
}  # fmt: skip


def test_a_sampled_workload_sends_its_temperature_and_the_same_seeds_in_every_arm(
    engine: tuple[FakeEngine, str],
) -> None:
    """Temperature per workload; seeded requests, so arm two sends what arm one sent."""
    fake, url = engine
    suite = Suite.model_validate(SAMPLED)
    seen = []
    for label in ("c1", "p1"):
        fake.sampling.clear()
        run_arm(Endpoint(url, metric_names=NAMES), suite, label=label)
        seen.append(list(fake.sampling))
    first, second = seen
    greedy = [s for s in first if s[0] == 0.0]
    sampled = [s for s in first if s[0] == 1.0]
    assert len(greedy) == len(sampled) == 4  # 2 streams x 2 samples each
    assert all(top_p is None and seed is None for _, top_p, seed in greedy)
    assert all(top_p == 0.95 and seed is not None for _, top_p, seed in sampled)
    assert len({seed for *_, seed in sampled}) == 4  # every request its own seed
    assert sorted(map(str, second)) == sorted(map(str, first))  # the same requests in arm two


# vLLM's info gauge as it exports it (labels of a real /metrics; the value is always 1)
CACHE_CONFIG = (
    "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
    "# TYPE vllm:cache_config_info gauge\n"
    'vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",'
    'engine="0",gpu_memory_utilization="0.7",num_gpu_blocks="661"} 1.0\n'
)


def test_the_arm_reports_the_kv_capacity_the_engine_exports(
    engine: tuple[FakeEngine, str],
) -> None:
    """Reported in the arm's identity beside the model, never a compared (gated) metric."""
    fake, url = engine
    suite = Suite.model_validate(SAMPLED)
    plain = run_arm(Endpoint(url, metric_names=NAMES), suite, label="c1")
    assert "kv_capacity_tokens" not in plain.identity
    fake.extra_metrics = CACHE_CONFIG
    arm = run_arm(Endpoint(url, metric_names=NAMES), suite, label="c2")
    assert arm.identity["kv_capacity_tokens"] == 661 * 16
    assert (arm.identity["kv_blocks"], arm.identity["kv_block_size"]) == (661, 16)
    assert not any("kv" in metric for point in arm.points.values() for metric in point.gate)


def test_a_session_workload_replays_its_turns_salted_with_per_turn_values(
    engine: tuple[FakeEngine, str], tmp_path: Path
) -> None:
    fake, url = engine
    session = tmp_path / "s.jsonl"
    turns = [
        {"kind": "turn", "index": i, "path": "/v1/completions", "sent_s": i, "gap_s": 0.0,
         "status": 200, "duration_s": 0.1, "usage": {"completion_tokens": 3},
         "body": {"model": "recorded", "prompt": "hello " * (i + 1), "temperature": 0}}
        for i in range(2)
    ]  # fmt: skip
    header = {"kind": "session", "recorded_utc": "2026-12-06T23:00:00+00:00", "upstream": "u"}
    session.write_text("".join(json.dumps(line) + "\n" for line in [header, *turns]))
    suite = Suite.model_validate(
        {**SUITE, "warmup": 0, "samples": 2,
         "workloads": [{"kind": "session", "name": "session", "file": str(session)}]}
    )  # fmt: skip
    arm = run_arm(Endpoint(url, metric_names=NAMES), suite, label="c1")
    point = arm.points["session/s"]
    assert all(r.ok for s in point.samples for r in s.receipts), point.samples[0].receipts[0].error
    assert point.gate == ["ttft_s", "tpot_ms"]
    assert point.info["session_turns"] == 2
    first, second = (sample.metrics for sample in point.samples)
    assert {"ttft_s@t00", "ttft_s@t01", "prompt_tokens@t01", "cached_share"} <= set(first)
    assert first["prompt_tokens@t00"] == second["prompt_tokens@t00"]  # salts of one length
    sent = ["".join(map(str, p)) for p in fake.prompts]
    assert len(sent) == 4
    assert sent[0] != sent[2]  # each sample salted apart: no replay warms the next
    assert sent[0].endswith("hello ")
