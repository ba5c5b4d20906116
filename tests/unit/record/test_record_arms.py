"""A record as the published side of `bench compare`: its candidate arms, with the host facts
its preflight read, against a user's arm of the same points with its own facts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flows.bench.hosts import FACTS_FILE, HostFacts
from flows.bench.report import ArmReport, Point, Sample, write_arm
from flows.cli import main
from flows.cluster.ops.preflight import run_preflight
from flows.cluster.transport import LocalTransport
from flows.pipeline.prelude import preflight_facts
from flows.record.arms import candidate_arms
from flows.record.writer import open_record
from flows.spec.cluster import Cluster
from flows.spec.release import Release
from tests.support.records import DAY, ORDER, fill

MINE = HostFacts(
    cluster="mine",
    source="probes.facts of mine",
    nodes={"spark1": {"page size": 65536.0, "kernel": "6.17.0-1008-nvidia"}},
)


def _record(tmp_path: Path, release: Release, cluster: Cluster, *, facts: bool = True) -> Path:
    """A published r2 record whose preflight really ran on this machine's local cluster."""
    writer = open_record(
        tmp_path / "experiments", release, build_digest="sha256:aaa", cluster=cluster,
        previous="r1", today=DAY,
    )  # fmt: skip
    fill(writer, None if facts else ["release_tests"])
    if facts:
        nodes = [n.model_copy(update={"workdir": str(tmp_path / n.name)}) for n in cluster.nodes]
        local = cluster.model_copy(update={"nodes": nodes})
        report = run_preflight(local, lambda node: LocalTransport(node.name))
        writer.save_json(FACTS_FILE, preflight_facts(report).model_dump(mode="json"))
    writer.publish(verdict="passed", stage_order=ORDER, versions={"sparkgate": "0.1"})
    return writer.path


def _mine(tmp_path: Path) -> Path:
    """The user's arm: the record's points, decode step 10 % longer, with their host facts."""
    spread = (0.999, 1.0, 1.001)
    points = {
        "decode/prose-c1": Point(
            workload="closed_loop", gate=["step_ms"],
            samples=[Sample(metrics={"step_ms": 42.03 * f}) for f in spread],
        ),
        "prefill/2k": Point(
            workload="prefill", gate=["prefill_tps"],
            samples=[Sample(metrics={"prefill_tps": 4040.1 * f}) for f in spread],
        ),
    }  # fmt: skip
    arm = ArmReport(
        label="mine", source="sparkgate", url="http://spark1:8000", suite="tiny",
        started_utc="2026-12-06T00:00:00+00:00", points=points, host_facts=MINE,
    )  # fmt: skip
    return write_arm(arm, tmp_path / "mine")


def test_the_records_candidate_arms_carry_the_facts_its_preflight_read(
    tmp_path: Path, release_r2: Release, cluster: Cluster
) -> None:
    arms = candidate_arms(_record(tmp_path, release_r2, cluster))
    assert [arm.label for arm in arms] == ["1-candidate", "3-candidate"]
    facts = arms[0].host_facts
    assert facts is not None
    assert (facts.cluster, facts.source) == ("local", "preflight")
    assert set(facts.nodes) == {node.name for node in cluster.nodes}
    assert {name for values in facts.nodes.values() for name in values} >= {"kernel", "page size"}


@pytest.mark.parametrize("by", ["folder", "name"])
def test_compare_a_users_arm_with_a_record_side_by_side(
    tmp_path: Path,
    release_r2: Release,
    cluster: Cluster,
    capsys: pytest.CaptureFixture[str],
    by: str,
) -> None:
    record = _record(tmp_path, release_r2, cluster)
    old = str(record) if by == "folder" else record.name
    out = tmp_path / "out"
    argv = ["bench", "compare", str(_mine(tmp_path)), old, "--out", str(out)]
    code = main([*argv, "--experiments", str(record.parent)])
    err = capsys.readouterr().err
    assert code == 3, "one arm here and the record's A/A pair: boot noise of one side only"
    assert "this side: mine: mine (probes.facts of mine); release not named, suite tiny" in err
    assert "other side: 1-candidate: local (preflight); release not named, suite tiny" in err
    assert "1 arm(s) on this side, 2 on the other" in err
    assert "A side does not name the release it ran" in err
    assert "decode/prose-c1 step_ms: 42.030 here, 38.210 there, +10.0 %" in err
    assert "this side spends more per step" in err
    rows = {
        row["fact"]: row for row in json.loads((out / "cross-cluster.json").read_text())["facts"]
    }
    assert rows["page size"]["new"] == "65536"
    assert rows["page size"]["old"] != "not recorded"  # read by preflight on this machine
    assert rows["pressure stall information"]["new"] == "not recorded"


def test_a_record_without_a_benchmark_stage_is_refused_with_exit_2(
    tmp_path: Path, release_r2: Release, cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    record = _record(tmp_path, release_r2, cluster, facts=False)
    assert main(["bench", "compare", str(_mine(tmp_path)), str(record)]) == 2
    assert "no benchmark stage with a candidate arm in this record" in capsys.readouterr().err
