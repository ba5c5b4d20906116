"""One promoted pointer per cluster: promoting or rolling back on one cluster moves no other.

The pure rules (which file, which cluster, which waiting run) and the CLI on a private project
with two clusters, `alpha` and `beta` (two-node overlays of config/local.yaml), and a project
that still has the legacy project-wide `config/promoted.yaml`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from flows.cli import main
from flows.errors import PromotionError, SpecError
from flows.promotion import promote
from flows.promotion.models import LEGACY_POINTER_FILE, LOG_FILE, LogEntry, Pointer, PromotedEntry
from flows.promotion.paused import matches_cluster, waiting_run
from flows.promotion.promote import target_cluster
from flows.promotion.rules import pointer_file, promoted
from flows.promotion.store import inherits_legacy, read_log, read_pointer, write_pointer
from tests.support.overlays import cluster_overlay
from tests.support.promotion_records import DIGEST, GATE_NAMES, stage


def _entry(release: str) -> PromotedEntry:
    return PromotedEntry(
        release=release, release_file=f"releases/{release}.yaml", build_digest=DIGEST,
        record=f"experiments/2026-12-02-{release}", at=datetime(2026, 12, 2, tzinfo=UTC),
        by="alice", reason="",
    )  # fmt: skip


def _legacy(root: Path, *releases: str) -> Pointer:
    """A project-wide config/promoted.yaml as sparkgate wrote it before pointers per cluster."""
    pointer: Pointer | None = None
    for release in releases:
        pointer = promoted(pointer, _entry(release))
    assert pointer is not None
    path = root / LEGACY_POINTER_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(pointer.model_dump(mode="json"), sort_keys=False))
    return pointer


# -- pure rules ----------------------------------------------------------------------------------


def test_each_cluster_has_its_own_pointer_file() -> None:
    assert pointer_file("local") == Path("config/promoted/local.yaml")
    assert pointer_file("spark-ring4") == Path("config/promoted/spark-ring4.yaml")


@pytest.mark.parametrize("name", ["../local", "a/b", ".hidden", "", "x y"])
def test_a_name_unfit_for_a_file_is_a_spec_error(name: str) -> None:
    with pytest.raises(SpecError, match="is not a cluster name") as raised:
        pointer_file(name)
    assert raised.value.exit_code == 2


def test_pointers_of_two_clusters_are_independent(tmp_path: Path) -> None:
    write_pointer(tmp_path, Pointer(current=_entry("r1")), "alpha")
    assert read_pointer(tmp_path, "beta") is None
    write_pointer(tmp_path, Pointer(current=_entry("r2")), "beta")
    alpha, beta = read_pointer(tmp_path, "alpha"), read_pointer(tmp_path, "beta")
    assert alpha is not None
    assert beta is not None
    assert (alpha.current.release, beta.current.release) == ("r1", "r2")


def test_a_cluster_without_its_own_pointer_starts_from_the_legacy_one(tmp_path: Path) -> None:
    legacy = _legacy(tmp_path, "r1", "r2")
    assert read_pointer(tmp_path, "alpha") == legacy
    assert inherits_legacy(tmp_path, "alpha")
    write_pointer(tmp_path, promoted(legacy, _entry("r3")), "alpha")
    assert not inherits_legacy(tmp_path, "alpha")
    assert inherits_legacy(tmp_path, "beta")
    assert read_pointer(tmp_path, "beta") == legacy  # other clusters still see what they saw


def test_the_pointer_cluster_is_the_cluster_files_name(tmp_path: Path) -> None:
    file = cluster_overlay(tmp_path / "ring.yaml", "ring", tmp_path)
    assert target_cluster(None, None) == ("local", None)
    assert target_cluster("beta", None) == ("beta", None)
    name, loaded = target_cluster(None, file)
    assert name == "ring"
    assert loaded is not None
    assert loaded.name == "ring"
    with pytest.raises(SpecError, match="the deploy target is cluster 'ring'"):
        target_cluster("beta", file)
    with pytest.raises(SpecError, match="is not a cluster name"):
        target_cluster("../beta", None)


def test_log_lines_written_before_clusters_were_named_still_read() -> None:
    old = json.dumps(
        {"at": "2026-12-01T10:00:00Z", "action": "promoted", "release": "r1", "by": "a",
         "reason": ""}
    )  # fmt: skip
    assert LogEntry.model_validate_json(old).cluster is None


def _run(release: str, cluster: str) -> SimpleNamespace:
    return SimpleNamespace(
        parameters={"release_file": f"/p/releases/{release}.yaml", "cluster_file": cluster}
    )


def test_a_decision_goes_to_the_run_waiting_on_the_named_cluster(tmp_path: Path) -> None:
    alpha, beta = tmp_path / "alpha.yaml", tmp_path / "beta.yaml"
    runs = [_run("r2", str(alpha)), _run("r2", str(beta)), _run("r1", str(alpha))]
    assert waiting_run(runs, "r2", beta) is runs[1]
    assert waiting_run(runs, "r1", None) is runs[2]  # one waits: no need to name its cluster
    with pytest.raises(PromotionError, match=r"wait on several clusters .*name one with -c"):
        waiting_run(runs, "r2", None)
    with pytest.raises(PromotionError, match=re.escape(f"no paused qualification of r1 on {beta}")):
        waiting_run(runs, "r1", beta)
    assert matches_cluster(alpha, {"cluster_file": str(tmp_path / "." / "alpha.yaml")})
    assert not matches_cluster(alpha, {})


# -- the CLI -------------------------------------------------------------------------------------


@pytest.fixture
def clusters(project: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """config/alpha.yaml and config/beta.yaml in the project; every build has digest DIGEST."""
    monkeypatch.chdir(project)
    for name in ("alpha", "beta"):
        cluster_overlay(project / "config" / f"{name}.yaml", name, project / "nodes" / name)
    monkeypatch.setattr(promote, "build_release", lambda *_a, **_k: SimpleNamespace(digest=DIGEST))
    return project


def _passed() -> dict[str, dict[str, object]]:
    return {name: stage(name) for name in GATE_NAMES}


def _pointer(project: Path, cluster: str) -> dict[str, object]:
    return dict(yaml.safe_load((project / "config/promoted" / f"{cluster}.yaml").read_text()))


def _releases(document: dict[str, object]) -> list[str]:
    current, history = document["current"], document["history"]
    assert isinstance(current, dict)
    assert isinstance(history, list)
    return [current["release"], *(entry["release"] for entry in history)]


def test_promote_and_rollback_move_one_clusters_pointer_only(
    clusters: Path, write_record: Callable[..., Path]
) -> None:
    project = clusters
    write_record("r1", stages=_passed())
    write_record("r2", stages=_passed())
    assert main(["promote", "r1", "-c", "alpha", "--by", "alice"]) == 0
    assert main(["promote", "r2", "-c", "beta", "--by", "bob"]) == 0
    assert _releases(_pointer(project, "alpha")) == ["r1"]
    assert _releases(_pointer(project, "beta")) == ["r2"]

    assert main(["promote", "r2", "-c", "alpha", "--by", "alice"]) == 0
    assert main(["promote", "r1", "-c", "beta", "--by", "bob"]) == 0
    assert _releases(_pointer(project, "alpha")) == ["r2", "r1"]
    assert _releases(_pointer(project, "beta")) == ["r1", "r2"]

    assert main(["rollback", "-c", "beta", "--by", "carol", "--reason", "pager"]) == 0
    assert _releases(_pointer(project, "beta")) == ["r2"]
    assert _releases(_pointer(project, "alpha")) == ["r2", "r1"]  # untouched
    assert main(["rollback", "-c", "alpha", "--by", "carol"]) == 0
    assert _releases(_pointer(project, "alpha")) == ["r1"]
    assert _releases(_pointer(project, "beta")) == ["r2"]
    assert main(["rollback", "-c", "beta"]) == 1  # nothing earlier on beta
    assert not (project / "config/promoted/local.yaml").exists()
    assert not (project / LEGACY_POINTER_FILE).exists()

    lines = [json.loads(line) for line in (project / LOG_FILE).read_text().splitlines()]
    assert [(e["action"], e["release"], e["cluster"]) for e in lines] == [
        ("promoted", "r1", "alpha"), ("promoted", "r2", "beta"),
        ("promoted", "r2", "alpha"), ("promoted", "r1", "beta"),
        ("rolled-back", "r2", "beta"), ("rolled-back", "r1", "alpha"),
    ]  # fmt: skip


def test_without_c_the_default_clusters_pointer_moves(
    clusters: Path, write_record: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    write_record("r1", stages=_passed())
    assert main(["promote", "r1", "--by", "alice"]) == 0
    assert "promoted on local: r1" in capsys.readouterr().err
    assert _releases(_pointer(clusters, "local")) == ["r1"]
    assert read_pointer(clusters, "alpha") is None
    assert [(e.action, e.cluster) for e in read_log(clusters)] == [("promoted", "local")]


def test_an_unknown_cluster_is_refused_before_anything_moves(
    clusters: Path, write_record: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    write_record("r1", stages=_passed())
    assert main(["promote", "r1", "-c", "gamma", "--by", "alice"]) == 2
    assert "no cluster 'gamma'" in capsys.readouterr().err
    assert main(["rollback", "-c", "gamma"]) == 2
    assert not (clusters / "config/promoted").exists()
    assert read_log(clusters) == []


def test_a_legacy_pointer_is_kept_and_each_cluster_starts_from_it(
    clusters: Path, write_record: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """The project-wide pointer's history is carried into each cluster's first write, and the
    legacy file itself is never rewritten (other clusters may still start from it)."""
    project = clusters
    _legacy(project, "r1", "r2")
    legacy_text = (project / LEGACY_POINTER_FILE).read_text()
    write_record("r1", stages=_passed())
    write_record("r2", stages=_passed())

    assert main(["promote", "r1", "-c", "alpha", "--by", "alice"]) == 0
    said = capsys.readouterr().err
    assert "alpha had no pointer of its own: started from the project-wide" in said
    assert _releases(_pointer(project, "alpha")) == ["r1", "r2", "r1"]

    assert main(["rollback", "-c", "beta", "--by", "carol"]) == 0  # back within legacy history
    assert _releases(_pointer(project, "beta")) == ["r1"]
    assert _releases(_pointer(project, "alpha")) == ["r1", "r2", "r1"]
    assert (project / LEGACY_POINTER_FILE).read_text() == legacy_text
    legacy = read_pointer(project, "local")  # still inherits, unchanged
    assert legacy is not None
    assert legacy.current.release == "r2"


def test_the_promotion_deployment_moves_the_named_clusters_pointer(
    clusters: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The `promote` deployment: a cluster names the pointer; `deploy=False` only moves it."""
    from flows.pipeline import deployments  # noqa: PLC0415

    calls: list[tuple[object, ...]] = []

    def flow(*args: object) -> dict[str, object]:
        calls.append(args)
        return {}

    monkeypatch.setattr(deployments, "promote_flow", flow)
    release = str(clusters / "releases/r1.yaml")
    alpha = str(clusters / "config/alpha.yaml")
    deployments.promotion.fn("r1", "alice", "why", "alpha", False)
    deployments.promotion.fn("r1", "alice", "why", "alpha")
    deployments.promotion.fn("r1", "alice", "why")
    deployments.promotion.fn("r1", "alice", "why", accept_inconclusive="docs only")
    assert calls == [
        (release, "alice", "why", None, "alpha", ""),
        (release, "alice", "why", alpha, "alpha", ""),
        (release, "alice", "why", None, None, ""),
        (release, "alice", "why", None, None, "docs only"),  # an inconclusive record's reason
    ]
