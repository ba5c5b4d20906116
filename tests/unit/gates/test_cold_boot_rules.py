"""The cold-boots gate's pure rules: what fails a boot, the table row and what happened."""

from __future__ import annotations

from flows.gates.cold_boots.rules import (
    BootObservation,
    RankFigures,
    boot_problems,
    boot_row,
    cold_boots_verdict,
    what_happened,
)


def rank(r: int, *, compiled: int = 0, prepare_s: float = 0.8, wait: float = 0.1) -> RankFigures:
    return RankFigures(
        rank=r, node=f"local{r}", prepare_s=prepare_s, kernels=10, compiled=compiled,
        cached=10 - compiled, liveness_wait_s=wait,
    )  # fmt: skip


def seen(mode: str = "warm", **update: object) -> BootObservation:
    base = BootObservation(
        mode=mode, ready_s=3.2, ranks=[rank(0), rank(1)], compiles_metric=0.0,
        spot_check="identical",
    )  # fmt: skip
    return base.model_copy(update=update)


def test_a_clean_warm_boot_passes_and_reads_like_the_recipe() -> None:
    boot = seen()
    assert boot_problems(boot) == []
    row = boot_row(boot).model_dump()
    assert row["passed"]
    assert (row["kernels"], row["compiled"], row["cached"]) == (20, 0, 20)
    assert row["prepare_s_max"] == 0.8
    assert row["spot_check"] == "identical"
    assert "loaded 10 kernels from the cache" in row["what_happened"]
    assert "nothing compiled after preparation" in row["what_happened"]


def test_a_cold_rank_is_described_with_its_compile_and_the_peer_wait() -> None:
    boot = seen(
        "one-rank-kernels",
        emptied_ranks=[1],
        ranks=[rank(0, wait=11.0), rank(1, compiled=10, prepare_s=12.3)],
    )
    assert boot_problems(boot) == []
    text = what_happened(boot)
    assert "rank 1 compiled 10 kernels in 12.3 s" in text
    assert "rank 0 waited 11.0 s on liveness" in text


def test_compiles_after_preparation_in_the_logs_fail_and_are_named() -> None:
    boot = seen(compiles_logged=2, compile_lines=["rank 0 mlp/k1", "rank 1 mlp/k1"])
    problems = boot_problems(boot)
    assert len(problems) == 1
    assert "2 compiles after preparation" in problems[0]
    assert "mlp/k1" in problems[0]
    assert not boot_row(boot).passed


def test_a_nonzero_compile_metric_fails_even_when_logs_say_nothing() -> None:
    assert "metric" in " ".join(boot_problems(seen(compiles_metric=1.0)))


def test_an_absent_compile_metric_does_not_fail() -> None:
    assert boot_problems(seen(compiles_metric=None)) == []


def test_a_spot_check_that_differs_fails_naming_the_prompts() -> None:
    problems = boot_problems(seen(spot_check="differs", spot_differing=["s1"]))
    assert problems == ["spot check differs against the reference (s1)"]


def test_a_spot_check_not_run_fails() -> None:
    assert boot_problems(seen(spot_check="not run")) != []


def test_an_emptied_rank_that_compiled_nothing_was_not_a_cold_boot() -> None:
    problems = boot_problems(seen("all-kernels", emptied_ranks=[0, 1]))
    assert problems == [
        "rank 0 compiled nothing though its kernel cache was emptied",
        "rank 1 compiled nothing though its kernel cache was emptied",
    ]


def test_a_boot_errors_own_words_are_not_repeated() -> None:
    boot = BootObservation(mode="warm", error="boot failed: node local1 rank 1: exited 70")
    assert boot_problems(boot) == ["boot failed: node local1 rank 1: exited 70"]


def test_a_failed_boot_names_its_cause_only() -> None:
    boot = BootObservation(mode="all-jit", error="node local1 rank 1: exited 70")
    assert boot_problems(boot) == ["boot failed: node local1 rank 1: exited 70"]
    row = boot_row(boot).model_dump()
    assert row["ready_s"] is None
    assert row["spot_check"] == "not run"
    assert row["what_happened"] == "boot failed: node local1 rank 1: exited 70"


def test_verdict_names_each_failing_mode() -> None:
    passed, reason = cold_boots_verdict(
        [seen(), seen("all-kernels", compiles_logged=1), BootObservation(mode="all-jit", error="x")]
    )
    assert not passed
    assert "all-kernels: 1 compiles after preparation" in reason
    assert "all-jit: boot failed: x" in reason
    assert "warm" not in reason


def test_verdict_passes_with_ready_times() -> None:
    passed, reason = cold_boots_verdict([seen(), seen("one-rank-kernels", ready_s=9.5)])
    assert passed
    assert "one-rank-kernels 9.5 s" in reason
