"""The `sparkgate` command line: one typer app, one place that turns errors into exit codes.

Each area registers its commands from a module of `flows.commands`; this module only assembles
them and owns the error boundary: a `SparkgateError` becomes its one-line message on stderr and
its exit code (2 for bad input), never a traceback.
"""

from __future__ import annotations

import errno
import sys
from typing import Any

import click
import typer

from flows import __version__
from flows.commands import register_all
from flows.errors import SparkgateError, SpecError
from flows.ui.console import err_console


def _option_metavar(option: Any, ctx: Any) -> str | None:
    """Nothing after a flag; NAME (or its metavar) after an option that takes a value."""
    del ctx
    if option.metavar is not None:
        return str(option.metavar)
    if option.is_flag or option.count:
        return None
    return str(option.name or "value").upper() + ("..." if option.nargs != 1 else "")


def _no_type(argument: Any, ctx: Any) -> None:
    """An argument's name already says what it takes."""
    del argument, ctx


def _argument_usage(argument: Any) -> str:
    """RELEASE when required, [RELEASE] when not, as click and most tools print them."""
    name = str(argument.display_name_raw).upper()
    name = name if argument.required else f"[{name}]"
    return name + ("..." if argument.nargs != 1 else "")


def conventional_help() -> None:
    """Help as a reader expects it: typer 0.2x prints `<bool>`, `<list[Path]>` and `{release}`;
    these show nothing after a flag, an upper-case name after a value, `RELEASE` in the usage.

    typer has no setting for it, so its two parameter classes get these three methods."""
    from typer.core import TyperArgument, TyperOption  # noqa: PLC0415

    setattr(TyperOption, "display_type_rich", _option_metavar)  # noqa: B010
    setattr(TyperArgument, "display_type_rich", _no_type)  # noqa: B010
    setattr(TyperArgument, "_usage_display_name", _argument_usage)  # noqa: B010
    setattr(  # noqa: B010
        TyperArgument,
        "_rich_display_name",
        lambda argument: (
            str(argument.display_name_raw).upper() + ("..." if argument.nargs != 1 else "")
        ),
    )


conventional_help()
app = typer.Typer(
    name="sparkgate",
    help="Qualify, promote and review releases of an LLM serving recipe on a small cluster.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},  # inherited by every subcommand
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"sparkgate {__version__}")
        raise typer.Exit


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Qualify, promote and review releases of an LLM serving recipe on a small cluster."""


register_all(app)


def _invoke(argv: list[str] | None) -> object:
    """The app, with a path argument the system cannot even look up (a name over 255 bytes,
    wherever it is first used) turned into bad input instead of a traceback."""
    try:
        return app(args=argv, standalone_mode=False)
    except OSError as error:
        if error.errno != errno.ENAMETOOLONG:
            raise
        name = str(error.filename or "a path")
        shown = name if len(name) <= 80 else f"{name[:80]}..."
        raise SpecError("file name too long", file=shown) from None


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit code."""
    try:
        returned = _invoke(argv)
    except SparkgateError as error:
        err_console.print(str(error), markup=False, highlight=False, soft_wrap=True)
        return error.exit_code
    except (click.exceptions.Exit, typer.Exit) as done:
        return int(done.exit_code)
    except (click.ClickException, typer.TyperException) as usage:
        # typer >= 0.23 carries its own click: its usage errors derive from TyperException
        show = getattr(usage, "show", None)
        if show is not None:
            show()
        else:
            err_console.print(str(usage), markup=False)
        return int(getattr(usage, "exit_code", 2))
    except (click.exceptions.Abort, typer.Abort):
        err_console.print("aborted", markup=False)
        return 130
    except KeyboardInterrupt:
        err_console.print("interrupted", markup=False)
        return 130
    # click returns the code of a `typer.Exit(n)` instead of raising when not standalone
    return returned if isinstance(returned, int) else 0


if __name__ == "__main__":
    sys.exit(main())
