"""Build a release once for the process runtime, install the same build on every node, verify.

The build is content-addressed: its digest covers the engine's source files (as the image build
sees them), the locked wheelhouse of its dependencies and the release's build arguments. It is
made once on this machine (a wheel of the engine plus the hashed wheelhouse), copied to each
node and installed there into `<workdir>/envs/<digest12>` with no index, so every rank runs
exactly the bytes that were digested. A node whose environment already carries the digest (made
by the same installer) is not touched again. Verification compares each node's installed
distributions (name, version, and hash of the engine wheel) with the build's own list.

Two installers make the environment from the same wheels and lock: `venv` plus pip (the
default), or uv (`runtime.uv`), several times faster (numbers at `uv_commands`): it neither
bootstraps pip into the environment nor compiles every module at install. A uv environment
holds no pip: nothing on a node runs pip from it (release tests run pytest, ranks the engine),
and every node of a cluster uses the same installer, so their distribution lists still compare
equal.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path, PurePosixPath

from pydantic import BaseModel, ConfigDict

from flows.cluster.build.source_image import context_files, source_digest
from flows.cluster.build.wheelhouse import (
    LOCK_NAME,
    engine_requirements,
    ensure_wheelhouse,
    host_spec,
)
from flows.cluster.transport.base import Transport
from flows.errors import BuildError
from flows.fileio import marker_digest, sha256_file
from flows.lines import LineSink, silent
from flows.secrets import explicit_env
from flows.spec.release import Release

MARKER = ".sparkgate-build.json"
INSTALL_TIMEOUT_S = 900.0
# Printed by the node's interpreter: every installed distribution as name==version, sorted.
_FREEZE = (
    "import importlib.metadata as m, json; "
    "print(json.dumps(sorted(f\"{d.metadata['Name'].lower()}=={d.version}\" "
    "for d in m.distributions())))"
)
# Printed by the node's base interpreter: its own path, which `uv venv` is given.
_EXECUTABLE = "import sys; print(sys.executable)"


class ProcessBuild(BaseModel):
    """A built release: its digest and the local files every node installs from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    release: str
    digest: str
    wheelhouse: Path
    engine_wheel: Path
    lock: str

    @property
    def short(self) -> str:
        """The first 12 hex digits, used in folder names."""
        return self.digest[:12]


class NodeEnv(BaseModel):
    """A node's installed build: where its interpreter is and what it contains."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node: str
    digest: str
    python: str
    distributions: list[str]
    reused: bool


def build_release(release: Release, state: Path, say: LineSink | None = None) -> ProcessBuild:
    """The release's build, made on a cache miss (wheelhouse download, engine wheel)."""
    say = say or silent
    engine_dir = release.build.engine_tree
    requirements = engine_requirements(engine_dir / "pyproject.toml")
    wheels = ensure_wheelhouse(host_spec(requirements), state / "wheelhouses", say=say)
    digest = source_digest(
        context_files(engine_dir), b"process", wheels.lock, dict(release.build.args)
    )
    folder = state / "builds" / digest[:12]
    existing = sorted(folder.glob("sparkgate_engine-*.whl"))
    if not existing:
        say(f"building the engine wheel for {release.name} ({digest[:12]})")
        existing = [_build_wheel(engine_dir, folder, wheels.directory)]
    return ProcessBuild(
        release=release.name,
        digest=digest,
        wheelhouse=wheels.directory,
        engine_wheel=existing[0],
        lock=wheels.lock,
    )


def install(
    build: ProcessBuild,
    transport: Transport,
    workdir: str,
    *,
    base_python: str = "python3",
    uv: str | None = None,
    say: LineSink = silent,
) -> NodeEnv:
    """Install the build on one node (or reuse it when its marker carries the digest and the
    installer: a pip environment lists pip, so one left by the other installer is made again)."""
    root = PurePosixPath(workdir) / "envs" / build.short
    python = str(root / "bin" / "python")
    marker = str(root / MARKER)
    installer = "pip" if uv is None else "uv"
    found = transport.run(["cat", "--", marker], timeout=30)
    if found.ok and _reusable(found.stdout, build.digest, installer):
        return _inspect(build, transport, python, reused=True)
    staging = PurePosixPath(workdir) / "builds" / build.short
    say(f"{transport.node}: copying the build ({build.short})")
    _copy_build(build, transport, staging)
    run = _runner(transport)
    if uv is None:
        commands = pip_commands(base_python, root, staging, build.engine_wheel.name)
    else:
        tool, base = _uv_on_node(transport, uv), run([base_python, "-I", "-c", _EXECUTABLE])
        commands = uv_commands(tool, base.strip(), root, staging, build.engine_wheel.name)
    say(f"{transport.node}: installing into {root} with {installer}")
    run(["rm", "-rf", "--", str(root)])
    for argv in commands:
        run(argv)
    transport.write_text(
        marker,
        json.dumps({"digest": build.digest, "release": build.release, "installer": installer}),
    )
    return _inspect(build, transport, python, reused=False)


def pip_commands(
    base_python: str, root: PurePosixPath, staging: PurePosixPath, engine_wheel: str
) -> list[list[str]]:
    """`venv` (which bootstraps pip), then pip installs the lock and the engine wheel."""
    wheels = staging / "wheels"
    # -I: the caller's PYTHONPATH must neither make pip skip the engine as "already installed"
    # nor be counted as installed; ranks start without it (an explicit environment).
    pip = [str(root / "bin" / "python"), "-I", "-m", "pip", "install", "--quiet", "--no-index",
           "--disable-pip-version-check", "--find-links", str(wheels)]  # fmt: skip
    return [
        [base_python, "-m", "venv", str(root)],
        [*pip, "--require-hashes", "-r", str(wheels / LOCK_NAME)],
        [*pip, "--no-deps", str(staging / engine_wheel)],
    ]


def uv_commands(
    uv: str, base: str, root: PurePosixPath, staging: PurePosixPath, engine_wheel: str
) -> list[list[str]]:
    """`uv venv` on the base interpreter, then uv installs the lock and the engine wheel.

    `uv` and `base` are the node's absolute paths (`uv venv --python python3` would read
    `python3` as "any Python 3" and might take another one). uv runs with the explicit
    environment only, as the pip path runs with `-I`: no PYTHONPATH, VIRTUAL_ENV or UV_* setting
    of the caller, and `--no-config` ignores uv.toml files, so nothing outside the wheels decides
    what is installed. `--no-cache` unpacks from the copied wheels themselves (no shared cache
    whose files the environment would hard-link). Bytecode is left to the first import, as uv
    does by default: pip compiles every module at install, which doubled uv's time here (two
    nodes on two cores: 6.5 s, 15 s with `--compile-bytecode`, 21 s for venv and pip), and the
    first run (the release tests, the determinism gate's first boot) compiles only what it
    imports, before any stage that compares boot or serving times.
    """
    wheels = staging / "wheels"
    isolated = ["sh", "-c", f'exec {explicit_env()} "$@"', "sh", uv]
    pip = [*isolated, "pip", "install", "--quiet", "--no-config", "--no-cache", "--python",
           str(root / "bin" / "python"), "--no-index", "--find-links", str(wheels)]  # fmt: skip
    return [
        [*isolated, "venv", "--quiet", "--no-config", "--python", base, str(root)],
        [*pip, "--require-hashes", "-r", str(wheels / LOCK_NAME)],
        [*pip, "--no-deps", str(staging / engine_wheel)],
    ]


def verify(build: ProcessBuild, envs: Sequence[NodeEnv]) -> None:
    """Every node runs the same build: same digest and the same installed distributions."""
    if not envs:
        return
    reference = envs[0]
    for env in envs:
        if env.digest != build.digest:
            raise BuildError(f"{env.node}: has build {env.digest[:12]}, expected {build.short}")
        if env.distributions != reference.distributions:
            extra = sorted(set(env.distributions) ^ set(reference.distributions))
            raise BuildError(
                f"{env.node}: installed distributions differ from {reference.node}: "
                + ", ".join(extra[:6])
            )


def install_everywhere(
    build: ProcessBuild,
    transports: Mapping[str, Transport],
    workdirs: Mapping[str, str],
    *,
    base_python: str = "python3",
    uv: str | None = None,
    say: LineSink = silent,
) -> dict[str, NodeEnv]:
    """Install on every node in parallel (with one installer), then verify they match."""
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415

    def one(node: str) -> NodeEnv:
        return install(
            build, transports[node], workdirs[node], base_python=base_python, uv=uv, say=say
        )

    with ThreadPoolExecutor(max_workers=max(1, len(workdirs))) as pool:
        envs = dict(zip(workdirs, pool.map(one, workdirs), strict=True))
    verify(build, list(envs.values()))
    return envs


def _build_wheel(engine_dir: Path, folder: Path, wheelhouse: Path) -> Path:
    """Build the engine wheel in isolation, its build backend taken from the wheelhouse."""
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=".wheel-") as scratch:
        pip = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-index"]
        argv = [*pip, "--find-links", str(wheelhouse), "--wheel-dir", scratch, str(engine_dir)]
        done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=300)
        if done.returncode != 0:
            raise BuildError(f"building the engine wheel failed: {done.stderr.strip()[-800:]}")
        built = sorted(Path(scratch).glob("*.whl"))
        if len(built) != 1:
            raise BuildError(f"expected one engine wheel, got {[p.name for p in built]}")
        target = folder / built[0].name
        built[0].replace(target)
    return target


def _copy_build(build: ProcessBuild, transport: Transport, staging: PurePosixPath) -> None:
    wheels = staging / "wheels"
    transport.run(["mkdir", "-p", "--", str(wheels)], timeout=60, check=True)
    for path in sorted(build.wheelhouse.iterdir()):
        if path.is_file():
            transport.put(path, str(wheels / path.name))
    transport.put(build.engine_wheel, str(staging / build.engine_wheel.name))
    expected = {p.name: sha256_file(p) for p in build.wheelhouse.iterdir() if p.is_file()}
    expected[build.engine_wheel.name] = sha256_file(build.engine_wheel)
    names = [str(wheels / name) for name in expected if name != build.engine_wheel.name]
    listing = transport.run(
        ["sha256sum", "--", *names, str(staging / build.engine_wheel.name)], timeout=300
    ).check()
    copied = {PurePosixPath(line.split()[1]).name: line.split()[0] for line in
              listing.stdout.splitlines() if line.strip()}  # fmt: skip
    if copied != expected:
        bad = sorted(name for name in expected if copied.get(name) != expected[name])
        raise BuildError(f"{transport.node}: copied build differs from the original: {bad}")


def _runner(transport: Transport) -> Callable[[list[str]], str]:
    def run(argv: list[str]) -> str:
        result = transport.run(argv, timeout=INSTALL_TIMEOUT_S)
        if not result.ok:
            shown = argv[4:8] if argv[0] == "sh" else argv[:4]  # past the isolating `sh -c`
            raise BuildError(
                f"{transport.node}: `{' '.join(shown)} ...` failed: "
                f"{(result.stderr or result.stdout).strip()[-800:]}"
            )
        return result.stdout

    return run


def _uv_on_node(transport: Transport, uv: str) -> str:
    """The node's path of `runtime.uv` (a name is looked up on its PATH); a BuildError naming
    the node and the value when there is none: the installer asked for is never swapped."""
    found = transport.run(["sh", "-c", 'command -v "$1"', "sh", uv], timeout=30)
    path = found.stdout.strip()
    if not found.ok or not path:
        where = "" if "/" in uv else ", looked up on PATH"
        raise BuildError(
            f"{transport.node}: no uv executable at {uv!r} (runtime.uv{where}): install uv "
            "there, set runtime.uv to a uv on every node, or remove runtime.uv to install "
            "with venv and pip"
        )
    return path


def _reusable(marker: str, digest: str, installer: str) -> bool:
    """Whether a marker names this digest and installer (markers from before uv: pip)."""
    if marker_digest(marker) != digest:
        return False
    made_by = json.loads(marker).get("installer", "pip")
    return bool(made_by == installer)


def _inspect(build: ProcessBuild, transport: Transport, python: str, *, reused: bool) -> NodeEnv:
    result = transport.run([python, "-I", "-c", _FREEZE], timeout=120)  # -I: no PYTHONPATH
    if not result.ok:
        raise BuildError(f"{transport.node}: the installed build does not run: {result.stderr}")
    return NodeEnv(
        node=transport.node,
        digest=build.digest,
        python=python,
        distributions=json.loads(result.stdout),
        reused=reused,
    )
