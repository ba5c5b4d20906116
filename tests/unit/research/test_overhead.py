"""The overhead benchmark measures our real client against a paced server in another process."""

from __future__ import annotations

from flows.bench.report import ClientStats
from flows.bench.runner import client_saturated, saturation_reason
from flows.research.overhead import measure


def test_overhead_benchmark_reports_cost_and_lag() -> None:
    result = measure(rate=1000.0, streams=10, seconds=1.0)
    assert result.failed == 0
    assert result.achieved_chunks_per_s > 0
    assert result.cpu_us_per_chunk is not None
    assert result.cpu_us_per_chunk > 0
    assert result.send_lag_p99_ms is not None
    assert result.send_lag_p50_ms is not None
    assert result.send_lag_p50_ms <= result.send_lag_p99_ms


def _stats(cpu: float, wall: float, lag: float | None) -> ClientStats:
    return ClientStats(
        processes=1, wall_s=wall, cpu_s=cpu, chunks=10, cpu_us_per_chunk=None,
        parse_lag_p50_ms=None, parse_lag_p99_ms=None, loop_lag_p99_ms=lag,
    )  # fmt: skip


def test_a_busy_client_is_flagged() -> None:
    assert not client_saturated(_stats(0.1, 1.0, 1.0))
    assert client_saturated(_stats(0.8, 1.0, 1.0))
    assert client_saturated(_stats(0.1, 1.0, 25.0))


def test_saturation_reason_tells_client_from_machine() -> None:
    assert "raise client.processes" in saturation_reason(_stats(0.8, 1.0, 1.0))
    assert "machine is busy" in saturation_reason(_stats(0.05, 1.0, 30.0))
