"""The webhook body the server renders: a one-line message and a UI link on every state.

Rendered here with the Prefect server's own sandboxed template environment and filters, for a
server schema flow run as the automation's action sees it: a pause carries the verdict, the
commands that decide and the benchmark headline (the run's labels); a failure its state's
message and the headline; the URL falls back to the UI address `notify` saw when the server
does not know its own (PREFECT_UI_URL unset where it runs).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest

from flows.pipeline.notify import HEADLINE_LABEL, STATES, VERDICT_LABEL, payload
from flows.pipeline.qualify import INCONCLUSIVE_STATE, awaiting_message

HEADLINE = "4 gated at 3%: 4 faster; largest prefill/512 prefill_tps +12.0% [+10.1, +13.9] faster"


def _render(state: str, message: str | None, labels: dict[str, Any]) -> dict[str, Any]:
    from prefect.server.events.jinja_filters import all_filters  # noqa: PLC0415
    from prefect.server.schemas.core import FlowRun  # noqa: PLC0415
    from prefect.server.schemas.states import State, StateType  # noqa: PLC0415
    from prefect.server.utilities.user_templates import (  # noqa: PLC0415
        register_user_template_filters,
        render_user_template_sync,
        validate_user_template,
    )

    register_user_template_filters(all_filters)
    kind = {"Paused": StateType.PAUSED, "Failed": StateType.FAILED,
            "Inconclusive": StateType.COMPLETED}[state]  # fmt: skip
    run = FlowRun(
        id=uuid4(), flow_id=uuid4(), name="qualify r2 on local (tp2-local)",
        tags=["release:r2", "previous:r1", "cluster:local", "shape:tp2-local"], labels=labels,
        state=State(type=kind, name=state, message=message),
    )  # fmt: skip
    template = payload("http://ui.example:4200/")
    validate_user_template(template)
    body: dict[str, Any] = json.loads(render_user_template_sync(template, {"flow_run": run}))
    assert body["url"] == f"http://ui.example:4200/runs/flow-run/{run.id}"
    return body


@pytest.fixture(autouse=True)
def _no_ui_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PREFECT_UI_URL", raising=False)
    monkeypatch.delenv("PREFECT_API_URL", raising=False)


def test_a_pause_says_the_verdict_the_commands_and_the_headline() -> None:
    labels = {VERDICT_LABEL: "qualified", HEADLINE_LABEL: HEADLINE}
    body = _render("Paused", None, labels)
    assert body["message"] == (
        "r2 qualified, waiting for a decision: sparkgate approve r2 -c local | "
        f"sparkgate reject r2 -c local --reason TEXT; benchmark: {HEADLINE}"
    )
    assert (body["release"], body["cluster"], body["verdict"]) == ("r2", "local", "qualified")
    assert body["benchmark"] == HEADLINE


def test_a_failure_says_its_state_message_and_the_headline() -> None:
    said = "r2 failed at benchmark: slower beyond 3% (record: experiments/x-r2)"
    body = _render("Failed", said, {VERDICT_LABEL: "failed at benchmark", HEADLINE_LABEL: HEADLINE})
    assert body["message"] == f"{said}; benchmark: {HEADLINE}"


def test_a_failure_without_a_message_or_labels_still_says_what_happened() -> None:
    body = _render("Failed", None, {})
    assert body["message"] == "r2 failed"
    assert body["benchmark"] == ""


UNDECIDED = "inconclusive after 7 arms (max_arms 7): step/grid engine_cpu_ms"


def test_a_pause_of_an_inconclusive_run_says_the_approval_needs_a_reason() -> None:
    body = _render("Paused", None, {VERDICT_LABEL: UNDECIDED, HEADLINE_LABEL: HEADLINE})
    assert body["message"].startswith(
        f"r2 {UNDECIDED}, waiting for a decision: sparkgate approve r2 -c local "
        '--accept-inconclusive "REASON" | sparkgate reject r2 -c local --reason TEXT'
    )


def test_an_inconclusive_run_that_did_not_wait_is_announced_with_the_command() -> None:
    """A nightly run (wait false) ends in the Completed state named Inconclusive: announced."""
    assert INCONCLUSIVE_STATE in STATES
    said = awaiting_message("r2", UNDECIDED, "releases/r2.yaml", "config/local.yaml", Path("x-r2"))
    body = _render(INCONCLUSIVE_STATE, said, {VERDICT_LABEL: UNDECIDED, HEADLINE_LABEL: HEADLINE})
    assert body["state"] == "Inconclusive"
    assert body["message"] == f"{said}; benchmark: {HEADLINE}"
    assert (
        'sparkgate promote releases/r2.yaml -c config/local.yaml --accept-inconclusive "REASON"'
        in said
    )
    assert "awaiting a person's decision" in said


def test_an_embedded_run_posts_the_same_fields_and_the_same_pause_message() -> None:
    """One payload shape: the embedded run's `Notice` has the template's fields, in order, and
    words a pause as the server does (here with the commands the server's tags give)."""
    from flows.pipeline.announce import Notice, waiting_message  # noqa: PLC0415

    for verdict in ("qualified", UNDECIDED):
        body = _render("Paused", None, {VERDICT_LABEL: verdict, HEADLINE_LABEL: HEADLINE})
        assert list(body) == list(Notice.model_fields)
        said = waiting_message(
            "r2", verdict, "sparkgate approve r2 -c local", "sparkgate reject r2 -c local",
            HEADLINE,
        )  # fmt: skip
        assert said == body["message"]
