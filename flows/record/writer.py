"""Open, fill and publish an experiments record, one atomic write at a time.

The qualify flow opens a record before its first stage and saves each stage the moment it
finishes, so a crash or Ctrl-C never loses a finished stage and a re-run of the same release and
build reopens the same folder and skips what is there. Publishing renders the README and plots
and freezes the folder: a published record is never rewritten, qualifying again makes a new
folder (`-2`, `-3`, ...).

Records are meant to be committed, so nothing secret is written: the release and cluster are
kept with the values of secret env keys, build arguments and options redacted, and every JSON
document, stage file and evidence file is scrubbed of the literal secret values (flows.secrets)
before it is hashed.
"""

from __future__ import annotations

import importlib
import json
import re
import shutil
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from flows.errors import RecordError
from flows.fileio import dump_json, sha256_file, write_json, write_text
from flows.gates.base import GateResult
from flows.gates.registry import REGISTRY
from flows.record.legacy import upgrade_result
from flows.record.model import (
    README_FILE,
    RECORD_FILE,
    RESULT_FILE,
    FileEntry,
    Record,
    StageEntry,
)
from flows.record.reader import list_records, read_record
from flows.record.readme import RENDER_VERSION, render_readme
from flows.secrets import Secrets
from flows.spec.cluster import Cluster
from flows.spec.launch import spec_secrets
from flows.spec.release import Release

_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_RESERVED = {RECORD_FILE, README_FILE}


def open_record(
    experiments: Path,
    release: Release,
    *,
    build_digest: str,
    cluster: Cluster,
    previous: str | None,
    resume: bool = True,
    today: date | None = None,
) -> RecordWriter:
    """The record to write this qualification into: reopened, or a new dated folder.

    With `resume`, the newest unpublished record of the same release, build digest and cluster
    is reopened (on any date), so a re-run continues where the last one stopped. Otherwise the
    folder is experiments/<YYYY-MM-DD>-<release>, or the first free `-2`, `-3`, ... suffix.
    """
    experiments.mkdir(parents=True, exist_ok=True)
    secrets = spec_secrets(cluster, release)
    if resume:
        for record in sorted(list_records(experiments), key=lambda r: r.updated_at, reverse=True):
            if (
                record.status == "in-progress"
                and record.release_name == release.name
                and record.build_digest == build_digest
                and record.cluster_name == cluster.name
            ):
                return RecordWriter(experiments / record.name, secrets=secrets)
    day = (today or datetime.now(UTC).date()).isoformat()
    path = _claim_folder(experiments, f"{day}-{release.name}")
    now = datetime.now(UTC)
    record = Record(
        name=path.name,
        status="in-progress",
        release_name=release.name,
        release=secrets.spec(release.model_dump(mode="json")),
        cluster_name=cluster.name,
        cluster=secrets.spec(cluster.model_dump(mode="json")),
        previous=previous,
        build_digest=build_digest,
        created_at=now,
        updated_at=now,
    )
    write_json(path / RECORD_FILE, record.model_dump(mode="json"))
    return RecordWriter(path, secrets=secrets)


def _claim_folder(experiments: Path, base: str) -> Path:
    """Create and return the first free folder among base, base-2, base-3, ..."""
    suffix = 1
    while True:
        name = base if suffix == 1 else f"{base}-{suffix}"
        try:
            (experiments / name).mkdir()
        except FileExistsError:
            suffix += 1
            continue
        return experiments / name


class RecordWriter:
    """Writes one unpublished record folder; every method refuses once it is published."""

    def __init__(self, path: Path, *, secrets: Secrets | None = None) -> None:
        self._path = path
        self._record = read_record(path)
        self._secrets = secrets or Secrets()

    @property
    def path(self) -> Path:
        """The record folder."""
        return self._path

    @property
    def record(self) -> Record:
        """The record as last written."""
        return self._record

    def stage_dir(self, stage: str) -> Path:
        """The folder of a stage's raw files (created)."""
        self._writable()
        folder = self._path / _safe(stage, "stage")
        folder.mkdir(exist_ok=True)
        return folder

    def save_stage(self, result: GateResult) -> None:
        """Write <stage>/result.json and the in-progress record.json with its files hashed."""
        record = self._writable()
        stage = result.gate
        folder = self.stage_dir(stage)
        data = self._secrets.spec(result.model_dump(mode="json"))
        write_text(folder / RESULT_FILE, dump_json(data))
        for name in result.files:
            self._scrub(folder / name)
        evidence = [self._keep_evidence(stage, Path(item), folder) for item in result.evidence]
        for item in evidence:
            for file in sorted((self._path / item).rglob("*")):
                self._scrub(file)
        entry = StageEntry(
            stage=stage,
            outcome=result.outcome.value,
            reason=result.reason,
            started_at=result.started_at,
            seconds=result.seconds,
            result=self._entry(folder / RESULT_FILE),
            result_type=f"{type(result).__module__}:{type(result).__qualname__}",
            files=[self._entry(folder / name) for name in result.files],
            evidence=evidence,
            evidence_files=[
                self._entry(file)
                for item in evidence
                for file in sorted((self._path / item).rglob("*"))
                if file.is_file()
            ],
            summary=result.summary,
        )
        self._write(record.model_copy(update={"stages": {**record.stages, stage: entry}}))

    def load_stage(self, stage: str) -> GateResult | None:
        """The saved result of a stage (its own GateResult class), or None if it never finished."""
        entry = self._record.stages.get(stage)
        file = self._path / stage / RESULT_FILE
        if entry is None or not file.is_file():
            return None
        if sha256_file(file) != entry.result.sha256:
            raise RecordError(f"{file}: changed since it was saved; start with --fresh")
        data = upgrade_result(json.loads(file.read_text()))
        return _result_class(entry.result_type).model_validate(data)

    def save_json(self, name: str, data: Any) -> None:
        """Write a top-level JSON file (build.json, inventory.json ...), also kept inline."""
        record = self._writable()
        if not name.endswith(".json") or name in _RESERVED:
            raise RecordError(f"{name}: not a name for an extra record file (want NAME.json)")
        file = self._path / _safe(name, "file")
        data = self._secrets.spec(_json_clean(data))
        write_text(file, dump_json(data))
        extras = [entry for entry in record.extras if entry.path != name]
        documents = {**record.documents, name: data}
        self._write(
            record.model_copy(
                update={"extras": [*extras, self._entry(file)], "documents": documents}
            )
        )

    def publish(
        self, *, verdict: str, stage_order: list[str], versions: dict[str, str], notes: str = ""
    ) -> Path:
        """Render plots and README.md, write the final record.json, and freeze the folder."""
        record = self._writable()
        now = datetime.now(UTC)
        final = record.model_copy(
            update={
                "status": "published",
                "verdict": verdict,
                "stage_order": list(stage_order),
                "versions": dict(versions),
                "notes": notes,
                "published_at": now,
                "updated_at": now,
            }
        )
        plots = make_plots(final, self._path / "plots")
        final = final.model_copy(
            update={
                "plots": [self._entry(file) for file in plots],
                "render_version": RENDER_VERSION,
            }
        )
        write_text(self._path / README_FILE, render_readme(final))
        final = final.model_copy(update={"readme": self._entry(self._path / README_FILE)})
        self._write(final, touch=False)
        return self._path

    def _writable(self) -> Record:
        current = read_record(self._path)
        if current.status == "published":
            raise RecordError(f"{self._path}: published records are never rewritten")
        self._record = current
        return current

    def _write(self, record: Record, *, touch: bool = True) -> None:
        if touch:
            record = record.model_copy(update={"updated_at": datetime.now(UTC)})
        data = self._secrets.spec(record.model_dump(mode="json"))
        write_json(self._path / RECORD_FILE, data)
        self._record = record

    def _scrub(self, file: Path) -> None:
        """Replace secret values in a text file the stage left (binary files are left as is)."""
        if not self._secrets.values or not file.is_file() or file.is_symlink():
            return
        try:
            text = file.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            return
        clean = self._secrets.text(text)
        if clean != text:
            write_text(file, clean)

    def _entry(self, file: Path) -> FileEntry:
        if not file.is_file():
            raise RecordError(f"{file}: listed as a record file but it does not exist")
        relative = file.resolve().relative_to(self._path.resolve()).as_posix()
        return FileEntry(path=relative, sha256=sha256_file(file), bytes=file.stat().st_size)

    def _keep_evidence(self, stage: str, item: Path, folder: Path) -> str:
        """An evidence folder as a record-relative path, copied in when it lies outside.

        Boot failures leave evidence in the project's state folder; a record must carry it, so
        it is copied to evidence/<stage>/<name> (a folder that vanished is kept as named, and
        verify reports it missing).
        """
        source = item if item.is_absolute() else folder / item
        root = self._path.resolve()
        resolved = source.resolve()
        if resolved.is_relative_to(root):
            return resolved.relative_to(root).as_posix()
        if not resolved.exists():
            return str(item)
        target = self._path / "evidence" / stage / resolved.name
        if target.is_dir():  # the stage is saved again (resume): copy afresh
            shutil.rmtree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        if resolved.is_dir():
            shutil.copytree(resolved, target, symlinks=True)
        else:
            shutil.copy2(resolved, target)
        return target.relative_to(self._path).as_posix()


def _safe(name: str, what: str) -> str:
    if not _SAFE_NAME.match(name):
        raise RecordError(f"{name!r}: not a valid record {what} name")
    return name


def _json_clean(data: Any) -> Any:
    return json.loads(dump_json(data))


def _result_class(result_type: str) -> type[GateResult]:
    """The GateResult subclass a stage was saved as (GateResult when it cannot be imported)."""
    module_name, _, qualname = result_type.partition(":")
    if not module_name.startswith("flows."):
        return GateResult
    try:
        found: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        return GateResult
    if isinstance(found, type) and issubclass(found, GateResult):
        return found
    return GateResult


def make_plots(record: Record, folder: Path) -> list[Path]:
    """Every plot the gates' stories draw from the record's summaries; the files written."""
    written: list[Path] = []
    for gate in REGISTRY:
        entry = record.stages.get(gate.name)
        if entry is not None and entry.summary is not None:
            written += gate.story.plots(entry.summary, folder)
    return written
