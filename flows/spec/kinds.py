"""Which model each `kind:` is, so any spec file can be loaded and checked by its own kind.

Models are imported lazily: `suite` belongs to the benchmark area and may not exist in a given
checkout yet; a missing model module is reported as "not available", never as a crash.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from pydantic import BaseModel

from flows.errors import SpecError
from flows.spec.load import load_document, require_mapping, validate_document

KINDS: dict[str, tuple[str, str]] = {
    "cluster": ("flows.spec.cluster", "Cluster"),
    "engine": ("flows.spec.engine", "EngineProfile"),
    "release": ("flows.spec.release", "Release"),
    "release-tests": ("flows.spec.release_tests", "ReleaseTests"),
    "suite": ("flows.spec.suite", "Suite"),
}


def model_for(kind: str) -> type[BaseModel] | None:
    """The model class of `kind`, or None when its module is not part of this checkout."""
    module_name, class_name = KINDS[kind]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name == module_name:
            return None
        raise
    model = getattr(module, class_name, None)
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return None
    return model


def available_kinds() -> dict[str, type[BaseModel]]:
    """Every kind whose model can be imported, by name."""
    found = {kind: model_for(kind) for kind in KINDS}
    return {kind: model for kind, model in found.items() if model is not None}


def load_spec(path: Path | str) -> BaseModel | None:
    """Load any spec file by its `kind`; None when that kind's model is not available."""
    document = load_document(path)
    kind = require_mapping(document).get("kind")
    if not isinstance(kind, str) or kind not in KINDS:
        where = document.origin_of(("kind",))
        raise SpecError(
            "required key is missing" if kind is None else f"unknown kind {kind!r}",
            file=where.file,
            line=where.line,
            key="kind",
            expected="one of " + ", ".join(KINDS),
        )
    model = model_for(kind)
    if model is None:
        return None
    spec = validate_document(document, model)
    from flows.spec.release import Release, check_suites  # noqa: PLC0415 - as model_for

    if isinstance(spec, Release):
        check_suites(path, spec)
    return spec
