"""The engine profile: everything the pipeline knows about an engine (kind: engine).

The pipeline never imports an engine; it launches processes, reads their logs, polls a URL and
scrapes metrics. A profile says how for one engine (the bundled sparkengine, the vLLM recipe),
so the same gates run against both. Profiles live in their own files (config/engines/) and
clusters pull them in with `engine: {extends: engines/NAME.yaml}`.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field

from flows.spec.base import EnvValue, Problem, SpecContext, SpecModel
from flows.spec.template import NODE_PLACEHOLDERS, unknown_placeholders

EVENT_NAMES = (
    "weights_loaded",
    "kernels_prepared",
    "rendezvous",
    "ready",
    "compile_after_preparation",
    "collective_failure",
    "peer_failure",
    "fatal",
)


class Launch(SpecModel):
    """How to start one rank: a command line and environment with placeholders."""

    argv: list[str] = Field(min_length=1, description="Command line of every rank.")
    head_args: list[str] = Field(default=[], description="Arguments added for the head rank.")
    worker_args: list[str] = Field(default=[], description="Arguments added for other ranks.")
    env: dict[str, EnvValue] = Field(default={}, description="Environment of every rank.")
    cwd: str = Field(default="{workdir}", description="Working directory on the node.")


class Ready(SpecModel):
    """How the pipeline decides the engine serves: the head's URL answers successfully."""

    url: str = Field(description="URL polled on the head, e.g. http://{address}:{port}/health.")
    timeout_s: float = Field(default=600, gt=0, description="Give up on a boot after this long.")
    interval_s: float = Field(default=1.0, gt=0, description="Seconds between two polls.")


class Stop(SpecModel):
    """How to stop a rank: a signal, then a kill after the grace period."""

    signal: Literal["SIGTERM", "SIGINT", "SIGQUIT", "SIGHUP", "SIGKILL"] = Field(
        default="SIGTERM", description="Signal sent first."
    )
    grace_s: float = Field(default=10, ge=0, description="Seconds before SIGKILL follows.")


class CacheKind(SpecModel):
    """One on-disk cache of a rank; cold boots empty these per kind."""

    path: str = Field(description="Directory on the node (placeholders allowed).")
    kernel: bool = Field(default=False, description="True for the one kernel cache kind.")
    note: str = Field(default="", description="What lives there, for people.")


class LogEvents(SpecModel):
    """Which log lines mark each phase: JSON event names (jsonl) or regexes (regex)."""

    weights_loaded: str | None = Field(default=None, description="Weights are loaded.")
    kernels_prepared: str | None = Field(
        default=None, description="Kernels prepared (count and seconds as fields or groups)."
    )
    rendezvous: str | None = Field(default=None, description="All ranks met.")
    ready: str | None = Field(default=None, description="The engine serves.")
    compile_after_preparation: str | None = Field(
        default=None, description="A kernel compiled after preparation (must never happen)."
    )
    collective_failure: str | None = Field(default=None, description="A collective timed out.")
    peer_failure: str | None = Field(default=None, description="A peer rank was lost.")
    fatal: str | None = Field(default=None, description="The rank stops on an error.")


class Logs(SpecModel):
    """How to read a rank's log: JSON lines with an `event` field, or plain text with regexes."""

    format: Literal["jsonl", "regex"] = Field(description="jsonl events or regex patterns.")
    events: LogEvents = Field(description="Event name (jsonl) or regex (regex) per phase.")

    def problems(self, context: SpecContext | None) -> list[Problem]:
        """Every regex must compile; a broken pattern would silently match nothing."""
        del context
        found: list[Problem] = []
        if self.format != "regex":
            return found
        for name in EVENT_NAMES:
            pattern = getattr(self.events, name)
            if pattern is None:
                continue
            try:
                re.compile(pattern)
            except re.error as error:
                found.append(Problem(("events", name), f"invalid regex: {error}", "a Python regex"))
        return found


class Metrics(SpecModel):
    """Prometheus metric names on the engine's /metrics endpoint."""

    path: str = Field(default="/metrics", description="Path of the metrics endpoint.")
    running: str = Field(description="Gauge of requests being processed.")
    waiting: str = Field(description="Gauge of queued requests.")
    prompt_tokens: str | None = Field(default=None, description="Counter of prompt tokens.")
    generation_tokens: str | None = Field(default=None, description="Counter of output tokens.")
    prefix_cache_queries: str | None = Field(
        default=None, description="Counter of prefix-cache lookups (tokens)."
    )
    prefix_cache_hits: str | None = Field(
        default=None, description="Counter of prefix-cache hits (tokens)."
    )
    compiles: str | None = Field(
        default=None, description="Counter of compiles after preparation, if exported."
    )
    step_seconds: str | None = Field(
        default=None,
        description="Histogram or summary (base name) of the engine's own time per step.",
    )
    step_cpu_seconds: str | None = Field(
        default=None,
        description="Summary (base name) of the CPU time of those steps, if exported.",
    )
    token_seconds: str | None = Field(
        default=None,
        description="Histogram or summary (base name) of the engine's time per output token, "
        "one observation per request; reported as engine_tpot_ms.",
    )
    spec_drafts: str | None = Field(
        default=None, description="Counter of speculative drafts (verification steps), if any."
    )
    spec_accepted_tokens: str | None = Field(
        default=None, description="Counter of draft tokens accepted, if the engine drafts."
    )


class EngineProfile(SpecModel):
    """Launch, readiness, stop, caches, logs and metrics of one engine."""

    kind: Literal["engine"] = Field(default="engine", description="Always `engine`.")
    name: str = Field(min_length=1, description="Name of the profile, e.g. sparkengine.")
    launch: Launch = Field(description="How to start a rank.")
    ready: Ready = Field(description="Readiness check on the head.")
    stop: Stop = Field(default=Stop(), description="How to stop a rank.")
    caches: dict[str, CacheKind] = Field(
        min_length=1, description="Cache kinds by name; exactly one is the kernel cache."
    )
    model_dir: str = Field(
        default="{workdir}/models/{model_id}", description="Model directory on each node."
    )
    min_free_memory_gib: float | None = Field(
        default=None,
        ge=0,
        description="Memory every node must have available before a boot (preflight refuses less).",
    )
    tests_root: str = Field(
        default="/opt/engine",
        pattern=r"^/",
        description="Where the release image keeps the tree its release tests run from.",
    )
    model_prepare: list[str] = Field(
        default=[],
        description="Command that writes the model directory {model} on a node when it has no "
        "model yet (empty: the model must already be there).",
    )
    options: dict[str, EnvValue] = Field(
        default={}, description="Named engine options with defaults, used as {option.NAME}."
    )
    logs: Logs = Field(description="How to read phases and failures from the logs.")
    metrics: Metrics = Field(description="Metric names on the Prometheus endpoint.")

    @property
    def kernel_cache(self) -> str:
        """Name of the cache kind marked as the kernel cache."""
        return next(name for name, cache in self.caches.items() if cache.kernel)

    def known_placeholders(self) -> set[str]:
        """Every placeholder a launch template of this profile may use."""
        return (
            set(NODE_PLACEHOLDERS)
            | {"python"}
            | {f"cache.{name}" for name in self.caches}
            | {f"option.{name}" for name in self.options}
        )

    def problems(self, context: SpecContext | None) -> list[Problem]:
        """Exactly one kernel cache; no unknown placeholder in any template."""
        del context
        found: list[Problem] = []
        kernels = [name for name, cache in self.caches.items() if cache.kernel]
        if len(kernels) != 1:
            found.append(
                Problem(
                    ("caches",),
                    f"{len(kernels)} cache kinds are marked kernel: true",
                    "exactly one kernel cache kind",
                )
            )
        known = self.known_placeholders()
        templates: list[tuple[tuple[str | int, ...], str]] = [
            *((("launch", "argv", i), arg) for i, arg in enumerate(self.launch.argv)),
            *((("launch", "head_args", i), arg) for i, arg in enumerate(self.launch.head_args)),
            *((("launch", "worker_args", i), a) for i, a in enumerate(self.launch.worker_args)),
            *((("launch", "env", name), value) for name, value in self.launch.env.items()),
            (("launch", "cwd"), self.launch.cwd),
            (("ready", "url"), self.ready.url),
            (("model_dir",), self.model_dir),
            *((("model_prepare", i), arg) for i, arg in enumerate(self.model_prepare)),
            *((("caches", name, "path"), cache.path) for name, cache in self.caches.items()),
        ]
        plain = set(NODE_PLACEHOLDERS) - {"model", "boot_token"}  # per boot, never a path
        for loc, template in templates:
            allowed = plain if loc[0] in ("caches", "model_dir") else known
            found.extend(placeholder_problems(loc, template, allowed))
        return found


def placeholder_problems(
    loc: tuple[str | int, ...], template: str, known: set[str]
) -> list[Problem]:
    """One problem per unknown placeholder in `template`."""
    return [
        Problem(
            loc,
            f"unknown placeholder {{{name}}}",
            "one of " + ", ".join("{" + k + "}" for k in sorted(known)),
        )
        for name in unknown_placeholders(template, known)
    ]
