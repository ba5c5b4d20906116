"""The process runtime: the engine as a process group on each node, in a virtual environment.

A build is a wheel of the engine plus its hashed wheelhouse (`flows.cluster.build.wheel`),
installed into `<workdir>/envs/<digest12>` on every node. Ranks start detached through the
node's transport with their exit status written beside the log; the model is prepared and the
caches emptied with plain commands on the node; the release tests run with the build's
interpreter on a shipped copy of the built test tree.

A rank never inherits the environment it is started from (the operator's SSH_AUTH_SOCK,
HF_TOKEN, ...): it gets `flows.secrets.EXPLICIT_ENV` as the node has them plus the plan's env,
whose `{env:..}`/`{file:..}` references are resolved here, at launch, and nowhere stored.
"""

from __future__ import annotations

import os
import signal
import sysconfig
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from flows.cluster.boot.caches import CacheTarget, empty_caches
from flows.cluster.build.wheel import ProcessBuild, build_release, install_everywhere
from flows.cluster.runtime.base import Build, Installed, NodeInstall, RankHandle, RankStatus
from flows.cluster.runtime.memory_guard import (
    RankGuard,
    answers,
    node_meminfo,
    refuse_below_startup,
)
from flows.cluster.runtime.pytest_host import ProcessTestHost, ship_tree, tree_files
from flows.cluster.transport.base import Transport
from flows.errors import BuildError, ClusterError, TransportError
from flows.lines import LineSink
from flows.secrets import explicit_env, resolve_env
from flows.spec.cluster import Cluster, LocalTransport, MemoryGuard, Node
from flows.spec.cluster import ProcessRuntime as ProcessRuntimeSpec
from flows.spec.launch import LaunchPlan
from flows.spec.release import Release

STOP_POLL_S = 0.2
FACT_TIMEOUT_S = 30.0
# The wrapper keeps the rank's exit status: a trapped signal waits for the engine to finish,
# then `$?` is written next to the log. argv reaches the engine as "$@", never as shell text;
# `{env}` keeps only the explicit environment (names only: values never enter a command line).
_EXIT_WRAPPER = 'trap : TERM INT HUP; {env} "$@"; echo "$?" > "$0"'


class ProcessRuntime:
    """Ranks as process groups started through each node's transport."""

    kind: Literal["process"] = "process"

    def __init__(
        self,
        transports: Mapping[str, Transport],
        *,
        cluster: Cluster | None = None,
        state: Path | None = None,
        release: Release | None = None,
    ) -> None:
        self._transports = dict(transports)
        self._cluster = cluster
        self._state = state
        self._release = release
        self._guards: dict[int, RankGuard] = {}
        self._ready_url: str | None = None

    # -- the build and what is done with it ------------------------------------------------------

    def build(self, release: Release, say: LineSink) -> ProcessBuild:
        """The engine wheel and its wheelhouse, made once under the state folder's build cache."""
        if self._state is None:
            raise ClusterError("the process runtime was made without a state folder to build in")
        self._release = release
        return build_release(release, self._state / "build-cache", say)

    def install(
        self, build: Build, say: LineSink, *, nodes: Sequence[str] | None = None
    ) -> Installed:
        """A virtual environment of the build on every node (reused where its marker matches)."""
        if not isinstance(build, ProcessBuild):
            raise ClusterError(f"the process runtime installs wheels, not {type(build).__name__}")
        cluster = self._need_cluster()
        chosen = [n for n in cluster.nodes if nodes is None or n.name in nodes]
        envs = install_everywhere(
            build, self._transports, {node.name: node.workdir for node in chosen},
            base_python=cluster.runtime.python, uv=node_uv(cluster), say=say,
        )  # fmt: skip
        return Installed(
            runtime="process",
            release=build.release,
            digest=build.digest,
            nodes=[
                NodeInstall(node=e.node, reused=e.reused, python=e.python) for e in envs.values()
            ],
            summary=[f"{e.node}: {'reused' if e.reused else 'installed'}" for e in envs.values()],
        )

    def model_on_node(self, plan: LaunchPlan) -> str:
        """A process reads the model where the plan says."""
        return plan.model_dir

    def prepare_model(self, plan: LaunchPlan, timeout: float) -> None:
        """Run the profile's model preparation on the node, in the rank's working folder."""
        if not plan.model_prepare:
            raise BuildError(f"{plan.node}: no model at {plan.model_dir} and no model_prepare")
        argv = ["sh", "-c", f'exec {explicit_env(plan.env)} "$@"', "sh", *plan.model_prepare]
        result = self._node(plan.node).run(
            argv, timeout=timeout, cwd=plan.cwd, env=resolve_env(plan.env)
        )
        if not result.ok:
            raise BuildError(
                f"{plan.node}: model preparation failed: {(result.stderr or result.stdout)[-800:]}"
            )

    def empty_caches(self, targets: Sequence[CacheTarget]) -> None:
        """Remove and re-create each cache folder through its node's transport."""
        empty_caches(self._transports, targets)

    def node_facts(self, node: Node, values: Mapping[str, str]) -> dict[str, object]:
        """The version of the node's base interpreter (an error when it does not run)."""
        try:
            done = self._node(node.name).run(
                [values["python"], "--version"], timeout=FACT_TIMEOUT_S
            )
        except TransportError as failure:
            return {"python_error": str(failure)}
        if not done.ok:
            return {"python_error": f"`{values['python']} --version` exited {done.rc}"}
        return {"python_version": (done.stdout + done.stderr).strip()}

    def release_tests(self, node: str, installed: Installed, say: LineSink) -> ProcessTestHost:
        """Ship the built test tree beside the node's environment; a host to list and run it."""
        cluster, transport = self._need_cluster(), self._node(node)
        python = installed.launch_values(node).get("python")
        if python is None:
            raise ClusterError(f"node {node}: the build is not installed there")
        if self._release is None:
            raise ClusterError(f"node {node}: no release given to ship the tests of")
        workdir = cluster.node(node).workdir
        files = tree_files(self._release.build.engine_tree)
        tree = ship_tree(installed.digest, files, transport, workdir)
        return ProcessTestHost(transport, python=python, tree=tree, workdir=workdir, say=say)

    # -- ranks -------------------------------------------------------------------------------------

    def prepare(self, plan: LaunchPlan) -> None:
        """Create workdir, log folder, model parent and cache folders."""
        folders = [plan.workdir, plan.cwd, _log_dir(plan), *plan.cache_dirs.values()]
        self._node(plan.node).run(["mkdir", "-p", "--", *folders], check=True)

    def start(self, plan: LaunchPlan) -> RankHandle:
        """Start the rank detached in its own process group; its log is a file in the workdir."""
        started = datetime.now(UTC)
        stem = f"{_log_dir(plan)}/{started:%Y%m%dT%H%M%S.%f}-rank{plan.rank}"
        log_path, exit_path = f"{stem}.log", f"{stem}.exit"
        wrapper = _EXIT_WRAPPER.replace("{env}", explicit_env(plan.env))
        argv = ["sh", "-c", wrapper, exit_path, *plan.argv]
        env = resolve_env(plan.env)
        guard = self._memory_guard()
        transport = self._node(plan.node)
        if guard is not None:
            refuse_below_startup(transport, guard, plan.node, plan.rank)
        pid = transport.start(argv, stdout_path=log_path, env=env, cwd=plan.cwd)
        if guard is not None:
            self._guard(plan, pid, guard)
        return RankHandle.started(
            "process", plan, started, pid=pid, log_path=log_path, exit_path=exit_path
        )

    def status(self, handle: RankHandle) -> RankStatus:
        """Alive by pid; otherwise the exit status the wrapper wrote, if any."""
        transport = self._node(handle.node)
        if handle.pid is not None and transport.is_alive(handle.pid):
            return RankStatus(running=True)
        code = None
        if handle.exit_path is not None:
            result = transport.run(["cat", "--", handle.exit_path], timeout=30)
            text = result.stdout.strip()
            code = int(text) if result.ok and text.lstrip("-").isdigit() else None
        guard = self._guards.get(handle.pid or -1)
        detail = guard.tripped if guard is not None and guard.tripped else ""
        return RankStatus(running=False, exit_code=code, detail=detail)

    def read_log(self, handle: RankHandle, offset: int = 0) -> str:
        """Bytes from `offset` on of the rank's log file."""
        if handle.log_path is None:
            return ""
        result = self._node(handle.node).run(
            ["tail", "-c", f"+{offset + 1}", "--", handle.log_path], timeout=60
        )
        return result.stdout if result.ok else ""

    def settle(self, handles: Sequence[RankHandle]) -> None:
        """Nothing to wait for: a rank is started once its process is."""

    def stop(self, handle: RankHandle) -> RankStatus:
        """Signal the process group, wait the grace period, then SIGKILL the group."""
        transport = self._node(handle.node)
        if handle.pid is None:
            return self.status(handle)
        guard = self._guards.get(handle.pid)
        if guard is not None:
            guard.stop()
        transport.kill(handle.pid, signal.Signals[handle.plan.stop_signal])
        deadline = time.monotonic() + handle.plan.stop_grace_s
        while time.monotonic() < deadline and transport.is_alive(handle.pid):
            time.sleep(STOP_POLL_S)
        if transport.is_alive(handle.pid):
            transport.kill(handle.pid, signal.SIGKILL)
            _wait_gone(transport, handle.pid)
        return self.status(handle)

    def inspect(self, handle: RankHandle) -> dict[str, Any]:
        """Process table rows of the rank's group plus its status."""
        transport = self._node(handle.node)
        listing = ""
        if handle.pid is not None:
            ps = ["ps", "-o", "pid,stat,etime,rss,args", "-g", str(handle.pid)]
            listing = transport.run(ps, timeout=30).stdout
        return {
            "pid": handle.pid,
            "status": self.status(handle).model_dump(),
            "processes": listing,
            "log_path": handle.log_path,
        }

    def _memory_guard(self) -> MemoryGuard | None:
        runtime = self._cluster.runtime if self._cluster is not None else None
        return getattr(runtime, "memory_guard", None)

    def _guard(self, plan: LaunchPlan, pid: int, settings: MemoryGuard) -> None:
        """Watch the rank's node memory until it is stopped; SIGKILL its group when short."""
        if plan.head and plan.ready_url:
            self._ready_url = plan.ready_url
        transport = self._node(plan.node)

        def kill() -> None:
            transport.kill(pid, signal.SIGKILL)

        ready = lambda: answers(self._ready_url)  # noqa: E731 - read when checked
        read = lambda: node_meminfo(transport)  # noqa: E731 - read when checked
        self._guards[pid] = RankGuard(settings, read=read, kill=kill, ready=ready).start()

    def _node(self, name: str) -> Transport:
        try:
            return self._transports[name]
        except KeyError:
            raise TransportError(f"no transport for node {name}") from None

    def _need_cluster(self) -> Cluster:
        if self._cluster is None:
            raise ClusterError("the process runtime was made without its cluster")
        return self._cluster


def node_uv(cluster: Cluster) -> str | None:
    """`runtime.uv` as the nodes run it (None: venv and pip).

    On a local cluster the nodes are this machine: unset, the uv beside sparkgate's own
    interpreter is used when there is one (`make setup` installs it there, whatever the
    virtualenv's folder), else pip; a bare name (`uv`) is first looked for there, then on PATH;
    a path was made absolute when the cluster file was loaded. On SSH nodes the value is the
    node's (a path there, or a name on its PATH), and unset means pip: nodes that differ in
    what they have would install different distributions.
    """
    runtime = cluster.runtime
    if not isinstance(runtime, ProcessRuntimeSpec):
        return None
    local = isinstance(cluster.transport, LocalTransport)
    if runtime.uv is None:
        own = _beside_interpreter("uv")
        return own if local else None
    if "/" in runtime.uv or not local:
        return runtime.uv
    return _beside_interpreter(runtime.uv) or runtime.uv


def _beside_interpreter(name: str) -> str | None:
    """The executable `name` in sparkgate's own interpreter's scripts folder, if it is there."""
    beside = Path(sysconfig.get_path("scripts")) / name
    return str(beside) if os.access(beside, os.X_OK) else None


def _log_dir(plan: LaunchPlan) -> str:
    return f"{plan.workdir}/logs"


def _wait_gone(transport: Transport, pid: int, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and transport.is_alive(pid):
        time.sleep(STOP_POLL_S)
