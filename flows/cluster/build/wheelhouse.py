"""The engine's Python dependencies as a wheelhouse, downloaded on the host and locked by hash.

The package registry is only reachable from the host (through a TLS proxy whose CA the images do
not have), so nothing inside an image build may touch the network. The build downloads every
wheel here with `pip download` for the image's interpreter and platform (Debian bookworm: CPython
3.11, glibc 2.36), writes a lock with one `name==version --hash=sha256:...` line per wheel, and
ships the folder in the build context; the image installs with `--no-index --require-hashes`.
Wheelhouses are cached by a digest of their inputs, and the lock's digest enters the image tag.
"""

from __future__ import annotations

import hashlib
import json
import platform
import re
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterable, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from flows.errors import BuildError, SpecError
from flows.lines import LineSink, silent

LOCK_NAME = "requirements.lock"
BOOKWORM_GLIBC_MINOR = 36
DOWNLOAD_TIMEOUT_S = 600.0
_WHEEL_NAME = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)-.+\.whl$")


class WheelhouseSpec(BaseModel):
    """What decides a wheelhouse: requirements, interpreter and platform; digest keys the cache."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    requirements: tuple[str, ...]
    python_version: str = "3.11"
    abi: str = "cp311"
    machine: str = "x86_64"
    glibc_minor: int = BOOKWORM_GLIBC_MINOR

    def digest(self) -> str:
        """A hex digest of the spec's content (requirements order does not matter)."""
        content = self.model_dump(mode="json")
        content["requirements"] = sorted(self.requirements)
        return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()

    def platforms(self) -> list[str]:
        """Every manylinux tag the image's glibc accepts, newest first (pip does not expand)."""
        return [f"manylinux_2_{minor}_{self.machine}" for minor in range(self.glibc_minor, 4, -1)]


class Wheelhouse(BaseModel):
    """A downloaded, locked wheelhouse folder."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    directory: Path
    lock: str

    @property
    def lock_digest(self) -> str:
        """sha256 of the lock text: what the image tag depends on."""
        return hashlib.sha256(self.lock.encode()).hexdigest()


def engine_requirements(pyproject: Path, extras: Sequence[str] = ("test",)) -> tuple[str, ...]:
    """Runtime, extra and build-system requirements from the engine's pyproject.toml."""
    try:
        data = tomllib.loads(pyproject.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SpecError(f"cannot read engine requirements: {exc}", file=pyproject) from exc
    project = data.get("project", {})
    requirements = list(project.get("dependencies", []))
    optional = project.get("optional-dependencies", {})
    for extra in extras:
        if extra not in optional:
            raise SpecError(
                f"no optional dependency group {extra!r}",
                file=pyproject,
                key="project.optional-dependencies",
                expected=", ".join(sorted(optional)) or "a [project.optional-dependencies] table",
            )
        requirements.extend(optional[extra])
    requirements.extend(data.get("build-system", {}).get("requires", []))
    return tuple(dict.fromkeys(requirements))


def host_spec(requirements: Iterable[str]) -> WheelhouseSpec:
    """A spec for bookworm images on this machine's architecture (build node == this host)."""
    return WheelhouseSpec(requirements=tuple(requirements), machine=platform.machine())


def lock_text(wheels: Iterable[Path]) -> str:
    """One pinned, hashed requirement line per wheel, sorted: the wheelhouse's lock."""
    lines = []
    for wheel in wheels:
        match = _WHEEL_NAME.match(wheel.name)
        if match is None:
            raise BuildError(f"unexpected file in wheelhouse: {wheel.name}")
        name = match["name"].lower().replace("_", "-")
        sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
        lines.append(f"{name}=={match['version']} --hash=sha256:{sha}")
    return "".join(f"{line}\n" for line in sorted(lines))


def ensure_wheelhouse(
    spec: WheelhouseSpec,
    cache_dir: Path,
    pip: Sequence[str] = (sys.executable, "-m", "pip"),
    say: LineSink = silent,
) -> Wheelhouse:
    """The cached wheelhouse for spec, downloading it on a miss (cold: seconds to a minute, said
    then only: a hit is a file read, done before every boot)."""
    directory = cache_dir / f"wheels-{spec.digest()[:16]}"
    lock_file = directory / LOCK_NAME
    if lock_file.is_file():
        return Wheelhouse(directory=directory, lock=lock_file.read_text())
    say("wheelhouse: downloading the engine's dependencies")
    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir, prefix=".wheels-") as scratch:
        partial = Path(scratch) / "wheels"
        _download(spec, partial, pip)
        (partial / LOCK_NAME).write_text(lock_text(sorted(partial.glob("*.whl"))))
        try:
            partial.replace(directory)
        except OSError:  # another run finished the same wheelhouse first: use that one
            if not lock_file.is_file():
                raise
    return Wheelhouse(directory=directory, lock=lock_file.read_text())


def _download(spec: WheelhouseSpec, destination: Path, pip: Sequence[str]) -> None:
    platforms = [arg for tag in spec.platforms() for arg in ("--platform", tag)]
    argv = [
        *pip,
        "download",
        "--quiet",
        "--disable-pip-version-check",
        "--only-binary=:all:",
        f"--python-version={spec.python_version}",
        "--implementation=cp",
        f"--abi={spec.abi}",
        *platforms,
        f"--dest={destination}",
        *spec.requirements,
    ]
    try:
        done = subprocess.run(
            argv, check=False, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S
        )
    except subprocess.TimeoutExpired as exc:
        raise BuildError(f"pip download took over {DOWNLOAD_TIMEOUT_S:.0f} s") from exc
    if done.returncode != 0:
        errors = [line for line in done.stderr.splitlines() if "ERROR" in line] or [done.stderr]
        raise BuildError(
            f"pip download of the engine's wheels failed (status {done.returncode}):\n"
            + "\n".join(errors[-10:])
        )
