"""Announce a qualification that waits for a person, or failed: a Prefect automation to a webhook.

A promotion gate that pauses silently waits a day for nobody. `sparkgate notify URL` saves the
URL as a Prefect Webhook block and creates (or replaces) one automation on the server: when a
`qualify-release` run (or a nightly parent) pauses for approval, fails, crashes or ends
inconclusive (awaiting a person's decision without waiting for it), the server
posts a JSON body naming the run, its release and cluster (from the run's tags), its state,
the verdict and benchmark headline the run labelled itself with, a one-line message, and the
run's URL in the UI.
Automations run on a Prefect server (`prefect server start`, PREFECT_API_URL), not on the
embedded one that lives only as long as one command: an embedded run posts the same body
itself (`flows.pipeline.announce`).

The server calls the URL, so a URL that reaches an address inside its network is a server-side
request forgery: unless `--allow-private`, every address the host resolves to must be public
(`is_global`), and an IPv6 address that carries an IPv4 one (mapped, NAT64 64:ff9b::/96 and
64:ff9b:1::/48, 6to4 2002::/16, Teredo) is judged by the IPv4 one, so 100.100.100.200 (shared
address space, a cloud metadata service) and `[64:ff9b::a9fe:a9fe]` (169.254.169.254) are
refused. The check runs here, before the server is asked; the server resolves the name again
when it posts (DNS rebinding is not covered).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable
from urllib.parse import urlsplit
from uuid import UUID

import httpx

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))

AUTOMATION_NAME = "sparkgate: a qualification needs a person"
BLOCK_NAME = "sparkgate-notify"
NIGHTLY_AUTOMATION_NAME = "sparkgate: a nightly run failed before its qualification"
QUALIFY_FLOW = "qualify-release"
NIGHTLY_FLOW = "nightly-qualification"
NIGHTLY_FAILED = "nightly qualification of"
NIGHTLY_OWN = {"prefect.state-message": f"{NIGHTLY_FAILED} *"}
"""A nightly parent's own failure (a name that loads no spec); when its qualification fails,
that run is announced, and the parent, failing with it, is not announced twice."""
STATES = ("Paused", "Failed", "Crashed", "Inconclusive")
"""A run announced: paused for a decision, failed, crashed, or ended inconclusive without
waiting (`--no-wait`, a nightly run: the Completed state `flows.pipeline.qualify` names
Inconclusive), which waits for a person just the same."""
VERDICT_LABEL = "sparkgate.verdict"
HEADLINE_LABEL = "sparkgate.headline"
WAITING = "waiting for a decision"

_PAYLOAD = """{% set found = namespace(release="", cluster="") -%}
{% for tag in flow_run.tags %}{% if tag.startswith("release:") -%}
{% set found.release = tag[8:] %}{% elif tag.startswith("cluster:") -%}
{% set found.cluster = tag[8:] %}{% endif %}{% endfor -%}
{% set labels = flow_run.labels or {} -%}
{% set verdict = labels.get("VERDICT_LABEL") or "" -%}
{% set headline = labels.get("HEADLINE_LABEL") or "" -%}
{% set said = flow_run.state.message or "" -%}
{% set accept = ' --accept-inconclusive "REASON"' if verdict.startswith("inconclusive") else "" -%}
{% if not said and flow_run.state.name == "Paused" -%}
{% set said = (found.release ~ " " ~ (verdict or "passed") ~ ", WAITING: sparkgate approve "
   ~ found.release ~ " -c " ~ found.cluster ~ accept ~ " | sparkgate reject " ~ found.release
   ~ " -c " ~ found.cluster ~ " --reason TEXT") -%}
{% elif not said -%}
{% set said = (found.release or flow_run.name) ~ " " ~ flow_run.state.name | lower -%}
{% endif -%}
{% if headline -%}{% set said = said ~ "; benchmark: " ~ headline %}{% endif -%}
{
  "source": "sparkgate",
  "run": {{ flow_run.name | tojson }},
  "release": {{ found.release | tojson }},
  "cluster": {{ found.cluster | tojson }},
  "tags": {{ flow_run.tags | list | tojson }},
  "state": {{ flow_run.state.name | tojson }},
  "verdict": {{ verdict | tojson }},
  "benchmark": {{ headline | tojson }},
  "message": {{ said | tojson }},
  "url": {{ ((flow_run | ui_url) or ("UI_BASE/runs/flow-run/" ~ flow_run.id)) | tojson }}
}"""


def payload(ui_base: str) -> str:
    """The webhook body, a Jinja template the server renders for the run that triggered it.

    The message is the state's (a failure's verdict), or for a pause the verdict with the
    commands that decide; the benchmark's headline follows when the run labelled one. The URL is
    the server's own UI link, or, when the server does not know its UI address (PREFECT_UI_URL
    unset where it runs, the usual case), the run's page under `ui_base`, the UI address the
    `notify` command saw.
    """
    return (
        _PAYLOAD.replace("VERDICT_LABEL", VERDICT_LABEL)
        .replace("HEADLINE_LABEL", HEADLINE_LABEL)
        .replace("WAITING", WAITING)
        .replace("UI_BASE", ui_base.rstrip("/").replace('"', "%22"))
    )


def ui_base() -> str:
    """The UI address of the server this client talks to (PREFECT_UI_URL, else from the API's)."""
    from prefect.settings import get_current_settings  # noqa: PLC0415

    settings = get_current_settings()
    return str(settings.ui_url or str(settings.api.url or "").removesuffix("/api"))


def label_verdict(verdict: str, headline: str) -> None:
    """Label the running flow run (and its parent, a nightly run) with the verdict and the
    benchmark headline, so a notification of its pause or failure can say them; nothing outside
    a flow run."""
    from prefect.client.orchestration import get_client  # noqa: PLC0415
    from prefect.context import FlowRunContext  # noqa: PLC0415

    context = FlowRunContext.get()
    if context is None or context.flow_run is None:
        return
    labels: dict[str, str | int | float | bool] = {VERDICT_LABEL: verdict}
    if headline:
        labels[HEADLINE_LABEL] = headline
    run = context.flow_run
    try:
        with get_client(sync_client=True) as client:
            client.update_flow_run_labels(run.id, labels)
            if run.parent_task_run_id is not None:  # a nightly run's qualification: its parent
                parent = client.read_task_run(run.parent_task_run_id).flow_run_id
                if parent is not None:
                    client.update_flow_run_labels(parent, labels)
    except (OSError, httpx.HTTPError) as error:  # a notification loses detail, the run goes on
        from prefect.logging import get_run_logger  # noqa: PLC0415

        get_run_logger().warning("could not label the run with its verdict: %s", error)


def url_problem(url: str, resolve: Callable[[str], Iterable[str]] | None = None) -> str | None:
    """Why the server must not post to `url` (a private, loopback, link-local, shared or
    reserved address, or one that does not resolve), or None."""
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return "not a valid URL"
    if not host:
        return "names no host"
    try:
        addresses = [ipaddress.ip_address(host)]
    except ValueError:
        try:
            addresses = [ipaddress.ip_address(a.split("%")[0]) for a in (resolve or _resolve)(host)]
        except (OSError, UnicodeError, ValueError) as error:
            return f"{host} does not resolve ({error})"
    for address in addresses:
        judged = _embedded_ipv4(address) or address
        if not judged.is_global or judged.is_multicast:
            named = host if host == str(address) else f"{host} ({address})"
            carried = f", which carries {judged}," if judged is not address else ""
            return f"{named}{carried} is not a public address"
    return None if addresses else f"{host} does not resolve"


def _embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if any(address in network for network in _NAT64):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def _resolve(host: str) -> list[str]:
    return [str(info[4][0]) for info in socket.getaddrinfo(host, None)]


def install_notifications(url: str, *, allow_private: bool = False) -> UUID:
    """Save the webhook block and create the automations, replacing earlier ones; the id of the
    qualification's (the nightly parent's own failures have one of their own)."""
    from prefect.blocks.webhook import Webhook  # noqa: PLC0415

    webhook = Webhook(method="POST", url=url, allow_private_urls=allow_private)
    block_id = webhook.save(BLOCK_NAME, overwrite=True)
    if not isinstance(block_id, UUID):  # sync call: the saved block's id
        raise RuntimeError("the server returned no block id")
    _delete_existing()
    body = payload(ui_base())
    created = _create(
        AUTOMATION_NAME, QUALIFY_FLOW, states=STATES, match={}, block_id=block_id, body=body
    )
    _create(
        NIGHTLY_AUTOMATION_NAME, NIGHTLY_FLOW, states=("Failed",), match=NIGHTLY_OWN,
        block_id=block_id, body=body,
    )  # fmt: skip
    return created


def _create(
    name: str,
    flow: str,
    *,
    states: tuple[str, ...],
    match: dict[str, str],
    block_id: UUID,
    body: str,
) -> UUID:
    """One automation: post `body` when a run of `flow` enters one of `states`."""
    from prefect.automations import Automation, CallWebhook, EventTrigger  # noqa: PLC0415
    from prefect.events.schemas.automations import Posture  # noqa: PLC0415

    created = Automation(
        name=name,
        description=f"Post to the sparkgate webhook when a {flow} run is {', '.join(states)}.",
        trigger=EventTrigger(
            expect={f"prefect.flow-run.{state}" for state in states},
            match={"prefect.resource.id": "prefect.flow-run.*", **match},
            match_related={"prefect.resource.role": "flow", "prefect.resource.name": flow},
            posture=Posture.Reactive,
            threshold=1,
        ),
        actions=[CallWebhook(block_document_id=block_id, payload=body)],
    ).create()
    if not isinstance(created, Automation) or created.id is None:  # sync call: an Automation
        raise RuntimeError("the server returned no automation")
    return created.id


def _delete_existing() -> None:
    """Remove earlier sparkgate automations so `notify` can be run again with a new URL."""
    from prefect.client.orchestration import get_client  # noqa: PLC0415

    with get_client(sync_client=True) as client:
        for name in (AUTOMATION_NAME, NIGHTLY_AUTOMATION_NAME):
            for found in client.read_automations_by_name(name):
                client.delete_automation(found.id)
