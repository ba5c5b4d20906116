"""The engine image's base: a Debian rootfs from debootstrap, imported into a daemon.

There is no registry to pull a base image from, and a pulled image would not be reproducible from
our inputs anyway. So the base is built here: `debootstrap --variant=minbase` from the Debian
mirror this machine's apt already uses, slimmed, tarred and `docker import`ed. The tarball is
cached under the state dir by a digest of its inputs (suite, variant, packages, mirror), and the
image tag carries the same digest, so reruns skip debootstrap and daemons that already hold the
base skip the import.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

import docker
from docker.errors import APIError, ImageNotFound
from pydantic import BaseModel, ConfigDict

from flows.errors import BuildError

APT_SOURCES = Path("/etc/apt")
DEBOOTSTRAP_TIMEOUT_S = 900.0
BASE_REPOSITORY = "sparkgate-base"
# Removed from the rootfs after debootstrap: package caches and docs nothing at runtime reads.
SLIM_PATHS = ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man")


class BaseImageSpec(BaseModel):
    """Everything that decides the base rootfs; its digest keys the cache and the tag."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    suite: str = "bookworm"
    variant: str = "minbase"
    packages: tuple[str, ...] = ("python3", "python3-venv", "ca-certificates")
    mirror: str

    def digest(self) -> str:
        """A hex digest of the spec's content, stable across runs and machines."""
        canonical = json.dumps(self.model_dump(mode="json"), sort_keys=True)
        return hashlib.sha256(canonical.encode()).hexdigest()

    @property
    def tag(self) -> str:
        """The base image's tag: `sparkgate-base:<suite>-<digest12>`."""
        return f"{BASE_REPOSITORY}:{self.suite}-{self.digest()[:12]}"


def mirror_from_sources(texts: Iterable[str], suite: str) -> str | None:
    """The first http(s) Debian mirror serving `suite` in apt sources (one-line or deb822)."""
    for text in texts:
        for stanza in text.split("\n\n"):
            found = _deb822_mirror(stanza, suite) or _one_line_mirror(stanza, suite)
            if found:
                return found
    return None


def host_mirror(suite: str = "bookworm", sources_dir: Path = APT_SOURCES) -> str:
    """The Debian mirror this machine's apt uses for `suite` (it is known to be reachable)."""
    files = [sources_dir / "sources.list", *sorted((sources_dir / "sources.list.d").glob("*"))]
    texts = [path.read_text(errors="replace") for path in files if path.is_file()]
    mirror = mirror_from_sources(texts, suite)
    if mirror is None:
        raise BuildError(f"no apt source for Debian {suite} in {sources_dir}; cannot debootstrap")
    return mirror


def rootfs_tarball(spec: BaseImageSpec, cache_dir: Path) -> Path:
    """The cached rootfs tarball for spec, running debootstrap on a miss (cold: about a minute)."""
    tarball = cache_dir / f"rootfs-{spec.suite}-{spec.digest()[:16]}.tar"
    if tarball.is_file():
        return tarball
    if shutil.which("debootstrap") is None:
        raise BuildError("debootstrap is not installed (apt-get install debootstrap)")
    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir, prefix=".rootfs-") as scratch:
        rootfs = Path(scratch) / "root"
        _debootstrap(spec, rootfs, Path(scratch) / "debootstrap.log")
        for relative in SLIM_PATHS:
            _empty_dir(rootfs / relative)
        partial = Path(scratch) / "rootfs.tar"
        subprocess.run(
            ["tar", "--numeric-owner", "--xattrs", "-C", str(rootfs), "-cf", str(partial), "."],
            check=True,
            capture_output=True,
        )
        partial.replace(tarball)
    return tarball


def ensure_base_image(client: docker.DockerClient, spec: BaseImageSpec, cache_dir: Path) -> str:
    """Make sure the daemon holds the base image for spec; returns its tag."""
    try:
        client.images.get(spec.tag)
    except ImageNotFound:
        pass
    else:
        return spec.tag
    tarball = rootfs_tarball(spec, cache_dir)
    repository, tag = spec.tag.split(":", 1)
    try:
        with tarball.open("rb") as stream:
            client.api.import_image_from_data(
                stream,
                repository=repository,
                tag=tag,
                changes=['CMD ["/bin/bash"]', "ENV LANG=C.UTF-8"],
            )
    except APIError as exc:
        raise BuildError(f"docker import of {tarball} failed: {exc.explanation or exc}") from exc
    try:
        client.images.get(spec.tag)
    except ImageNotFound as exc:
        raise BuildError(f"docker import of {tarball} did not produce {spec.tag}") from exc
    return spec.tag


def _debootstrap(spec: BaseImageSpec, rootfs: Path, log_file: Path) -> None:
    argv = [
        "debootstrap",
        f"--variant={spec.variant}",
        f"--include={','.join(spec.packages)}",
        spec.suite,
        str(rootfs),
        spec.mirror,
    ]
    started = time.monotonic()
    with log_file.open("wb") as log:
        try:
            done = subprocess.run(
                argv,
                check=False,
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=DEBOOTSTRAP_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired as exc:
            raise BuildError(f"debootstrap took over {DEBOOTSTRAP_TIMEOUT_S:.0f} s") from exc
    if done.returncode != 0:
        tail = "\n".join(log_file.read_text(errors="replace").splitlines()[-20:])
        raise BuildError(
            f"debootstrap {spec.suite} from {spec.mirror} failed with status {done.returncode} "
            f"after {time.monotonic() - started:.0f} s:\n{tail}"
        )


def _empty_dir(path: Path) -> None:
    if not path.is_dir():
        return
    for child in path.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def _deb822_mirror(stanza: str, suite: str) -> str | None:
    fields: dict[str, str] = {}
    for line in stanza.splitlines():
        if ":" in line and not line.startswith(("#", " ")):
            key, value = line.split(":", 1)
            fields[key.strip().lower()] = value.strip()
    if (
        "deb" not in fields.get("types", "").split()
        or suite not in fields.get("suites", "").split()
    ):
        return None
    return _first_http(fields.get("uris", "").split())


def _one_line_mirror(stanza: str, suite: str) -> str | None:
    for line in stanza.splitlines():
        words = re.sub(r"\[[^\]]*\]", " ", line).split()
        if len(words) >= 3 and words[0] == "deb" and words[2] == suite:
            return _first_http(words[1:2])
    return None


def _first_http(uris: list[str]) -> str | None:
    return next((uri for uri in uris if uri.startswith(("http://", "https://"))), None)
