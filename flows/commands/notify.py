"""`sparkgate notify URL`: post to a webhook when a qualification pauses for approval or fails."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from flows.errors import SpecError
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
    if not os.environ.get("PREFECT_API_URL"):
        raise SpecError(
            "automations run on a Prefect server: start one (`prefect server start`) and set "
            "PREFECT_API_URL",
            key="PREFECT_API_URL",
        )
    from flows.settings import prefect_environment  # noqa: PLC0415

    prefect_environment()
    from flows.pipeline.notify import AUTOMATION_NAME, install_notifications  # noqa: PLC0415

    automation = install_notifications(url, allow_private=allow_private)
    err_console.print(
        f"automation {AUTOMATION_NAME!r} ({automation}) posts to {url} when a qualification "
        "pauses for approval, fails or crashes",
        markup=False,
        highlight=False,
    )


def register(app: typer.Typer) -> None:
    """Attach `sparkgate notify`."""
    app.command("notify")(notify)
