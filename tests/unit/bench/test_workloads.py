"""Workload numbers are defined from receipts alone, as documented."""

from __future__ import annotations

import math

import pytest

from flows.bench import workloads as wl
from flows.bench.report import Receipt


def _r(sent: float, first: float, last: float, tokens: int, **kw: object) -> Receipt:
    return Receipt(
        ok=True, sent_s=sent, ttft_s=first, first_token_s=first, last_token_s=last,
        end_s=last + 0.01, completion_tokens=tokens, prompt_tokens=100, **kw,
    )  # fmt: skip


def test_poisson_schedule_is_seeded_and_starts_at_zero() -> None:
    a = wl.poisson_schedule(2.0, 50, seed=3)
    assert a == wl.poisson_schedule(2.0, 50, seed=3)
    assert a != wl.poisson_schedule(2.0, 50, seed=4)
    assert a[0] == 0.0
    assert a == sorted(a)
    assert 10 < a[-1] < 50  # 49 gaps of mean 0.5 s


def test_closed_loop_uses_the_first_to_last_token_window_across_streams() -> None:
    receipts = [_r(0.0, 0.5, 2.5, 21), _r(0.1, 0.4, 1.5, 11)]  # absolute: 0.5..2.5, 0.5..1.6
    out = wl.closed_loop(receipts)
    assert out["tps"] == pytest.approx((20 + 10) / (2.5 - 0.5))
    assert out["per_stream_tps"] == pytest.approx((20 / 2.0 + 10 / 1.1) / 2)


def test_single_stream_reports_medians() -> None:
    receipts = [_r(0, 0.1, 1.1, 11), _r(2, 0.3, 2.3, 11), _r(5, 0.2, 1.2, 11)]
    out = wl.single_stream(receipts)
    assert out["ttft_p50_s"] == pytest.approx(0.2)
    assert out["tpot_p50_ms"] == pytest.approx(100.0)
    assert out["tps"] == pytest.approx(33 / (1.11 + 2.31 + 1.21))


def test_poisson_records_lateness() -> None:
    receipts = [
        _r(0.002, 0.1, 1.1, 11, due_s=0.0),
        _r(0.5, 0.1, 0.6, 6, due_s=0.49),
    ]
    out = wl.poisson(receipts)
    assert out["lateness_p50_ms"] == pytest.approx(6.0)
    assert out["output_tps"] == pytest.approx(17 / 1.11)


def test_prefill_rate_is_prompt_tokens_over_ttft() -> None:
    assert wl.prefill(_r(0, 0.25, 0.25, 1)) == {"prefill_tps": 400.0, "ttft_s": 0.25}


def test_step_grid_is_a_geometric_mean_of_shapes() -> None:
    shapes = {
        wl.shape_key(1, 128): [_r(0, 0.1, 1.1, 101)],  # 10 ms per step
        wl.shape_key(4, 128): [_r(0, 0.1, 4.1, 101)] * 4,  # 40 ms per step
    }
    out = wl.step_grid(shapes)
    assert out["step_ms@c1x128"] == pytest.approx(10.0)
    assert out["step_geomean_ms"] == pytest.approx(20.0)
    assert "step_geomean_ms" not in wl.step_grid({**shapes, "step_ms@c8x128": []})


def test_prefix_hit_rate() -> None:
    cold = _r(0, 2.0, 2.0, 1, cached_tokens=0)
    warm = [_r(3, 0.1, 0.1, 1, cached_tokens=96), _r(4, 0.3, 0.3, 1, cached_tokens=96)]
    assert wl.prefix(cold, warm) == pytest.approx(
        {"cold_ttft_s": 2.0, "warm_ttft_s": 0.2, "warm_hit_rate": 0.96}
    )


def test_a_failed_request_invalidates_the_sample() -> None:
    good = _r(0, 0.1, 1.0, 10)
    bad = Receipt(ok=False, sent_s=0.0, error="HTTP 500")
    assert wl.all_ok([good])
    assert not wl.all_ok([good, bad])
    assert not wl.all_ok([])
    assert not math.isnan(wl.single_stream([good])["tps"])
