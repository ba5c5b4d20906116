"""Deploy a promoted release on a cluster and verify it: stop what runs, start it, check its
readiness URL and a determinism spot check against the record that proved it.

A release that fails is stopped again; one that passes is left serving. Rolling back is the
caller's (`flows.promotion.promote`): this module only says what went wrong and where the boot
evidence is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from flows.cluster.boot.session import load_session, start_release, stop_session
from flows.cluster.build.adopted_image import pinned
from flows.cluster.transport.base import Transport
from flows.engine_api.ready import probe_ready
from flows.errors import BootError, SparkgateError, boot_failure_reason
from flows.gates.base import api_base_url
from flows.gates.determinism.kept import record_hashes
from flows.gates.outputs import logprobs_hash, output_from_completion, tokens_hash
from flows.gates.prompts import Prompt
from flows.gates.traffic import complete, open_client
from flows.lines import LineSink
from flows.pipeline.events import NullObserver
from flows.pipeline.prelude import held_cluster
from flows.promotion.models import PromotedEntry
from flows.promotion.rules import spot_check_differences, spot_check_prompts
from flows.record import read_record
from flows.record.model import Record
from flows.spec.cluster import Cluster
from flows.spec.release import Release, load_release

SPOT_CHECK_PROMPTS = 3


def deploy(
    cluster: Cluster, entry: PromotedEntry, *, root: Path, state: Path, say: LineSink
) -> tuple[str | None, list[str]]:
    """Stop what runs, start `entry`, check health and a spot check; (problem, evidence)."""
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


def deployed_release(release: Release, entry: PromotedEntry, record: Record) -> Release:
    """The release a deploy boots: an image build pinned to the image ID its record qualified."""
    if not release.build.makes_image:
        return release
    built = record.documents.get("build.json", {}).get("built", {})
    return pinned(release, str(built.get("tag") or entry.build_digest), entry.build_digest)


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
