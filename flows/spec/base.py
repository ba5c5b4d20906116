"""The strict base every declarative model derives from, and the way models report problems.

Spec files are written by people, so a typo must fail loudly: models are frozen, reject unknown
keys and describe every field (the description feeds the JSON Schemas editors complete from).
Cross-field rules (duplicate ranks, two heads, ...) return `Problem`s that carry the key path of
the offending value, so the loader can point at the exact line instead of the enclosing model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, NamedTuple, Self

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    ValidationInfo,
    model_validator,
)

Loc = tuple[str | int, ...]


class Problem(NamedTuple):
    """One rule a valid-looking model breaks, located by its key path inside that model."""

    loc: Loc
    message: str
    expected: str | None = None


class SpecContext(NamedTuple):
    """What a model may know about where it was loaded from (passed as validation context)."""

    file: Path
    roots: tuple[Path, ...] = ()
    """The folders its paths may point into (flows.spec.load.project_roots)."""


def inside(path: Path, roots: tuple[Path, ...]) -> bool:
    """Whether `path` resolves (symlinks followed, `~` expanded) inside one of `roots`."""
    resolved = path.expanduser().resolve()
    return any(resolved.is_relative_to(root) for root in roots)


def confined_out(path: Path, context: SpecContext | None) -> bool:
    """True when `path` leaves the project: the loader refuses it, so a model must not even
    say whether it exists (that would probe the machine from a spec file)."""
    return context is not None and bool(context.roots) and not inside(path, context.roots)


class ProblemsError(ValueError):
    """Raised from model validation; the loader expands it into one located error per problem."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("; ".join(problem.message for problem in problems))


class SpecPathMarker:
    """Marks a field as a local path that is resolved against the file that declared it.

    A confined path must resolve (symlinks followed) inside the project the spec belongs to, so
    a release file cannot make sparkgate read, hash or ship files from elsewhere on the machine.
    """

    def __init__(self, *, confined: bool = True) -> None:
        self.confined = confined

    def __repr__(self) -> str:
        return "SpecPath" if self.confined else "HostPath"


def expand_home(path: Path) -> Path:
    """`path` with a leading `~` or `~user` expanded; ValueError when there is no such home (a
    spec names a user this machine lacks: a located spec error, not a crash)."""
    try:
        return path.expanduser()
    except RuntimeError:
        raise ValueError(f"{path}: no home directory for {path.parts[0]!r}") from None


def _to_path(value: object) -> object:
    if isinstance(value, str) and value:
        return expand_home(Path(value))
    return value


SpecPath = Annotated[Path, SpecPathMarker(), BeforeValidator(_to_path)]
"""A path inside the project; relative paths are relative to the YAML file that set them."""

HostPath = Annotated[Path, SpecPathMarker(confined=False), BeforeValidator(_to_path)]
"""A path of the operator's machine outside the project (an SSH key, known_hosts): resolved
like SpecPath, never read into a spec or a record, so not confined to the project."""


def _scalar_to_str(value: object) -> object:
    if isinstance(value, bool):
        return value  # left to fail: `true` vs "1" vs "yes" is ambiguous, make the user quote it
    if isinstance(value, int | float):
        return str(value)
    return value


def shown(path: Path) -> str:
    """A path for messages: relative to the current directory when it is below it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


EnvValue = Annotated[str, BeforeValidator(_scalar_to_str)]
"""An environment value; YAML numbers are accepted and kept as their text."""


class SpecModel(BaseModel):
    """Frozen, strict, fully described; subclasses add cross-field rules in `problems`."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", strict=True, allow_inf_nan=False, validate_default=True
    )

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        """Refuse to define a spec model with an undescribed field: the schemas need them all."""
        super().__pydantic_init_subclass__(**kwargs)
        missing = [name for name, field in cls.model_fields.items() if not field.description]
        if missing:
            message = f"{cls.__name__}: fields without a description: {', '.join(missing)}"
            raise TypeError(message)

    def problems(self, context: SpecContext | None) -> list[Problem]:
        """Cross-field rules this model breaks; empty when it is consistent."""
        del context
        return []

    def local_paths(self) -> list[Loc]:
        """Key paths of str fields that are local paths only in this instance's setting.

        The loader resolves them like `SpecPath` fields (a local node's workdir, say).
        """
        return []

    @model_validator(mode="after")
    def _check_problems(self, info: ValidationInfo) -> Self:
        context = info.context if isinstance(info.context, SpecContext) else None
        found = self.problems(context)
        if found:
            raise ProblemsError(found)
        return self
