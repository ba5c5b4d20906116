"""The operator runtime: ranks started and stopped by the operator's own launcher.

A docker cluster makes its rank containers itself, so what is qualified is sparkgate's reading
of the operator's `docker run`. With `runtime.kind: operator` the cluster file names the
operator's own commands instead (for the recipe: `bin/spark --cluster-config
config/cluster.json cluster start --apply --replace` and `cluster stop --apply`, run in its
checkout on the head), and the ranks are the containers those commands create, found on each
node's daemon by the launcher's container name. So a maintainer qualifies exactly what
production runs: the same command line, memory guards, mounts and environment.

Everything else (building or adopting the image, putting it on every node, the model, caches,
the release tests, preflight facts) is the docker runtime's, which this class extends. The
launcher starts every node at once: `start` of a worker only records its handle, `start` of the
head runs the start command in the background, and until it ends a node without its container
counts as starting. Once the head answers, `settle` waits for the start command to end and
fails the boot unless it succeeded and every rank runs the release's image (the launcher serves
what its checkout names): the recipe's launcher still arms the steady memory guards
and removes the containers it replaced after its API wait, and a boot that ended first (a
`sparkgate cluster start` closing its SSH session) would cut that short. The first `stop` runs
the stop command, which stops every node; the stopped containers are the operator's and are
left for its next `start --replace`.
"""

from __future__ import annotations

import shlex
import threading
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from flows.cluster.build.progress import ImageProgress
from flows.cluster.runtime.base import RankHandle, RankStatus, RuntimeKind
from flows.cluster.runtime.containers import inspect_document
from flows.cluster.runtime.docker import DockerRanks, docker_spec, rank_status
from flows.cluster.transport.base import CommandResult, Transport
from flows.errors import BootError, ClusterError, SparkgateError
from flows.spec.cluster import Cluster, LauncherCommands, OperatorRuntime
from flows.spec.launch import LaunchPlan, placeholder_values
from flows.spec.release import Release
from flows.spec.template import fill

OUTPUT_TAIL = 800
STOP_TIMEOUT_S = 600.0


def launcher(cluster: Cluster) -> LauncherCommands:
    """The cluster's launcher commands; ClusterError for another runtime kind."""
    if not isinstance(cluster.runtime, OperatorRuntime):
        raise ClusterError(f"cluster {cluster.name} has no operator launcher (runtime.kind)")
    return cluster.runtime.commands


def launcher_cwd(cluster: Cluster, release_values: dict[str, str] | None = None) -> str:
    """The folder the commands run in, node placeholders filled with the head's values."""
    values = release_values or {"workdir": cluster.head.workdir, "node": cluster.head.name}
    return fill(launcher(cluster).cwd, values)


def outcome(result: CommandResult | None, running: bool) -> RankStatus | None:
    """How a rank without its container stands, from the start command (pure).

    None: the command succeeded, so the container's own state decides.
    """
    if running or result is None:
        return RankStatus(running=True, detail="the operator's start command is running")
    if result.ok:
        return None
    tail = (result.stdout + result.stderr).strip()[-OUTPUT_TAIL:] or "(no output)"
    return RankStatus(
        running=False,
        exit_code=result.rc,
        detail=f"the operator's start command `{shlex.join(result.argv)}` exited {result.rc}: "
        f"{tail}",
    )


def image_mismatch(container: Mapping[str, Any] | None, wanted_id: str, wanted: str) -> str | None:
    """Why the launcher's container does not run the release's image (pure); None if it does.

    The launcher serves the image its checkout names, whatever release sparkgate asked for: an
    arm measured on another image would be reported as this release's.
    """
    if container is None:
        return "the operator's start command succeeded but its container is not there"
    running = str(container.get("Image", ""))
    if running == wanted_id:
        return None
    name = container.get("Config", {}).get("Image", "?")
    return (
        f"the operator's launcher runs {name} ({running[:19]}), not this release's {wanted} "
        f"({wanted_id[:19]}): it serves what its checkout names, so check out the release's "
        "commit there first"
    )


class OperatorRanks(DockerRanks):
    """Ranks as the operator's launcher starts them (the `Runtime` of operator clusters)."""

    kind: RuntimeKind = "operator"

    def __init__(
        self,
        cluster: Cluster,
        transports: Mapping[str, Transport],
        *,
        release: Release | None = None,
        image: str | None = None,
        state: Path | None = None,
        progress: ImageProgress | None = None,
    ) -> None:
        super().__init__(
            cluster, transports, release=release, image=image, state=state, progress=progress
        )
        self._commands = launcher(cluster)
        self._started: threading.Thread | None = None
        self._start_result: CommandResult | None = None
        self._stopped: RankStatus | None = None
        self._before: dict[str, str | None] = {}
        self._once = threading.Lock()

    def start(self, plan: LaunchPlan) -> RankHandle:
        """Record the rank (and which container had its name before); the head's start runs
        the operator's start command, which starts every node."""
        name = fill(docker_spec(self._cluster).container_name, self._values(plan.node))
        before = inspect_document(self.client(plan.node), name)
        self._before[plan.node] = None if before is None else str(before["Id"])
        if plan.head:
            self._run_start()
        return RankHandle.started(
            "operator", plan, datetime.now(UTC), container=name,
            daemon=self._daemons[plan.node].base_url, image=self._image,
        )  # fmt: skip

    def status(self, handle: RankHandle) -> RankStatus:
        """The new container's state once it exists; before that, the start command's (the
        container that had the name before, production's say, is not the rank)."""
        document = inspect_document(self._client_of(handle), str(handle.container))
        previous = self._before.get(handle.node)
        if document is not None and (previous is None or str(document["Id"]) != previous):
            return rank_status(document)
        pending = outcome(self._start_result, self._launching())
        return pending if pending is not None else rank_status(document)

    def settle(self, handles: Sequence[RankHandle]) -> None:
        """Wait for the start command (run by the head's `start`) to end, its `start_timeout_s`
        at most; BootError, with its own words, unless it succeeded."""
        if not any(handle.head for handle in handles):
            return
        if self._started is not None:
            self._started.join(timeout=self._commands.start_timeout_s)
        head = self._cluster.head.name
        if self._launching():
            raise BootError(
                f"node {head}: the operator's start command still runs after "
                f"{self._commands.start_timeout_s:g} s"
            )
        failed = outcome(self._start_result, running=False)
        if failed is not None:
            raise BootError(f"node {head}: {failed.detail}")
        for handle in handles:
            if self._image is not None:
                client = self._client_of(handle)
                wanted = str(client.api.inspect_image(self._image)["Id"])
                found = inspect_document(client, str(handle.container))
                problem = image_mismatch(found, wanted, self._image)
                if problem is not None:
                    raise BootError(f"node {handle.node}: {problem}")

    def inspect(self, handle: RankHandle) -> dict[str, Any]:
        """The docker runtime's evidence plus what the operator's status command says."""
        found = super().inspect(handle)
        if self._commands.status and handle.head:
            found["operator_status"] = self._run("status", self._commands.status, 60).detail
        return found

    def stop(self, handle: RankHandle) -> RankStatus:
        """Run the operator's stop command once (it stops every node); the container stays."""
        with self._once:
            if self._stopped is None:
                self._stopped = self._run("stop", self._commands.stop, STOP_TIMEOUT_S)
        if self._started is not None:
            self._started.join(timeout=STOP_TIMEOUT_S)
        ended = self.status(handle)
        return ended if not ended.running else self._stopped

    def _run_start(self) -> None:
        self._start_result, self._stopped = None, None
        head, argv = self._node(self._cluster.head.name), self._commands.start

        def run() -> None:
            try:
                self._start_result = head.run(
                    argv, cwd=self._cwd(), timeout=self._commands.start_timeout_s
                )
            except SparkgateError as error:  # unreachable head, timeout: the start failed
                self._start_result = CommandResult(
                    node=head.node, argv=tuple(argv), rc=-1, stdout="", stderr=str(error),
                    duration=0.0,
                )  # fmt: skip

        self._started = threading.Thread(target=run, name="operator-start", daemon=True)
        self._started.start()

    def _run(self, what: str, argv: list[str], timeout: float) -> RankStatus:
        """Run one of the commands on the head; RankStatus of how it ended."""
        try:
            result = self._node(self._cluster.head.name).run(argv, cwd=self._cwd(), timeout=timeout)
        except SparkgateError as error:
            return RankStatus(running=False, detail=f"the operator's {what} command: {error}")
        tail = (result.stdout + result.stderr).strip()[-OUTPUT_TAIL:]
        shown = f"the operator's {what} command exited {result.rc}: {tail}"
        return RankStatus(running=False, exit_code=result.rc, detail=shown)

    def _launching(self) -> bool:
        return self._started is not None and self._started.is_alive()

    def _cwd(self) -> str:
        return launcher_cwd(self._cluster, self._values(self._cluster.head.name))

    def _values(self, node: str) -> dict[str, str]:
        if self._release is None:
            found = self._cluster.node(node)
            return {"node": found.name, "workdir": found.workdir, "rank": str(found.rank)}
        return placeholder_values(self._cluster, self._release, self._cluster.node(node))
