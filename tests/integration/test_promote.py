"""Promotion end to end on the real engine: approve and reject from a second process while
`qualify` waits, and `promote --deploy` of a release that crashes on boot rolling back.

What a person sees is checked too: the waiting `qualify` prints how to answer as its last lines,
and the reject command it shows is pasted into a shell as printed; the rejection is one line
(no traceback); the verdict is said once; Prefect's own lines appear only with -v.

One project root (SPARKGATE_ROOT in tmp) serves the module: a trimmed r1 (a tiny determinism
gate, every other gate disabled) is qualified and approved from another process, which makes
it the promoted release; a second qualification of it is rejected; then crash-on-boot (previous
r1) is promoted with --deploy. Its record is written by the record writer as if it had
qualified (its fault is a boot crash, so it never could): what is under test is that the deploy
fails, r1 is started again and passes its spot check against its own record's hashes, the
pointer is back at r1 and the boot evidence is kept. The build cache is the shared state
folder's; the Prefect database is private to this module (PREFECT_HOME), so no other test's
paused run can be resumed by mistake.
"""

from __future__ import annotations

import getpass
import json
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from flows.gates.base import GateResult, Outcome
from flows.pipeline.stages import GATES
from flows.record import latest_record, read_record
from flows.record.writer import open_record
from flows.spec.cluster import Cluster
from flows.spec.load import load_model
from flows.spec.release import load_release
from tests.support.output_lines import OutputLines
from tests.support.project import ProjectKind, projects
from tests.support.project import PromotionProject as Project
from tests.support.shell import paste
from tests.support.waiting import wait_until

# one project for the module: its r1 is approved once, then rejected, then rolled back to
pytestmark = [
    pytest.mark.integration, pytest.mark.slow,
    projects(ProjectKind("promotetest", Project, server=False)),  # embedded, as users run it
]  # fmt: skip


@pytest.fixture(scope="module")
def approved(project: Project) -> tuple[int, str, str]:
    """qualify r1 waits, `approve` from a second process; (qualify exit, its output, approve's)."""
    waiting = project.start("qualify", str(project.r1), "-c", str(project.cluster), "-v")
    try:
        said = project.decide(waiting, 1, "approve", str(project.r1), "-c", str(project.cluster),
                              "--by", "alice", "--reason", "all gates passed")  # fmt: skip
        output = waiting.communicate(timeout=300)[0]
    finally:
        if waiting.poll() is None:
            waiting.kill()
    return waiting.returncode, output, said


def test_approve_from_another_process_promotes(
    project: Project, approved: tuple[int, str, str]
) -> None:
    code, output, said = approved
    assert code == 0, output
    assert "approve sent to the waiting qualification" in said
    assert output.splitlines()[-1] == "r1: qualified, promoted by alice"
    assert output.count("qualified") == 1, output  # the verdict, said once
    assert "Beginning flow run" in output  # -v: Prefect's own lines too
    pointer = project.pointer()
    current = pointer["current"]
    assert isinstance(current, dict)
    assert current["release"] == "r1"
    assert current["by"] == "alice"
    assert current["reason"] == "all gates passed"
    record = latest_record(project.root / "experiments", "r1")
    assert record is not None
    assert current["build_digest"] == record.build_digest
    assert current["record"] == f"experiments/{record.name}"
    assert [(e["action"], e["release"], e["cluster"]) for e in project.log()] == [
        ("promoted", "r1", "promotetest"),
    ]  # the cluster it qualified on, whose pointer alone moved
    assert not (project.root / "config/promoted/local.yaml").exists()


def test_reject_as_printed_by_the_waiting_qualification_leaves_the_pointer(
    project: Project, approved: tuple[int, str, str]
) -> None:
    assert approved[0] == 0
    before = project.pointer()
    waiting = project.start("qualify", str(project.r1), "-c", str(project.cluster))
    lines = OutputLines(waiting)
    try:
        command = wait_until(
            lambda: lines.containing("sparkgate reject"), 600, "qualify to print its reject"
        )
        time.sleep(3)  # long enough for anything printed after the prompt to show
        assert lines.said()[-1] == command, "the prompt is not the last thing printed"
        wait_until(lambda: _paste(project, command), 120, "the pasted reject to find the run")
        waiting.wait(timeout=300)
    finally:
        if waiting.poll() is None:
            waiting.kill()
        output = lines.close()
    by = getpass.getuser()
    assert waiting.returncode == 1, output
    assert lines.said()[-1] == f"r1 rejected by {by}: ...", output  # the run's state message
    for noise in ("Traceback", "PromotionError", "encountered an exception", "Flow run '"):
        assert noise not in output, output  # one line, and no Prefect lines without -v
    assert project.pointer() == before
    last = project.log()[-1]
    assert (last["action"], last["release"], last["by"], last["reason"], last["cluster"]) == (
        "rejected", "r1", by, "...", "promotetest",
    )  # fmt: skip


def _paste(project: Project, command: str) -> bool:
    """True once `command`, pasted into a shell, reached the waiting run (before the pause is
    stored the run is not found yet)."""
    done = paste(command, project.env, project.root)
    assert done.returncode == 0 or "no paused qualification" in done.stderr, done.stderr
    return done.returncode == 0


def _qualified_record(project: Project, digest: str) -> Path:
    """crash-on-boot's record as if every gate had passed for `digest` (see the module doc)."""
    release = load_release(project.crash)
    cluster = load_model(project.cluster, Cluster)
    writer = open_record(
        project.root / "experiments", release, build_digest=digest, cluster=cluster,
        previous="r1", resume=False,
    )  # fmt: skip
    for gate in GATES:
        enabled = getattr(release.gates, gate).enabled
        writer.save_stage(GateResult(
            gate=gate, outcome=Outcome.PASSED if enabled else Outcome.SKIPPED,
            reason="test fixture" if enabled else "disabled in the release file",
            started_at=datetime.now(UTC), seconds=0.0,
        ))  # fmt: skip
    return writer.publish(verdict="qualified", stage_order=list(GATES), versions={}, notes="")


def test_deploy_of_a_release_that_crashes_on_boot_rolls_back(
    project: Project, approved: tuple[int, str, str]
) -> None:
    assert approved[0] == 0
    r1 = latest_record(project.root / "experiments", "r1")
    assert r1 is not None
    _qualified_record(project, r1.build_digest)  # same engine source, same build

    done = project.run("promote", str(project.crash), "--deploy", "-c", str(project.cluster),
                       "--by", "carol", "--reason", "try it", timeout=600)  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "deploy of crash-on-boot failed" in done.stderr
    assert "rolled back to r1 (verified)" in done.stderr
    current = project.pointer()["current"]
    assert isinstance(current, dict)
    assert current["release"] == "r1"
    log = project.log()
    actions = [(e["action"], e["release"]) for e in log]
    assert actions[-3:] == [
        ("promoted", "crash-on-boot"), ("deploy-failed", "crash-on-boot"), ("rolled-back", "r1"),
    ]  # fmt: skip
    assert {e["cluster"] for e in log[-3:]} == {"promotetest"}
    failed = log[-2]
    assert "boot failed" in str(failed["detail"])
    evidence = failed["evidence"]
    assert isinstance(evidence, list)
    assert evidence, "no evidence folder kept"
    assert all(Path(folder).is_dir() and any(Path(folder).iterdir()) for folder in evidence)
    assert log[-1]["evidence"] == evidence

    status = project.run("cluster", "status", "-c", str(project.cluster), "--json")
    assert status.returncode == 0, status.stderr
    serving = json.loads(status.stdout)
    assert serving["release"] == "r1"
    assert {rank["state"] for rank in serving["ranks"]} == {"running"}
    assert read_record(project.root / str(current["record"])).release_name == "r1"
