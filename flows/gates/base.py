"""What every gate is, gets and returns, so the qualify flow can run, persist and resume them alike.

A gate is an object of the `Gate` shape: its name and title, the pydantic models of its settings
and of its summary, its `story` (how the record renders, compares, plots and recomputes it),
`plan` (what it would do, for `qualify --plan`), `inputs` (what it needs from earlier gates and
earlier records) and `run`, which does the gate's I/O under `flows.gates.harness.run_gate` and
returns a `GateVerdict`. The harness adds timing, the file listing and boot-failure evidence and
returns a `GateResult` whose summary is the gate's typed model. Gates never import Prefect: the
flow wraps them in tasks, caches their results and writes them into the record.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from flows.cluster.transport.base import Transport
from flows.gates.plan import PlanContext, PlanStep
from flows.gates.story import GateStory
from flows.gates.summaries import GateSummary, summary_as
from flows.lines import LineSink, silent
from flows.spec.cluster import Cluster
from flows.spec.release import Release

if TYPE_CHECKING:
    from flows.bench.ledger import Ledger
    from flows.gates.files import GateFiles
    from flows.spec.release import BenchmarkGate

S = TypeVar("S", bound=BaseModel)
SettingsT_contra = TypeVar("SettingsT_contra", bound=BaseModel, contravariant=True)
InputsT = TypeVar("InputsT")


class Outcome(StrEnum):
    """How a gate ended."""

    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"
    INCONCLUSIVE = "inconclusive"
    """The gate ran but its noise allowed no decision: neither a pass nor a failure; a person
    decides (`approve --accept-inconclusive REASON`), it never promotes by itself."""


class GateResult(BaseModel):
    """A gate's verdict, headline figures and the files it wrote (relative to its folder)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gate: str = Field(description="release_tests, determinism, cold_boots or benchmark.")
    outcome: Outcome
    reason: str = Field(description="One line a person reads first: why it passed or failed.")
    started_at: datetime
    seconds: float
    summary: GateSummary | None = Field(default=None, description="Headline figures, typed.")
    files: list[str] = Field(default=[], description="Raw files written, relative to out_dir.")
    evidence: list[str] = Field(default=[], description="Evidence folders of failed attempts.")

    @property
    def passed(self) -> bool:
        """True when it passed or was skipped (a skipped gate does not block; an inconclusive
        one waits for a person)."""
        return self.outcome in (Outcome.PASSED, Outcome.SKIPPED)

    def summary_as(self, model: type[S]) -> S | None:
        """The summary when it is a `model` (None for a gate that produced none)."""
        return summary_as(self.summary, model)


class GateVerdict(BaseModel):
    """What a gate's `run` decides: the harness turns it into a GateResult."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    outcome: Outcome
    reason: str
    summary: GateSummary | None = None
    evidence: list[str] = []


class HostSwitch(Protocol):
    """A release's host layers as the benchmark switches them (`flows.cluster.ops.host_layers`):
    on for the candidate's arms, off for the previous release's."""

    def for_role(self, role: str, arm: int) -> None:
        """Switch the layers for arm `arm` of `role` and check their facts."""
        ...


@dataclass(frozen=True)
class GateContext:
    """Everything a gate may touch: the resolved specs, the nodes, and where state lives."""

    cluster: Cluster
    release: Release
    previous: Release | None
    transports: dict[str, Transport]
    state: Path = field(metadata={"doc": "project-local state folder (.sparkgate)"})
    experiments: Path = field(metadata={"doc": "folder of experiments records"})
    say: LineSink = field(default=silent)
    advance: Callable[[str, int, int], None] = field(
        default=lambda _what, _done, _total: None,
        metadata={"doc": "progress inside the gate: what is counted, done, total"},
    )
    host: HostSwitch | None = field(
        default=None,
        metadata={"doc": "the release's reversible host layers (None: the hosts stay as they are)"},
    )


@dataclass(frozen=True)
class PreviousOutputs:
    """The previous release's per-prompt determinism hashes and the record they come from.

    Everything the determinism gate needs of the previous record, handed over by `History`, so
    the gate compares with it and keeps a copy naming it without reading records itself.
    """

    record: str | None = field(metadata={"doc": "the record's folder name (None: not known)"})
    hashes: dict[str, Any]


@dataclass(frozen=True)
class EarlierTestRun:
    """A passing release-tests run of an earlier published record, as the gate may reuse it.

    `files` maps each raw file's name (junit.xml, pytest.txt) to its path in that record, each
    already checked unchanged since it was saved.
    """

    record: str = field(metadata={"doc": "the record's folder name"})
    run_key: str = field(metadata={"doc": "what decided that run (`release_tests.rules.run_key`)"})
    files: dict[str, Path]


@dataclass(frozen=True)
class RecordedArms:
    """The previous release's arms of its newest published record on this shape, for a
    candidate whose hosts cannot be reverted (the cross-session rule)."""

    record: str = field(metadata={"doc": "the record's folder name"})
    folders: list[Path] = field(metadata={"doc": "its arms/<i>-candidate folders, in order"})


class History(Protocol):
    """What gates may read of earlier records (the pipeline supplies it; gates never read
    records themselves, so `flows.record` depends on the gates and not the other way)."""

    def previous_outputs(self, context: GateContext) -> PreviousOutputs | None:
        """The previous release's determinism hashes, from its newest record of this shape."""
        ...

    def ledger(self, context: GateContext, settings: BenchmarkGate) -> Ledger | None:
        """The A/A ledger of earlier records for this cluster shape and suite."""
        ...

    def passed_release_tests(self, context: GateContext) -> list[EarlierTestRun]:
        """The passing release-tests runs of earlier published records of this cluster."""
        ...

    def previous_arms(self, context: GateContext) -> RecordedArms | None:
        """The previous release's arms of its newest published record on this shape."""
        ...


class Gate(Protocol[SettingsT_contra, InputsT]):
    """One qualification gate: a plug-in the registry lists and the harness runs."""

    @property
    def name(self) -> str:
        """The stage name: folder in the record, key in the release's `gates` settings."""
        ...

    @property
    def title(self) -> str:
        """What the stage board and the README call it."""
        ...

    @property
    def settings_model(self) -> type[BaseModel]:
        """The pydantic model of its settings in the release file."""
        ...

    @property
    def summary_model(self) -> type[BaseModel]:
        """The pydantic model of its summary (a member of `flows.gates.summaries.GateSummary`)."""
        ...

    @property
    def boot_failure(self) -> str:
        """How a boot that fails inside the gate is reported (`<this>: <error>`)."""
        ...

    @property
    def story(self) -> GateStory:
        """What the record says of the gate: README section, tables, compare rows, plots, the
        recompute step (`flows.gates.story`)."""
        ...

    def inputs(
        self, context: GateContext, earlier: Mapping[str, GateResult], history: History
    ) -> InputsT:
        """What the gate needs from the gates before it and from earlier records."""
        ...

    def run(
        self, context: GateContext, settings: SettingsT_contra, inputs: InputsT, files: GateFiles
    ) -> GateVerdict:
        """Do the gate's work, writing raw files through `files`; the verdict."""
        ...

    def plan(self, given: PlanContext) -> list[PlanStep]:
        """What it would do on which node, touching nothing (`sparkgate qualify --plan`)."""
        ...


def api_base_url(cluster: Cluster) -> str:
    """Base URL of the head's OpenAI-compatible API, e.g. http://127.0.0.1:8017."""
    return f"http://{cluster.head.address}:{cluster.ports.api}"
