"""Gate summaries for tests, built from the gates' typed models (never hand-copied dicts).

Each builder returns a plausible, self-consistent summary of one gate; keyword arguments
override fields, so a test states only what it is about.
"""

from __future__ import annotations

from typing import Any

from flows.gates.benchmark.summary import BenchmarkSummary, PointRow
from flows.gates.cold_boots.summary import BootRow, ColdBootsSummary, RankFigures
from flows.gates.determinism.summary import (
    DeterminismSummary,
    PreviousReport,
    PromptHashes,
    ScenarioRow,
)
from flows.gates.release_tests.summary import Excluded, FileRow, ReleaseTestsSummary

HASHES = {f"p{i}": PromptHashes(tokens=f"t{i}" * 8, logprobs=f"l{i}" * 8) for i in range(4)}
SCENARIOS = ("all-at-once", "staggered", "long-prefill", "prefix-cached", "after-traffic")


def release_tests(**fields: Any) -> ReleaseTestsSummary:
    """Three passed and one skipped test in two files, one file excluded."""
    values: dict[str, Any] = {
        "passed": 3, "failed": 0, "errors": 0, "skipped": 1, "seconds": 0.4,
        "files": [
            FileRow(file="tests/test_kernels.py", outcome="passed", tests=2, seconds=0.2),
            FileRow(file="tests/test_api.py", outcome="passed", tests=2, seconds=0.2),
        ],
        "excluded": [Excluded(file="tests/test_gpu_only.py", reason="needs a GPU the CI lacks")],
        "node": "local0",
    }  # fmt: skip
    return ReleaseTestsSummary(**{**values, **fields})


def determinism(hashes: dict[str, PromptHashes] | None = None, **fields: Any) -> DeterminismSummary:
    """Four prompts identical in every scenario and to the previous release."""
    values: dict[str, Any] = {
        "prompts": 4,
        "scenarios": [ScenarioRow(name=name, identical=4) for name in SCENARIOS],
        "against_previous": PreviousReport(
            mode="unchanged", identical=4, total=4, reason="outputs declared unchanged"
        ),
        "hashes": HASHES if hashes is None else hashes,
    }
    return DeterminismSummary(**{**values, **fields})


def boot(mode: str, ready: float, compiled: int, **fields: Any) -> BootRow:
    """A boot of two ranks that prepared `compiled` kernels and compiled nothing after."""
    half = compiled // 2
    ranks = [
        RankFigures(
            rank=r,
            node=f"local{r}",
            prepare_s=ready / 2,
            kernels=6,
            compiled=half,
            cached=6 - half,
            liveness_wait_s=0.4,
        )
        for r in (0, 1)
    ]
    values: dict[str, Any] = {
        "mode": mode, "ready_s": ready, "prepare_s_max": ready / 2, "kernels": 12,
        "compiled": compiled, "cached": 12 - compiled, "liveness_wait_s_max": 0.4,
        "compiles_after_preparation": 0, "spot_check": "identical",
        "what_happened": f"{compiled} kernels compiled before the rendezvous", "passed": True,
        "ranks": ranks,
    }  # fmt: skip
    return BootRow(**{**values, **fields})


def cold_boots(**fields: Any) -> ColdBootsSummary:
    """Four boot modes, each ready and compiling nothing after preparation."""
    boots = [
        boot("warm", 3.2, 0),
        boot("one-rank-kernels", 6.5, 6),
        boot("all-kernels", 7.25, 12),
        boot("all-jit", 9.0, 12),
    ]
    return ColdBootsSummary(**{"boots": boots, **fields})


def point(name: str, unit: str, **fields: Any) -> PointRow:
    """One benchmark point (level unless told otherwise)."""
    values: dict[str, Any] = {"point": name, "unit": unit, "verdict": "level"}
    return PointRow(**{**values, **fields})


def benchmark(**fields: Any) -> BenchmarkSummary:
    """One faster and one level point over three arms, drawn on an A/A ledger of 2 gaps."""
    points = [
        point("decode/prose-c1", "step_ms", higher_is_better=False, previous=40.84,
              candidate=38.21, change=-6.4, low=-9.9, high=-3.6, verdict="faster"),
        point("prefill/2k", "prefill_tps", higher_is_better=True, previous=4033.5,
              candidate=4040.1, change=0.2, low=-1.1, high=1.4, verdict="level"),
    ]  # fmt: skip
    values: dict[str, Any] = {
        "arms": ["candidate", "previous", "candidate"], "tolerance": 0.03, "ledger_gaps": 2,
        "points": points,
    }  # fmt: skip
    return BenchmarkSummary(**{**values, **fields})
