"""The promotion gate in server mode: the UI's resume form, `approve` and a pause that times out.

A real local Prefect server (the shared `prefect_api` fixture) serves the module; `sparkgate
qualify` runs with PREFECT_API_URL pointing at it on a trimmed r1 (only a small determinism gate)
and a private two-node cluster. The first qualification is decided the way the UI's Resume form
does it: the paused run's input schema (stored on the server by the pause) must describe
decision, by and reason; input the schema refuses leaves the run paused; `resume_flow_run` with
the form's values over the server's API resumes it and the release is promoted. The second is
approved with the `sparkgate approve` command it prints, pasted into a shell without
PREFECT_API_URL (the command carries it; a bare `sparkgate reject` there finds the server too).
The third waits for nobody (an overlay sets promotion.timeout_s to 3 s): qualify exits 1 saying
so, the run ends Failed, the record stands, the promotions log keeps a `no-decision` line, the
run's log on the server names the reason, and `sparkgate promote` decides later.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from flows.record import latest_record
from tests.support.output_lines import OutputLines
from tests.support.overlays import overlay
from tests.support.prefect_server import Server
from tests.support.project import TRIMMED_GATES, ProjectKind, projects
from tests.support.project import PromotionProject as Project
from tests.support.shell import paste
from tests.support.waiting import wait_until

# one project for the module, talking to the session's server: its runs are told apart from
# other modules' by their cluster's tag
pytestmark = [
    pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1800),
    pytest.mark.prefect_server,
    projects(ProjectKind("promoteserver", Project, server=True)),
]  # fmt: skip

WAIT_S = 900
TIMEOUT_S = 3
PAUSED = {
    "flow_runs": {
        "state": {"type": {"any_": ["PAUSED"]}},
        "tags": {"all_": ["cluster:promoteserver"]},  # this module's, on the shared server
    }
}


def _paused_run(server: Server, waiting: subprocess.Popen[str]) -> dict[str, Any]:
    """The qualification's run once it is paused for a decision."""

    def paused() -> dict[str, Any] | None:
        assert waiting.poll() is None, f"qualify ended early:\n{waiting.communicate()[0]}"
        status, runs = server.post("/flow_runs/filter", PAUSED)
        assert status == 200, runs
        assert len(runs) <= 1, runs
        return dict(runs[0]) if runs else None

    return wait_until(paused, WAIT_S, "the run to pause", interval_s=2, detail=server.tails)


def _finish(waiting: subprocess.Popen[str]) -> str:
    try:
        return waiting.communicate(timeout=300)[0]
    finally:
        if waiting.poll() is None:
            waiting.kill()


def _resume(
    server: Server, run_id: str, run_input: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """`resume_flow_run(run_id, run_input=...)` from another process, over the server's API."""
    code = (
        "from uuid import UUID\nfrom prefect.flow_runs import resume_flow_run\n"
        f"resume_flow_run(UUID({run_id!r}), run_input={run_input!r})\nprint('resumed')\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code], env=server.env, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip


def _form_schema(server: Server, run: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The paused run's stored input schema and form description (what the UI renders)."""
    keys = run["state"]["state_details"]["run_input_keyset"]
    with_id = f"/flow_runs/{run['id']}/input"
    schema = server.get(f"{with_id}/{keys['schema']}")
    description = server.get(f"{with_id}/{keys['description']}")
    return (json.loads(schema) if isinstance(schema, str) else schema), str(description)


@pytest.fixture(scope="module")
def ui_decided(project: Project, prefect_api: Server) -> tuple[str, dict[str, Any], str]:
    """qualify waits; the form's schema is read, a bad and then a good answer sent; results."""
    waiting = project.start("qualify", str(project.r1), "-c", str(project.cluster))
    try:
        run = _paused_run(prefect_api, waiting)
        schema, description = _form_schema(prefect_api, run)
        refused = _resume(prefect_api, run["id"], {"decision": "approve"})  # no `by`
        assert refused.returncode != 0, refused.stdout
        assert "Validation failed" in refused.stderr, refused.stderr
        state = prefect_api.get(f"/flow_runs/{run['id']}")["state"]["type"]
        assert state == "PAUSED", "a refused answer must leave the run waiting"
        accepted = _resume(
            prefect_api, run["id"],
            {"decision": "approve", "by": "ui-user", "reason": "looks good"},
        )  # fmt: skip
        assert accepted.returncode == 0, accepted.stderr
    finally:
        output = _finish(waiting)
    assert waiting.returncode == 0, output
    return run["id"], schema, description + "\n" + output


def test_the_paused_run_stores_the_decision_form_on_the_server(
    ui_decided: tuple[str, dict[str, Any], str],
) -> None:
    _run, schema, text = ui_decided
    properties = schema["properties"]
    assert set(properties) == {"decision", "by", "reason"}
    assert properties["decision"]["enum"] == ["approve", "reject"]
    assert properties["decision"]["default"] == "approve"  # the form's initial value
    assert set(schema["required"]) >= {"by"}
    assert "Promote r1?" in text


def test_the_ui_resume_form_answer_promotes(
    project: Project, prefect_api: Server, ui_decided: tuple[str, dict[str, Any], str]
) -> None:
    run_id, _schema, text = ui_decided
    assert "qualified, promoted by ui-user" in text
    assert prefect_api.get(f"/flow_runs/{run_id}")["state"]["type"] == "COMPLETED"
    current = project.pointer()["current"]
    assert isinstance(current, dict)
    assert (current["release"], current["by"], current["reason"]) == ("r1", "ui-user", "looks good")
    record = latest_record(project.root / "experiments", "r1")
    assert record is not None
    assert current["record"] == f"experiments/{record.name}"
    assert [(e["action"], e["by"]) for e in project.log()] == [("promoted", "ui-user")]


def test_approve_from_the_cli_in_server_mode(
    project: Project, prefect_api: Server, ui_decided: tuple[str, dict[str, Any], str]
) -> None:
    del ui_decided  # the first promotion, so this one pushes it into history
    waiting = project.start("qualify", str(project.r1), "-c", str(project.cluster))
    lines = OutputLines(waiting)
    try:
        run = _paused_run(prefect_api, waiting)
        approve = wait_until(lambda: lines.containing("sparkgate approve"), 60, "the prompt")
        assert approve.split() == [f"PREFECT_API_URL={prefect_api.api}", "sparkgate", "approve",
                                   "r1", "-c", "cluster.yaml"]  # fmt: skip
        assert lines.said()[-1].endswith(
            f"Prefect UI: {prefect_api.api[:-4]}/runs/flow-run/{run['id']}"
        )
        # a terminal without PREFECT_API_URL finds the server the running qualify uses
        bare = {name: value for name, value in project.env.items() if name != "PREFECT_API_URL"}
        nothing = paste("sparkgate reject r9 --reason x", bare, project.root)
        assert f"waiting for a decision on the Prefect server at {prefect_api.api}" in (
            nothing.stderr
        )
        said = paste(f"{approve} --by bob --reason cli", bare, project.root)  # as printed, +who
        assert said.returncode == 0, said.stderr
        assert f"approve sent to the waiting qualification (run {run['id']})" in said.stderr
    finally:
        if waiting.poll() is None:
            waiting.wait(timeout=300)
        output = lines.close()
    assert waiting.returncode == 0, output
    assert "qualified, promoted by bob" in output
    pointer = project.pointer()
    assert isinstance(pointer["current"], dict)
    assert isinstance(pointer["history"], list)
    assert pointer["current"]["by"] == "bob"
    assert [entry["by"] for entry in pointer["history"]] == ["ui-user"]


def test_no_decision_within_the_timeout_ends_failed_and_logged(
    project: Project, prefect_api: Server
) -> None:
    impatient = overlay(
        project.root / "impatient/r1.yaml", "releases/r1.yaml",
        gates=TRIMMED_GATES, promotion={"timeout_s": TIMEOUT_S},
    )  # fmt: skip
    before = len(project.published("r1"))
    waiting = project.start("qualify", str(impatient), "-c", str(project.cluster))
    output = _finish(waiting)
    assert waiting.returncode == 1, output
    assert f"r1: qualified, but no decision within {TIMEOUT_S} s" in output
    assert len(project.published("r1")) == before + 1, "the record must be published"
    record = latest_record(project.root / "experiments", "r1")
    assert record is not None
    assert record.verdict == "qualified"
    last = project.log()[-1]
    assert (last["action"], last["record"]) == ("no-decision", f"experiments/{record.name}")
    assert last["detail"] == f"no decision within {TIMEOUT_S} s (promotion.timeout_s)"
    run = _run_of(prefect_api, impatient)
    assert run["state"]["type"] == "FAILED", run["state"]
    # ours, one line naming the reason, also when Prefect's orchestration failed the expired
    # pause first (the flow then sets its own Failed state, forced); the run's log names it too
    message = run["state"]["message"]
    assert message.startswith(f"r1: qualified, but no decision within {TIMEOUT_S} s"), message
    assert "\n" not in message
    # the newest lines: the reason is among the run's last, after every task's own lines (a
    # run can log more than one page)
    status, logs = prefect_api.post(
        "/logs/filter",
        {"logs": {"flow_run_id": {"any_": [run["id"]]}}, "sort": "TIMESTAMP_DESC", "limit": 50},
    )
    assert status == 200, logs
    said = [line["message"] for line in logs]
    assert any(f"no decision within {TIMEOUT_S} s" in line for line in said), said

    hint = f"sparkgate promote {impatient.resolve()} -c {project.cluster.resolve()}"
    assert hint in output, output  # the command the message shows is the one run here
    later = project.run(
        "promote", str(impatient), "-c", str(project.cluster), "--by", "carol",
        "--reason", "decided later",
    )  # fmt: skip
    assert later.returncode == 0, later.stderr
    current = project.pointer()["current"]
    assert isinstance(current, dict)
    assert (current["by"], current["record"]) == ("carol", f"experiments/{record.name}")


def _run_of(server: Server, release_file: Path) -> dict[str, Any]:
    """The (only) qualification run of `release_file`."""
    status, runs = server.post("/flow_runs/filter", {})
    assert status == 200, runs
    wanted = str(release_file.resolve())
    found = [run for run in runs if run["parameters"].get("release_file") == wanted]
    assert len(found) == 1, found
    return dict(found[0])
