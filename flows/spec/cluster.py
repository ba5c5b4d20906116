"""The cluster spec (kind: cluster): which nodes, how to reach them, how to run the engine there.

A cluster file is the only place that knows machines: transport (local processes or SSH), the
runtime (plain processes or Docker), the nodes with their ranks, ports, lock and preflight
checks, and the engine profile. Its rules (one head at rank 0, ranks 0..N-1 without gaps, unique
names, the shape's node count, known placeholders) are checked at load time so that nothing is
started on a cluster that cannot form.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Annotated, Literal

from pydantic import Field

from flows.spec.base import EnvValue, HostPath, Loc, Problem, SpecContext, SpecModel
from flows.spec.engine import EngineProfile, placeholder_problems
from flows.spec.probes import Probes
from flows.spec.template import NODE_PLACEHOLDERS

SHAPE = re.compile(r"^tp([1-9][0-9]*)-[a-z0-9][a-z0-9-]*$")
NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
DAEMON_KEYS = {"user", "address", "node", "rank"}
NODE_KEYS = set(NODE_PLACEHOLDERS) - {"boot_token"}  # a secret never goes into names or paths


class LocalTransport(SpecModel):
    """Every node is this machine: commands run as local processes."""

    kind: Literal["local"] = Field(description="Run commands on this machine.")


class SshTransport(SpecModel):
    """Reach nodes over SSH; unknown or changed host keys are refused unless allowed."""

    kind: Literal["ssh"] = Field(description="Run commands over SSH.")
    user: str = Field(min_length=1, description="SSH user on every node.")
    port: int = Field(default=22, ge=1, le=65535, description="SSH port.")
    key_file: HostPath | None = Field(default=None, description="Private key (else the agent).")
    known_hosts: HostPath | None = Field(
        default=None, description="known_hosts file to trust (else ~/.ssh/known_hosts)."
    )
    accept_unknown_host_keys: bool = Field(
        default=False, description="Trust and record unknown host keys (never changed ones)."
    )
    connect_timeout_s: float = Field(default=10, gt=0, description="Timeout of one connect.")
    command_timeout_s: float = Field(default=600, gt=0, description="Default command timeout.")
    connect_retries: int = Field(default=3, ge=0, description="Retries of a failed connect.")


Transport = Annotated[LocalTransport | SshTransport, Field(discriminator="kind")]


class MemoryGuard(SpecModel):
    """Stop a rank whose node runs short of memory, as the recipe's memguard does.

    The recipe arms a startup guard on every node before its container starts and switches to
    the steady guard once the API is ready; the guard kills the container when MemAvailable
    falls below its threshold, and refuses to start one below the startup threshold
    (christopherowen/spark-ds41f scripts/memguard.sh, bin/spark `command_cluster_start`). Its
    values: startup 5 GiB (the release thread's r6x post: "dgx1's 5 GiB startup memory
    guard"), steady 3 GiB, checked every 0.25 s and 2 s (config/cluster.json `host`).
    """

    startup_gib: float = Field(gt=0, description="Startup threshold: refuse or kill below it.")
    steady_gib: float = Field(gt=0, description="Threshold once the head's API is ready.")
    startup_interval_s: float = Field(default=0.25, gt=0, description="Check period at startup.")
    interval_s: float = Field(default=2.0, gt=0, description="Check period once ready.")


class ProcessRuntime(SpecModel):
    """Ranks run as plain processes started by the transport."""

    kind: Literal["process"] = Field(description="Run ranks as processes.")
    python: str = Field(
        default="python3", description="Interpreter used for {python} (placeholders allowed)."
    )
    uv: str | None = Field(
        default=None,
        min_length=1,
        description="A uv executable on every node: when set, the build is installed with "
        "`uv venv` and `uv pip install` from the same locked, hashed wheels with no index; "
        "unset: venv and pip. A path (relative to the cluster file when local) or a command "
        "name: `uv` is looked up beside sparkgate's own interpreter first when local, then on "
        "the node's PATH.",
    )
    memory_guard: MemoryGuard | None = Field(
        default=None, description="Startup and steady memory guards of every rank."
    )


class Mount(SpecModel):
    """A bind mount into the engine container."""

    source: str = Field(min_length=1, description="Path on the node (placeholders allowed).")
    target: str = Field(min_length=1, description="Path inside the container.")
    mode: Literal["ro", "rw"] = Field(default="ro", description="Read-only or read-write.")


class ImageBuilds(SpecModel):
    """What a `build.kind: dockerfile` release may do while it builds on this cluster.

    Offline by default: RUN steps get no network and nothing is pulled (every base image, the
    `# syntax` frontend and each docker-image:// context must already be on the build daemon).
    """

    network: bool = Field(default=False, description="RUN steps may use the network.")
    pull: bool = Field(default=False, description="Missing base images may be pulled.")
    controller_daemon: str = Field(
        default="unix:///var/run/docker.sock",
        description="The controller's Docker daemon, for `build.on: controller`.",
    )


class DockerRuntime(SpecModel):
    """Ranks run as containers of the release image, one per node."""

    kind: Literal["docker"] = Field(description="Run ranks in Docker containers.")
    daemon: str = Field(
        default="unix:///var/run/docker.sock",
        description="Docker daemon URL per node: a template like ssh://{user}@{address}.",
    )
    container_name: str = Field(
        default="sparkgate-{node}", description="Container name (placeholders allowed)."
    )
    python: str = Field(default="python", description="Interpreter inside the image.")
    run_args: list[str] = Field(default=[], description="Extra `docker run` style options.")
    mounts: list[Mount] = Field(default=[], description="Bind mounts into the container.")
    builds: ImageBuilds = Field(
        default=ImageBuilds(), description="Network and pulls of dockerfile builds."
    )
    create_as: Literal["sparkgate", "docker-run"] = Field(
        default="sparkgate",
        description="`docker-run`: create each rank container as the operator's launcher's "
        "`docker run -d --name NAME RUN_ARGS --env ... --volume SRC:DST:MODE IMAGE ARGS` does "
        "(the image's own entrypoint, argv after `image_entrypoint` as its command, the mounts "
        "as binds, no folder of sparkgate's mounted, no working directory), so the recipe's "
        "`doctor --live` finds nothing to differ. `sparkgate`: argv[0] as the entrypoint, the "
        "workdir and cache folders mounted at their own paths.",
    )
    image_entrypoint: list[str] = Field(
        default=[],
        description="With `docker-run`: the image's ENTRYPOINT words that argv starts with "
        "(the recipe's vLLM image: [vllm, serve]); checked against the image at start.",
    )
    memory_guard: MemoryGuard | None = Field(
        default=None, description="Startup and steady memory guards of every rank."
    )


class LauncherCommands(SpecModel):
    """The operator's own cluster commands, run on the head in `cwd` (the recipe's checkout).

    For the recipe (christopherowen/spark-ds41f bin/spark): `cluster start --apply --replace`
    arms the startup memory guards, runs each node's `docker run`, waits for the API and arms
    the steady guards; `cluster stop --apply` stops the guards and the containers; `status`
    lists each node's container. Its launcher refuses a dirty checkout.
    """

    cwd: str = Field(min_length=1, description="Folder on the head (node placeholders allowed).")
    start: list[str] = Field(min_length=1, description="Starts every node's rank container.")
    stop: list[str] = Field(min_length=1, description="Stops every node's rank container.")
    status: list[str] = Field(default=[], description="Reports the cluster (shown, not parsed).")
    start_timeout_s: float = Field(
        default=3600,
        gt=0,
        description="How long the start command may take (it waits for the "
        "API: the recipe's deployment.ready_timeout_seconds is 3600).",
    )


class OperatorRuntime(DockerRuntime):
    """Ranks started and stopped by the operator's own launcher, so what is qualified is
    exactly what production runs; images, caches, models and release tests are handled as in
    the docker runtime, and each node's container (`container_name`) is watched through its
    daemon (status, `docker logs`)."""

    kind: Literal["operator"] = Field(  # type: ignore[assignment]  # a docker runtime's variant
        description="Start and stop ranks with the operator's commands."
    )
    commands: LauncherCommands = Field(description="The operator's start, stop, status commands.")


Runtime = Annotated[ProcessRuntime | DockerRuntime | OperatorRuntime, Field(discriminator="kind")]


class NodeOverrides(SpecModel):
    """Per-node exceptions to the cluster-wide settings."""

    env: dict[str, EnvValue] = Field(default={}, description="Extra environment of this rank.")
    args: list[str] = Field(default=[], description="Extra engine arguments of this rank.")
    docker_daemon: str | None = Field(default=None, description="Docker daemon of this node.")
    ssh_port: int | None = Field(default=None, ge=1, le=65535, description="SSH port override.")


class Node(SpecModel):
    """One machine running one rank."""

    name: str = Field(pattern=NAME, description="Unique node name.")
    rank: int = Field(ge=0, description="Rank of the engine process on this node.")
    head: bool = Field(default=False, description="True for the head (rank 0) only.")
    address: str = Field(min_length=1, description="Address other ranks and the pipeline use.")
    workdir: str = Field(
        min_length=1,
        description="Working directory on the node; relative to the cluster file when local.",
    )
    state_dir: str | None = Field(
        default=None,
        description="Folder for sparkgate's own files on the node (cluster lock, release-test "
        "workspaces); default: `<workdir>.sparkgate`, beside the workdir, never inside it.",
    )
    overrides: NodeOverrides = Field(default=NodeOverrides(), description="Per-node overrides.")

    @property
    def state_folder(self) -> str:
        """Where sparkgate writes on the node: outside the workdir, which may be the operator's
        git checkout (the recipe's `bin/spark build image` refuses any untracked file there,
        and its `cluster start` refuses a dirty checkout)."""
        return self.state_dir or f"{self.workdir.rstrip('/')}.sparkgate"


class Ports(SpecModel):
    """Ports the engine uses on the head."""

    rendezvous: int = Field(default=29500, ge=1, le=65535, description="Rank meeting port.")
    api: int = Field(default=8000, ge=1, le=65535, description="HTTP API port on the head.")


class Lock(SpecModel):
    """The cluster lock: one qualification at a time."""

    stale_after_s: float = Field(
        default=3600, gt=0, description="A lock without heartbeat for this long may be taken."
    )


class PreflightCheck(SpecModel):
    """A command run on every node before anything starts; its output must match a regex."""

    name: str = Field(min_length=1, description="Name shown in reports.")
    argv: list[str] = Field(min_length=1, description="Command (node placeholders allowed).")
    expect: str = Field(default="", description="Regex the output must contain (search).")
    severity: Literal["ERROR", "WARN"] = Field(default="ERROR", description="ERROR stops.")
    timeout_s: float = Field(default=30, gt=0, description="Timeout of the command.")


class Cluster(SpecModel):
    """Nodes, transport, runtime and engine profile of one cluster."""

    kind: Literal["cluster"] = Field(description="Always `cluster`.")
    name: str = Field(pattern=NAME, description="Name of the cluster.")
    shape: str = Field(description="tp<N>-<topology>, e.g. tp2-local, tp3-triangle, tp4-ring.")
    transport: Transport = Field(description="How to reach the nodes.")
    runtime: Runtime = Field(description="How ranks run on a node.")
    ports: Ports = Field(default=Ports(), description="Engine ports.")
    lock: Lock = Field(default=Lock(), description="Cluster lock settings.")
    preflight: list[PreflightCheck] = Field(default=[], description="Checks before a run.")
    probes: Probes = Field(
        default=Probes(), description="Host facts for preflight, host samples around arms."
    )
    engine: EngineProfile = Field(description="The engine profile (usually `extends: FILE`).")
    nodes: list[Node] = Field(min_length=1, description="The nodes, one rank each.")
    secret_keys: list[str] = Field(
        default=[],
        description="Env keys, build args and options whose values are secrets beyond those "
        "named like one (TOKEN, KEY, SECRET, PASSWORD, AUTH, CREDENTIAL); never written.",
    )

    @property
    def head(self) -> Node:
        """The head node (rank 0)."""
        return next(node for node in self.nodes if node.head)

    def node(self, name: str) -> Node:
        """The node called `name`; KeyError if there is none."""
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    def local_paths(self) -> list[Loc]:
        """With the local transport, node workdirs (and state folders) are paths here, and so
        is a `runtime.uv` with a slash in it (a bare name is a command, looked up at install)."""
        if not isinstance(self.transport, LocalTransport):
            return []
        workdirs: list[Loc] = [("nodes", index, "workdir") for index in range(len(self.nodes))]
        states: list[Loc] = [
            ("nodes", index, "state_dir")
            for index, node in enumerate(self.nodes)
            if node.state_dir is not None
        ]
        uv = self.runtime.uv if isinstance(self.runtime, ProcessRuntime) else None
        tools: list[Loc] = [("runtime", "uv")] if uv is not None and "/" in uv else []
        return workdirs + states + tools

    def problems(self, context: SpecContext | None) -> list[Problem]:
        """Node-set rules, shape and template placeholders."""
        del context
        return [*self._node_problems(), *self._shape_problems(), *self._template_problems()]

    def _node_problems(self) -> list[Problem]:
        found = [
            *_duplicates("name", [node.name for node in self.nodes]),
            *_duplicates("rank", self._ranks()),
        ]
        heads = [i for i, node in enumerate(self.nodes) if node.head]
        if not heads:
            found.append(Problem(("nodes",), "no node has head: true", "exactly one head"))
        for index in heads[1:]:
            found.append(Problem(("nodes", index, "head"), "second head", "exactly one head"))
        if heads and self.nodes[heads[0]].rank != 0:
            found.append(Problem(("nodes", heads[0], "rank"), "the head must be rank 0", "0"))
        ranks = sorted(set(self._ranks()))
        missing = sorted(set(range(len(self.nodes))) - set(ranks))
        if missing and len(ranks) == len(self.nodes):
            extra = [r for r in ranks if r >= len(self.nodes)]
            index = self._ranks().index(extra[0])
            found.append(
                Problem(
                    ("nodes", index, "rank"),
                    f"rank {extra[0]} leaves a gap (rank {missing[0]} is missing)",
                    f"ranks 0..{len(self.nodes) - 1}",
                )
            )
        return found

    def _ranks(self) -> list[int]:
        return [node.rank for node in self.nodes]

    def _shape_problems(self) -> list[Problem]:
        match = SHAPE.match(self.shape)
        if match is None:
            return [Problem(("shape",), f"bad shape {self.shape!r}", "tp<N>-<topology>")]
        size = int(match.group(1))
        if size != len(self.nodes):
            return [
                Problem(
                    ("shape",),
                    f"shape {self.shape} needs {size} nodes, the cluster has {len(self.nodes)}",
                    f"tp{len(self.nodes)}-...",
                )
            ]
        return []

    def _template_problems(self) -> list[Problem]:
        known = self.engine.known_placeholders()
        templates: list[tuple[Loc, str, set[str]]] = []
        if isinstance(self.runtime, DockerRuntime):
            runtime = self.runtime
            templates.append((("runtime", "daemon"), runtime.daemon, DAEMON_KEYS))
            templates.append((("runtime", "container_name"), runtime.container_name, NODE_KEYS))
            templates.extend(
                (("runtime", "mounts", i, "source"), mount.source, NODE_KEYS)
                for i, mount in enumerate(runtime.mounts)
            )
        if isinstance(self.runtime, OperatorRuntime):
            templates.append((("runtime", "commands", "cwd"), self.runtime.commands.cwd, NODE_KEYS))
        for index, node in enumerate(self.nodes):
            loc: Loc = ("nodes", index, "overrides")
            env = node.overrides.env.items()
            templates.extend(((*loc, "env", key), value, known) for key, value in env)
            args = enumerate(node.overrides.args)
            templates.extend(((*loc, "args", i), arg, known) for i, arg in args)
        for index, check in enumerate(self.preflight):
            argv = enumerate(check.argv)
            templates.extend((("preflight", index, "argv", i), arg, known) for i, arg in argv)
        probe_argvs = [("facts", i, f.argv) for i, f in enumerate(self.probes.facts)] + [
            ("samples", i, s.argv) for i, s in enumerate(self.probes.samples)
        ]
        for section, index, argv_ in probe_argvs:
            where: Loc = ("probes", section, index, "argv")
            templates.extend(((*where, i), arg, known) for i, arg in enumerate(argv_))
        found = [p for loc, text, keys in templates for p in placeholder_problems(loc, text, keys)]
        for index, check in enumerate(self.preflight):
            try:
                re.compile(check.expect)
            except re.error as error:
                found.append(
                    Problem(("preflight", index, "expect"), f"invalid regex: {error}", "a regex")
                )
        return found


def _duplicates(label: str, values: Sequence[object]) -> list[Problem]:
    """A problem at every repeated value after its first occurrence."""
    return [
        Problem(("nodes", index, label), f"duplicate {label} {value!r}", f"unique {label}s")
        for index, value in enumerate(values)
        if value in values[:index]
    ]
