"""Import a report of the recipe's own `bin/spark bench` (schema 1) as a sparkgate arm.

A cluster that already has recipe reports can use them as "the previous release": every decode
sample becomes a sample (its per-sample metrics as written, its request receipts verbatim), every
prefill receipt becomes a prefill sample (prefill_tps = prompt_tokens / ttft_s, as the recipe
computes it), and the recipe's stored summaries travel along so a comparison can show they are
reproduced. Sections we do not measure (quality, thermal, memory, ...) are kept in `extra`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import JsonValue

from flows.bench.hosts import manifest_facts
from flows.bench.report import ArmFileError, ArmReport, Point, Sample
from flows.bench.stats import Described
from flows.errors import BenchError

RECIPE_SCHEMA = 1
DECODE_GATE = ["tps", "step_ms"]
PREFILL_GATE = ["prefill_tps"]
_DESCRIBED_KEYS = set(Described.model_fields)
_MOVED = {"schema", "started_utc", "finished_utc", "identity", "workload", "suites"}


def _need(mapping: Any, key: str, where: str, kind: type) -> Any:
    """mapping[key] checked for type, or a BenchError naming the key path."""
    if not isinstance(mapping, dict) or key not in mapping:
        raise BenchError(f"{where}: missing key {key!r}")
    value = mapping[key]
    if not isinstance(value, kind):
        raise BenchError(f"{where}.{key}: expected {kind.__name__}, got {type(value).__name__}")
    return value


def _split_point(stored: dict[str, Any]) -> tuple[dict[str, Described], dict[str, JsonValue]]:
    """A recipe point -> (its describe() objects, its other fields)."""
    summaries: dict[str, Described] = {}
    info: dict[str, JsonValue] = {}
    for key, value in stored.items():
        if isinstance(value, dict) and set(value) == _DESCRIBED_KEYS:
            summaries[key] = Described.model_validate(value)
        else:
            info[key] = value
    return summaries, info


def _decode_sample(raw: dict[str, Any], where: str) -> Sample:
    metrics = {
        k: float(v)
        for k, v in raw.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and k != "requests"
    }
    receipts = _need(raw, "requests", where, list)
    return Sample(metrics=metrics, legacy_receipts=receipts)


def _prefill_sample(receipt: dict[str, Any]) -> Sample:
    """One prefill request: prefill_tps = prompt_tokens / ttft_s for a successful request."""
    metrics: dict[str, float] = {}
    ttft, tokens = receipt.get("ttft_s"), receipt.get("prompt_tokens")
    if receipt.get("ok") and ttft and tokens:
        metrics = {"prefill_tps": tokens / ttft, "ttft_s": float(ttft)}
    return Sample(metrics=metrics, legacy_receipts=[receipt])


def _points(suites: dict[str, Any], where: str) -> dict[str, Point]:
    points: dict[str, Point] = {}
    decode = suites.get("decode") or {}
    for label, stored in (decode.get("points") or {}).items():
        raw = (decode.get("samples") or {}).get(label, [])
        summaries, info = _split_point(stored)
        samples = [
            _decode_sample(s, f"{where}.decode.samples.{label}[{i}]") for i, s in enumerate(raw)
        ]
        points[f"decode/{label}"] = Point(
            workload="decode", gate=DECODE_GATE, samples=samples, info=info, stored=summaries
        )
    prefill = suites.get("prefill") or {}
    for size, stored in (prefill.get("points") or {}).items():
        raw = (prefill.get("samples") or {}).get(size, [])
        summaries, info = _split_point(stored)
        points[f"prefill/{size}"] = Point(
            workload="prefill",
            gate=PREFILL_GATE,
            samples=[_prefill_sample(r) for r in raw],
            info=info,
            stored=summaries,
        )
    return points


def import_recipe_report(path: Path, *, label: str | None = None) -> ArmReport:
    """Turn a recipe `bench.json` (schema 1) into an arm report, keeping every receipt.

    Raises:
        BenchError: when the file is missing, not JSON, or not a schema-1 recipe report.
    """
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as error:
        raise BenchError(f"{path}: no such file") from error
    except json.JSONDecodeError as error:
        raise BenchError(f"{path}:{error.lineno}: not JSON: {error.msg}") from error
    where = str(path)
    if not isinstance(data, dict) or data.get("schema") != RECIPE_SCHEMA:
        raise BenchError(f"{where}: schema: expected a recipe bench report with schema 1")
    suites = _need(data, "suites", where, dict)
    workload = _need(data, "workload", where, dict)
    suite_names = workload.get("suites") or sorted(suites)
    extra = {k: v for k, v in data.items() if k not in _MOVED}
    extra["suites"] = {k: v for k, v in suites.items() if k not in ("decode", "prefill")}
    return ArmReport(
        label=label or path.stem,
        source=f"recipe-bench-1:{path.name}",
        url=str(workload.get("url", "")),
        suite="recipe:" + ",".join(str(s) for s in suite_names),
        started_utc=str(_need(data, "started_utc", where, str)),
        finished_utc=data.get("finished_utc"),
        identity=_need(data, "identity", where, dict),
        workload=workload,
        points=_points(suites, where + ".suites"),
        discarded=data.get("discarded_samples") or [],
        extra=extra,
    )


MANIFEST_KEY = "benchmark_reference"
"""The key of a recipe release manifest that names its benchmark report."""


def is_recipe_manifest(data: object) -> bool:
    """A recipe release manifest (baseline-*.json): it names its benchmark report."""
    return isinstance(data, dict) and isinstance(data.get(MANIFEST_KEY), str)


def import_recipe_manifest(path: Path) -> ArmReport:
    """The benchmark report a recipe release manifest names, imported, with the manifest's
    `hosts:` as the arm's host facts.

    The manifest names its report by the recipe repository's path
    (`manifests/benchmarks/<name>.json`); it is looked for at that path beside the manifest,
    then by its file name beside it (how published reports are kept together).

    Raises:
        ArmFileError: when the manifest is not JSON, or its report is in neither place.
    """
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as error:
        raise ArmFileError(f"{path}: no such file") from error
    except json.JSONDecodeError as error:
        raise ArmFileError(f"{path}:{error.lineno}: not JSON: {error.msg}") from error
    if not is_recipe_manifest(data):
        raise ArmFileError(f"{path}: {MANIFEST_KEY}: expected the path of its benchmark report")
    named = Path(data[MANIFEST_KEY])
    tried = [path.parent / named, path.parent / named.name]
    report = next((file for file in tried if file.is_file()), None)
    if report is None:
        raise ArmFileError(
            f"{path}: {MANIFEST_KEY}: {named} is not beside the manifest "
            f"(looked for {', '.join(str(file) for file in tried)})"
        )
    arm = import_recipe_report(report, label=path.stem)
    return arm.model_copy(update={"host_facts": manifest_facts(data, str(path))})
