"""Image tags are content-addressed and never moved: digest stability, tag rules, build stream."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docker.errors import ImageNotFound
from rich.console import Console

from flows.cluster.build.progress import RichImageProgress, parse_step
from flows.cluster.build.source_image import (
    BuildRequest,
    build_image,
    check_tag_target,
    context_files,
    image_tag,
    is_ignored,
    source_digest,
)
from flows.cluster.build.wheelhouse import Wheelhouse
from flows.errors import BuildError, SpecError

DOCKERFILE = b"ARG BASE\nFROM ${BASE}\n"


def make_engine(root: Path) -> Path:
    engine = root / "engine"
    (engine / "sparkengine").mkdir(parents=True)
    (engine / "sparkengine" / "__init__.py").write_text("VERSION = 1\n")
    (engine / "pyproject.toml").write_text("[project]\nname = 'e'\n")
    (engine / "Dockerfile").write_bytes(DOCKERFILE)
    (engine / ".dockerignore").write_text(
        "# comment\nDockerfile\n.dockerignore\n**/__pycache__\n*.egg-info\n"
    )
    return engine


def digest_of(engine: Path, lock: str = "a==1\n", args: dict[str, str] | None = None) -> str:
    return source_digest(context_files(engine), DOCKERFILE, lock, args or {"BASE": "b:1"})


def test_ignore_patterns_match_paths_and_their_folders() -> None:
    patterns = ["**/__pycache__", "*.egg-info", "build"]
    assert is_ignored("sparkengine/__pycache__/x.pyc", patterns)
    assert is_ignored("__pycache__/x.pyc", patterns)
    assert is_ignored("sparkgate_engine.egg-info/PKG-INFO", patterns)
    assert is_ignored("build/lib/a.py", patterns)
    assert not is_ignored("sparkengine/build.py", patterns)
    assert not is_ignored("sparkengine/api.py", patterns)


def test_context_holds_sources_but_not_ignored_files(tmp_path: Path) -> None:
    engine = make_engine(tmp_path)
    (engine / "sparkengine" / "__pycache__").mkdir()
    (engine / "sparkengine" / "__pycache__" / "a.pyc").write_bytes(b"\0")
    names = [f.arcname for f in context_files(engine)]
    assert names == ["engine/pyproject.toml", "engine/sparkengine/__init__.py"]


def test_digest_ignores_mtimes_and_ignored_files(tmp_path: Path) -> None:
    engine = make_engine(tmp_path)
    before = digest_of(engine)
    os.utime(engine / "pyproject.toml", (1, 1))
    (engine / "x.egg-info").mkdir()
    (engine / "x.egg-info" / "PKG-INFO").write_text("noise")
    assert digest_of(engine) == before
    assert len(before) == 64


@pytest.mark.parametrize("change", ["source", "new-file", "mode", "lock", "build-arg"])
def test_digest_changes_with_every_input(tmp_path: Path, change: str) -> None:
    engine = make_engine(tmp_path)
    before = digest_of(engine)
    lock, args = "a==1\n", {"BASE": "b:1"}
    if change == "source":
        (engine / "sparkengine" / "__init__.py").write_text("VERSION = 2\n")
    elif change == "new-file":
        (engine / "sparkengine" / "extra.py").write_text("")
    elif change == "mode":
        (engine / "pyproject.toml").chmod(0o755)
    elif change == "lock":
        lock = "a==2\n"
    else:
        args = {"BASE": "b:2"}
    assert digest_of(engine, lock, args) != before


def test_digest_changes_with_the_dockerfile(tmp_path: Path) -> None:
    engine = make_engine(tmp_path)
    files = context_files(engine)
    one = source_digest(files, DOCKERFILE, "", {})
    two = source_digest(files, DOCKERFILE + b"USER engine\n", "", {})
    assert one != two


def test_tag_is_name_source12_release() -> None:
    digest = "0123456789abcdef" * 4
    assert image_tag("sparkengine", digest, "r2") == "sparkengine:0123456789ab-r2"


@pytest.mark.parametrize("release", ["r1; rm -rf /", "", "-r1", "r/1", "x" * 120])
def test_release_names_that_cannot_be_tags_are_spec_errors(release: str) -> None:
    with pytest.raises(SpecError, match="release"):
        image_tag("sparkengine", "0" * 64, release)


def test_repository_names_are_checked() -> None:
    with pytest.raises(SpecError, match="repository"):
        image_tag("SparkEngine", "0" * 64, "r1")


def test_a_tag_may_be_created_or_kept_but_never_moved() -> None:
    check_tag_target("e:1-r1", None, "sha256:new")
    check_tag_target("e:1-r1", "sha256:new", "sha256:new")
    with pytest.raises(BuildError, match="never moves"):
        check_tag_target("e:1-r1", "sha256:old", "sha256:new")


def test_build_steps_are_parsed() -> None:
    assert parse_step("Step 3/15 : RUN pip install x\n") == (3, 15, "RUN pip install x")
    assert parse_step(" ---> Running in 1234") is None


class ScriptedApi:
    """A daemon's low-level API reduced to what build_image uses, scripted per test."""

    def __init__(self, images: dict[str, str], stream: list[dict[str, Any]]) -> None:
        self.images = images
        self.stream = stream
        self.tagged: list[tuple[str, str, str]] = []
        self.builds = 0

    def inspect_image(self, reference: str) -> dict[str, str]:
        if reference not in self.images:
            raise ImageNotFound(reference)
        return {"Id": self.images[reference]}

    def build(self, **options: Any) -> Iterator[dict[str, Any]]:
        assert options["network_mode"] == "none"
        assert options["custom_context"] is True
        self.builds += 1
        return iter(self.stream)

    def tag(self, image: str, repository: str, tag: str) -> None:
        self.tagged.append((image, repository, tag))
        self.images[f"{repository}:{tag}"] = image


class ScriptedClient:
    def __init__(self, api: ScriptedApi) -> None:
        self.api = api


def request_for(tmp_path: Path) -> BuildRequest:
    engine = make_engine(tmp_path)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "requirements.lock").write_text("a==1\n")
    return BuildRequest(
        release="r1",
        engine_dir=engine,
        dockerfile=engine / "Dockerfile",
        wheelhouse=Wheelhouse(directory=wheels, lock="a==1\n"),
        base_image="sparkgate-base:bookworm-0",
    )


OK_STREAM = [
    {"stream": "Step 1/2 : ARG BASE\n"},
    {"stream": "Step 2/2 : FROM x\n"},
    {"aux": {"ID": "sha256:new"}},
    {"stream": "Successfully built new\n"},
]


def test_build_tags_the_new_image_then_reuses_it(tmp_path: Path) -> None:
    api = ScriptedApi({}, OK_STREAM)
    request = request_for(tmp_path)
    first = build_image(ScriptedClient(api), request)  # type: ignore[arg-type]
    assert not first.reused
    assert first.image_id == "sha256:new"
    assert api.tagged == [("sha256:new", *first.tag.split(":"))]
    second = build_image(ScriptedClient(api), request)  # type: ignore[arg-type]
    assert second.reused
    assert (second.tag, second.image_id, api.builds) == (first.tag, first.image_id, 1)


def test_rebuild_never_moves_an_existing_tag(tmp_path: Path) -> None:
    request = request_for(tmp_path)
    tag = build_image(ScriptedClient(ScriptedApi({}, OK_STREAM)), request).tag  # type: ignore[arg-type]
    api = ScriptedApi({tag: "sha256:old"}, OK_STREAM)
    with pytest.raises(BuildError, match="never moves"):
        build_image(ScriptedClient(api), request, rebuild=True)  # type: ignore[arg-type]
    assert api.tagged == []
    assert api.images[tag] == "sha256:old"


def test_a_failing_step_is_a_build_error_with_the_output_tail(tmp_path: Path) -> None:
    stream = [
        {"stream": "Step 1/2 : RUN pip install\n"},
        {"stream": "ERROR: No matching distribution found for numpy\n"},
        {"error": "The command returned a non-zero code: 1", "errorDetail": {}},
    ]
    api = ScriptedApi({}, stream)
    with pytest.raises(BuildError, match="non-zero code") as caught:
        build_image(ScriptedClient(api), request_for(tmp_path))  # type: ignore[arg-type]
    assert "No matching distribution" in str(caught.value)
    assert api.tagged == []


def test_rich_progress_draws_build_steps_and_transfers() -> None:
    console = Console(record=True, width=120, force_terminal=False)
    with RichImageProgress(console) as progress:
        progress.build_step(1, 2, "FROM base")
        progress.build_step(2, 2, "RUN pip install")
        progress.build_done(ok=True)
        progress.transfer_start("n2", 2_000_000)
        progress.transfer_advance("n2", 1_000_000)
        progress.transfer_advance("n2", 1_000_000)
        progress.transfer_done("n2", ok=True)
        progress.transfer_start("n3", 2_000_000)
        progress.transfer_done("n3", ok=False)
    text = console.export_text()
    assert "built" in text
    assert "loaded n2" in text
    assert "2.0/2.0 MB" in text
    assert "FAILED n3" in text
