"""Attacks: a release or cluster file reaching outside the project (issue 15, "A release file
reaches outside the project").

Each test builds a small project in tmp (a folder holding config/), puts a secret outside it and
points a spec at the secret every way the review tried: absolute, `~`, `../`, a symlink out,
a dockerfile or previous name that climbs, a nightly parameter that is a path, a symlink in the
build context or the release-test overlay. Each must end in exit 2 (or a BuildError) naming the
file, line and key, and the secret's content must appear nowhere in the output.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.cli import main
from flows.errors import BuildError, SpecError
from flows.spec.cluster import Cluster
from flows.spec.load import load_model

ROOT = Path(__file__).resolve().parents[2]
SECRET = "ghp_registry_token_never_printed"

RELEASE = """kind: release
name: r9
previous: null
build:
  source: {source}
{extra}outputs:
  change: changed
  reason: test
gates:
  benchmark:
    enabled: false
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """tmp/project (config/, releases/, engine/) and tmp/outside holding the secret."""
    root = tmp_path / "project"
    for folder in ("config", "releases", "engine"):
        (root / folder).mkdir(parents=True)
    (root / "engine" / "Dockerfile").write_text("FROM scratch\n")
    outside = tmp_path / "outside"
    (outside / "engine").mkdir(parents=True)
    (outside / "secret.yaml").write_text(f"kind: cluster\ntoken: {SECRET}\n")
    (outside / "secret.json").write_text(f'{{"auths": {{"r": {{"auth": "{SECRET}"}}}}}}\n')
    home = tmp_path / "home"
    (home / ".docker").mkdir(parents=True)
    (home / ".docker" / "config.json").write_text(
        f'{{"auths": {{"registry": {{"auth": "{SECRET}"}}}}}}\n'
    )
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(ROOT)
    return root


def validate(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["validate", str(path)])
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert SECRET not in text
    assert "Traceback" not in text
    return code, text


def cluster_file(project: Path, body: str) -> Path:
    path = project / "config" / "c.yaml"
    path.write_text(body)
    return path


@pytest.mark.parametrize(
    "target",
    ["{outside}/secret.yaml", "../../outside/secret.yaml", "~/.docker/config.json"],
    ids=["absolute", "dot-dot", "home"],
)
def test_extends_outside_the_project_is_refused(
    target: str, project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    written = target.format(outside=project.parent / "outside")
    path = cluster_file(project, f"kind: cluster\nextends: {written}\n")
    code, text = validate(path, capsys)
    assert code == 2
    assert text.startswith(f"{path}:2: extends: {written} is outside the project")


def test_a_nested_extends_of_the_docker_config_never_prints_its_token(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`engine.env: {extends: ~/.docker/config.json}` printed a registry token in the error."""
    path = cluster_file(
        project,
        f"kind: cluster\nextends: {ROOT / 'config/local.yaml'}\nset:\n  engine:\n"
        f"    extends: {ROOT / 'config/engines/sparkengine.yaml'}\n"
        "    set:\n      env:\n        extends: ~/.docker/config.json\n",
    )
    code, text = validate(path, capsys)
    assert code == 2
    assert f"{path}:8: set.engine.set.env.extends: ~/.docker/config.json is outside" in text


def test_a_symlink_pointing_out_of_the_project_is_refused(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (project / "config" / "base.yaml").symlink_to(project.parent / "outside" / "secret.yaml")
    path = cluster_file(project, "kind: cluster\nextends: base.yaml\n")
    code, text = validate(path, capsys)
    assert code == 2
    assert text.startswith(f"{path}:2: extends: base.yaml is outside the project")


def test_extends_inside_the_project_still_works(project: Path) -> None:
    (project / "config" / "engines").mkdir()
    shipped = (ROOT / "config" / "engines" / "sparkengine.yaml").read_text()
    (project / "config" / "engines" / "e.yaml").write_text(shipped)
    local = (ROOT / "config" / "local.yaml").read_text()
    (project / "config" / "base.yaml").write_text(
        local.replace("engines/sparkengine.yaml", "engines/e.yaml")
    )
    path = cluster_file(project, "kind: cluster\nextends: base.yaml\nset: {name: mine}\n")
    assert load_model(path, Cluster).name == "mine"


@pytest.mark.parametrize(
    "source",
    ["{outside}/engine", "../../outside/engine", "~/.docker", "/usr/lib"],
    ids=["absolute", "dot-dot", "home", "system"],
)
def test_a_build_source_outside_the_project_is_refused(
    source: str, project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    written = source.format(outside=project.parent / "outside")
    path = project / "releases" / "r9.yaml"
    path.write_text(RELEASE.format(source=written, extra=""))
    code, text = validate(path, capsys)
    assert code == 2
    assert text.startswith(f"{path}:5: build.source: ")
    assert "is outside the project" in text


def test_a_build_source_outside_that_does_not_exist_is_not_probed(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Saying "no such directory" for an outside path would let a spec probe the machine."""
    path = project / "releases" / "r9.yaml"
    path.write_text(RELEASE.format(source="/nonexistent/engine", extra=""))
    code, text = validate(path, capsys)
    assert code == 2
    assert "no such directory" not in text
    assert "is outside the project" in text


def test_a_build_source_inside_the_project_validates(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = project / "releases" / "r9.yaml"
    path.write_text(RELEASE.format(source="../engine", extra=""))
    code, text = validate(path, capsys)
    assert code == 0, text


@pytest.mark.parametrize("dockerfile", ["../../outside/secret.yaml", "/etc/passwd", "link"])
def test_a_dockerfile_outside_the_source_tree_is_refused(
    dockerfile: str, project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (project / "engine" / "link").symlink_to(project.parent / "outside" / "secret.yaml")
    path = project / "releases" / "r9.yaml"
    path.write_text(RELEASE.format(source="../engine", extra=f"  dockerfile: {dockerfile}\n"))
    code, text = validate(path, capsys)
    assert code == 2
    assert text.startswith(f"{path}:6: build.dockerfile: leaves the source tree")


def test_a_classification_outside_the_project_is_refused(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    extra = f"gates:\n  release_tests:\n    classification: {project.parent}/outside/secret.yaml\n"
    path = project / "releases" / "r9.yaml"
    path.write_text(
        RELEASE.format(source="../engine", extra="").replace(
            "gates:\n", extra.replace("gates:\n", "gates:\n", 1)
        )
    )
    code, text = validate(path, capsys)
    assert code == 2
    assert "gates.release_tests.classification: " in text
    assert "is outside the project" in text


def test_a_release_test_tree_with_a_symlink_out_is_refused(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The test overlay copies files under the classification's root onto the release's tests."""
    tests = project / "engine" / "tests"
    tests.mkdir()
    (tests / "test_a.py").write_text("def test_a(): pass\n")
    (tests / "test_b.py").symlink_to(project.parent / "outside" / "secret.yaml")
    path = project / "config" / "release-tests.yaml"
    path.write_text(
        "kind: release-tests\nroot: ../engine\npatterns: ['tests/test_*.py']\nfiles:\n"
        "  tests/test_a.py: {gate: true}\n"
    )
    code, text = validate(path, capsys)
    assert code == 2
    assert f"{path}:2: root: " in text
    assert "test_b.py: a symlink that leaves the tree" in text


@pytest.mark.parametrize("previous", ["../../outside/secret", "/etc/passwd", "a/b", ".."])
def test_previous_must_be_a_release_name(
    previous: str, project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = project / "releases" / "r9.yaml"
    path.write_text(
        RELEASE.format(source="../engine", extra="").replace(
            "previous: null", f"previous: '{previous}'"
        )
    )
    code, text = validate(path, capsys)
    assert code == 2
    assert text.startswith(f"{path}:3: previous: got ")


@pytest.mark.parametrize("name", ["../r1", "releases/r1", "/etc/passwd", "..", "r1/../../x"])
def test_nightly_parameters_are_names_not_paths(name: str) -> None:
    from prefect.exceptions import ParameterTypeError  # noqa: PLC0415

    from flows.pipeline.deployments import nightly_qualification, promotion  # noqa: PLC0415

    with pytest.raises(ParameterTypeError):
        nightly_qualification.validate_parameters({"release": name})
    with pytest.raises(ParameterTypeError):
        nightly_qualification.validate_parameters({"release": "r2", "cluster": name})
    with pytest.raises(ParameterTypeError):
        promotion.validate_parameters({"release": name, "by": "me", "reason": "x"})
    assert nightly_qualification.validate_parameters({"release": "r2"})["release"] == "r2"


def test_a_spec_found_outside_the_project_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flows.pipeline.deployments import resolve_spec  # noqa: PLC0415

    monkeypatch.setenv("SPARKGATE_ROOT", str(ROOT))
    outside = tmp_path / "r1.yaml"
    outside.write_text("kind: release\n")
    with pytest.raises(SpecError):
        resolve_spec(str(outside), "releases")
    assert resolve_spec("r1", "releases") == ROOT / "releases" / "r1.yaml"


def test_a_build_context_with_a_symlink_out_is_refused(tmp_path: Path) -> None:
    from flows.cluster.build.source_image import context_files  # noqa: PLC0415

    engine = tmp_path / "engine"
    engine.mkdir()
    (engine / "Dockerfile").write_text("FROM scratch\n")
    (tmp_path / "shadow").write_text(SECRET)
    (engine / "data.txt").symlink_to(tmp_path / "shadow")
    with pytest.raises(BuildError, match=r"data\.txt: a symlink that leaves the engine") as err:
        context_files(engine)
    assert SECRET not in str(err.value)
    (engine / "data.txt").unlink()
    (engine / "inner.txt").write_text("ok\n")
    (engine / "data.txt").symlink_to(engine / "inner.txt")  # a link inside the tree is fine
    assert [f.arcname for f in context_files(engine)] == [
        "engine/Dockerfile",
        "engine/data.txt",
        "engine/inner.txt",
    ]


def test_a_build_context_with_a_directory_symlink_out_is_refused(tmp_path: Path) -> None:
    from flows.cluster.build.source_image import context_files  # noqa: PLC0415

    engine = tmp_path / "engine"
    engine.mkdir()
    (tmp_path / "ssh").mkdir()
    (engine / "keys").symlink_to(tmp_path / "ssh")
    with pytest.raises(BuildError, match="keys: a symlink that leaves the engine tree"):
        context_files(engine)


def test_ssh_key_files_may_live_in_the_home_folder() -> None:
    """key_file and known_hosts are the operator's (~/.ssh), never read into a record."""
    ring = load_model(ROOT / "config" / "examples" / "tp4-ring.yaml", Cluster)
    assert ring.transport.key_file == Path("~/.ssh/id_ed25519").expanduser()
