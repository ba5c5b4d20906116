"""Build the engine image once, tagged by the content it was built from.

The tag is `<name>:<source12>-<release>`, where source12 starts the sha256 of a manifest of the
build's inputs: every engine source file that enters the context (path and content hash), the
Dockerfile, the wheelhouse lock and the build args (the base image tag carries the base's own
digest). The same inputs always give the same tag, so a tag that already exists is that build and
is reused, and a tag is never moved to a different image: that would silently change what an
experiments record says was tested. The build streams through the low-level API with the network
disabled, reporting steps to an `ImageProgress` observer.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import docker
from docker.errors import APIError, DockerException, ImageNotFound
from pydantic import BaseModel, ConfigDict

from flows.cluster.build.progress import ImageProgress, NullProgress, parse_step
from flows.cluster.build.wheelhouse import Wheelhouse
from flows.errors import BuildError, SpecError

BUILD_TIMEOUT_S = 1800
_REPOSITORY = re.compile(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*$")
_RELEASE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_MAX_TAG = 128
_TAIL_LINES = 25


class ContextFile(BaseModel):
    """One engine source file as it enters the build context."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    arcname: str
    path: Path
    sha256: str
    executable: bool


class BuildRequest(BaseModel):
    """What to build: engine source, Dockerfile, wheelhouse, base image and release name."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = "sparkengine"
    release: str
    engine_dir: Path
    dockerfile: Path
    wheelhouse: Wheelhouse
    base_image: str
    build_args: Mapping[str, str] = {}


class BuiltImage(BaseModel):
    """The result of `build_image`: tag, image ID, source digest, and whether it was reused."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tag: str
    image_id: str
    source_digest: str
    reused: bool
    seconds: float


def is_ignored(relative: str, patterns: Sequence[str]) -> bool:
    """Whether a path (relative, `/`-separated) or one of its folders matches an ignore glob."""
    parts = relative.split("/")
    for pattern in patterns:
        core = pattern.strip("/").removeprefix("**/")
        anywhere = pattern.startswith("**/")
        for end in range(1, len(parts) + 1):
            starts = range(end) if anywhere else range(1)
            if any(fnmatchcase("/".join(parts[start:end]), core) for start in starts):
                return True
    return False


def read_ignore_file(path: Path) -> list[str]:
    """Glob lines of a .dockerignore (comments and blanks dropped); `!` is not supported."""
    if not path.is_file():
        return []
    patterns = []
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("!"):
            raise SpecError("exceptions (!) are not supported", file=path, line=number)
        patterns.append(line)
    return patterns


def context_files(engine_dir: Path) -> list[ContextFile]:
    """The engine's files that enter the build context, sorted, with content hashes.

    Both build kinds hash (and ship) this list, so a symlink whose target leaves the tree is
    refused here: it would put a file from elsewhere on the machine into the image or wheel.
    """
    patterns = read_ignore_file(engine_dir / ".dockerignore")
    tree = engine_dir.resolve()
    files = []
    for path in sorted(engine_dir.rglob("*")):
        relative = path.relative_to(engine_dir).as_posix()
        if path.is_symlink() and not path.resolve().is_relative_to(tree):
            raise BuildError(
                f"{path}: a symlink that leaves the engine tree {engine_dir}; refusing to build "
                "(replace it with the file itself)"
            )
        if not path.is_file() or is_ignored(relative, patterns):
            continue
        files.append(
            ContextFile(
                arcname=f"engine/{relative}",
                path=path,
                sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
                executable=bool(path.stat().st_mode & 0o111),
            )
        )
    return files


def source_digest(
    files: Sequence[ContextFile], dockerfile: bytes, lock: str, build_args: Mapping[str, str]
) -> str:
    """sha256 of a canonical manifest of every build input (paths and contents, not mtimes)."""
    manifest = {
        "files": sorted([f.arcname, f.sha256, f.executable] for f in files),
        "dockerfile": hashlib.sha256(dockerfile).hexdigest(),
        "lock": hashlib.sha256(lock.encode()).hexdigest(),
        "build_args": dict(sorted(build_args.items())),
    }
    return hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()


def image_tag(name: str, digest: str, release: str) -> str:
    """`<name>:<digest12>-<release>`; SpecError when name or release cannot form a docker tag."""
    if not _REPOSITORY.match(name):
        raise SpecError(
            f"image name {name!r} is not a valid docker repository", key="image.name",
            expected="lowercase letters, digits and . _ - / separators",
        )  # fmt: skip
    if not _RELEASE.match(release) or len(release) + 13 > _MAX_TAG:
        raise SpecError(
            f"release name {release!r} cannot be part of a docker tag", key="release",
            expected=f"letters, digits, '_', '.', '-', at most {_MAX_TAG - 13} characters",
        )  # fmt: skip
    return f"{name}:{digest[:12]}-{release}"


def check_tag_target(tag: str, existing_id: str | None, new_id: str) -> None:
    """The never-overwrite rule: a tag may be created, or kept on its image, never moved."""
    if existing_id is not None and existing_id != new_id:
        raise BuildError(
            f"tag {tag} already names image {existing_id[:19]}, not the new {new_id[:19]}; "
            "sparkgate never moves a release tag (remove the old image by hand if it is wrong)"
        )


def image_id(client: docker.DockerClient, reference: str) -> str | None:
    """The image ID a reference names on a daemon, or None when it has none."""
    try:
        return str(client.api.inspect_image(reference)["Id"])
    except ImageNotFound:
        return None


def build_image(
    client: docker.DockerClient,
    request: BuildRequest,
    progress: ImageProgress | None = None,
    rebuild: bool = False,
) -> BuiltImage:
    """Build (or reuse) the tagged image on the build node's daemon; BuildError on failure."""
    started = time.monotonic()
    observer = progress or NullProgress()
    files = context_files(request.engine_dir)
    dockerfile = request.dockerfile.read_bytes()
    build_args = {**request.build_args, "BASE": request.base_image}
    digest = source_digest(files, dockerfile, request.wheelhouse.lock, build_args)
    tag = image_tag(request.name, digest, request.release)
    existing = image_id(client, tag)
    if existing is not None and not rebuild:
        return BuiltImage(tag=tag, image_id=existing, source_digest=digest, reused=True, seconds=0)
    with tempfile.TemporaryFile() as context:
        _write_context(context, files, dockerfile, request.wheelhouse.directory)
        context.seek(0)
        labels = {"RELEASE": request.release, "SOURCE_DIGEST": digest}
        new_id = _run_build(client, context, {**build_args, **labels}, observer)
    check_tag_target(tag, image_id(client, tag), new_id)
    repository, version = tag.rsplit(":", 1)
    client.api.tag(new_id, repository, version)
    return BuiltImage(
        tag=tag,
        image_id=new_id,
        source_digest=digest,
        reused=False,
        seconds=time.monotonic() - started,
    )


def _write_context(
    stream: Any, files: Sequence[ContextFile], dockerfile: bytes, wheelhouse: Path
) -> None:
    """A tar build context with fixed owners and mtimes: Dockerfile, wheelhouse/, engine/."""
    with tarfile.open(fileobj=stream, mode="w") as tar:
        _add_bytes(tar, "Dockerfile", dockerfile, executable=False)
        for wheel in sorted(wheelhouse.iterdir()):
            _add_bytes(tar, f"wheelhouse/{wheel.name}", wheel.read_bytes(), executable=False)
        for file in files:
            _add_bytes(tar, file.arcname, file.path.read_bytes(), executable=file.executable)


def _add_bytes(tar: tarfile.TarFile, name: str, content: bytes, *, executable: bool) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(content)
    info.mode = 0o755 if executable else 0o644
    info.mtime = 0
    tar.addfile(info, io.BytesIO(content))


def _run_build(
    client: docker.DockerClient, context: Any, build_args: dict[str, str], progress: ImageProgress
) -> str:
    """Run the classic builder with no network; returns the new image ID."""
    output: list[str] = []
    ok = False
    try:
        stream = client.api.build(
            fileobj=context,
            custom_context=True,
            dockerfile="Dockerfile",
            buildargs=build_args,
            network_mode="none",
            pull=False,
            rm=True,
            forcerm=True,
            decode=True,
            timeout=BUILD_TIMEOUT_S,
        )
        built = _follow_build(stream, output, progress)
        ok = True
    except (APIError, DockerException) as exc:
        tail = "\n".join(output[-_TAIL_LINES:])
        raise BuildError(f"docker build failed: {exc}\n{tail}") from exc
    finally:
        progress.build_done(ok=ok)
    return built


def _follow_build(
    stream: Iterator[dict[str, Any]], output: list[str], progress: ImageProgress
) -> str:
    """Read the builder's JSON stream into output and progress; the image ID it reports."""
    built: str | None = None
    for chunk in stream:
        if "error" in chunk:
            tail = "\n".join(output[-_TAIL_LINES:])
            raise BuildError(f"docker build failed: {str(chunk['error']).strip()}\n{tail}")
        built = chunk.get("aux", {}).get("ID", built)
        for line in str(chunk.get("stream", "")).splitlines():
            output.append(line)
            progress.build_output(line)
            step = parse_step(line)
            if step is not None:
                progress.build_step(*step)
    if built is None:
        raise BuildError("docker build ended without an image ID:\n" + "\n".join(output[-10:]))
    return built
