"""Release tests on a node of the process runtime: the built test tree beside the node's build.

The test tree *as built for the release* (the files the build digested: the tests and pytest's
configuration) is shipped once per digest beside the node's installed environment, as the image
carries /opt/engine. A run copies that tree to a fresh workspace, lays the release's changed
files over it, runs pytest with the build's interpreter, keeps pytest's output and JUnit XML as
raw files and removes the workspace. The pieces both runtimes share (pytest's argv, copying
files with a checksum proof, keeping the raw files) sit here too. pytest runs with an explicit
environment (`flows.secrets.EXPLICIT_ENV`), never the whole environment it is started from.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

from flows.cluster.build.source_image import context_files
from flows.cluster.runtime.base import PytestRun
from flows.cluster.transport.base import Transport
from flows.errors import BuildError, SparkgateError
from flows.fileio import marker_digest, sha256_file, write_text
from flows.lines import LineSink
from flows.secrets import explicit_env
from flows.spec.release_tests import PYTEST_OPTIONS

TREE_MARKER = ".sparkgate-tree.json"
# Files of the engine tree the tests need on a node: the tests and pytest's configuration.
TREE_PREFIXES = ("tests/",)
TREE_FILES = ("pyproject.toml",)
# The tests' tmp_path root inside the run's workspace (short: some tests bind sockets there).
BASETEMP = ".tmp"


def tree_files(engine_dir: Path) -> dict[str, Path]:
    """The engine files the tests need on a node, as digested by the build (name -> path)."""
    found = {}
    for item in context_files(engine_dir):
        name = item.arcname.removeprefix("engine/")
        if name.startswith(TREE_PREFIXES) or name in TREE_FILES:
            found[name] = item.path
    return found


def pytest_argv(
    python: str,
    workspace: str,
    gate_files: Sequence[str],
    options: Sequence[str] = PYTEST_OPTIONS,
) -> list[str]:
    """pytest with the release's `options` (the recipe's runner: `-q --noconftest -p
    no:cacheprovider -rfE`) on the gate files, with JUnit XML (xunit1 keeps each test's file);
    a file that fails to import is reported as an error while the other files still run.

    The tests' temporary folders live in the workspace (`--basetemp`), so they go with it: by
    default pytest numbers them under the node's /tmp and, when a session ends, deletes the
    oldest beyond three, whoever made them: after our own CI had run on the machine, a
    release-test run spent 48 s of its 101 s deleting CI's folders.
    """
    return [
        python, "-m", "pytest", *options, "--continue-on-collection-errors",
        f"--junitxml={workspace}/junit.xml",
        "-o", "junit_family=xunit1", f"--basetemp={workspace}/{BASETEMP}",
        "--rootdir", workspace, *gate_files,
    ]  # fmt: skip


def ship_tree(digest: str, files: Mapping[str, Path], transport: Transport, workdir: str) -> str:
    """Copy the built tree's test files beside the node's environment once per digest."""
    tree = PurePosixPath(workdir) / "envs" / digest[:12] / "engine"
    marker = str(tree / TREE_MARKER)
    found = transport.run(["cat", "--", marker], timeout=30)
    if found.ok and marker_digest(found.stdout) == digest:
        return str(tree)
    transport.run(["rm", "-rf", "--", str(tree)], timeout=120, check=True)
    put_all(transport, tree, files)
    transport.write_text(marker, json.dumps({"digest": digest, "files": sorted(files)}))
    return str(tree)


def put_all(transport: Transport, target: PurePosixPath, files: Mapping[str, Path]) -> None:
    """Copy local files under `target` on the node and prove each arrived whole."""
    folders = sorted({str((target / name).parent) for name in files} | {str(target)})
    transport.run(["mkdir", "-p", "--", *folders], timeout=60, check=True)
    for name, path in sorted(files.items()):
        transport.put(path, str(target / name))
    listing = transport.run(
        ["sha256sum", "--", *(str(target / name) for name in sorted(files))], timeout=300
    ).check()
    copied = {line.split()[1]: line.split()[0] for line in listing.stdout.splitlines() if line}
    bad = [n for n, p in files.items() if copied.get(str(target / n)) != sha256_file(p)]
    if bad:
        raise BuildError(f"{transport.node}: test files differ after copying: {', '.join(bad)}")


def list_tree(transport: Transport, tree: str) -> list[str]:
    """Every Python file under `tree` on the node, relative to it."""
    listing = transport.run(["find", tree, "-type", "f", "-name", "*.py"], timeout=60).check()
    prefix = tree.rstrip("/") + "/"
    return sorted(line.removeprefix(prefix) for line in listing.stdout.splitlines() if line)


def workspace_in(workdir: str) -> str:
    """A fresh folder on the node for one run (the built tree is never modified)."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    return str(PurePosixPath(workdir) / "release-tests" / stamp)


def keep_results(
    transport: Transport, rc: int, output: str, *, junit: str, workspace: str, out_dir: Path
) -> PytestRun:
    """Keep pytest's output and JUnit XML as raw files in out_dir, then drop the workspace."""
    out_dir.mkdir(parents=True, exist_ok=True)
    write_text(out_dir / "pytest.txt", output)
    files, junit_xml = ["pytest.txt"], None
    if transport.run(["test", "-f", junit], timeout=30).ok:
        transport.get(junit, out_dir / "junit.xml")
        files.append("junit.xml")
        junit_xml = (out_dir / "junit.xml").read_text()
    transport.run(["rm", "-rf", "--", workspace], timeout=120)
    return PytestRun(node=transport.node, rc=rc, output=output, junit_xml=junit_xml, files=files)


class ProcessTestHost:
    """The shipped test tree and the build's interpreter on one node of the process runtime."""

    def __init__(
        self, transport: Transport, *, python: str, tree: str, workdir: str, say: LineSink
    ) -> None:
        self._transport = transport
        self._python = python
        self._tree = tree
        self._workdir = workdir
        self._say = say

    @property
    def node(self) -> str:
        """The node the tests run on."""
        return self._transport.node

    def list_tree(self) -> list[str]:
        """Every Python file of the shipped tree."""
        return list_tree(self._transport, self._tree)

    def run_pytest(
        self,
        gate: Sequence[str],
        changed: Mapping[str, Path],
        out_dir: Path,
        *,
        timeout: float,
        options: Sequence[str] = PYTEST_OPTIONS,
    ) -> PytestRun:
        """Copy the tree to a fresh workspace, lay the changed files over it, run pytest."""
        transport, workspace = self._transport, workspace_in(self._workdir)
        transport.run(["mkdir", "-p", "--", workspace], timeout=60, check=True)
        transport.run(["cp", "-a", "--", f"{self._tree}/.", workspace], timeout=300, check=True)
        if changed:
            put_all(transport, PurePosixPath(workspace), changed)
        self._say(f"{transport.node}: pytest on {len(gate)} gate files")
        try:
            argv = ["sh", "-c", f'exec {explicit_env()} "$@"', "sh"]
            argv += pytest_argv(self._python, workspace, gate, options)
            result = transport.run(argv, timeout=timeout, cwd=workspace)
            rc, output = result.rc, f"{result.stdout}\n{result.stderr}"
        except SparkgateError as error:  # a timeout: keep whatever pytest wrote
            rc, output = 124, f"pytest did not finish within {timeout:g}s: {error}"
        junit = f"{workspace}/junit.xml"
        return keep_results(
            transport, rc, output, junit=junit, workspace=workspace, out_dir=out_dir
        )
