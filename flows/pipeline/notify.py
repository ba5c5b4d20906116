"""Announce a qualification that waits for a person, or failed: a Prefect automation to a webhook.

A promotion gate that pauses silently waits a day for nobody. `sparkgate notify URL` saves the
URL as a Prefect Webhook block and creates (or replaces) one automation on the server: when a
`qualify-release` run pauses for approval, fails or crashes, the server posts a JSON body naming
the run, its release (from the run's `release:` tag), its state and message, and the run's URL.
Automations run on a Prefect server (`prefect server start`, PREFECT_API_URL), not on the
embedded one that lives only as long as one command.
"""

from __future__ import annotations

from uuid import UUID

AUTOMATION_NAME = "sparkgate: a qualification needs a person"
BLOCK_NAME = "sparkgate-notify"
FLOW_NAME = "qualify-release"
STATES = ("Paused", "Failed", "Crashed")

PAYLOAD = """{% set found = namespace(release="") -%}
{% for tag in flow_run.tags %}{% if tag.startswith("release:") -%}
{% set found.release = tag[8:] %}{% endif %}{% endfor -%}
{
  "source": "sparkgate",
  "run": {{ flow_run.name | tojson }},
  "release": {{ found.release | tojson }},
  "tags": {{ flow_run.tags | list | tojson }},
  "state": {{ flow_run.state.name | tojson }},
  "message": {{ (flow_run.state.message or "") | tojson }},
  "url": {{ (flow_run | ui_url) | tojson }}
}"""
"""The webhook body, a Jinja template the server renders for the run that triggered it."""


def install_notifications(url: str, *, allow_private: bool = False) -> UUID:
    """Save the webhook block and create the automation, replacing an earlier one; its id."""
    from prefect.automations import Automation, CallWebhook, EventTrigger  # noqa: PLC0415
    from prefect.blocks.webhook import Webhook  # noqa: PLC0415
    from prefect.events.schemas.automations import Posture  # noqa: PLC0415

    webhook = Webhook(method="POST", url=url, allow_private_urls=allow_private)
    block_id = webhook.save(BLOCK_NAME, overwrite=True)
    _delete_existing()
    created = Automation(
        name=AUTOMATION_NAME,
        description="Post to the sparkgate webhook when a qualification pauses or fails.",
        trigger=EventTrigger(
            expect={f"prefect.flow-run.{state}" for state in STATES},
            match={"prefect.resource.id": "prefect.flow-run.*"},
            match_related={"prefect.resource.role": "flow", "prefect.resource.name": FLOW_NAME},
            posture=Posture.Reactive,
            threshold=1,
        ),
        actions=[CallWebhook(block_document_id=block_id, payload=PAYLOAD)],
    ).create()
    if not isinstance(created, Automation) or created.id is None:  # sync call: an Automation
        raise RuntimeError("the server returned no automation")
    return created.id


def _delete_existing() -> None:
    """Remove earlier sparkgate automations so `notify` can be run again with a new URL."""
    from prefect.client.orchestration import get_client  # noqa: PLC0415

    with get_client(sync_client=True) as client:
        for found in client.read_automations_by_name(AUTOMATION_NAME):
            client.delete_automation(found.id)
