"""The `sparkgate` command line: one typer app, one place that turns errors into exit codes.

Each area registers its commands from a module of `flows.commands`; this module only assembles
them and owns the error boundary: a `SparkgateError` becomes its one-line message on stderr and
its exit code (2 for bad input), never a traceback.
"""

from __future__ import annotations

import errno
import sys

import click
import typer

from flows import __version__
from flows.commands import register_all
from flows.errors import SparkgateError, SpecError
from flows.ui.console import err_console

app = typer.Typer(
    name="sparkgate",
    help="Qualify, promote and review releases of an LLM serving recipe on a small cluster.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
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
