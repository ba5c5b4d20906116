"""Every boot row of a record again, from the raw boots/<mode>.json the gate kept.

The raw file keeps the boot's timeline, the compiles seen after preparation, the metric and the
spot-check outputs; the gate's own `boot_row` over an observation rebuilt from them must give the
figures of the summary (the `what happened` text aside), judged against the reference hashes the
summary keeps.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from flows.cluster.boot.timeline import BootTimeline
from flows.gates.cold_boots.rules import BootObservation, boot_row, rank_figures
from flows.gates.cold_boots.summary import ColdBootsSummary
from flows.gates.outputs import Output, hashes
from flows.gates.story import RecordView, StageView
from flows.spec.cluster import Cluster

BOOT_KEYS = (
    "ready_s",
    "prepare_s_max",
    "kernels",
    "compiled",
    "cached",
    "liveness_wait_s_max",
    "compiles_after_preparation",
    "compiles_metric",
    "spot_check",
    "passed",
)


def boots_recomputed(record: RecordView, stage: StageView) -> list[str]:
    """Differences between each boot row and the one its raw boots/<mode>.json gives."""
    folder = record.folder
    if folder is None:
        return []
    try:
        kernel_cache = Cluster.model_validate(record.cluster).engine.kernel_cache
    except ValidationError as error:
        return [f"cold_boots: the resolved cluster cannot be read: {error}"]
    summary = stage.summary
    if not isinstance(summary, ColdBootsSummary):
        return []
    reference = {prompt: digest.model_dump() for prompt, digest in summary.reference.items()}
    problems: list[str] = []
    for kept in summary.boots:
        file = folder / stage.stage / "boots" / f"{kept.mode}.json"
        if not file.is_file():
            continue
        try:
            raw = json.loads(file.read_text())
            again = boot_row(_observation(raw, kernel_cache, reference))
        except (ValidationError, ValueError, TypeError, KeyError) as error:
            problems.append(f"cold_boots: {file.name} cannot be read again: {error}")
            continue
        problems += [
            f"cold_boots: {kept.mode}: {key} is {getattr(kept, key)!r}, the raw boot gives "
            f"{getattr(again, key)!r}"
            for key in BOOT_KEYS
            if getattr(kept, key) != getattr(again, key)
        ]
    return problems


def _observation(
    raw: dict[str, Any], kernel_cache: str, reference: dict[str, Any]
) -> BootObservation:
    """The gate's BootObservation of one boot, rebuilt from its raw file."""
    emptied = sorted(
        {int(t["rank"]) for t in raw.get("emptied", []) if t.get("kind") == kernel_cache}
    )
    mode = str(raw["mode"])
    if "timeline" not in raw or "compile_events" not in raw:
        error = raw.get("error") or "no timeline"
        text = str(error) if "timeline" not in raw else f"traffic: {error}"
        return BootObservation(mode=mode, emptied_ranks=emptied, error=text)
    timeline = BootTimeline.model_validate(raw["timeline"])
    outputs = [Output.model_validate(o) for o in raw.get("spot") or []]
    mine = hashes(outputs)
    differing = sorted(
        {
            o.prompt
            for o in outputs
            if not isinstance(reference.get(o.prompt), dict)
            or any(reference[o.prompt].get(k) != v for k, v in mine[o.prompt].items())
        }
    )
    judged = bool(reference) and bool(outputs)
    return BootObservation(
        mode=mode,
        emptied_ranks=emptied,
        ready_s=timeline.ready_s,
        ranks=rank_figures(timeline),
        compiles_logged=len(raw.get("compile_events") or []),
        compiles_metric=raw.get("compiles_metric"),
        spot_check=("differs" if differing else "identical") if judged else "not run",
        spot_differing=differing if judged else [],
    )
