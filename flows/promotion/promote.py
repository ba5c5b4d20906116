"""Promote and roll back one cluster's pointer, deploying with automatic rollback.

Why it exists: a release reaches production only after every gate passed for the very build
that would be deployed, and only by a named person with a reason. A promotion checks one record:
the one a person was shown (the approval form), passed through and never looked up again; else,
for `sparkgate promote`, the newest published record of the release on the cluster's shape.

A deploy that fails in any way (an unexpected exception included) rolls the pointer back; one
that is interrupted (Ctrl-C, SIGTERM) puts the pointer back as it was before it stops. A pointer
move whose log line cannot be written is undone: no promotion goes unlogged.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from flows.cluster.build.wheel import build_release
from flows.errors import MachineError, PromotionError, SpecError
from flows.lines import LineSink, silent
from flows.promotion.deploy import deploy
from flows.promotion.models import (
    DEFAULT_CLUSTER,
    LEGACY_POINTER_FILE,
    Action,
    LogEntry,
    Pointer,
    PromotedEntry,
)
from flows.promotion.rules import (
    accepted_reason,
    pointer_file,
    promoted,
    refusal_reasons,
    relative_to_root,
    rolled_back,
)
from flows.promotion.store import (
    append_log,
    inherits_legacy,
    restore_pointer,
    switch_pointer,
)
from flows.record import latest_record
from flows.record.model import Record
from flows.record.reader import published_shapes
from flows.settings import project_root, state_dir
from flows.spec.cluster import Cluster
from flows.spec.load import load_model
from flows.spec.release import Release, load_release


def promote_release(
    release_file: Path | str,
    *,
    by: str,
    reason: str,
    cluster: str | None = None,
    cluster_file: Path | str | None = None,
    shape: str | None = None,
    shown: Record | None = None,
    say: LineSink = silent,
    accept_inconclusive: str = "",
) -> Pointer:
    """Promote a qualified release on one cluster's pointer (default: the default cluster).

    A record whose benchmark was inconclusive is promoted only with `accept_inconclusive`, a
    person's reason, kept in the pointer and the log beside who accepted it.

    With `shown` (the record the approval form showed) exactly that record is checked. Else only
    a record of the cluster's shape counts: the deploy target's, else `shape` (the cluster the
    operator named); with neither, a record of any shape. With a cluster file, that cluster's
    pointer moves and the release is deployed there (rolled back on failure).
    """
    root, state = project_root(), state_dir()
    name, target = target_cluster(cluster, cluster_file)
    entry = checked_entry(
        Path(release_file), by=by, reason=reason, root=root, state=state, say=say,
        shape=target.shape if target is not None else shape, shown=shown,
        accept_inconclusive=accept_inconclusive,
    )  # fmt: skip
    legacy = inherits_legacy(root, name)
    before, after = switch_pointer(root, name, lambda pointer: promoted(pointer, entry))
    _say_legacy(legacy, name, say)
    _log_or_undo(root, _log(entry, "promoted", cluster=name), moved=after, before=before)
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


def checked_entry(
    release_file: Path,
    *,
    by: str,
    reason: str,
    root: Path,
    state: Path,
    say: LineSink,
    shape: str | None = None,
    shown: Record | None = None,
    accept_inconclusive: str = "",
) -> PromotedEntry:
    """The entry to promote, after the refusal rules; raises PromotionError naming each gap.

    The record checked is `shown` when given (never looked up again: a release qualified on two
    shapes has two records, and the approval is for the one a person saw). Else with `shape`
    only a record of that cluster shape counts: a release qualified on a TP3 triangle proves
    nothing about booting on a TP4 ring.
    """
    release = load_release(release_file)
    experiments = root / "experiments"
    record = shown if shown is not None else _latest(experiments, release.name, shape)
    digest = _deployable_digest(release, record, state, say)
    problems = refusal_reasons(record, release, digest, accept_inconclusive)
    if problems or record is None:
        raise PromotionError(f"refusing to promote {release.name}: " + "; ".join(problems))
    folder = record.folder or experiments / record.name
    return PromotedEntry(
        release=release.name, release_file=relative_to_root(release_file, root),
        build_digest=digest, record=relative_to_root(folder, root), at=datetime.now(UTC), by=by,
        reason=reason, accepted_inconclusive=accepted_reason(record, accept_inconclusive),
    )  # fmt: skip


def _latest(experiments: Path, release: str, shape: str | None) -> Record | None:
    """The newest published record of `release` (on `shape`); refused when only others exist."""
    record = latest_record(experiments, release, shape=shape)
    if record is None and shape is not None:
        others = published_shapes(experiments, release)
        if others:
            raise PromotionError(
                f"refusing {release} on a {shape} cluster: its records are on "
                f"{', '.join(others)} only; qualify it on {shape} first"
            )
    return record


def _deployable_digest(release: Release, record: Record | None, state: Path, say: LineSink) -> str:
    """The digest of what a deploy would run now.

    A source build is built again (content-addressed: nothing changed, nothing rebuilt) so a
    changed tree is caught. An image build is never rebuilt: a deploy runs the image ID its
    record qualified, or the ID the release pins.
    """
    if release.build.makes_image:
        return release.build.image_id or (record.build_digest if record is not None else "")
    return build_release(release, state / "build-cache", say).digest


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
    if target is None:
        line = _log(restored.current, "rolled-back", cluster=name, by=by, reason=reason,
                    detail="on purpose")  # fmt: skip
        _log_or_undo(root, line, moved=restored, before=before)
        say(f"rolled back {name} to {restored.current.release}")
        return restored
    problem, evidence = _guarded_deploy(
        target, restored.current, root=root, state=state, say=say, expected=restored,
        original=before,
    )  # fmt: skip
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


def _say_legacy(legacy: bool, cluster: str, say: LineSink) -> None:
    if legacy:
        say(
            f"{cluster} had no pointer of its own: started from the project-wide "
            f"{LEGACY_POINTER_FILE} (left as it is) and wrote {pointer_file(cluster)}"
        )


def _log_or_undo(root: Path, line: LogEntry, *, moved: Pointer, before: Pointer | None) -> None:
    """Log a pointer move; when the machine cannot write the log, put the pointer back first.

    The failure stays the machine's (MachineError) and says where the pointer is left.
    """
    try:
        append_log(root, line)
    except MachineError as error:
        cluster = line.cluster or DEFAULT_CLUSTER
        try:
            put_back = restore_pointer(root, cluster, moved, before)
        except MachineError as also:
            raise MachineError(f"{error}; and the pointer could not be put back: {also}") from also
        where = "was put back" if put_back else "was moved by another promotion meanwhile"
        raise MachineError(f"{error}; the pointer {where}") from error


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
    action: Action,
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
        accepted_inconclusive=entry.accepted_inconclusive,
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
