"""`sparkgate notify URL`: post to a webhook when a qualification pauses for approval or fails.

On a server the server posts (an automation, `flows.pipeline.notify`); without one the URL is
kept in the project's Prefect home and an embedded `qualify` posts itself
(`flows.pipeline.announce`).
"""

from __future__ import annotations

import os
from typing import Annotated

import httpx
import typer

from flows.errors import SparkgateError, SpecError
from flows.ui.console import err_console


def notify(
    url: Annotated[str, typer.Argument(help="Webhook URL that receives a JSON POST.")],
    allow_private: Annotated[
        bool,
        typer.Option("--allow-private", help="Allow a URL on a private or loopback address."),
    ] = False,
) -> None:
    """Announce paused, failed and crashed qualifications: on a Prefect server (PREFECT_API_URL)
    with its automation, else from this project's embedded runs themselves."""
    if not url.startswith(("http://", "https://")):
        raise SpecError(f"{url!r} is not an http(s) URL", key="URL", expected="http(s)://...")
    from flows.pipeline.notify import url_problem  # noqa: PLC0415
    from flows.secrets import Secrets  # noqa: PLC0415

    shown = Secrets().text(url)  # a password in the URL is never printed
    problem = None if allow_private else url_problem(url)
    if problem:
        raise SpecError(
            f"{shown}: {problem}", key="URL", expected="a public address, or --allow-private"
        )
    from flows.settings import prefect_environment  # noqa: PLC0415

    prefect_environment()
    if not os.environ.get("PREFECT_API_URL"):
        _keep_for_embedded_runs(url, shown, allow_private=allow_private)
        return
    from flows.pipeline.notify import AUTOMATION_NAME, install_notifications  # noqa: PLC0415

    api = os.environ["PREFECT_API_URL"]
    try:
        automation = install_notifications(url, allow_private=allow_private)
    except (OSError, httpx.HTTPError) as error:  # the server is down or refuses: no traceback
        raise SparkgateError(
            f"cannot create the automation on the Prefect server at {Secrets().text(api)}: "
            f"{type(error).__name__}: {Secrets().text(str(error)) or 'no answer'}"
        ) from None
    err_console.print(
        f"automation {AUTOMATION_NAME!r} ({automation}) posts to {shown} when a qualification "
        "pauses for approval, fails or crashes",
        markup=False,
        highlight=False,
    )


def _keep_for_embedded_runs(url: str, shown: str, *, allow_private: bool) -> None:
    """No server: the project's embedded runs post from their own process (no automation, no UI
    to link to, so the link is the record's folder)."""
    from flows.pipeline.announce import Webhook, save_webhook  # noqa: PLC0415

    saved = save_webhook(Webhook(url=url, allow_private=allow_private))
    err_console.print(
        f"embedded mode (no PREFECT_API_URL): `sparkgate qualify` of this project posts to {shown} "
        "from its own process when it pauses for a decision, fails, crashes or is interrupted "
        "(Ctrl-C, SIGTERM; not SIGKILL); the link is the record's folder, as an embedded server's "
        f"UI ends with the run; saved in {saved}",
        markup=False,
        highlight=False,
    )


def register(app: typer.Typer) -> None:
    """Attach `sparkgate notify`."""
    app.command("notify")(notify)
