"""The release spec (kind: release): what to build, how to run it, and how to prove it.

A release names its predecessor, so qualification can compare against it; the predecessor is a
sibling file `<name>.yaml` (or one directory up, for examples kept in a subfolder), and a name
that resolves to nothing is a spec error before anything is built. The declared output change
decides whether determinism compares tokens with the previous release.
"""

from __future__ import annotations

import os
import re
import shlex
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
    confined_out,
    shown,
)
from flows.spec.gate_policy import KNOWN_METRICS, GatePolicy
from flows.spec.load import load_model


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


IMAGE_REFERENCE = r"^[a-z0-9][a-z0-9._/:@-]*$"
IMAGE_ID = r"^sha256:[0-9a-f]{64}$"
BuildKind = Literal["source", "image", "command", "dockerfile"]
CONTROLLER = "controller"
"""`build.on: controller`: a dockerfile build on the machine sparkgate runs on."""
IMAGE_CONTEXT = "docker-image://"
CONTEXT_NAME = r"^[a-z0-9][a-z0-9._-]*$"
TAG_FIELDS = ("release", "stamp")


class Build(SpecModel):
    """Where the engine comes from, one of four kinds.

    `source` (the bundled engine): a source tree built by sparkgate into a wheel (process
    clusters) or an image (docker clusters). `image`: a prebuilt image adopted as is, by tag or ID.
    `command`: the operator's own build command (the recipe's `bin/spark build image --apply`),
    run on a node whose daemon then holds the image; its name is given, written to a file or
    printed. `dockerfile`: a Dockerfile built by sparkgate with the docker CLI (BuildKit through
    buildx where offered: build args, named contexts, a target), on a node's daemon or on the
    controller's, whose image is then shipped to every node. Image kinds need a docker cluster;
    the record keeps the image ID, and promotion and deploys run exactly that image, never
    building again.
    """

    kind: BuildKind = Field(default="source", description="source, image, command or dockerfile.")

    @model_validator(mode="before")
    @classmethod
    def _on_key(cls, data: object) -> object:
        """YAML 1.1 reads a bare `on:` key as the boolean true: it is the `on` field."""
        if isinstance(data, dict) and True in data and "on" not in data:
            return {("on" if key is True else key): value for key, value in data.items()}
        return data

    source: SpecPath | None = Field(
        default=None, description="source: the engine source directory (relative to this file)."
    )
    dockerfile: str = Field(
        default="Dockerfile",
        description="source: Dockerfile in `source`; dockerfile: relative to `context`.",
    )
    args: dict[str, EnvValue] = Field(
        default={}, description="source, dockerfile: Docker build arguments."
    )
    context: SpecPath | None = Field(
        default=None, description="dockerfile: the build context folder (relative to this file)."
    )
    contexts: dict[Annotated[str, Field(pattern=CONTEXT_NAME)], str] = Field(
        default={},
        description="dockerfile: named contexts, name -> a folder (relative to `context`) or "
        "docker-image://REF; needs BuildKit (buildx).",
    )
    target: Annotated[str, Field(pattern=CONTEXT_NAME)] | None = Field(
        default=None, description="dockerfile: the stage to build (default the last)."
    )
    tag: str = Field(
        default="sparkgate/{release}:{stamp}",
        description="dockerfile: the tag, with {release} and {stamp} (UTC build time).",
    )
    platform: str | None = Field(
        default=None,
        description="dockerfile: the platform to build for (linux/arm64); must be the nodes'.",
    )
    image: Annotated[str, Field(pattern=IMAGE_REFERENCE)] | None = Field(
        default=None,
        description="image: the tag or ID to adopt; command: the tag the command produces.",
    )
    image_id: Annotated[str, Field(pattern=IMAGE_ID)] | None = Field(
        default=None, description="image: the ID the image must have (sha256:...), when pinned."
    )
    command: list[Annotated[str, Field(min_length=1)]] = Field(
        default=[], description="command: the build command's argv, run on the node `on`."
    )
    cwd: str | None = Field(
        default=None, description="command: working directory on that node (absolute)."
    )
    on: str | None = Field(
        default=None,
        description="command: the node to build on (default the head); dockerfile: that, or "
        "`controller`; image: the node (or `controller`) whose daemon holds the image.",
    )
    image_file: str | None = Field(
        default=None,
        description="command: a file (relative to cwd) the command writes the image tag to.",
    )
    image_line: str | None = Field(
        default=None,
        description="command: a regex with one group; its last match in the output is the tag.",
    )
    timeout_s: float = Field(
        default=7200.0, gt=0, description="command, dockerfile: how long the build may run."
    )

    def problems(self, context: SpecContext | None) -> list[Problem]:
        """Each kind names what it needs and nothing another kind needs."""
        problems = self._kind_problems()
        if not problems and self.kind == "dockerfile" and self.context is not None:
            return self._context_problems(self.context, context)
        if problems or self.kind != "source" or self.source is None:
            return problems
        return self._source_problems(self.source, context)

    def _context_problems(self, folder: Path, context: SpecContext | None) -> list[Problem]:
        """The Dockerfile and every named folder stay inside the project (each is read by the
        builder and sent to a daemon). Whether they exist is asked only before a build
        (`missing_inputs`): a deploy of the recorded image needs none of them."""
        if context is None or not folder.is_absolute() or confined_out(folder, context):
            return []
        problems = []
        dockerfile = self.dockerfile_path
        if (
            dockerfile is not None and confined_out(dockerfile, context)
        ) or self.dockerfile.startswith("~"):
            problems.append(Problem(("dockerfile",), "outside the project", "a file inside it"))
        for name, path in self.context_folders.items():
            if confined_out(path, context) or self.contexts[name].startswith("~"):
                problems.append(
                    Problem(("contexts", name), "outside the project", "a folder inside it")
                )
        return problems

    def missing_inputs(self) -> list[tuple[str, str]]:
        """(key, problem) for each input of a dockerfile build that is not there to build from."""
        if self.kind != "dockerfile" or self.context is None:
            return []
        if not self.context.is_dir():
            return [("build.context", f"no such directory: {shown(self.context)}")]
        found = []
        dockerfile = self.dockerfile_path
        if dockerfile is not None and not dockerfile.is_file():
            found.append(("build.dockerfile", f"no such file: {shown(dockerfile)}"))
        found += [
            (f"build.contexts.{name}", f"no such directory: {shown(path)}")
            for name, path in self.context_folders.items()
            if not path.is_dir()
        ]
        return found

    @property
    def dockerfile_path(self) -> Path | None:
        """A dockerfile build's Dockerfile (relative to `context`), None for other kinds."""
        if self.kind != "dockerfile" or self.context is None:
            return None
        return Path(os.path.normpath(self.context / self.dockerfile))

    @property
    def context_folders(self) -> dict[str, Path]:
        """The named contexts that are folders (relative to `context`), absolute."""
        if self.context is None:
            return {}
        return {
            name: Path(os.path.normpath(self.context / value))
            for name, value in self.contexts.items()
            if not value.startswith(IMAGE_CONTEXT)
        }

    def _kind_problems(self) -> list[Problem]:
        used = {
            "source": self.source is not None,
            "args": bool(self.args),
            "image_id": self.image_id is not None,
            "command": bool(self.command),
            "cwd": self.cwd is not None,
            "on": self.on is not None,
            "image_file": self.image_file is not None,
            "image_line": self.image_line is not None,
            "context": self.context is not None,
            "contexts": bool(self.contexts),
            "target": self.target is not None,
            "platform": self.platform is not None,
            "tag": self.tag != Build.model_fields["tag"].default,
        }
        allowed = {
            "source": {"source", "args"},
            "image": {"image_id", "on"},
            "command": {"command", "cwd", "on", "image_file", "image_line"},
            "dockerfile": {"args", "context", "contexts", "target", "platform", "on", "tag"},
        }[self.kind]
        article = "an" if self.kind == "image" else "a"
        problems = [
            Problem((key,), f"not a key of {article} {self.kind} build", f"only {self._needs()}")
            for key, present in used.items()
            if present and key not in allowed
        ]
        if self.kind == "source" and self.source is None:
            problems.append(Problem(("source",), "a source build needs it", "the engine tree"))
        if self.kind == "image" and self.image is None:
            problems.append(Problem(("image",), "an image build needs it", "a tag or an ID"))
        if self.kind == "command":
            problems += self._command_problems()
        if self.kind == "dockerfile":
            problems += self._dockerfile_kind_problems()
        return problems

    def _dockerfile_kind_problems(self) -> list[Problem]:
        problems = []
        if self.context is None:
            problems.append(Problem(("context",), "a dockerfile build needs it", "a folder"))
        if self.image is not None:
            problems.append(Problem(("image",), "a dockerfile build names it `tag`", "tag"))
        try:
            sample = self.tag.format(release="release", stamp="20261203t000000")
        except (KeyError, IndexError, ValueError) as error:
            sample = ""
            problems.append(
                Problem(("tag",), f"bad placeholder {error}", "placeholders {release}, {stamp}")
            )
        if sample and (re.match(IMAGE_REFERENCE, sample) is None or "@" in sample):
            problems.append(
                Problem(("tag",), f"not an image tag: {sample}", "a lowercase name:tag")
            )
        for name, value in self.contexts.items():
            if not value.strip():
                problems.append(
                    Problem(("contexts", name), "empty", "a folder or docker-image://REF")
                )
            elif value.startswith(IMAGE_CONTEXT) and not re.match(
                IMAGE_REFERENCE, value.removeprefix(IMAGE_CONTEXT)
            ):
                problems.append(Problem(("contexts", name), "not an image reference", "REF"))
        return problems

    def _command_problems(self) -> list[Problem]:
        problems = []
        if not self.command:
            problems.append(Problem(("command",), "a command build needs it", "an argv list"))
        named = [self.image is not None, self.image_file is not None, self.image_line is not None]
        if sum(named) != 1:
            problems.append(
                Problem(
                    ("image",),
                    "a command build names its image in exactly one way",
                    "one of image, image_file, image_line",
                )
            )
        if self.on == CONTROLLER:
            problems.append(Problem(("on",), "a build command runs on a node", "a node name"))
        if self.cwd is not None and not self.cwd.startswith("/"):
            problems.append(Problem(("cwd",), "not absolute", "a path on the build node"))
        if self.image_line is not None:
            try:
                groups = re.compile(self.image_line).groups
            except re.error as error:
                return [*problems, Problem(("image_line",), f"not a regex: {error}", "a regex")]
            if groups != 1:
                problems.append(Problem(("image_line",), f"{groups} groups", "exactly one group"))
        return problems

    def _needs(self) -> str:
        return {
            "source": "source, dockerfile, args",
            "image": "image, image_id, on",
            "command": "command, cwd, on and one of image, image_file, image_line",
            "dockerfile": "context, dockerfile, args, contexts, target, tag, platform, on, "
            "timeout_s",
        }[self.kind]

    def _source_problems(self, source: Path, context: SpecContext | None) -> list[Problem]:
        """The source tree must exist when loaded from a file (a record's copy is not rebuilt),
        and the Dockerfile must be inside it: it is read and hashed into the build."""
        if context is None or not source.is_absolute() or confined_out(source, context):
            return []  # a path outside the project is refused by the loader, unprobed
        if not source.is_dir():
            return [Problem(("source",), f"no such directory: {shown(source)}", "the engine tree")]
        return self._dockerfile_problems(source.resolve())

    def _dockerfile_problems(self, tree: Path) -> list[Problem]:
        dockerfile = Path(self.dockerfile)
        if (
            dockerfile.is_absolute()
            or self.dockerfile.startswith("~")
            or not (tree / dockerfile).resolve().is_relative_to(tree)
        ):
            return [
                Problem(
                    ("dockerfile",),
                    "leaves the source tree (absolute, `~`, `..` or a symlink out)",
                    "a path relative to `source`, inside it",
                )
            ]
        return []

    @property
    def engine_tree(self) -> Path:
        """The source tree of a source build (a SpecError for the image kinds)."""
        if self.source is None:
            raise SpecError(
                f"a {self.kind} build has no source tree", key="build.kind", expected="source"
            )
        return self.source

    def describe(self) -> str:
        """One line saying where the engine comes from (for `render`)."""
        if self.kind == "image":
            pinned = f" (pinned to {self.image_id})" if self.image_id else ""
            where = f" from {self.on}" if self.on else ""
            return f"image {self.image}{pinned}, adopted as is{where}"
        if self.kind == "command":
            named = (
                f"tag {self.image}" if self.image is not None
                else f"tag in {self.image_file}" if self.image_file is not None
                else f"tag printed as /{self.image_line}/"
            )  # fmt: skip
            where = f"on {self.on or 'the head'}" + (f" in {self.cwd}" if self.cwd else "")
            return f"command `{shlex.join(self.command)}` {where}, {named}"
        if self.kind == "dockerfile":
            where = "the controller" if self.on == CONTROLLER else self.on or "the head"
            extra = f", named contexts {', '.join(sorted(self.contexts))}" if self.contexts else ""
            stage = f", target {self.target}" if self.target else ""
            return f"dockerfile {self.dockerfile} in {self.context} on {where}{stage}{extra}"
        return f"source {self.source} ({self.dockerfile})"

    @property
    def makes_image(self) -> bool:
        """Whether the build is an image made elsewhere (image, command): docker clusters only."""
        return self.kind != "source"


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
