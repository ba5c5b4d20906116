"""The peer check's parsing of guidellm reports, its definitions and its comparison math.

`data/guidellm-0.8.1-report.json` is a real guidellm 0.8.1 JSON report against the bundled
engine (one synchronous and one 4-stream benchmark), trimmed to the fields the check reads and
three requests per benchmark; its summaries are the ones guidellm computed over all requests.
Its prompts had been sent before, so they report cached tokens (the check must refuse that).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from flows.bench.report import Receipt
from flows.errors import BenchError
from flows.research import peer
from flows.research.peer_metrics import (
    EngineWindow,
    GuidellmBenchmark,
    LoadMetrics,
    Timing,
    Windows,
    cached_total,
    compare,
    gap_pct,
    markdown_table,
    our_definitions,
    parse_guidellm,
    per_step,
    pooled,
    receipt_timings,
)

SAMPLE = Path(__file__).parent / "data" / "guidellm-0.8.1-report.json"


def _report() -> dict[str, object]:
    return json.loads(SAMPLE.read_text())  # type: ignore[no-any-return]


def _t(start: float, first: float, last: float, tokens: int, end: float | None = None) -> Timing:
    return Timing(
        start=start, first_token=first, last_token=last, end=last if end is None else end,
        output_tokens=tokens,
    )  # fmt: skip


def test_parse_reads_streams_headlines_and_raw_timings() -> None:
    sync, conc = parse_guidellm(_report())
    assert (sync.streams, conc.streams) == (1, 4)
    assert sync.reported.ttft_p50_ms == pytest.approx(7.961034774780273)
    assert sync.reported.itl_mean_ms == pytest.approx(10.784235265519884)
    assert conc.reported.output_tps == pytest.approx(167.82738569910663)
    assert conc.reported.requests == 3
    first = sync.timings[0]
    assert first.first_token - first.start == pytest.approx(0.0105612, abs=1e-6)
    assert first.output_tokens == 64
    assert cached_total(sync.timings) == 3 * 128


def test_parse_names_what_is_missing() -> None:
    report = _report()
    del report["benchmarks"][0]["metrics"]["inter_token_latency_ms"]  # type: ignore[index]
    with pytest.raises(BenchError, match="inter_token_latency_ms"):
        parse_guidellm(report)
    with pytest.raises(BenchError, match="no benchmarks"):
        parse_guidellm({"benchmarks": []})
    report = _report()
    report["benchmarks"][1]["config"]["strategy"].pop("streams")  # type: ignore[index]
    with pytest.raises(BenchError, match="no streams"):
        parse_guidellm(report)


def test_our_definitions() -> None:
    # TTFT 0.1 and 0.3 s; ITL per request (2.0 - 0.1) / 19 = 100 ms and (1.3 - 0.3) / 10 = 100 ms
    timings = [_t(0.0, 0.1, 2.0, 20, end=2.1), _t(0.0, 0.3, 1.3, 11, end=1.4)]
    m = our_definitions(timings)
    assert m.requests == 2
    assert m.ttft_p50_ms == pytest.approx(200.0)
    assert m.ttft_mean_ms == pytest.approx(200.0)
    assert m.itl_p50_ms == pytest.approx((100.0 + 100.0) / 2)
    assert m.itl_mean_ms == pytest.approx(1e3 * (1.9 + 1.0) / (19 + 10))
    assert m.output_tps == pytest.approx(31 / 2.1)
    assert m.decode_window_tps == pytest.approx(29 / 1.9)
    assert our_definitions([]).requests == 0


def test_token_weighted_mean_differs_from_the_median_of_requests() -> None:
    # a short fast request and a long slow one: the token-weighted mean leans to the long one
    timings = [_t(0, 0.1, 0.2, 11), _t(0, 0.1, 10.1, 101)]
    m = our_definitions(timings)
    assert m.itl_mean_ms == pytest.approx(1e3 * 10.1 / 110)
    assert m.itl_p50_ms == pytest.approx((10.0 + 100.0) / 2)


def test_our_definitions_applied_to_guidellm_timings() -> None:
    sync = parse_guidellm(_report())[0]
    m = our_definitions(sync.timings)
    ttfts = sorted(1e3 * (t.first_token - t.start) for t in sync.timings)
    assert m.ttft_p50_ms == pytest.approx(ttfts[1])


def test_receipts_become_timings_and_failures_are_refused() -> None:
    ok = Receipt(
        ok=True, sent_s=1.0, ttft_s=0.2, first_token_s=0.2, last_token_s=1.2, end_s=1.3,
        completion_tokens=11, cached_tokens=0,
    )  # fmt: skip
    (t,) = receipt_timings([ok])
    assert (t.start, t.first_token, t.last_token, t.end) == pytest.approx((1.0, 1.2, 2.2, 2.3))
    with pytest.raises(BenchError, match="failed: HTTP 500"):
        receipt_timings([Receipt(ok=False, sent_s=0.0, error="HTTP 500")])
    with pytest.raises(BenchError, match="no usage"):
        receipt_timings([ok.model_copy(update={"completion_tokens": None})])


def test_gap_pct() -> None:
    assert gap_pct(103.0, 100.0) == pytest.approx(3.0)
    assert gap_pct(None, 1.0) is None
    assert gap_pct(1.0, 0.0) is None


def test_pooled_keeps_latencies_and_averages_throughput() -> None:
    a = [_t(0, 0.1, 1.1, 11)]  # 11 tok / 1.1 s = 10 tok/s
    b = [_t(0, 0.3, 2.3, 11)]  # 11 tok / 2.3 s
    m = pooled(a, b)
    assert m.requests == 2
    assert m.ttft_p50_ms == pytest.approx(200.0)
    assert m.output_tps == pytest.approx((10.0 + 11 / 2.3) / 2)


def test_compare_flags_gaps_over_three_percent_and_shows_the_repeat() -> None:
    theirs = GuidellmBenchmark(
        streams=1,
        reported=LoadMetrics(requests=2, ttft_p50_ms=104.0, itl_mean_ms=100.0, output_tps=9.0),
        timings=[_t(0, 0.1, 1.1, 11), _t(0, 0.1, 1.1, 11)],
    )
    rows = {
        r.metric: r for r in compare("c1", theirs, [_t(0, 0.1, 1.1, 11)], [_t(0, 0.1, 1.1, 11)])
    }
    assert rows["ttft_p50_ms"].gap_reported_pct == pytest.approx(4.0)
    assert rows["ttft_p50_ms"].gap_timings_pct == pytest.approx(0.0)
    assert rows["ttft_p50_ms"].flagged
    assert not rows["itl_mean_ms"].flagged
    assert rows["output_tps"].gap_reported_pct == pytest.approx(-10.0)
    assert rows["decode_window_tps"].guidellm is None
    assert rows["itl_p50_ms"].repeat_pct == pytest.approx(0.0)
    assert rows["requests"].ours == 1  # per run
    table = markdown_table(list(rows.values()))
    assert (
        "| c1 | TTFT p50 (ms) | 104.0 | 100.0 | 100.0 | +4.0 % | +0.0 % | +0.0 % | yes |" in table
    )


def test_prompts_are_distinct_ascii_of_exact_length() -> None:
    texts = peer.prompt_texts("c4/ours-1", 6, 128, seed=0)
    assert len(set(texts)) == 6
    assert len({t[:16] for t in texts}) == 6  # not even one cache block is shared
    assert all(len(t) == 127 for t in texts)  # + BOS = 128 engine tokens
    assert all(c in "\t\n" or " " <= c <= "~" for t in texts for c in t)
    assert texts == peer.prompt_texts("c4/ours-1", 6, 128, seed=0)
    assert set(texts).isdisjoint(peer.prompt_texts("c4/ours-2", 6, 128, seed=0))


def test_guidellm_dataset_and_argv(tmp_path: Path) -> None:
    lines = peer.guidellm_dataset(["ab", "cde"], 64).splitlines()
    assert json.loads(lines[1]) == {
        "prompt": "cde", "prompt_tokens_count": 4, "output_tokens_count": 64,
    }  # fmt: skip
    argv = peer.guidellm_argv(
        tmp_path, "http://127.0.0.1:1", data=tmp_path / "d", streams=4, requests=16, out=tmp_path
    )
    assert "kind=concurrent,streams=4" in argv
    assert "kind=max_requests,count=16" in argv
    sync = peer.guidellm_argv(
        tmp_path, "http://127.0.0.1:1", data=tmp_path / "d", streams=1, requests=8, out=tmp_path
    )
    assert "kind=synchronous" in sync


def test_missing_venv_says_how_to_create_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = peer.main(["--out", str(tmp_path / "out"), "--venv", str(tmp_path / "none")])
    assert code == 2
    err = capsys.readouterr().err
    assert "--setup" in err
    assert f"torch=={peer.TORCH_VERSION}" in err
    assert not (tmp_path / "out").exists()


def test_engine_window_from_counter_snapshots() -> None:
    w = EngineWindow.between(
        {"step_count": 10, "step_sum": 1.0}, {"step_count": 30, "step_sum": 1.5}
    )
    assert (w.steps, w.step_seconds) == pytest.approx((20, 0.5))
    assert w.step_ms == pytest.approx(25.0)
    assert (w + w).step_ms == pytest.approx(25.0)
    assert EngineWindow(steps=0, step_seconds=0).step_ms is None


def test_per_step_cancels_the_machine_speed() -> None:
    # the same tool on a machine twice as slow: raw numbers halve, per-step numbers do not
    fast = LoadMetrics(requests=1, itl_mean_ms=10.0, ttft_mean_ms=30.0, output_tps=100.0)
    slow = LoadMetrics(requests=1, itl_mean_ms=20.0, ttft_mean_ms=60.0, output_tps=50.0)
    a = per_step(fast, EngineWindow(steps=100, step_seconds=1.0))
    b = per_step(slow, EngineWindow(steps=100, step_seconds=2.0))
    assert a == pytest.approx(b | {"engine_step_ms": 10.0})
    assert a["itl_mean_per_step"] == pytest.approx(1.0)
    assert a["output_tokens_per_step"] == pytest.approx(1.0)
    assert per_step(fast, None)["itl_mean_per_step"] is None


def test_compare_with_windows_adds_per_step_rows() -> None:
    run = [_t(0, 0.1, 1.1, 11)]  # ITL 100 ms, 10 tok/s
    theirs = GuidellmBenchmark(streams=1, reported=our_definitions(run), timings=run)
    windows = Windows(
        guidellm=EngineWindow(steps=10, step_seconds=1.0),  # 100 ms steps
        first=EngineWindow(steps=10, step_seconds=0.5),  # our runs saw 50 ms steps
        second=EngineWindow(steps=10, step_seconds=0.5),
    )
    rows = {r.metric: r for r in compare("c1", theirs, run, run, windows)}
    assert rows["engine_step_ms"].guidellm == pytest.approx(100.0)
    assert rows["engine_step_ms"].ours == pytest.approx(50.0)
    assert rows["itl_mean_per_step"].guidellm == pytest.approx(1.0)
    assert rows["itl_mean_per_step"].ours == pytest.approx(2.0)
    assert rows["itl_mean_per_step"].gap_reported_pct == pytest.approx(-50.0)
    assert rows["requests"].ours == 1
    assert "ITL mean / engine step" in markdown_table(list(rows.values()))


def test_ours_per_step_pairs_each_run_with_its_own_window() -> None:
    fast, slow = [_t(0, 0.1, 1.1, 11)], [_t(0, 0.2, 2.2, 11)]  # 10 and 5 tok/s
    theirs = GuidellmBenchmark(streams=1, reported=our_definitions(fast), timings=fast)
    windows = Windows(
        guidellm=EngineWindow(steps=11, step_seconds=1.1),
        first=EngineWindow(steps=11, step_seconds=1.1),  # 100 ms steps
        second=EngineWindow(steps=11, step_seconds=2.2),  # 200 ms steps: the machine slowed
    )
    rows = {r.metric: r for r in compare("c1", theirs, fast, slow, windows)}
    assert rows["output_tokens_per_step"].ours == pytest.approx(1.0)
    assert rows["output_tokens_per_step"].repeat_pct == pytest.approx(0.0)
    assert rows["engine_step_ms"].ours == pytest.approx(150.0)


def test_parse_loads() -> None:
    assert peer.parse_loads("1:8,4:16") == {1: 8, 4: 16}
    for bad in ("1", "4:2", "0:3", "a:b", "1:8,"):
        with pytest.raises(argparse.ArgumentTypeError, match="STREAMS:REQUESTS"):
            peer.parse_loads(bad)
