"""The release spec (kind: release): what to build, how to run it, and how to prove it.

A release names its predecessor, so qualification can compare against it; the predecessor is a
sibling file `<name>.yaml` (or one directory up, for examples kept in a subfolder), and a name
that resolves to nothing is a spec error before anything is built. The declared output change
decides whether determinism compares tokens with the previous release. Where the engine comes
from (`build:`) is a spec of its own, `flows/spec/build.py`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, model_validator

from flows.errors import SpecError
from flows.settings import project_root
from flows.spec.base import (
    EnvValue,
    Problem,
    SpecContext,
    SpecModel,
    SpecPath,
)
from flows.spec.build import Build
from flows.spec.gate_policy import KNOWN_METRICS, GatePolicy
from flows.spec.host import HostLayer
from flows.spec.load import load_model
from flows.spec.release_tests import (
    PYTEST_OPTIONS,
    checkout_path_problems,
    pytest_option_problems,
)


def nearest_config(start: Path, name: str) -> Path:
    """`config/<name>` in `start` or the closest folder above it; else the project's."""
    for folder in (start, *start.parents):
        candidate = folder / "config" / name
        if candidate.is_file():
            return candidate
    return project_root() / "config" / name


NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
CHECKPOINT = r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$"
REVISION = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
BootMode = Literal["warm", "one-rank-kernels", "all-kernels", "all-jit"]
BOOT_MODES: tuple[BootMode, ...] = ("warm", "one-rank-kernels", "all-kernels", "all-jit")


class EngineSettings(SpecModel):
    """What this release changes in how the engine runs."""

    options: dict[str, EnvValue] = Field(
        default={}, description="Values of the profile's options ({option.NAME}), e.g. mlp_kernel."
    )
    env: dict[str, EnvValue] = Field(default={}, description="Extra environment of every rank.")
    serve_args: list[str] = Field(default=[], description="Extra engine arguments of every rank.")


class Model(SpecModel):
    """The model served: the bundled engine makes it from a seed and a size; a real engine
    serves a checkpoint at a revision (the recipe pins deepseek-ai/DeepSeek-V4.1-Flash at one),
    which the record keeps and the cluster's mounts and preflight checks can name."""

    seed: int = Field(default=0, ge=0, description="Seed of the weights.")
    size: Literal["tiny", "small"] = Field(default="tiny", description="Model size.")
    checkpoint: Annotated[str, Field(pattern=CHECKPOINT)] | None = Field(
        default=None, description="The checkpoint's repository (owner/name), {model_checkpoint}."
    )
    revision: Annotated[str, Field(pattern=REVISION)] | None = Field(
        default=None, description="The checkpoint's revision (a commit hash), {model_revision}."
    )

    def problems(self, context: SpecContext | None) -> list[Problem]:
        """A revision belongs to a checkpoint."""
        del context
        if self.revision is not None and self.checkpoint is None:
            return [Problem(("checkpoint",), "a revision needs its checkpoint", "owner/name")]
        return []

    @property
    def id(self) -> str:
        """Directory name of this model on a node ({model_id})."""
        return f"{self.size}-s{self.seed}"


class Outputs(SpecModel):
    """Whether this release may change outputs; `changed` needs a reason people can review."""

    change: Literal["unchanged", "changed"] = Field(description="unchanged or changed.")
    reason: str | None = Field(default=None, description="Why outputs change (when changed).")

    def problems(self, context: SpecContext | None) -> list[Problem]:
        """A change needs a reason; an unchanged release must not carry one."""
        del context
        if self.change == "changed" and not (self.reason or "").strip():
            return [Problem(("reason",), "required when outputs change", "a non-empty reason")]
        if self.change == "unchanged" and self.reason is not None:
            return [Problem(("reason",), "only allowed with change: changed", "no reason")]
        return []


class GateSettings(SpecModel):
    """Settings every gate shares."""

    enabled: bool = Field(default=True, description="Run this gate.")
    timeout_s: float = Field(default=1800, gt=0, description="Give up on the gate after this.")


class ReleaseTestsGate(GateSettings):
    """Release tests: the classified engine tests, run in the release image on one node."""

    classification: SpecPath = Field(
        default=Path("../config/release-tests.yaml"),
        description=(
            "The release-tests file (relative to this release); default: the nearest"
            " config/release-tests.yaml in this release's folder or above it."
        ),
    )
    node: str | None = Field(default=None, description="Node to run on (default: the head).")
    checkout_classification: str | None = Field(
        default=None,
        description="The classification as the operator's checkout holds it, read on the head "
        "at each run instead of `classification`: a path relative to the head's workdir (the "
        "recipe's `config/release-tests.json`), in the release-tests schema, JSON or YAML.",
    )
    reuse: bool = Field(
        default=True,
        description="Take the pass of an earlier published record of this cluster whose run was "
        "the same (same build, gate files and their contents, pytest options, node, runtime and "
        "rank environment) instead of running the same tests again; the record names where it "
        "came from and keeps its JUnit XML. false: always run them.",
    )
    pytest_options: list[str] = Field(
        default=list(PYTEST_OPTIONS),
        description="pytest's options before the gate files (the recipe's runner: -q "
        "--noconftest -p no:cacheprovider -rfE); sparkgate adds its JUnit XML, temporary folder "
        "and rootdir options.",
    )

    def problems(self, context: SpecContext | None) -> list[Problem]:
        """sparkgate's own pytest options stay its own; the checkout path stays inside it."""
        del context
        found = [
            Problem(("pytest_options", *problem.loc), problem.message, problem.expected)
            for problem in pytest_option_problems(self.pytest_options)
        ]
        if self.checkout_classification is not None:
            found += [
                Problem(("checkout_classification",), problem.message, problem.expected)
                for problem in checkout_path_problems(self.checkout_classification)
            ]
        return found


class DeterminismGate(GateSettings):
    """Temperature-0 outputs must be identical across scenarios, and against the previous."""

    prompts: list[str] = Field(
        default=[
            "The quick brown fox jumps over the lazy dog, and then",
            "Once upon a time, in a village by the sea, there lived",
            'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
            "In a distant galaxy, the last starship of the old fleet",
            "Dear committee, I am writing to recommend my former student",
            "SELECT name, total FROM orders WHERE total > 100 ORDER BY",
            "The three laws of thermodynamics can be stated simply as",
            "Recipe for bread: mix 500 g of flour with 350 ml of water,",
        ],
        min_length=1,
        description="Distinct prompts every scenario sends (plus the long prompt).",
    )
    max_tokens: int = Field(default=64, ge=1, description="Tokens generated per request.")
    long_prompt_tokens: int = Field(
        default=1500, ge=1, description="Length of the long prefill mixed in."
    )
    stagger_ms: int = Field(default=100, ge=0, description="Delay between staggered joins.")
    logprobs: bool = Field(default=True, description="Compare logprobs bit for bit too.")
    top_logprobs: int = Field(
        default=5, ge=0, le=20, description="Alternatives per token asked for (compared too)."
    )
    sampled_streams: int = Field(
        default=4, ge=0, description="Temperature-1 streams sent beside the sampled scenario."
    )
    against_previous: bool = Field(
        default=True, description="Compare with the previous release when outputs are unchanged."
    )
    chat: bool = Field(
        default=True,
        description="Also send two chat probes in every scenario: a tool call and a JSON-schema "
        "response format (off for an engine without /v1/chat/completions).",
    )


class ColdBootsGate(GateSettings):
    """Boots with emptied caches: nothing may compile after preparation."""

    modes: list[BootMode] = Field(
        default=list(BOOT_MODES), min_length=1, description="Boot modes to run."
    )
    rank: int | None = Field(
        default=None, ge=0, description="Rank whose cache one-rank-kernels empties (default last)."
    )
    requests_after_ready: int = Field(
        default=4,
        ge=0,
        description="Concurrent streams (with logprobs) sent after ready before counting compiles.",
    )
    max_tokens: int = Field(
        default=16, ge=1, description="Tokens per burst and spot-check request."
    )
    spot_check: int = Field(
        default=3,
        ge=1,
        description="How many of the determinism prompts (its max_tokens) must equal the "
        "reference after each boot.",
    )


class BenchmarkGate(GateSettings):
    """Interleaved arms against the previous release; a non-inferiority decision."""

    suite: str | list[str] = Field(
        default="release",
        min_length=1,
        description=(
            "Suite name (config/suites) or file, or a list of them: every arm runs each, and "
            "with several the points are named <suite>:<point>."
        ),
    )
    arms: list[Literal["candidate", "previous"]] = Field(
        default=["candidate", "previous", "candidate"],
        min_length=2,
        description="Arm order of the first session.",
    )
    max_arms: int = Field(default=7, ge=2, description="Most arms when undecided.")
    tolerance: float = Field(default=0.03, gt=0, lt=1, description="Allowed slowdown.")
    gate_metrics: list[str] | None = Field(
        default=None,
        description=(
            "Metrics that decide the gate (e.g. engine_cpu_ms, tpot_p50_ms); the rest are "
            "reported. Default: the engine's CPU time per step, else its wall time per step, "
            "else every client metric."
        ),
    )
    tolerances: dict[str, Annotated[float, Field(gt=0, lt=1)]] = Field(
        default_factory=dict, description="Allowed slowdown per metric, overriding tolerance."
    )
    cross_session_allowance_pct: float | None = Field(
        default=None,
        ge=0,
        description="With an irreversible host layer the candidate is compared with the "
        "previous release's arms of its newest record on this shape (another session): each end "
        "of every interval is widened by this much (%) for what differs between sessions. "
        "Required then, and stated in the record.",
    )

    def policy(self) -> GatePolicy:
        """The gate policy these settings describe."""
        return GatePolicy.of_settings(self.gate_metrics, self.tolerances)

    def suites(self) -> list[str]:
        """The suites every arm runs, in order."""
        return [self.suite] if isinstance(self.suite, str) else list(self.suite)

    def problems(self, context: SpecContext | None) -> list[Problem]:
        """Both releases must be measured, and max_arms must allow the first session."""
        del context
        found: list[Problem] = []
        known = ", ".join(sorted(KNOWN_METRICS))
        for metric in [*(self.gate_metrics or []), *self.tolerances]:
            if metric not in KNOWN_METRICS:
                found.append(Problem(("gate_metrics",), f"unknown metric {metric!r}", known))
        names = self.suites()
        if any(not name for name in names) or len(set(names)) != len(names):
            found.append(Problem(("suite",), "suites must be unique names", "e.g. [release]"))
        if {"candidate", "previous"} - set(self.arms):
            found.append(Problem(("arms",), "needs both arms", "candidate and previous"))
        if self.max_arms < len(self.arms):
            found.append(
                Problem(("max_arms",), f"{self.max_arms} < {len(self.arms)} arms", ">= arms")
            )
        return found


class Gates(SpecModel):
    """Settings of every gate; all run by default."""

    release_tests: ReleaseTestsGate = Field(default=ReleaseTestsGate(), description="Tests.")
    determinism: DeterminismGate = Field(default=DeterminismGate(), description="Determinism.")
    cold_boots: ColdBootsGate = Field(default=ColdBootsGate(), description="Cold boots.")
    benchmark: BenchmarkGate = Field(default=BenchmarkGate(), description="Benchmark.")


class Promotion(SpecModel):
    """How long qualification waits for a person to approve."""

    timeout_s: float = Field(default=86400, gt=0, description="Approval wait before giving up.")


class Release(SpecModel):
    """One release of the recipe."""

    @model_validator(mode="before")
    @classmethod
    def _nearest_classification(cls, data: object, info: ValidationInfo) -> object:
        """A release kept in a subfolder (releases/faulty/) finds the project's file too."""
        if not isinstance(info.context, SpecContext) or not isinstance(data, dict):
            return data
        gates = data.get("gates", {})
        tests = gates.get("release_tests", {}) if isinstance(gates, dict) else None
        if not isinstance(tests, dict) or "classification" in tests:
            return data
        found = str(nearest_config(info.context.file.parent, "release-tests.yaml"))
        return {**data, "gates": {**gates, "release_tests": {**tests, "classification": found}}}

    kind: Literal["release"] = Field(description="Always `release`.")
    name: str = Field(pattern=NAME, description="Release name; equals the file name.")
    previous: Annotated[str, Field(pattern=NAME)] | None = Field(
        description="Previous release name (sibling file) or null."
    )
    description: str = Field(default="", description="What this release changes.")
    build: Build = Field(description="Where the engine comes from.")
    engine: EngineSettings = Field(default=EngineSettings(), description="Engine settings.")
    model: Model = Field(default=Model(), description="The model served.")
    outputs: Outputs = Field(description="Declared output change.")
    gates: Gates = Field(default=Gates(), description="Gate settings.")
    promotion: Promotion = Field(default=Promotion(), description="Promotion settings.")
    host: list[HostLayer] = Field(
        default=[],
        description="Host layers this release changes on the nodes (none: the hosts stay as "
        "they are); see docs/host-probes.md.",
    )

    def problems(self, context: SpecContext | None) -> list[Problem]:
        """Name matches the file, previous exists, and the benchmark has something to compare."""
        found: list[Problem] = []
        if context is not None and context.file.stem != self.name:
            found.append(Problem(("name",), "differs from the file name", context.file.stem))
        if self.previous == self.name:
            found.append(Problem(("previous",), "a release cannot follow itself", "another name"))
        elif (
            self.previous is not None
            and context is not None
            and previous_file(context.file, self.previous) is None
        ):
            found.append(
                Problem(
                    ("previous",),
                    f"unknown previous release {self.previous!r}",
                    f"{self.previous}.yaml next to {context.file.name}",
                )
            )
        names = [layer.name for layer in self.host]
        found.extend(
            Problem(("host", i, "name"), f"duplicate layer {name!r}", "unique names")
            for i, name in enumerate(names)
            if name in names[:i]
        )
        if (
            any(not layer.reversible for layer in self.host)
            and self.gates.benchmark.enabled
            and self.gates.benchmark.cross_session_allowance_pct is None
        ):
            found.append(
                Problem(
                    ("gates", "benchmark", "cross_session_allowance_pct"),
                    "an irreversible host layer is compared with the previous release's record "
                    "across sessions; state the allowance for what differs between sessions",
                    "a percentage, e.g. 2",
                )
            )
        if self.host and self.previous is None:
            found.append(
                Problem(("host",), "a host change is compared with a previous release", "previous")
            )
        if self.previous is None and self.gates.benchmark.enabled:
            found.append(
                Problem(
                    ("gates", "benchmark", "enabled"),
                    "a release without previous has nothing to benchmark against",
                    "enabled: false",
                )
            )
        return found


def previous_file(release_file: Path, name: str) -> Path | None:
    """The file of release `name` seen from `release_file`: a sibling, else one folder up."""
    for folder in (release_file.parent, release_file.parent.parent):
        candidate = folder / f"{name}.yaml"
        if candidate.is_file():
            return candidate
    return None


def load_release(path: Path | str) -> Release:
    """Load and validate a release file, and the benchmark suites it names."""
    release = load_model(path, Release)
    check_suites(path, release)
    return release


def check_suites(path: Path | str, release: Release) -> None:
    """Raise a SpecError unless the suites of an enabled benchmark gate load (see
    `flows.spec.suites`): a missing suite is refused before anything starts."""
    from flows.spec.suites import check_release_suites  # noqa: PLC0415 - suites imports load

    if release.gates.benchmark.enabled:
        check_release_suites(path, release.gates.benchmark.suites())


def load_previous(path: Path | str, release: Release) -> Release | None:
    """Load the release `release` follows (None for a first release)."""
    if release.previous is None:
        return None
    found = previous_file(Path(path), release.previous)
    if found is None:  # validation already refused this; kept for callers that built the model
        raise SpecError(f"unknown previous release {release.previous!r}", file=path, key="previous")
    return load_model(found, Release)
