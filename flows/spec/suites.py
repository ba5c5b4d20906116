"""Where a release's benchmark suites are found, and the check that they load before anything runs.

A release names its suites (`gates.benchmark.suite`) by name, looked up in `config/suites/` of the
project and then of this checkout, or by a `.yaml` path. A name nobody can find would otherwise
surface only at the benchmark gate, after the build and every earlier gate: hours on the
recipe's cluster. So loading a release loads its suites too, and a missing or broken one is an
error at the release's `suite` key (or in the suite file itself), before anything starts.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from flows.errors import SpecError
from flows.settings import project_root
from flows.spec.base import shown
from flows.spec.load import SHIPPED_ROOT, load_document, load_model
from flows.spec.suite import Suite, combine

SUITE_KEY = ("gates", "benchmark", "suite")


def suite_file(name: str) -> Path:
    """A suite by file (`.yaml`) or by name in config/suites of the project (or this checkout)."""
    given = Path(name)
    if given.suffix in (".yaml", ".yml"):
        return given
    for root in (project_root(), SHIPPED_ROOT):
        candidate = root / "config" / "suites" / f"{name}.yaml"
        if candidate.is_file():
            return candidate
    return project_root() / "config" / "suites" / f"{name}.yaml"


def load_suites(names: Sequence[str]) -> Suite:
    """The suite every arm runs: the one named, or the named ones combined (`combine`).

    Raises:
        SpecError: naming the file, line and key of a bad suite, or why suites do not combine.
    """
    return combine([load_model(suite_file(name), Suite) for name in names])


def check_release_suites(release_file: Path | str, names: Sequence[str]) -> None:
    """Raise a SpecError at the release's `suite` key unless every suite named loads and they
    combine; a suite file's own problems are reported at its own file, line and key."""
    origin = load_document(release_file).origin_of(SUITE_KEY)
    for name in names:
        file = suite_file(name)
        if not file.is_file():
            raise SpecError(
                f"no suite {name!r} ({shown(file)})",
                file=origin.file,
                line=origin.line,
                key=".".join(SUITE_KEY),
                expected="a suite name in config/suites or a .yaml file",
            )
    try:
        load_suites(names)
    except SpecError as error:
        if error.file is not None:
            raise
        raise SpecError(
            error.message, file=origin.file, line=origin.line, key=".".join(SUITE_KEY)
        ) from error
