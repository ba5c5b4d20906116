"""Promotion: a person's decision turns a qualified release into the promoted one, reversibly.

Why it exists: a release reaches production only after every gate passed for the very build
that would be deployed, and only by a named person with a reason. Each cluster has its own
promoted release: a release promoted for the TP3 triangle is not thereby promoted for the TP4
ring. A cluster's pointer is one file, `config/promoted/<cluster>.yaml` (named by the cluster's
`name`; current entry plus the earlier promoted ones, newest first), always replaced by rename so
a reader sees the old pointer or the new one. Every decision (promoted, rejected, no decision in
time, deployed, deploy failed, rolled back) is appended as one JSON line, naming the cluster, to
`experiments/promotions.jsonl`, which is never rewritten. Every read-modify-write of a pointer
holds an exclusive `flock` on the `config/` folder, so concurrent promotions never lose history.

Before pointers were per cluster, one project-wide `config/promoted.yaml` was the promoted release
of every cluster. It is read as the starting pointer of each cluster that has no file of its own
yet (what that cluster saw before), so its history is never lost; the first promotion or rollback
on a cluster writes that cluster's own file with the legacy history in it. sparkgate never
rewrites or removes the legacy file (other clusters may still start from it).

A deploy that fails in any way (an unexpected exception included) rolls the pointer back; one
that is interrupted (Ctrl-C, SIGTERM) puts the pointer back as it was before it stops.

The module reads top to bottom: the decision input the paused qualification waits for, the pure
rules (refusal reasons, pointer updates, spot-check comparison), then the I/O (pointer, log,
promote, deploy with automatic rollback, rollback on purpose, finding and resuming a paused run).
Import it only after `flows.settings.prefect_environment()`.
"""

from __future__ import annotations

import asyncio
import fcntl
import math
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

import httpx
import yaml
from prefect import flow
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    FlowFilter,
    FlowFilterName,
    FlowRunFilter,
    FlowRunFilterState,
    FlowRunFilterStateType,
)
from prefect.client.schemas.objects import StateType
from prefect.exceptions import FlowPauseTimeout
from prefect.flow_runs import pause_flow_run, resume_flow_run
from prefect.input import RunInput
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from flows.cluster.boot.session import load_session, start_release, stop_session
from flows.cluster.build.adopted_image import pinned
from flows.cluster.build.wheel import build_release
from flows.cluster.transport.base import Transport
from flows.engine_api.ready import probe_ready
from flows.errors import (
    BootError,
    PromotionError,
    SparkgateError,
    SpecError,
    boot_failure_reason,
)
from flows.gates.base import api_base_url
from flows.gates.benchmark.summary import BenchmarkSummary
from flows.gates.outputs import logprobs_hash, output_from_completion, tokens_hash
from flows.gates.prompts import LONG_ID, Prompt
from flows.gates.traffic import complete, open_client
from flows.lines import LineSink, silent
from flows.pipeline.events import NullObserver
from flows.pipeline.prelude import held_cluster
from flows.pipeline.stages import GATES
from flows.record import latest_record, read_record, record_hashes
from flows.record.atomic import write_text
from flows.record.brief import headline_changes
from flows.record.model import Record, verdict_passes
from flows.record.reader import published_shapes
from flows.settings import project_root, state_dir
from flows.spec.cluster import NAME as CLUSTER_NAME
from flows.spec.cluster import Cluster
from flows.spec.load import load_model
from flows.spec.release import Release, load_release

POINTER_DIR = Path("config/promoted")
LEGACY_POINTER_FILE = Path("config/promoted.yaml")
DEFAULT_CLUSTER = "local"  # the cluster every command uses without -c (config/local.yaml)
LOG_FILE = Path("experiments/promotions.jsonl")
QUALIFY_FLOW = "qualify-release"
SPOT_CHECK_PROMPTS = 3
RESUME_ATTEMPTS = 10
POLL_S = 1
AWAITING = "awaiting promotion"
_FROZEN = ConfigDict(frozen=True, extra="forbid")
_T = TypeVar("_T")


class _HasParameters(Protocol):
    @property
    def parameters(self) -> dict[str, Any]: ...


_Run = TypeVar("_Run", bound=_HasParameters)


class Decision(RunInput):
    """What a person answers to a paused qualification (CLI `approve`/`reject` or the UI form)."""

    decision: Literal["approve", "reject"] = Field(description="approve or reject the release")
    by: str = Field(min_length=1, description="who decides")
    reason: str = Field(default="", description="why")


class PromotedEntry(BaseModel):
    """One promoted release: what, which build, which record proves it, who, when, why."""

    model_config = _FROZEN

    release: str
    release_file: str = Field(description="Relative to the project root when inside it.")
    build_digest: str
    record: str = Field(description="Record folder, relative to the project root when inside.")
    at: datetime
    by: str
    reason: str


class Pointer(BaseModel):
    """config/promoted/<cluster>.yaml: a cluster's promoted release and the earlier ones."""

    model_config = _FROZEN

    current: PromotedEntry
    history: list[PromotedEntry] = Field(default=[], description="Earlier promotions.")


class LogEntry(BaseModel):
    """One line of the promotions log."""

    model_config = _FROZEN

    at: datetime
    action: Literal[
        "promoted", "rejected", "no-decision", "deployed", "deploy-failed", "rolled-back"
    ]
    release: str
    by: str
    reason: str
    cluster: str | None = Field(
        default=None, description="The cluster whose pointer moved (absent in older lines)."
    )
    build_digest: str | None = None
    record: str | None = None
    evidence: list[str] = Field(default=[], description="Evidence folders of failed boots.")
    detail: str = ""


# -- pure rules ----------------------------------------------------------------------------------


def refusal_reasons(record: Record | None, release: Release, digest: str) -> list[str]:
    """Why `release` may not be promoted with build `digest`; empty when every gate passed.

    A gate counts when it passed, or when it was skipped because this release disables it.
    """
    if record is None:
        return [f"{release.name}: no published record; qualify it first"]
    problems: list[str] = []
    if record.build_digest != digest:
        problems.append(
            f"record {record.name} qualified build {record.build_digest[:12]}, but the build "
            f"that would be deployed now is {digest[:12]}; qualify again"
        )
    for gate in GATES:
        stage = record.stages.get(gate)
        if stage is None:
            problems.append(f"gate {gate} missing from record {record.name}")
        elif stage.outcome == "failed":
            problems.append(f"gate {gate} failed in record {record.name}: {stage.reason}")
        elif stage.outcome != "passed" and getattr(release.gates, gate).enabled:
            problems.append(f"gate {gate} was {stage.outcome} in record {record.name}")
    if not problems and not verdict_passes(record.verdict):
        problems.append(f"record {record.name} verdict is {record.verdict!r}")
    return problems


def promoted(pointer: Pointer | None, entry: PromotedEntry) -> Pointer:
    """The pointer after promoting `entry` (the current one moves into history)."""
    if pointer is None:
        return Pointer(current=entry)
    return Pointer(current=entry, history=[pointer.current, *pointer.history])


def rolled_back(pointer: Pointer | None) -> Pointer:
    """The pointer after returning to the previous promoted release."""
    if pointer is None or not pointer.history:
        raise PromotionError("no previous promoted release to roll back to")
    return Pointer(current=pointer.history[0], history=pointer.history[1:])


def spot_check_prompts(hashes: Mapping[str, Any], count: int) -> list[Prompt]:
    """The first `count` short prompts of a record's determinism hashes, as they were sent."""
    chosen: list[Prompt] = []
    for prompt_id, entry in hashes.items():
        if prompt_id == LONG_ID or not isinstance(entry, Mapping) or "prompt" not in entry:
            continue
        chosen.append(
            Prompt(id=prompt_id, text=str(entry["prompt"]), max_tokens=int(entry["max_tokens"]))
        )
        if len(chosen) == count:
            break
    return chosen


def spot_check_differences(
    expected: Mapping[str, Any], got: Mapping[str, Mapping[str, str]]
) -> list[str]:
    """Prompts whose tokens or logprobs hash differs from the record's."""
    found: list[str] = []
    for prompt_id, hashes in got.items():
        want = expected[prompt_id]
        for kind in ("tokens", "logprobs"):
            if hashes[kind] != want.get(kind):
                found.append(f"{prompt_id}: {kind} differ from the record")
    return found


def pointer_file(cluster: str) -> Path:
    """A cluster's pointer, relative to the project root; SpecError for a name unfit for a path.

    Cluster names are checked by the cluster spec (letters, digits, `_.-`, no leading dot), so a
    name never leaves `config/promoted/`; a name given some other way is checked the same way.
    """
    if not re.fullmatch(CLUSTER_NAME, cluster):
        raise SpecError(
            f"{cluster!r} is not a cluster name",
            key="cluster",
            expected=f"a name like {CLUSTER_NAME}",
        )
    return POINTER_DIR / f"{cluster}.yaml"


def relative_to_root(path: Path, root: Path) -> str:
    """A path as stored in the pointer and log: relative to the project root when inside it."""
    resolved = path.resolve()
    return str(resolved.relative_to(root)) if resolved.is_relative_to(root) else str(resolved)


# -- pointer and log -----------------------------------------------------------------------------


def read_pointer(root: Path, cluster: str = DEFAULT_CLUSTER) -> Pointer | None:
    """The cluster's promoted pointer, or None before the first promotion.

    A cluster without a file of its own starts from the legacy project-wide pointer, if any.
    """
    path = pointer_source(root, cluster)
    if path is None:
        return None
    try:
        return Pointer.model_validate(yaml.safe_load(path.read_text()))
    except (ValidationError, yaml.YAMLError) as error:
        raise SpecError(
            str(error).splitlines()[0], file=path, expected="a promoted pointer"
        ) from None


def pointer_source(root: Path, cluster: str) -> Path | None:
    """The file the cluster's pointer is read from: its own, else the legacy one, else None."""
    own = root / pointer_file(cluster)
    if own.is_file():
        return own
    legacy = root / LEGACY_POINTER_FILE
    return legacy if legacy.is_file() else None


def inherits_legacy(root: Path, cluster: str) -> bool:
    """Whether the cluster's pointer is still the legacy project-wide `config/promoted.yaml`."""
    return pointer_source(root, cluster) == root / LEGACY_POINTER_FILE


@contextmanager
def pointer_lock(root: Path) -> Iterator[None]:
    """Hold the `config/` folder exclusively (flock, released by the kernel if we die).

    One lock for every cluster's pointer and the legacy file beside them: pointer updates are
    rare and short, and a cluster's first write reads the legacy file.
    """
    folder = root / LEGACY_POINTER_FILE.parent
    folder.mkdir(parents=True, exist_ok=True)
    handle = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)  # closing the last descriptor releases the lock


def switch_pointer(
    root: Path, cluster: str, change: Callable[[Pointer | None], Pointer]
) -> tuple[Pointer | None, Pointer]:
    """Apply `change` to the cluster's pointer under `pointer_lock`; (before, after)."""
    with pointer_lock(root):
        before = read_pointer(root, cluster)
        after = change(before)
        write_pointer(root, after, cluster)
        return before, after


def restore_pointer(root: Path, cluster: str, expected: Pointer, original: Pointer | None) -> bool:
    """Put `original` back (no pointer when None) if the cluster's pointer is still `expected`.

    False when another promotion changed the pointer meanwhile: it is left as that one wrote it.
    """
    with pointer_lock(root):
        if read_pointer(root, cluster) != expected:
            return False
        if original is None:
            (root / pointer_file(cluster)).unlink(missing_ok=True)
        else:
            write_pointer(root, original, cluster)
        return True


def write_pointer(root: Path, pointer: Pointer, cluster: str = DEFAULT_CLUSTER) -> Path:
    """Replace the cluster's pointer atomically (temporary file, fsync, rename)."""
    path = root / pointer_file(cluster)
    path.parent.mkdir(parents=True, exist_ok=True)
    header = "# Written by `sparkgate promote/approve/rollback`; do not edit by hand.\n"
    data = pointer.model_dump(mode="json")
    write_text(path, header + yaml.safe_dump(data, sort_keys=False))
    return path


def append_log(root: Path, entry: LogEntry) -> Path:
    """Append one line to the promotions log (one write of a whole line, then fsync)."""
    path = root / LOG_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (entry.model_dump_json() + "\n").encode()
    handle = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(handle, line)
        os.fsync(handle)
    finally:
        os.close(handle)
    return path


def read_log(root: Path) -> list[LogEntry]:
    """Every entry of the promotions log, oldest first."""
    path = root / LOG_FILE
    if not path.is_file():
        return []
    return [LogEntry.model_validate_json(line) for line in path.read_text().splitlines() if line]


# -- promote -------------------------------------------------------------------------------------


def checked_entry(
    release_file: Path,
    *,
    by: str,
    reason: str,
    root: Path,
    state: Path,
    say: LineSink,
    shape: str | None = None,
) -> PromotedEntry:
    """The entry to promote, after the refusal rules; raises PromotionError naming each gap.

    With `shape` (a named cluster's) only a record of that cluster shape counts: a release
    qualified on a TP3 triangle proves nothing about booting on a TP4 ring.
    """
    release = load_release(release_file)
    experiments = root / "experiments"
    record = latest_record(experiments, release.name, shape=shape)
    if record is None and shape is not None:
        others = published_shapes(experiments, release.name)
        if others:
            raise PromotionError(
                f"refusing {release.name} on a {shape} cluster: its records are on "
                f"{', '.join(others)} only; qualify it on {shape} first"
            )
    digest = _deployable_digest(release, record, state, say)
    problems = refusal_reasons(record, release, digest)
    if problems or record is None:
        raise PromotionError(f"refusing to promote {release.name}: " + "; ".join(problems))
    return PromotedEntry(
        release=release.name, release_file=relative_to_root(release_file, root),
        build_digest=digest, record=relative_to_root(experiments / record.name, root),
        at=datetime.now(UTC), by=by, reason=reason,
    )  # fmt: skip


def _deployable_digest(release: Release, record: Record | None, state: Path, say: LineSink) -> str:
    """The digest of what a deploy would run now.

    A source build is built again (content-addressed: nothing changed, nothing rebuilt) so a
    changed tree is caught. An image build is never rebuilt: a deploy runs the image ID its
    record qualified, or the ID the release pins.
    """
    if release.build.makes_image:
        return release.build.image_id or (record.build_digest if record is not None else "")
    return build_release(release, state / "build-cache", say).digest


def deployed_release(release: Release, entry: PromotedEntry, record: Record) -> Release:
    """The release a deploy boots: an image build pinned to the image ID its record qualified."""
    if not release.build.makes_image:
        return release
    built = record.documents.get("build.json", {}).get("built", {})
    return pinned(release, str(built.get("tag") or entry.build_digest), entry.build_digest)


def target_cluster(
    cluster: str | None, cluster_file: Path | str | None
) -> tuple[str, Cluster | None]:
    """Whose pointer moves, and the cluster to deploy to (None: no deploy).

    With a cluster file, its `name` names the pointer; else `cluster`, else the default cluster.
    """
    if cluster_file is None:
        name = cluster or DEFAULT_CLUSTER
        pointer_file(name)  # a name unfit for a path is refused before anything moves
        return name, None
    loaded = load_model(cluster_file, Cluster)
    if cluster is not None and cluster != loaded.name:
        raise SpecError(
            f"the deploy target is cluster {loaded.name!r}, but the pointer of {cluster!r} was "
            "named", file=cluster_file, key="name", expected=repr(cluster),
        )  # fmt: skip
    return loaded.name, loaded


def promote_release(
    release_file: Path | str,
    *,
    by: str,
    reason: str,
    cluster: str | None = None,
    cluster_file: Path | str | None = None,
    shape: str | None = None,
    say: LineSink = silent,
) -> Pointer:
    """Promote a qualified release on one cluster's pointer (default: the default cluster).

    With a cluster file, that cluster's pointer moves and the release is deployed there (rolled
    back on failure). Only a record of the cluster's shape counts: the deploy target's, else
    `shape` (the cluster the operator named); with neither, a record of any shape.
    """
    root, state = project_root(), state_dir()
    name, target = target_cluster(cluster, cluster_file)
    entry = checked_entry(
        Path(release_file), by=by, reason=reason, root=root, state=state, say=say,
        shape=target.shape if target is not None else shape,
    )  # fmt: skip
    legacy = inherits_legacy(root, name)
    before, after = switch_pointer(root, name, lambda pointer: promoted(pointer, entry))
    _say_legacy(legacy, name, say)
    append_log(root, _log(entry, "promoted", cluster=name))
    say(
        f"promoted {entry.release} on {name} (build {entry.build_digest[:12]}, "
        f"record {entry.record})"
    )
    if target is None:
        return after
    problem, evidence = _guarded_deploy(
        target, entry, root=root, state=state, say=say, expected=after, original=before
    )
    if problem is None:
        append_log(root, _log(entry, "deployed", cluster=name, detail=f"on {name}"))
        return after
    append_log(root, _log(entry, "deploy-failed", cluster=name, detail=problem, evidence=evidence))
    say(f"deploy of {entry.release} failed: {problem}; rolling back")
    if not restore_pointer(root, name, after, before):
        raise PromotionError(
            f"deploy of {entry.release} failed: {problem}; the pointer was changed by another "
            "promotion meanwhile and is left as that one wrote it "
            f"(evidence: {', '.join(evidence) or 'none'})"
        )
    if before is None:  # nothing was promoted before: no pointer, as before
        raise PromotionError(
            f"deploy of {entry.release} failed and there is no previous promoted release: "
            f"{problem} (evidence: {', '.join(evidence) or 'none'})"
        )
    back, back_evidence = _deploy_or_problem(
        target, before.current, root=root, state=state, say=say
    )
    detail = f"automatic, after the deploy of {entry.release} failed: {problem}"
    if back is not None:
        detail += f"; the previous release did not verify either: {back}"
    append_log(
        root,
        _log(
            before.current, "rolled-back", cluster=name, by=by, reason=reason, detail=detail,
            evidence=[*evidence, *back_evidence],
        ),
    )  # fmt: skip
    raise PromotionError(
        f"deploy of {entry.release} failed: {problem}; rolled back to {before.current.release}"
        + (" (verified)" if back is None else f" which failed too: {back}")
        + f"; evidence: {', '.join(evidence) or 'none'}"
    )


def _say_legacy(legacy: bool, cluster: str, say: LineSink) -> None:
    if legacy:
        say(
            f"{cluster} had no pointer of its own: started from the project-wide "
            f"{LEGACY_POINTER_FILE} (left as it is) and wrote {pointer_file(cluster)}"
        )


def rollback(
    *,
    by: str,
    reason: str,
    cluster: str | None = None,
    cluster_file: Path | str | None = None,
    say: LineSink = silent,
) -> Pointer:
    """Return one cluster's pointer to its previous release on purpose (deploy it with a file).

    Every other cluster's pointer stays as it is.
    """
    root, state = project_root(), state_dir()
    name, target = target_cluster(cluster, cluster_file)
    legacy = inherits_legacy(root, name)
    try:
        before, restored = switch_pointer(root, name, rolled_back)
    except PromotionError as error:  # nothing to roll back to: nothing moved
        raise PromotionError(f"{name}: {error}") from None
    _say_legacy(legacy, name, say)
    problem, evidence = None, list[str]()
    if target is not None:
        problem, evidence = _guarded_deploy(
            target,
            restored.current,
            root=root,
            state=state,
            say=say,
            expected=restored,
            original=before,
        )
    detail = "on purpose" + ("" if problem is None else f"; deploy failed: {problem}")
    append_log(
        root,
        _log(restored.current, "rolled-back", cluster=name, by=by, reason=reason, detail=detail,
             evidence=evidence),
    )  # fmt: skip
    if problem is not None:
        raise PromotionError(
            f"{name}: rolled back to {restored.current.release} but it failed: {problem}"
        )
    say(f"rolled back {name} to {restored.current.release}")
    return restored


def _deploy_or_problem(
    cluster: Cluster, entry: PromotedEntry, *, root: Path, state: Path, say: LineSink
) -> tuple[str | None, list[str]]:
    """`deploy`, with any unexpected exception turned into a problem (so it is rolled back)."""
    try:
        return deploy(cluster, entry, root=root, state=state, say=say)
    except Exception as error:  # noqa: BLE001 - any crash of a deploy is a failed deploy
        return f"deploy crashed: {type(error).__name__}: {error}", []


def _guarded_deploy(
    cluster: Cluster,
    entry: PromotedEntry,
    *,
    root: Path,
    state: Path,
    say: LineSink,
    expected: Pointer,
    original: Pointer | None,
) -> tuple[str | None, list[str]]:
    """Deploy `entry`; when interrupted (Ctrl-C, SIGTERM), put the pointer back, then stop.

    The cluster lock and whatever the deploy started are released by its own cleanup on the
    way out; the pointer never names a release that was not deployed.
    """
    try:
        return _deploy_or_problem(cluster, entry, root=root, state=state, say=say)
    except BaseException:
        restored = restore_pointer(root, cluster.name, expected, original)
        append_log(
            root,
            _log(
                entry, "rolled-back", cluster=cluster.name,
                detail="deploy interrupted; "
                + ("pointer restored" if restored else "pointer changed meanwhile, left as is"),
            ),
        )  # fmt: skip
        raise


def _log(
    entry: PromotedEntry,
    action: Literal["promoted", "deployed", "deploy-failed", "rolled-back"],
    *,
    cluster: str,
    by: str | None = None,
    reason: str | None = None,
    detail: str = "",
    evidence: Sequence[str] = (),
) -> LogEntry:
    return LogEntry(
        at=datetime.now(UTC), action=action, release=entry.release, by=by or entry.by,
        reason=entry.reason if reason is None else reason, cluster=cluster,
        build_digest=entry.build_digest,
        record=entry.record, evidence=list(evidence), detail=detail,
    )  # fmt: skip


def log_rejection(release: str, *, by: str, reason: str, cluster: str | None = None) -> None:
    """Record a rejection on a cluster (the release stays unpromoted there)."""
    append_log(
        project_root(),
        LogEntry(
            at=datetime.now(UTC), action="rejected", release=release, by=by, reason=reason,
            cluster=cluster,
        ),
    )  # fmt: skip


# -- deploy --------------------------------------------------------------------------------------


def deploy(
    cluster: Cluster, entry: PromotedEntry, *, root: Path, state: Path, say: LineSink
) -> tuple[str | None, list[str]]:
    """Stop what runs, start `entry`, check health and a spot check; (problem, evidence).

    A release that fails is stopped again; one that passes is left serving.
    """
    record = read_record(root / entry.record)
    release = deployed_release(load_release(root / entry.release_file), entry, record)
    quiet = NullObserver()  # a deploy has no stage board; its lines go to `say`
    # no concurrency slot: a deploy only takes the lock, as it always did
    command = f"deploy {entry.release}"
    with held_cluster(cluster, command=command, observer=quiet, slot=False) as held:
        running = load_session(state, cluster.name)
        if running is not None:
            say(f"stopping {running.release} on {cluster.name}")
            stop_session(cluster, running, held.transports, state)
        return _start_and_verify(
            cluster, release, entry, transports=held.transports, root=root, state=state,
            say=say,
        )  # fmt: skip


def _start_and_verify(
    cluster: Cluster,
    release: Release,
    entry: PromotedEntry,
    *,
    transports: dict[str, Transport],
    root: Path,
    state: Path,
    say: LineSink,
) -> tuple[str | None, list[str]]:
    say(f"starting {entry.release} on {cluster.name}")
    try:
        started = start_release(cluster, release, transports, state, say=say)
    except BootError as error:
        reason = boot_failure_reason("boot failed", str(error))
        return reason, [str(error.evidence)] if error.evidence else []
    except SparkgateError as error:
        return f"could not start: {error}", []
    problem = _verify(cluster, release, entry, started.session.handles, root)
    if problem is not None:
        stop_session(cluster, started.session, transports, state)
        return problem, []
    say(f"{entry.release} serves on {cluster.name}, spot check passed")
    return None, []


def _verify(
    cluster: Cluster, release: Release, entry: PromotedEntry, handles: Sequence[Any], root: Path
) -> str | None:
    head = next(handle for handle in handles if handle.head)
    if not head.plan.ready_url or not probe_ready(head.plan.ready_url):
        return f"health check failed: {head.plan.ready_url} does not answer"
    hashes = record_hashes(read_record(root / entry.record))
    if not hashes:
        return f"record {entry.record} has no determinism hashes to spot-check against"
    prompts = spot_check_prompts(hashes, SPOT_CHECK_PROMPTS)
    if not prompts:
        return f"record {entry.record} names no short prompt to spot-check"
    top = release.gates.determinism.top_logprobs if release.gates.determinism.logprobs else 0
    try:
        got = asyncio.run(_spot_check(api_base_url(cluster), prompts, top))
    except (SparkgateError, OSError, ValueError) as error:
        return f"spot check could not run: {error}"
    differences = spot_check_differences(hashes, got)
    return "spot check: " + "; ".join(differences) if differences else None


async def _spot_check(
    base_url: str, prompts: Sequence[Prompt], top: int
) -> dict[str, dict[str, str]]:
    async with open_client(base_url, top) as client:
        answers = [await complete(client, prompt) for prompt in prompts]
    outputs = [output_from_completion(a.prompt, a.response) for a in answers]
    return {o.prompt: {"tokens": tokens_hash(o), "logprobs": logprobs_hash(o)} for o in outputs}


# -- the paused qualification --------------------------------------------------------------------


def resume_paused(release: str, decision: Decision, cluster_file: Path | None = None) -> str:
    """Find the paused qualification of `release` (a name or its file) and resume it; the run id.

    With `cluster_file`, only a qualification on that cluster is resumed; without it, the one
    waiting run of `release`, refused (naming their clusters) when runs on several clusters wait.

    Talks to the server the waiting run polls: PREFECT_API_URL, else this project's running
    embedded server (a waiting `sparkgate qualify` keeps one). Retries while a database is
    locked or a server answers 503.
    """
    from flows.pipeline.embedded import running_backend  # noqa: PLC0415

    with running_backend() as url:
        if url is None:
            raise PromotionError(
                f"no paused qualification of {release} is waiting for a decision "
                "(no `sparkgate qualify` of this project is running)"
            )
        return _resume_on(url, release, decision, cluster_file)


def _resume_on(url: str, release: str, decision: Decision, cluster_file: Path | None) -> str:
    paused = FlowRunFilter(
        state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.PAUSED]))
    )
    named = FlowFilter(name=FlowFilterName(any_=[QUALIFY_FLOW]))
    try:
        with get_client(sync_client=True) as client:
            runs = _retry(lambda: client.read_flow_runs(flow_filter=named, flow_run_filter=paused))
    except (RuntimeError, OSError, httpx.TransportError) as error:  # the server went away
        raise PromotionError(f"could not reach the Prefect API at {url}: {error}") from error
    run = waiting_run(runs, release, cluster_file)
    _retry(lambda: resume_flow_run(run.id, run_input=decision.model_dump(mode="json")))
    return str(run.id)


def waiting_run(runs: Sequence[_Run], release: str, cluster_file: Path | None) -> _Run:
    """The paused run a decision about `release` (on `cluster_file`, when given) is for.

    Refused when none waits, and when runs of `release` wait on several clusters and none was
    named: an approval moves the pointer of the run's cluster, so it must not be a guess.
    """
    matching = [run for run in runs if matches_release(release, run.parameters)]
    if cluster_file is not None:
        matching = [run for run in matching if matches_cluster(cluster_file, run.parameters)]
    if not matching:
        on = f" on {cluster_file}" if cluster_file is not None else ""
        raise PromotionError(f"no paused qualification of {release}{on} is waiting for a decision")
    clusters = sorted({str(run.parameters.get("cluster_file", "")) for run in matching})
    if len(clusters) > 1:
        raise PromotionError(
            f"qualifications of {release} wait on several clusters ({', '.join(clusters)}); "
            "name one with -c CLUSTER"
        )
    return matching[0]


def matches_release(release: str, parameters: Mapping[str, Any]) -> bool:
    """Whether a run qualifies `release`: that very file when a file is given, else by name."""
    file = Path(str(parameters.get("release_file", "")))
    given = Path(release)
    if given.is_file():
        return file == given.resolve()
    return file.stem == release


def matches_cluster(cluster_file: Path, parameters: Mapping[str, Any]) -> bool:
    """Whether a qualification run ran on the cluster of `cluster_file` (the same file)."""
    given = parameters.get("cluster_file")
    return given is not None and Path(str(given)).resolve() == cluster_file.resolve()


def _retry(call: Callable[[], _T]) -> _T:
    for attempt in range(RESUME_ATTEMPTS):
        try:
            return call()
        except Exception as error:
            text = str(error)
            if attempt + 1 == RESUME_ATTEMPTS or not (
                "database is locked" in text or "503" in text
            ):
                raise
            time.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")


def decide_promotion(
    release_file: str,
    release: Release,
    record: Path,
    *,
    wait: bool,
    say: LineSink,
    cluster_file: str | None = None,
) -> str:
    """At the end of a passing qualification: wait for a person, then promote or reject.

    Runs inside the qualify flow (it pauses that flow run). Without `wait` the release stays
    qualified and awaits `sparkgate promote`. A rejection is logged and raised. The decision is
    about the cluster the record was qualified on (its `cluster_name`): an approval moves that
    cluster's pointer only.
    """
    if not wait:
        return AWAITING
    described = described_record(record)
    cluster = described.cluster_name if described is not None else None
    say(f"waiting for a decision: sparkgate approve {release.name} | reject {release.name}")
    form = Decision.with_initial_data(
        description=decision_description(release.name, described, str(record)),
        decision="approve",
    )
    timeout = pause_timeout_s(release)
    try:
        answer = pause_flow_run(wait_for_input=form, timeout=timeout, poll_interval=POLL_S)
    except FlowPauseTimeout as error:
        entry, message = no_decision(
            release, release_file, record, timeout, cluster=cluster, cluster_file=cluster_file
        )
        append_log(project_root(), entry)
        raise PromotionError(message) from error
    if answer is None:  # pragma: no cover - pause_flow_run with an input always returns one
        raise PromotionError(f"{release.name}: the decision came back empty")
    if answer.decision == "reject":
        log_rejection(release.name, by=answer.by, reason=answer.reason, cluster=cluster)
        raise PromotionError(f"{release.name} rejected by {answer.by}: {answer.reason}")
    promote_release(release_file, by=answer.by, reason=answer.reason, cluster=cluster, say=say)
    return f"promoted by {answer.by}"


def pause_timeout_s(release: Release) -> int:
    """How long the paused qualification waits: promotion.timeout_s, whole seconds, at least 1."""
    return max(1, math.ceil(release.promotion.timeout_s))


def no_decision(
    release: Release,
    release_file: str,
    record: Path,
    timeout: int,
    *,
    cluster: str | None = None,
    cluster_file: str | None = None,
) -> tuple[LogEntry, str]:
    """The log line and the flow's failure message when nobody decided within `timeout` s.

    The record stays published and qualified; only the wait ended, so `promote` can decide later
    for the cluster it qualified on: the command shown names its cluster file when known (a
    cluster's name is a `-c` only when config/NAME.yaml holds it).
    """
    stored = relative_to_root(record, project_root())
    detail = f"no decision within {timeout} s (promotion.timeout_s)"
    entry = LogEntry(
        at=datetime.now(UTC), action="no-decision", release=release.name, by="sparkgate",
        reason="", cluster=cluster, record=stored, detail=detail,
    )  # fmt: skip
    chosen = cluster_file or cluster
    on = f" -c {chosen}" if chosen is not None else ""
    message = (
        f"{release.name}: qualified, but {detail}; the record {stored} stands: decide later "
        f"with `sparkgate promote {release_file}{on}`"
    )
    return entry, message


def decision_description(release: str, record: Record | None, path: str) -> str:
    """The markdown shown above the UI's resume form: what a person approves, from the record.

    The verdict and each gate's outcome, the benchmark's decision with its largest gated changes
    and their intervals (the rows `records --brief` names), and where the record is, so the
    decision can be made from the form alone. Without a readable record, the path only.
    """
    lines = [f"### Promote {release}?", ""]
    if record is not None:
        against = f" against {record.previous}" if record.previous else ""
        lines.append(f"- **Verdict:** {record.verdict or record.status}{against}")
        gates = [f"{gate} {record.stages[gate].outcome}" for gate in GATES if gate in record.stages]
        if gates:
            lines.append(f"- **Gates:** {', '.join(gates)}")
        lines.extend(_benchmark_lines(record))
    lines += [f"- **Record:** `{path}`", ""]
    lines.append(f"Approve to promote it (`sparkgate approve {release}`), or reject with a reason.")
    return "\n".join(lines)


def _benchmark_lines(record: Record) -> list[str]:
    stage = record.stages.get("benchmark")
    if stage is None:
        return []
    summary = stage.summary_as(BenchmarkSummary)
    if summary is None or not summary.decision:
        reason = f" ({stage.reason})" if stage.reason else ""
        return [f"- **Benchmark:** {stage.outcome}{reason}"]
    arms = f"{len(summary.arms)} arms ({', '.join(summary.arms)})"
    lines = [f"- **Benchmark:** {summary.decision} after {arms}"]
    changes = headline_changes(summary)
    if changes:
        lines.append("- **Largest gated changes** [95% interval]:")
        lines.extend(f"  - {change}" for change in changes)
    return lines


def described_record(path: Path) -> Record | None:
    """The published record the pause describes, or None when it cannot be read."""
    try:
        return read_record(path)
    except SparkgateError:
        return None


@flow(name="promote-release", validate_parameters=False)
def promote_flow(
    release_file: str,
    by: str,
    reason: str = "",
    cluster_file: str | None = None,
    cluster: str | None = None,
) -> dict[str, Any]:
    """The promotion as a Prefect flow (for deployments): promote on a cluster, maybe deploy.

    With `cluster_file` that cluster's pointer moves and the release is deployed there; with
    only `cluster` (a name) that cluster's pointer moves; with neither, the default cluster's.
    """
    pointer = promote_release(
        release_file, by=by, reason=reason, cluster=cluster, cluster_file=cluster_file
    )
    return dict(pointer.model_dump(mode="json"))
