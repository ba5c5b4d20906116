"""Issue 26 deliver 4: the operator runtime drives the operator's own start and stop commands.

The commands are real shell commands run through the local transport; the node daemons that
would show the containers those commands create are a small fake here (the lab runs the recipe
double's launcher against real daemons).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from docker.errors import NotFound

from flows.cluster.runtime import docker as docker_ranks
from flows.cluster.runtime.factory import rank_spec, runtime_for
from flows.cluster.runtime.operator import OperatorRanks
from flows.cluster.transport.local import LocalTransport
from flows.errors import BootError, SpecError
from flows.spec.cluster import Cluster
from flows.spec.launch import render_all
from flows.spec.load import load_model
from flows.spec.release import Release

ROOT = Path(__file__).resolve().parents[3]


class Daemon:
    """A node daemon whose container exists once the launcher wrote `started`."""

    def __init__(self, checkout: Path, production: bool = False, serves: str = "sha256:r1") -> None:
        self.api = self
        self.checkout, self.production, self.serves = checkout, production, serves

    def inspect_image(self, reference: str) -> dict[str, Any]:
        return {"Id": {"r1:tag": "sha256:r1"}[reference]}

    def inspect_container(self, name: str) -> dict[str, Any]:
        if not (self.checkout / "started").exists():
            if self.production:  # the operator's serving container, before --replace
                return {"Id": "prod", "Name": f"/{name}", "State": {"Running": True}}
            raise NotFound("no such container")
        running = not (self.checkout / "stopped").exists()
        state = {"Running": running, "ExitCode": 0 if running else 137}
        image = {"Image": self.serves, "Config": {"Image": "checkout:tag"}}
        return {"Id": "abc", "Name": f"/{name}", "State": state, **image}


def operator_cluster(tmp_path: Path, start: str) -> Cluster:
    checkout = tmp_path / "checkout"
    checkout.mkdir(exist_ok=True)
    runtime = {
        "kind": "operator",
        "container_name": "dsv41-karmic-kraken",
        "commands": {
            "cwd": str(checkout),
            "start": ["sh", "-c", start],
            "stop": ["sh", "-c", "echo stop >> stops; touch stopped"],
        },
    }
    path = tmp_path / "operator.yaml"
    set_ = {"name": "op", "runtime": runtime}
    path.write_text(
        json.dumps({"kind": "cluster", "extends": str(ROOT / "config" / "local.yaml"), "set": set_})
    )
    return load_model(path, Cluster)


@pytest.fixture
def release() -> Release:
    return load_model(ROOT / "releases" / "r1.yaml", Release)


def started(runtime: OperatorRanks, cluster: Cluster, release: Release) -> list[Any]:
    plans = render_all(cluster, release)
    worker = runtime.start(next(p for p in plans if not p.head))
    assert runtime.status(worker).running  # the launcher has not run: still starting
    head = runtime.start(next(p for p in plans if p.head))
    assert runtime._started is not None
    runtime._started.join(timeout=30)
    return [worker, head]


def test_the_launchers_start_and_stop_commands_run_the_ranks(
    tmp_path: Path, release: Release, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = operator_cluster(tmp_path, 'test -z "$(ls)" && touch started')  # a clean checkout
    checkout = tmp_path / "checkout"
    monkeypatch.setattr(docker_ranks, "connect", lambda endpoint: Daemon(checkout))
    transports = {n.name: LocalTransport(n.name) for n in cluster.nodes}
    runtime = runtime_for(cluster, transports, release=release)
    assert isinstance(runtime, OperatorRanks)
    assert runtime.kind == "operator"
    worker, head = started(runtime, cluster, release)
    assert (worker.container, head.container) == ("dsv41-karmic-kraken", "dsv41-karmic-kraken")
    assert runtime.status(worker).running
    assert runtime.status(head).running
    assert not runtime.status(head).detail  # the container's state, not the launcher's
    runtime.settle([worker, head])  # the launcher succeeded: the boot may end

    ended = [runtime.stop(head), runtime.stop(worker)]
    assert [e.running for e in ended] == [False, False]
    assert (checkout / "stops").read_text() == "stop\n", "the stop command runs once"


def test_settling_waits_for_the_launcher_past_its_api_wait_and_fails_with_its_words(
    tmp_path: Path, release: Release, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recipe's launcher still arms the steady guards and removes the containers it replaced
    after the API answers: the boot must end after it, and fail when that part fails."""
    after_ready = "touch started; sleep 1; echo armed > guards; echo 'no steady guard' >&2; exit 1"
    cluster = operator_cluster(tmp_path, after_ready)
    checkout = tmp_path / "checkout"
    monkeypatch.setattr(docker_ranks, "connect", lambda endpoint: Daemon(checkout))
    runtime = runtime_for(cluster, {n.name: LocalTransport(n.name) for n in cluster.nodes})
    assert isinstance(runtime, OperatorRanks)
    runtime._release = release
    plans = render_all(cluster, release)
    handles = [runtime.start(p) for p in sorted(plans, key=lambda p: p.head)]
    runtime.settle([h for h in handles if not h.head])  # no head: its command is not waited for
    assert not (checkout / "guards").exists()
    with pytest.raises(BootError, match="exited 1: no steady guard"):
        runtime.settle(handles)
    assert (checkout / "guards").read_text() == "armed\n"  # it waited for the whole command


def test_a_launcher_serving_another_image_than_the_releases_fails_the_boot(
    tmp_path: Path, release: Release, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The launcher serves what its checkout names: an arm of r1 that ran another image would be
    measured and reported as r1's."""
    cluster = operator_cluster(tmp_path, "touch started")
    checkout = tmp_path / "checkout"
    for serves, fails in (("sha256:r1", False), ("sha256:r2", True)):
        monkeypatch.setattr(
            docker_ranks, "connect", lambda _e, s=serves: Daemon(checkout, serves=s)
        )
        runtime = runtime_for(cluster, {n.name: LocalTransport(n.name) for n in cluster.nodes})
        assert isinstance(runtime, OperatorRanks)
        runtime._release, runtime._image = release, "r1:tag"
        handles = started(runtime, cluster, release)
        if not fails:
            runtime.settle(handles)
            continue
        with pytest.raises(BootError, match=r"runs checkout:tag \(sha256:r2\), not this release's "
                           r"r1:tag \(sha256:r1\): it serves what its checkout names"):  # fmt: skip
            runtime.settle(handles)


def test_a_refused_start_ends_every_rank_with_the_launchers_own_words(
    tmp_path: Path, release: Release, monkeypatch: pytest.MonkeyPatch
) -> None:
    refuse = "echo 'deployment requires a clean local repository' >&2; exit 1"
    cluster = operator_cluster(tmp_path, refuse)
    monkeypatch.setattr(docker_ranks, "connect", lambda endpoint: Daemon(tmp_path / "checkout"))
    runtime = runtime_for(cluster, {n.name: LocalTransport(n.name) for n in cluster.nodes})
    assert isinstance(runtime, OperatorRanks)
    runtime._release = release
    for handle in started(runtime, cluster, release):
        status = runtime.status(handle)
        assert (status.running, status.exit_code) == (False, 1)
        assert "clean local repository" in status.detail


def test_the_plan_shows_the_launchers_commands(tmp_path: Path, release: Release) -> None:
    cluster = operator_cluster(tmp_path, "true")
    plan = render_all(cluster, release)[0]
    shown = rank_spec(cluster, release, plan, "i")["operator"]
    assert shown["start"] == ["sh", "-c", "true"]
    assert shown["cwd"] == str(tmp_path / "checkout")
    assert shown["on"] == cluster.head.name


def test_the_container_that_had_the_name_before_is_not_taken_for_the_rank(
    tmp_path: Path, release: Release, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = operator_cluster(tmp_path, "sleep 1; touch started")
    daemon = Daemon(tmp_path / "checkout", production=True)
    monkeypatch.setattr(docker_ranks, "connect", lambda endpoint: daemon)
    runtime = runtime_for(cluster, {n.name: LocalTransport(n.name) for n in cluster.nodes})
    assert isinstance(runtime, OperatorRanks)
    runtime._release = release
    plans = render_all(cluster, release)
    worker = runtime.start(next(p for p in plans if not p.head))
    runtime.start(next(p for p in plans if p.head))
    waiting = runtime.status(worker)  # production still runs under the name: not our rank
    assert waiting.detail == "the operator's start command is running"
    assert runtime._started is not None
    runtime._started.join(timeout=30)
    assert runtime.status(worker).running
    assert runtime.status(worker).detail == ""


def test_an_unknown_placeholder_in_the_launchers_folder_is_refused_at_load(
    tmp_path: Path,
) -> None:
    path = tmp_path / "bad.yaml"
    runtime = {"kind": "operator", "commands": {"cwd": "{checkout}", "start": ["a"], "stop": ["b"]}}
    set_ = {"name": "op", "runtime": runtime}
    extends = str(ROOT / "config" / "local.yaml")
    path.write_text(json.dumps({"kind": "cluster", "extends": extends, "set": set_}))
    with pytest.raises(SpecError) as bad:
        load_model(path, Cluster)
    assert "runtime.commands.cwd" in str(bad.value)
    assert "checkout" in str(bad.value)
