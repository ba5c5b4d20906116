"""Attack: local ranks and release tests inherited the operator's whole environment, so
SSH_AUTH_SOCK (the operator's SSH agent) and an HF_TOKEN of the shell reached every rank. Now a
rank gets the explicit environment (PATH, HOME, locale ...) plus its spec's env, whose
`{env:NAME}` and `{file:PATH}` references are resolved at launch."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from flows.cluster.runtime.process import ProcessRuntime
from flows.cluster.runtime.pytest_host import ProcessTestHost
from flows.cluster.transport.local import LocalTransport
from flows.lines import silent
from flows.spec.launch import LaunchPlan

DUMP = "import json, os, sys; json.dump(dict(os.environ), open(sys.argv[1], 'w'))"


@pytest.fixture
def operator_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """An operator shell with an SSH agent, a token and a secret meant for references."""
    monkeypatch.setenv("SSH_AUTH_SOCK", "/tmp/ssh-operator/agent.1")
    monkeypatch.setenv("HF_TOKEN", "hf_operator_token_value")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "operator-aws-secret")
    monkeypatch.setenv("SPARKGATE_TEST_SECRET", "resolved-from-env")


def _plan(tmp_path: Path, env: dict[str, str]) -> LaunchPlan:
    return LaunchPlan(
        node="n0", rank=0, head=True, address="127.0.0.1",
        argv=[sys.executable, "-c", DUMP, str(tmp_path / "env.json")],
        env=env, cwd=str(tmp_path), workdir=str(tmp_path), model_dir=str(tmp_path / "m"),
        cache_dirs={}, kernel_cache="kernels", ready_url=None,
        stop_signal="SIGTERM", stop_grace_s=5,
    )  # fmt: skip


def _rank_env(tmp_path: Path, env: dict[str, str]) -> dict[str, str]:
    transport = LocalTransport("n0")
    runtime = ProcessRuntime({"n0": transport})
    plan = _plan(tmp_path, env)
    runtime.prepare(plan)
    handle = runtime.start(plan)
    deadline = time.monotonic() + 60
    while runtime.status(handle).running and time.monotonic() < deadline:
        time.sleep(0.1)
    assert runtime.status(handle).exit_code == 0, runtime.read_log(handle)
    transport.close()
    found: dict[str, str] = json.loads((tmp_path / "env.json").read_text())
    return found


@pytest.mark.usefixtures("operator_env")
def test_a_local_rank_gets_no_operator_environment(tmp_path: Path) -> None:
    env = _rank_env(tmp_path, {"PYTHONUNBUFFERED": "1"})
    assert "SSH_AUTH_SOCK" not in env
    assert "HF_TOKEN" not in env
    assert "AWS_SECRET_ACCESS_KEY" not in env
    assert env["PYTHONUNBUFFERED"] == "1"
    assert env["PATH"]


@pytest.mark.usefixtures("operator_env")
def test_a_rank_gets_its_referenced_secrets_resolved_at_launch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPARKGATE_ROOT", str(tmp_path))
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "hf").write_text("hf_from_a_file\n")
    env = _rank_env(
        tmp_path, {"API_KEY": "{env:SPARKGATE_TEST_SECRET}", "HF_TOKEN": "{file:secrets/hf}"}
    )
    assert env["API_KEY"] == "resolved-from-env"
    assert env["HF_TOKEN"] == "hf_from_a_file"
    assert "SSH_AUTH_SOCK" not in env


TEST_FILE = """
import os

def test_no_operator_environment():
    assert "SSH_AUTH_SOCK" not in os.environ
    assert "HF_TOKEN" not in os.environ
    assert os.environ["PATH"]
"""


@pytest.mark.usefixtures("operator_env")
def test_release_tests_get_no_operator_environment(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "tests").mkdir(parents=True)
    (tree / "tests" / "test_env.py").write_text(TEST_FILE)
    transport = LocalTransport("n0")
    host = ProcessTestHost(
        transport, python=sys.executable, tree=str(tree), workdir=str(tmp_path / "wd"), say=silent
    )
    run = host.run_pytest(["tests/test_env.py"], {}, tmp_path / "out", timeout=120)
    transport.close()
    assert run.rc == 0, run.output
