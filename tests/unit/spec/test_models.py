"""Model rules that the corpus does not show line by line: helpers and union key hints."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.errors import MultipleSpecError, SpecError
from flows.spec.cluster import Cluster
from flows.spec.kinds import available_kinds, load_spec
from flows.spec.load import load_model
from flows.spec.release import Release
from flows.spec.release_tests import ReleaseTests

ROOT = Path(__file__).resolve().parents[3]
LOCAL = (ROOT / "config" / "local.yaml").read_text(encoding="utf-8")


def write(tmp_path: Path, name: str, text: str) -> Path:
    (tmp_path / "engines").mkdir(exist_ok=True)
    engine = (ROOT / "config" / "engines" / "sparkengine.yaml").read_text(encoding="utf-8")
    (tmp_path / "engines" / "sparkengine.yaml").write_text(engine, encoding="utf-8")
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_unknown_key_inside_a_union_lists_that_members_keys(tmp_path: Path) -> None:
    text = LOCAL.replace(
        "transport:\n  kind: local\n", "transport:\n  kind: ssh\n  user: u\n  prot: 2\n"
    )
    path = write(tmp_path, "c.yaml", text)
    with pytest.raises(SpecError) as caught:
        load_model(path, Cluster)
    message = caught.value.render()
    assert message.startswith(f"{path}:9: transport.prot: unknown key (expected one of ")
    assert "accept_unknown_host_keys" in message


def test_every_node_rule_is_reported_at_once(tmp_path: Path) -> None:
    text = LOCAL.replace("    rank: 1\n", "    rank: 0\n    head: true\n").replace(
        "name: local1", "name: local0"
    )
    path = write(tmp_path, "c.yaml", text)
    with pytest.raises(MultipleSpecError) as caught:
        load_model(path, Cluster)
    keys = [error.key for error in caught.value.errors]
    assert keys == ["nodes[1].name", "nodes[1].rank", "nodes[1].head"]


def test_local_workdirs_resolve_against_the_cluster_file(tmp_path: Path) -> None:
    path = write(tmp_path, "c.yaml", LOCAL)
    cluster = load_model(path, Cluster)
    assert cluster.nodes[0].workdir == str((tmp_path / "../.sparkgate/nodes/local0").resolve())
    assert cluster.head.name == "local0"
    assert cluster.engine.kernel_cache == "kernels"


def test_ssh_workdirs_stay_as_written(tmp_path: Path) -> None:
    ring = load_model(ROOT / "config" / "examples" / "tp4-ring.yaml", Cluster)
    assert ring.nodes[3].workdir == "/home/swank/projects/spark-ds41f"
    assert ring.transport.kind == "ssh"
    assert ring.transport.key_file is not None
    assert ring.transport.key_file.is_absolute()


def test_release_tests_selection_and_unclassified(tmp_path: Path) -> None:
    text = (
        "kind: release-tests\nroot: .\npatterns: [tests/test_*.py]\nfiles:\n"
        "  tests/test_a.py: {gate: true}\n"
        "  tests/test_b.py: {excluded: true, reason: needs a GPU}\n"
    )
    path = write(tmp_path, "rt.yaml", text)
    spec = load_model(path, ReleaseTests)
    assert spec.root == tmp_path
    assert spec.gate_files() == ["tests/test_a.py"]
    names = ["tests/test_a.py", "tests/test_b.py", "tests/test_c.py", "tests/helpers.py"]
    assert spec.unclassified(names) == ["tests/test_c.py"]


def test_every_kind_has_a_model_here() -> None:
    assert set(available_kinds()) >= {"cluster", "engine", "release", "release-tests"}


def test_load_spec_dispatches_on_kind() -> None:
    assert type(load_spec(ROOT / "config" / "local.yaml")).__name__ == "Cluster"
    assert type(load_spec(ROOT / "releases" / "r1.yaml")).__name__ == "Release"


def test_every_engine_test_file_is_classified() -> None:
    spec = load_model(ROOT / "config" / "release-tests.yaml", ReleaseTests)
    names = [p.relative_to(spec.root).as_posix() for p in spec.root.rglob("*.py")]
    assert spec.unclassified(names) == [], "classify it in config/release-tests.yaml"
    assert sorted(set(spec.files) - set(names)) == [], "classified files that do not exist"
    assert spec.gate_files()


def test_a_release_in_a_subfolder_defaults_to_the_projects_classification() -> None:
    """releases/faulty/*.yaml name no classification: config/ is found, not releases/config/."""
    for name in ("r1.yaml", "faulty/slower.yaml", "faulty/lazy-kernel.yaml"):
        release = load_model(ROOT / "releases" / name, Release)
        assert release.gates.release_tests.classification == ROOT / "config/release-tests.yaml"
    failing = load_model(ROOT / "releases/faulty/failing-test.yaml", Release)
    expected = ROOT / "releases/faulty/failing-test/release-tests.yaml"
    assert failing.gates.release_tests.classification == expected
