"""The build spec (a release's `build:`): where the engine comes from, one of four kinds.

Kept apart from the release spec because it is the largest part of it and read on its own by the
build code (`flows/cluster/build/`): which keys each kind takes, which files and folders must
exist and stay inside the project, and how a build is described in plans and records.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, model_validator

from flows.errors import SpecError
from flows.spec.base import (
    EnvValue,
    Problem,
    SpecContext,
    SpecModel,
    SpecPath,
    confined_out,
    shown,
)
from flows.spec.regex_cost import backtracking_risk

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
            risk = backtracking_risk(self.image_line)
            if risk is not None:
                problems.append(
                    Problem(
                        ("image_line",),
                        f"may backtrack without end: {risk}",
                        "repeats that split a line one way only, e.g. `\\S+`, or possessive `a++`",
                    )
                )
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
