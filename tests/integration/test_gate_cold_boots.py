"""The cold-boots gate on a private local cluster of the real engine, as the flow calls it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from flows.cluster.boot.session import load_session
from flows.cluster.transport.local import LocalTransport
from flows.gates.base import GateResult, Outcome
from flows.gates.cold_boots.runner import run_cold_boots
from flows.gates.determinism.runner import run_determinism
from flows.spec.cluster import Cluster
from flows.spec.load import load_model
from flows.spec.release import ColdBootsGate, DeterminismGate, Release
from tests.support.local_cluster import context_for
from tests.support.paths import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ALL_MODES = ColdBootsGate(spot_check=2, max_tokens=12, requests_after_ready=3, timeout_s=600)
SHORT = DeterminismGate(
    prompts=["The quick brown fox jumps over the lazy dog, and then", "SELECT name FROM orders"],
    max_tokens=12,
    long_prompt_tokens=200,
    stagger_ms=30,
    sampled_streams=1,
)


def _summary(result: GateResult) -> dict[str, Any]:
    """The gate's typed summary, as the JSON the record keeps."""
    assert result.summary is not None, result.reason
    return result.summary.model_dump(mode="json")


def test_r1_cold_boots_pass_with_zero_compiles(
    local_cluster: Cluster,
    transports: dict[str, LocalTransport],
    state: Path,
    release_r1: Release,
    tmp_path: Path,
) -> None:
    result = run_cold_boots(
        context_for(local_cluster, transports, state, release_r1), ALL_MODES, tmp_path
    )
    assert result.outcome == Outcome.PASSED, result.reason
    assert load_session(state, local_cluster.name) is None
    rows = {row["mode"]: row for row in _summary(result)["boots"]}
    assert list(rows) == ["warm", "one-rank-kernels", "all-kernels", "all-jit"]
    for row in rows.values():
        assert row["ready_s"] is not None
        assert row["ready_s"] > 0
        assert row["compiles_after_preparation"] == 0
        assert row["compiles_metric"] == 0
        assert row["spot_check"] == "identical"
        assert row["what_happened"]
    one = {r["rank"]: r for r in rows["one-rank-kernels"]["ranks"]}
    assert one[0]["compiled"] == 0
    assert one[1]["compiled"] > 0  # the last rank by default
    assert all(r["compiled"] > 0 for r in rows["all-kernels"]["ranks"])
    assert "rank 1 compiled" in rows["one-rank-kernels"]["what_happened"]
    assert set(_summary(result)["reference"]) == {"p0", "p1"}
    timeline = json.loads((tmp_path / "boots/all-jit.json").read_text())["timeline"]
    assert [r["rank"] for r in timeline["ranks"]] == [0, 1]
    assert (tmp_path / "boots/warm/local0-rank0.log").is_file()


def test_lazy_kernel_fails_cold_boots_but_passes_determinism(
    local_cluster: Cluster,
    transports: dict[str, LocalTransport],
    state: Path,
    tmp_path: Path,
) -> None:
    lazy = load_model(ROOT / "releases/faulty/lazy-kernel.yaml", Release)
    lazy = lazy.model_copy(update={"gates": lazy.gates.model_copy(update={"determinism": SHORT})})
    context = context_for(local_cluster, transports, state, lazy)
    determinism = run_determinism(context, SHORT, tmp_path / "determinism")
    assert determinism.outcome == Outcome.PASSED, determinism.reason

    boots = run_cold_boots(
        context,
        ALL_MODES.model_copy(update={"modes": ["warm"]}),
        tmp_path / "boots",
        reference=_summary(determinism)["hashes"],  # as the flow passes it
    )
    assert boots.outcome == Outcome.FAILED
    assert "warm:" in boots.reason
    assert "compiles after preparation" in boots.reason
    assert "mlp" in boots.reason
    assert "spot check" not in boots.reason
    row = _summary(boots)["boots"][0]
    assert row["compiles_after_preparation"] > 0
    assert row["compiles_metric"] > 0
    assert row["spot_check"] == "identical"


def test_a_rank_crashing_at_boot_fails_naming_mode_and_cause_with_evidence(
    local_cluster: Cluster,
    transports: dict[str, LocalTransport],
    state: Path,
    tmp_path: Path,
) -> None:
    crash = load_model(ROOT / "releases/faulty/crash-on-boot.yaml", Release)
    result = run_cold_boots(
        context_for(local_cluster, transports, state, crash),
        ALL_MODES.model_copy(update={"modes": ["warm", "one-rank-kernels"]}),
        tmp_path,
    )
    assert result.outcome == Outcome.FAILED
    assert "warm: boot failed" in result.reason
    assert "one-rank-kernels: boot failed" in result.reason
    assert "rank 1" in result.reason
    assert len(result.evidence) == 2
    assert all(Path(folder).is_dir() for folder in result.evidence)
    assert load_session(state, local_cluster.name) is None
