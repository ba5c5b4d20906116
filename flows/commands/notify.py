"""`sparkgate notify URL`: post to a webhook when a qualification pauses for approval or fails."""

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
    """Create the Prefect automation that announces paused and failed qualifications."""
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
    if not os.environ.get("PREFECT_API_URL"):
        raise SpecError(
            "automations run on a Prefect server: start one (`prefect server start`) and set "
            "PREFECT_API_URL",
            key="PREFECT_API_URL",
        )
    from flows.settings import prefect_environment  # noqa: PLC0415

    prefect_environment()
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


def register(app: typer.Typer) -> None:
    """Attach `sparkgate notify`."""
    app.command("notify")(notify)
