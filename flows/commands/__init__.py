"""Command groups of the CLI, one module per area, assembled by `flows.cli`."""

from __future__ import annotations

from importlib import import_module

import typer


def register_all(app: typer.Typer) -> None:
    """Attach every area's commands to the root app (imports stay local to keep startup fast)."""
    import_module("flows.commands.cluster").register(app)
    import_module("flows.commands.lab").register(app)
    import_module("flows.commands.bench").register(app)
    import_module("flows.commands.spec").register(app)
    import_module("flows.commands.image").register(app)
    import_module("flows.commands.records").register(app)
    import_module("flows.commands.qualify").register(app)
    import_module("flows.commands.calibrate").register(app)
    import_module("flows.commands.promote").register(app)
    import_module("flows.commands.notify").register(app)
    import_module("flows.commands.replay").register(app)
