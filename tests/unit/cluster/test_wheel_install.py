"""Installing a process build on a node: the commands of each installer (venv and pip, or uv),
when an environment is reused, and the error for a uv that is not there.

The node is a recording double: these tests pin the argv handed to a transport. A real install
with either installer is the integration tests' (tests/integration/test_boot_local.py)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath

import pytest

from flows.cluster.build import wheel
from flows.cluster.build.wheel import MARKER, ProcessBuild, install, pip_commands, uv_commands
from flows.cluster.runtime.process import node_uv
from flows.cluster.transport.base import CommandResult
from flows.errors import BuildError
from flows.secrets import explicit_env
from flows.spec.cluster import Cluster
from flows.spec.load import load_model

ROOT = Path(__file__).resolve().parents[3]
ENGINE = "sparkgate_engine-0.1.0-py3-none-any.whl"
ROOT_ENV = PurePosixPath("/n/envs/abc")
STAGING = PurePosixPath("/n/builds/abc")
STAGED = "/n/builds/abc000000000"  # where `install` copies the fixture's build
ISOLATED = ["sh", "-c", f'exec {explicit_env()} "$@"', "sh"]


class Node:
    """A transport double: records argv, answers from `answers` (first word or `sh` script)."""

    def __init__(self, answers: Mapping[str, CommandResult | str] | None = None) -> None:
        self.node = "n0"
        self.ran: list[list[str]] = []
        self.written: dict[str, str] = {}
        self.answers = dict(answers or {})

    def run(self, argv: Sequence[str], **_: object) -> CommandResult:
        self.ran.append(list(argv))
        key = argv[2] if argv[0] == "sh" and argv[2].startswith("command") else argv[0]
        answer = self.answers.get(key, "[]" if key.endswith("/bin/python") else "")
        if isinstance(answer, CommandResult):
            return answer
        return CommandResult(node="n0", argv=tuple(argv), rc=0, stdout=answer, stderr="",
                             duration=0.0)  # fmt: skip

    def write_text(self, remote: str, text: str) -> None:
        self.written[remote] = text


def _missing(argv: str) -> CommandResult:
    return CommandResult(node="n0", argv=(argv,), rc=1, stdout="", stderr="", duration=0.0)


@pytest.fixture
def build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ProcessBuild:
    """A build whose copy to the node is skipped (the double has no files)."""
    monkeypatch.setattr(wheel, "_copy_build", lambda *_: None)
    return ProcessBuild(release="r1", digest="abc" + "0" * 61, wheelhouse=tmp_path,
                        engine_wheel=tmp_path / ENGINE, lock="")  # fmt: skip


def test_pip_makes_a_venv_then_installs_the_lock_and_the_engine_isolated() -> None:
    pip = ["/n/envs/abc/bin/python", "-I", "-m", "pip", "install", "--quiet", "--no-index",
           "--disable-pip-version-check", "--find-links", "/n/builds/abc/wheels"]  # fmt: skip
    assert pip_commands("python3", ROOT_ENV, STAGING, ENGINE) == [
        ["python3", "-m", "venv", "/n/envs/abc"],
        [*pip, "--require-hashes", "-r", "/n/builds/abc/wheels/requirements.lock"],
        [*pip, "--no-deps", f"/n/builds/abc/{ENGINE}"],
    ]


def test_uv_installs_the_same_wheels_without_an_index_config_cache_or_caller_env() -> None:
    pip = [*ISOLATED, "/bin/uv", "pip", "install", "--quiet", "--no-config", "--no-cache",
           "--python", "/n/envs/abc/bin/python", "--no-index", "--find-links",
           "/n/builds/abc/wheels"]  # fmt: skip
    assert uv_commands("/bin/uv", "/usr/bin/python3.11", ROOT_ENV, STAGING, ENGINE) == [
        [*ISOLATED, "/bin/uv", "venv", "--quiet", "--no-config", "--python",
         "/usr/bin/python3.11", "/n/envs/abc"],
        [*pip, "--require-hashes", "-r", "/n/builds/abc/wheels/requirements.lock"],
        [*pip, "--no-deps", f"/n/builds/abc/{ENGINE}"],
    ]  # fmt: skip


def test_uv_runs_without_the_callers_pythonpath_venv_or_uv_settings() -> None:
    caller = {**os.environ, "PYTHONPATH": "/elsewhere", "VIRTUAL_ENV": "/v", "UV_OFFLINE": "0"}
    done = subprocess.run([*ISOLATED, "env"], env=caller, capture_output=True, text=True,
                          check=True)  # fmt: skip
    names = {line.split("=", 1)[0] for line in done.stdout.splitlines()}
    assert "PATH" in names
    assert not names & {"PYTHONPATH", "VIRTUAL_ENV", "UV_OFFLINE"}


def test_install_with_uv_runs_the_nodes_uv_on_its_base_interpreter(build: ProcessBuild) -> None:
    node = Node({'command -v "$1"': "/opt/uv/bin/uv\n", "python3": "/usr/bin/python3.11\n"})
    said: list[str] = []
    env = install(build, node, "/n", uv="uv", say=said.append)
    assert node.ran[1] == ["sh", "-c", 'command -v "$1"', "sh", "uv"]
    assert node.ran[2] == ["python3", "-I", "-c", "import sys; print(sys.executable)"]
    assert node.ran[3] == ["rm", "-rf", "--", "/n/envs/abc000000000"]
    venv, lock, engine = node.ran[4:7]
    assert venv[4:] == ["/opt/uv/bin/uv", "venv", "--quiet", "--no-config", "--python",
                        "/usr/bin/python3.11", "/n/envs/abc000000000"]  # fmt: skip
    assert lock[-3:] == ["--require-hashes", "-r", f"{STAGED}/wheels/requirements.lock"]
    assert engine[-2:] == ["--no-deps", f"{STAGED}/{ENGINE}"]
    assert "n0: installing into /n/envs/abc000000000 with uv" in said
    marker = json.loads(node.written[f"/n/envs/abc000000000/{MARKER}"])
    assert marker == {"digest": build.digest, "release": "r1", "installer": "uv"}
    assert not env.reused


def test_a_missing_uv_is_an_error_naming_node_and_value_and_nothing_is_touched(
    build: ProcessBuild,
) -> None:
    node = Node({'command -v "$1"': _missing("sh")})
    with pytest.raises(BuildError) as caught:
        install(build, node, "/n", uv="/x/.venv/bin/uv")
    assert str(caught.value).startswith("n0: no uv executable at '/x/.venv/bin/uv' (runtime.uv)")
    assert "remove runtime.uv to install with venv and pip" in str(caught.value)
    assert not any(argv[0] == "rm" for argv in node.ran)
    with pytest.raises(BuildError, match=r"'uv' \(runtime.uv, looked up on PATH\)"):
        install(build, node, "/n", uv="uv")


@pytest.mark.parametrize(
    ("marker", "uv", "reused"),
    [
        ({"installer": "uv"}, "uv", True),
        ({"installer": "pip"}, None, True),
        ({}, None, True),  # made before uv: by pip
        ({}, "uv", False),  # pip's environment lists pip, a uv one does not: made again
        ({"installer": "uv"}, None, False),
    ],
)
def test_an_environment_is_reused_only_from_the_same_installer(
    build: ProcessBuild, marker: dict[str, str], uv: str | None, reused: bool
) -> None:
    text = json.dumps({"digest": build.digest, **marker})
    node = Node({"cat": text, 'command -v "$1"': "/bin/uv", "python3": "/usr/bin/python3"})
    assert install(build, node, "/n", uv=uv).reused is reused


def _cluster(tmp_path: Path, uv: str, transport: str = "kind: local") -> Cluster:
    local = (ROOT / "config" / "local.yaml").read_text(encoding="utf-8")
    local = local.replace("transport:\n  kind: local\n", f"transport: {{{transport}}}\n")
    (tmp_path / "config" / "engines").mkdir(parents=True)
    engine = (ROOT / "config" / "engines" / "sparkengine.yaml").read_text(encoding="utf-8")
    (tmp_path / "config" / "engines" / "sparkengine.yaml").write_text(engine, encoding="utf-8")
    path = tmp_path / "config" / "c.yaml"
    uv_line = f"runtime:\n  kind: process\n  uv: {uv}\n"
    path.write_text(local.replace("runtime:\n  kind: process\n", uv_line), encoding="utf-8")
    return load_model(path, Cluster)


def test_a_local_uv_path_resolves_against_the_cluster_file(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path, "../.venv/bin/uv")
    assert node_uv(cluster) == str(tmp_path / ".venv" / "bin" / "uv")


def test_a_bare_uv_is_the_one_beside_sparkgates_interpreter_else_the_path_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = _cluster(tmp_path, "uv")
    scripts = tmp_path / "venv-bin"
    scripts.mkdir()
    monkeypatch.setattr("sysconfig.get_path", lambda name: str(scripts))
    assert node_uv(cluster) == "uv"  # not beside it: looked up on the node's PATH
    (scripts / "uv").write_text("#!/bin/sh\n")
    (scripts / "uv").chmod(0o755)
    assert node_uv(cluster) == str(scripts / "uv")


def test_an_unset_uv_on_a_local_cluster_is_sparkgates_own_else_pip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shipped local cluster sets no `uv`: its nodes are this machine, so the uv `make
    setup` put beside sparkgate's interpreter installs them; without one, pip does."""
    cluster = load_model(ROOT / "config/local.yaml", Cluster)
    scripts = tmp_path / "venv-bin"
    scripts.mkdir()
    monkeypatch.setattr("sysconfig.get_path", lambda name: str(scripts))
    assert node_uv(cluster) is None
    (scripts / "uv").write_text("#!/bin/sh\n")
    (scripts / "uv").chmod(0o755)
    assert node_uv(cluster) == str(scripts / "uv")


def test_an_ssh_nodes_uv_is_taken_as_written_and_unset_means_pip(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path, "bin/uv", transport="kind: ssh, user: u")
    assert node_uv(cluster) == "bin/uv"  # a path on the node, not made absolute here
    runtime = cluster.runtime.model_copy(update={"uv": None})
    assert node_uv(cluster.model_copy(update={"runtime": runtime})) is None
