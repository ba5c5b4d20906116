"""The on-disk format of one benchmark arm: points, samples and every raw request receipt.

One arm is one boot of one release measured with one suite. Its report keeps the raw receipts
of every request, so any table can be recomputed from it, and it is what `bench compare` reads.
Reports imported from the recipe's `bin/spark bench` use the same models; their receipts are
kept verbatim in `Sample.legacy_receipts` and the recipe's own summaries in `Point.stored`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

from flows.bench.hosts import HostFacts
from flows.bench.stats import Described, describe
from flows.errors import BenchError
from flows.spec.gate_policy import METRICS, Direction

SCHEMA_VERSION: Literal[1] = 1
_FROZEN = ConfigDict(frozen=True, extra="forbid")


def higher_is_better(metric: str) -> bool:
    """Direction of a metric; unknown metrics are refused rather than guessed."""
    if metric not in METRICS:
        raise BenchError(f"unknown metric {metric!r} (known: {', '.join(sorted(METRICS))})")
    return METRICS[metric] is Direction.HIGHER


class Receipt(BaseModel):
    """What happened to one request, as the client saw it; a failure is a receipt too.

    Times are seconds: `sent_s` from the start of the run, every other time from `sent_s`.
    """

    model_config = _FROZEN

    ok: bool = Field(description="the request completed with a 200 and a well-formed stream")
    error: str | None = Field(default=None, description="what went wrong, if anything")
    status: int | None = Field(default=None, description="HTTP status, None if none was read")
    sent_s: float = Field(description="send time, seconds from the start of the run")
    due_s: float | None = Field(default=None, description="scheduled send time (Poisson)")
    ttft_s: float | None = Field(default=None, description="first chunk carrying choices")
    ttfc_s: float | None = Field(default=None, description="first chunk carrying content")
    first_token_s: float | None = Field(default=None, description="first chunk with tokens")
    last_token_s: float | None = Field(default=None, description="last chunk with tokens")
    end_s: float | None = Field(default=None, description="end of the stream")
    chunk_s: list[float] = Field(default_factory=list, description="arrival of each choice chunk")
    chunk_tokens: list[int] = Field(
        default_factory=list, description="token ids per chunk, when the server returns them"
    )
    prompt_tokens: int | None = Field(default=None, description="usage.prompt_tokens")
    completion_tokens: int | None = Field(default=None, description="usage.completion_tokens")
    cached_tokens: int | None = Field(default=None, description="usage cached prompt tokens")
    finish_reason: str | None = Field(default=None, description="finish reason of choice 0")
    output_sha256: str | None = Field(default=None, description="SHA-256 of the output")
    hashed: Literal["token_ids", "text"] | None = Field(
        default=None, description="what output_sha256 was computed over"
    )

    @property
    def tpot_s(self) -> float | None:
        """Time per output token after the first: (last - first) / (tokens - 1)."""
        tokens = self.completion_tokens
        if self.first_token_s is None or self.last_token_s is None or not tokens or tokens < 2:
            return None
        return (self.last_token_s - self.first_token_s) / (tokens - 1)


class ClientStats(BaseModel):
    """The client's own cost and lag during a run, so a saturated client is visible."""

    model_config = _FROZEN

    processes: int = Field(description="client processes used")
    wall_s: float = Field(description="wall time of the run")
    cpu_s: float = Field(description="client CPU time (user + system) over all processes")
    chunks: int = Field(description="stream chunks parsed")
    cpu_us_per_chunk: float | None = Field(description="cpu_s / chunks in microseconds")
    parse_lag_p50_ms: float | None = Field(description="read stamp to parsed, median")
    parse_lag_p99_ms: float | None = Field(description="read stamp to parsed, p99")
    loop_lag_p99_ms: float | None = Field(description="event-loop wake-up lateness, p99")
    send_lag_p50_ms: float | None = Field(
        default=None, description="server send to client parse, median (stamping servers)"
    )
    send_lag_p99_ms: float | None = Field(
        default=None, description="server send to client parse, p99 (servers that stamp chunks)"
    )


class Sample(BaseModel):
    """One sample of a point: its metric values and the receipts they came from."""

    model_config = _FROZEN

    metrics: dict[str, float] = Field(description="metric name -> value of this sample")
    receipts: list[Receipt] = Field(default_factory=list, description="our raw receipts")
    engine: dict[str, float] = Field(
        default_factory=dict,
        description="growth of the engine's step counters over the sample (steps, seconds)",
    )
    legacy_receipts: list[dict[str, JsonValue]] = Field(
        default_factory=list, description="raw receipts of an imported recipe report, verbatim"
    )
    attempts: int = Field(default=1, description="tries needed (foreign traffic repeats)")


class Point(BaseModel):
    """A workload point (e.g. decode/prose-c1, prefill/32768) and its samples."""

    model_config = _FROZEN

    workload: str = Field(description="workload kind that produced the point")
    gate: list[str] = Field(description="metrics compared and gated for this point")
    samples: list[Sample] = Field(default_factory=list, description="samples in run order")
    warmup: list[Sample] = Field(
        default_factory=list, description="discarded warm-up samples, kept as raw receipts"
    )
    info: dict[str, JsonValue] = Field(default_factory=dict, description="context, e.g. tokens")
    stored: dict[str, Described] = Field(
        default_factory=dict, description="summaries stored by an imported report (unrounded)"
    )

    def values(self, metric: str) -> list[float]:
        """Every sample's value of a metric (samples without it are skipped)."""
        return [s.metrics[metric] for s in self.samples if metric in s.metrics]

    def summary(self, metric: str) -> Described | None:
        """describe() of the samples, else the imported report's stored summary, else None."""
        values = self.values(metric)
        if values:
            return describe(values)
        return self.stored.get(metric)


class ArmReport(BaseModel):
    """One arm: which release, which suite, against what, and every point it measured."""

    model_config = _FROZEN

    schema_version: Literal[1] = SCHEMA_VERSION
    kind: Literal["bench-arm"] = "bench-arm"
    label: str = Field(description="human label, e.g. the release name")
    source: str = Field(description="'sparkgate' or 'recipe-bench-1:<file>' for imports")
    url: str = Field(description="endpoint measured")
    suite: str = Field(description="suite name")
    started_utc: str = Field(description="start, UTC ISO-8601")
    finished_utc: str | None = Field(default=None, description="end, UTC ISO-8601")
    aborted: str | None = Field(default=None, description="why the arm stopped early, if it did")
    identity: dict[str, JsonValue] = Field(default_factory=dict, description="what was measured")
    workload: dict[str, JsonValue] = Field(default_factory=dict, description="suite as run")
    points: dict[str, Point] = Field(default_factory=dict, description="point name -> point")
    client: ClientStats | None = Field(default=None, description="client cost of the run")
    discarded: list[dict[str, JsonValue]] = Field(
        default_factory=list, description="samples repeated because of foreign traffic"
    )
    extra: dict[str, JsonValue] = Field(
        default_factory=dict, description="other sections of an imported report (thermal ...)"
    )
    host_facts: HostFacts | None = Field(
        default=None,
        description="host facts of the cluster measured (`bench run -c`/`--facts`, a record's "
        "preflight, a recipe manifest's hosts); None: not recorded",
    )


ARM_FILE = "arm.json"


def write_arm(report: ArmReport, out_dir: Path) -> Path:
    """Write a report as `arm.json` in `out_dir` (created) and return its path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / ARM_FILE
    path.write_text(report.model_dump_json(indent=1) + "\n")
    return path


class ArmFileError(BenchError):
    """An arm file that cannot be an arm report (not UTF-8, not JSON, NaN, wrong shape): bad
    input like a bad spec, so it exits 2 with the file named, never with a traceback."""

    exit_code = 2


MAX_ARM_BYTES = 256 << 20
"""Upper bound on an arm file read into memory (real arms are a few MB)."""


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def read_arm(path: Path) -> ArmReport:
    """Read an arm report from a file or a directory holding `arm.json`.

    Raises:
        BenchError: if it is missing; ArmFileError if it is not an arm report.
    """
    file = path / ARM_FILE if path.is_dir() else path
    try:
        with file.open("rb") as stream:
            raw = stream.read(MAX_ARM_BYTES + 1)
    except FileNotFoundError as error:
        raise BenchError(f"{file}: no such benchmark report") from error
    except OSError as error:
        raise ArmFileError(f"{file}: cannot read: {error.strerror}") from error
    if len(raw) > MAX_ARM_BYTES:
        raise ArmFileError(f"{file}: larger than {MAX_ARM_BYTES} bytes, not an arm report")
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant)
        return ArmReport.model_validate(data)
    except UnicodeDecodeError as error:
        raise ArmFileError(f"{file}: not UTF-8 text (byte {error.start}), not JSON") from error
    except json.JSONDecodeError as error:
        raise ArmFileError(f"{file}:{error.lineno}: not JSON: {error.msg}") from error
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(top level)"
        raise ArmFileError(
            f"{file}: not a sparkgate arm report: {where}: {first['msg']}"
        ) from error
    except (ValueError, RecursionError) as error:
        raise ArmFileError(f"{file}: not a sparkgate arm report: {error}") from error
