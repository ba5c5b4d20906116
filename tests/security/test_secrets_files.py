"""Attack: release and cluster env, build args and launch env went into record.json, evidence
folders (launch plans, inspect output), the session file and a rank's log unredacted. Each file
sparkgate writes is now checked for the literal secret values."""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from flows.cluster.boot.evidence import capture, evidence_folder
from flows.cluster.boot.session import ClusterSession, load_session, prepare_plans, save_session
from flows.cluster.boot.timeline import BootTimeline
from flows.cluster.runtime.base import Installed, RankHandle
from flows.cluster.runtime.process import ProcessRuntime
from flows.cluster.transport.local import LocalTransport
from flows.gates.base import GateResult, Outcome
from flows.lines import silent
from flows.record.writer import open_record
from flows.spec.cluster import Cluster
from flows.spec.launch import LaunchPlan, render_all
from flows.spec.load import load_model
from flows.spec.release import load_release

ROOT = Path(__file__).resolve().parents[2]
HF = "hf_secret_value"
TOKEN = "boot-token-value-0123456789abcdef"
LISTED = "listed-secret-value"


def assert_nowhere(folder: Path, *values: str) -> None:
    """No file under `folder` holds any of `values` (grep -r, binary files included)."""
    for file in folder.rglob("*"):
        if file.is_file():
            data = file.read_bytes()
            for value in values:
                assert value.encode() not in data, f"{value!r} found in {file}"


def _plan(tmp_path: Path, argv: list[str]) -> LaunchPlan:
    return LaunchPlan(
        node="n0", rank=0, head=True, address="127.0.0.1", argv=argv,
        env={"HF_TOKEN": HF, "SPARKENGINE_BOOT_TOKEN": TOKEN, "NCCL_DEV": LISTED, "MODE": "x"},
        cwd=str(tmp_path), workdir=str(tmp_path), model_dir=str(tmp_path / "m"),
        cache_dirs={"kernels": str(tmp_path / "k")}, kernel_cache="kernels", ready_url=None,
        stop_signal="SIGTERM", stop_grace_s=5, secret_keys=["NCCL_DEV"],
    )  # fmt: skip


def test_a_session_file_holds_no_secret(tmp_path: Path) -> None:
    plan = _plan(tmp_path, ["serve", "--api-key", "an-api-key-value"])
    handle = RankHandle.started("process", plan, datetime.now(UTC), pid=12345)
    session = ClusterSession(
        cluster="c", release="r", runtime="process", build="d", started_at=datetime.now(UTC),
        handles=[handle], timeline=BootTimeline(started_at=datetime.now(UTC), ready_s=1, ranks=[]),
    )  # fmt: skip
    path = save_session(tmp_path / "state", session)
    assert_nowhere(path.parent, HF, TOKEN, LISTED, "an-api-key-value")
    loaded = load_session(tmp_path / "state", "c")
    assert loaded is not None
    assert loaded.handles[0].pid == 12345
    assert loaded.handles[0].plan.env["MODE"] == "x"
    assert loaded.handles[0].plan.env["HF_TOKEN"] == "<redacted>"


def test_evidence_holds_no_secret(tmp_path: Path) -> None:
    """A real rank that echoes its secrets into its log and command line, then is captured."""
    workdir = tmp_path / "node"
    script = (
        "import os, sys, time; print(os.environ['HF_TOKEN'], sys.argv[1], flush=True); "
        "time.sleep(60)"
    )
    plan = _plan(workdir, [sys.executable, "-c", script, TOKEN])
    transport = LocalTransport("n0")
    runtime = ProcessRuntime({"n0": transport})
    runtime.prepare(plan)
    handle = runtime.start(plan)
    try:
        deadline = time.monotonic() + 30
        while HF not in runtime.read_log(handle) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert HF in runtime.read_log(handle)  # the rank itself has the value, as it must
        folder = capture(
            evidence_folder(tmp_path / "evidence", "boot"), runtime, [handle], {"n0": transport},
            cause=f"rank 0 failed with {HF}",
        )  # fmt: skip
    finally:
        runtime.stop(handle)
        transport.close()
    assert (folder / "n0-rank0.launch.json").is_file()
    assert (folder / "n0-rank0.inspect.json").is_file()
    assert_nowhere(folder, HF, TOKEN, LISTED)


def test_a_record_holds_no_secret_written_by_the_writer(tmp_path: Path) -> None:
    """The writer on its own: release, cluster, a stage result, a raw file, evidence, JSON."""
    release = load_release(ROOT / "releases" / "r1.yaml")
    release = release.model_copy(
        update={"engine": release.engine.model_copy(update={"env": {"HF_TOKEN": HF}})}
    )
    cluster = load_model(ROOT / "config" / "local.yaml", Cluster)
    plans = render_all(cluster, release, {"boot_token": TOKEN})
    assert plans[0].env["SPARKENGINE_BOOT_TOKEN"] == TOKEN
    writer = open_record(
        tmp_path / "experiments", release, build_digest="d" * 64, cluster=cluster, previous=None
    )
    folder = writer.stage_dir("determinism")
    (folder / "raw.txt").write_text(f"a response mentioning {HF}\n")
    outside = tmp_path / "state" / "evidence" / "boot"
    outside.mkdir(parents=True)
    (outside / "rank0.log").write_text(f"HF_TOKEN={HF}\n")
    writer.save_stage(
        GateResult(
            gate="determinism", outcome=Outcome.FAILED, reason=f"failed near {HF}",
            started_at=datetime.now(UTC), seconds=1.0, files=["raw.txt"],
            evidence=[str(outside)],
        )
    )  # fmt: skip
    writer.save_json("inventory.json", {"plans": [plan.model_dump() for plan in plans]})
    assert_nowhere(writer.path, HF, TOKEN)
    assert writer.record.release["engine"]["env"]["HF_TOKEN"] == "<redacted>"


@pytest.mark.parametrize("shipped", ["config/local.yaml", "config/local-tp3.yaml"])
def test_bundled_clusters_give_the_engine_a_boot_token(shipped: str) -> None:
    cluster = load_model(ROOT / shipped, Cluster)
    release = load_release(ROOT / "releases" / "r1.yaml")
    plans = render_all(cluster, release, {"boot_token": TOKEN})
    assert {plan.env["SPARKENGINE_BOOT_TOKEN"] for plan in plans} == {TOKEN}
    assert all(plan.redacted().env["SPARKENGINE_BOOT_TOKEN"] == "<redacted>" for plan in plans)


class _Installed:
    """Stands in for a runtime whose build is already on every node (no build is made)."""

    def build(self, release: object, say: object) -> str:
        return "build"

    def install(self, build: object, say: object) -> Installed:
        return Installed(runtime="process", release="r1", digest="d" * 64, nodes=[], summary=[])


def test_each_boot_has_its_own_token_shared_by_its_ranks() -> None:
    cluster = load_model(ROOT / "config" / "local.yaml", Cluster)
    release = load_release(ROOT / "releases" / "r1.yaml")
    runtime: Any = _Installed()
    tokens = []
    for _ in range(2):
        prepared = prepare_plans(runtime, cluster, release, silent)
        shared = {plan.env["SPARKENGINE_BOOT_TOKEN"] for plan in prepared.plans}
        assert len(shared) == 1
        tokens.append(shared.pop())
    assert tokens[0] != tokens[1]
    assert all(len(token) >= 40 for token in tokens)
