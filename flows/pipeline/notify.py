"""Announce a qualification that waits for a person, or failed: a Prefect automation to a webhook.

A promotion gate that pauses silently waits a day for nobody. `sparkgate notify URL` saves the
URL as a Prefect Webhook block and creates (or replaces) one automation on the server: when a
`qualify-release` run pauses for approval, fails or crashes, the server posts a JSON body naming
the run, its release (from the run's `release:` tag), its state and message, and the run's URL.
Automations run on a Prefect server (`prefect server start`, PREFECT_API_URL), not on the
embedded one that lives only as long as one command.

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

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))

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
