"""The promoted pointers (atomic rename, one per cluster), the append-only log, and
promote/rollback from the CLI.

The build step is replaced by its digest (the rules under test only compare digests); records
are record.json files in a private project root.
"""

from __future__ import annotations

import json
import multiprocessing
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from flows.cli import main
from flows.errors import MachineError, PromotionError
from flows.promotion import paused, promote
from flows.promotion.models import LOG_FILE, LogEntry, Pointer, PromotedEntry
from flows.promotion.store import append_log, read_log, read_pointer, write_pointer
from tests.support.paths import ROOT
from tests.support.promotion_records import DIGEST, GATE_NAMES, stage

CLUSTER = str(ROOT / "config/local.yaml")
POINTER_FILE = Path("config/promoted/local.yaml")  # the default cluster's pointer


def _pointer(release: str, n: int = 0) -> Pointer:
    entry = PromotedEntry(
        release=release, release_file=f"releases/{release}.yaml", build_digest=DIGEST,
        record=f"experiments/x-{n}", at=datetime(2026, 12, 2, tzinfo=UTC), by="bob",
        reason="r" * n,
    )  # fmt: skip
    return Pointer(current=entry)


def test_pointer_round_trips_and_readers_never_see_half_a_file(tmp_path: Path) -> None:
    write_pointer(tmp_path, _pointer("r1"))
    seen: list[str] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            pointer = read_pointer(tmp_path)  # raises on a torn file
            assert pointer is not None
            seen.append(pointer.current.release)

    thread = threading.Thread(target=reader)
    thread.start()
    for n in range(200):
        write_pointer(tmp_path, _pointer("r2" if n % 2 else "r1", n * 50))
    stop.set()
    thread.join()
    assert seen, "the reader never ran"
    assert set(seen) <= {"r1", "r2"}
    assert [p.name for p in (tmp_path / "config/promoted").iterdir()] == ["local.yaml"]


def test_a_failed_pointer_write_keeps_the_old_pointer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_pointer(tmp_path, _pointer("r1"))

    def broken_fsync(_fd: int) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("os.fsync", broken_fsync)
    with pytest.raises(
        MachineError, match=r"disk full; the pointer is as it was .*not of the release"
    ):
        write_pointer(tmp_path, _pointer("r2"))
    pointer = read_pointer(tmp_path)
    assert pointer is not None
    assert pointer.current.release == "r1"
    assert [p.name for p in (tmp_path / "config/promoted").iterdir()] == ["local.yaml"]


def test_a_hand_edited_pointer_is_a_spec_error(tmp_path: Path) -> None:
    (tmp_path / "config/promoted").mkdir(parents=True)
    (tmp_path / POINTER_FILE).write_text("current: {release: r1}\n")
    with pytest.raises(Exception, match=r"config/promoted/local\.yaml") as raised:
        read_pointer(tmp_path)
    assert getattr(raised.value, "exit_code", None) == 2


def _append_many(root: str, worker: int) -> None:
    for n in range(50):
        append_log(
            Path(root),
            LogEntry(at=datetime.now(UTC), action="rejected", release=f"w{worker}",
                     by="x", reason=f"{n}" + "x" * 500),
        )  # fmt: skip


def test_log_appends_from_several_processes_stay_whole_lines(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_append_many, args=(str(tmp_path), w)) for w in range(3)]
    for process in workers:
        process.start()
    for process in workers:
        process.join(60)
    entries = read_log(tmp_path)
    assert len(entries) == 150
    for worker in range(3):
        mine = [int(e.reason.rstrip("x")) for e in entries if e.release == f"w{worker}"]
        assert mine == list(range(50))


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> None:
    """The build of every release has digest DIGEST."""
    monkeypatch.setattr(promote, "build_release", lambda *_a, **_k: SimpleNamespace(digest=DIGEST))


def _passed() -> dict[str, dict[str, object]]:
    return {name: stage(name) for name in GATE_NAMES}


def test_promote_refuses_a_failed_gate_and_names_it(
    project: Path, write_record: Callable[..., Path], built: None,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    failed = stage("cold_boots", "failed", "rank 1 compiled")
    write_record(
        "r2", stages={**_passed(), "cold_boots": failed},
        verdict="failed at cold_boots: rank 1 compiled",
    )  # fmt: skip
    assert main(["promote", "r2", "--by", "alice"]) == 1
    error = capsys.readouterr().err
    assert "refusing to promote r2" in error
    assert "gate cold_boots failed in record 2026-12-02-r2: rank 1 compiled" in error
    assert not (project / POINTER_FILE).exists()
    assert not (project / LOG_FILE).exists()


def test_promote_refuses_a_missing_gate_and_names_it(
    project: Path, write_record: Callable[..., Path], built: None,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    stages = _passed()
    del stages["benchmark"]
    write_record("r2", stages=stages)
    assert main(["promote", "releases/r2.yaml"]) == 1
    assert "gate benchmark missing from record 2026-12-02-r2" in capsys.readouterr().err


def test_promote_then_rollback_updates_pointer_and_log(
    project: Path, write_record: Callable[..., Path], built: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.chdir(project)
    write_record("r1", stages=_passed())
    write_record("r2", stages=_passed())
    assert main(["promote", "r1", "--by", "alice", "--reason", "baseline"]) == 0
    assert main(["promote", "releases/r2.yaml", "--by", "bob", "--reason", "faster"]) == 0
    document = yaml.safe_load((project / POINTER_FILE).read_text())
    assert document["current"]["release"] == "r2"
    assert document["current"]["by"] == "bob"
    assert document["current"]["reason"] == "faster"
    assert document["current"]["build_digest"] == DIGEST
    assert document["current"]["record"] == "experiments/2026-12-02-r2"
    assert document["current"]["release_file"] == "releases/r2.yaml"
    assert [e["release"] for e in document["history"]] == ["r1"]

    assert main(["rollback", "--by", "carol", "--reason", "pager went off"]) == 0
    pointer = read_pointer(project)
    assert pointer is not None
    assert pointer.current.release == "r1"
    assert pointer.history == []
    lines = [json.loads(line) for line in (project / LOG_FILE).read_text().splitlines()]
    assert [(e["action"], e["release"], e["by"]) for e in lines] == [
        ("promoted", "r1", "alice"),
        ("promoted", "r2", "bob"),
        ("rolled-back", "r1", "carol"),
    ]
    assert lines[2]["reason"] == "pager went off"
    assert main(["rollback"]) == 1  # nothing earlier than r1


def test_approve_without_a_waiting_qualification_says_so(
    project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(paused, "resume_paused", _no_paused_run)
    assert main(["approve", "r2", "--by", "alice"]) == 1
    assert "no paused qualification of r2" in capsys.readouterr().err


def _no_paused_run(release: str, _decision: object, _cluster: object = None) -> str:
    raise PromotionError(f"no paused qualification of {release} is waiting for a decision")


def test_a_failed_deploy_rolls_the_pointer_back_and_logs_the_evidence(
    project: Path, write_record: Callable[..., Path], built: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    write_record("r1", stages=_passed())
    write_record("r2", stages=_passed())
    assert main(["promote", "r1", "--by", "alice"]) == 0
    deployed: list[str] = []

    def deploy(
        _cluster: object, entry: PromotedEntry, **_kwargs: object
    ) -> tuple[str | None, list[str]]:
        deployed.append(entry.release)
        if entry.release == "r2":
            return "boot failed: rank 1 exited", ["/state/evidence/local/boot-1"]
        return None, []

    monkeypatch.setattr(promote, "deploy", deploy)
    assert main(["promote", "r2", "--deploy", "-c", CLUSTER, "--by", "bob"]) == 1
    assert deployed == ["r2", "r1"]
    pointer = read_pointer(project)
    assert pointer is not None
    assert pointer.current.release == "r1"
    log = read_log(project)
    assert [(e.action, e.release) for e in log] == [
        ("promoted", "r1"), ("promoted", "r2"), ("deploy-failed", "r2"), ("rolled-back", "r1"),
    ]  # fmt: skip
    assert log[2].evidence == ["/state/evidence/local/boot-1"]
    assert "boot failed: rank 1 exited" in log[3].detail


def test_a_failed_first_deploy_leaves_no_pointer(
    project: Path, write_record: Callable[..., Path], built: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    write_record("r1", stages=_passed())
    monkeypatch.setattr(promote, "deploy", lambda *_a, **_k: ("health check failed", []))
    assert main(["promote", "r1", "--deploy", "-c", CLUSTER]) == 1
    assert read_pointer(project) is None
    assert [e.action for e in read_log(project)] == ["promoted", "deploy-failed"]


def test_a_deploy_to_another_shape_is_refused_before_anything_moves(
    project: Path, write_record: Callable[..., Path], built: None,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """A release qualified on a TP4 ring only proves nothing about the local tp2 cluster."""
    write_record("r2", stages=_passed(), shape="tp4-ring")
    deployed: list[str] = []
    monkeypatch.setattr(promote, "deploy", lambda _c, entry, **_k: deployed.append(entry.release))
    assert main(["promote", "r2", "--deploy", "-c", CLUSTER, "--by", "bob"]) == 1
    error = capsys.readouterr().err
    assert "refusing r2 on a tp2-local cluster: its records are on tp4-ring only" in error
    assert deployed == []
    assert read_pointer(project) is None
    assert read_log(project) == []
    # naming the cluster without a deploy moves its pointer: the same shape rule
    assert main(["promote", "r2", "-c", CLUSTER, "--by", "bob"]) == 1
    assert "refusing r2 on a tp2-local cluster" in capsys.readouterr().err
    assert read_pointer(project) is None
    assert main(["promote", "r2", "--by", "bob"]) == 0  # without a cluster, any shape's record
