"""Resolve a release on a cluster into each rank's launch plan: argv, env, cwd, cache dirs.

This is the one place placeholders are filled, as a pure function of the specs, so the process
and Docker runtimes launch exactly what `sparkgate render` shows. Layering, lowest first: the
engine profile, the release (options, env, serve args), the node's overrides.

Env values that are `{env:NAME}` / `{file:PATH}` references stay references in the plan (the
runtime resolves them when it starts the rank), and a plan knows its secret keys, so that every
file it is written into can redact it (`LaunchPlan.redacted`).
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

from flows.errors import SpecError
from flows.secrets import Secrets, collect, reference_problem
from flows.spec.cluster import Cluster, Node, SshTransport
from flows.spec.release import Release
from flows.spec.template import fill, unknown_placeholders


class LaunchPlan(BaseModel):
    """Everything a runtime needs to start one rank, with no placeholder left."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node: str = Field(description="Node name.")
    rank: int = Field(description="Rank of this process.")
    head: bool = Field(description="Whether this is the head rank.")
    address: str = Field(description="Node address.")
    argv: list[str] = Field(description="Command line.")
    env: dict[str, str] = Field(description="Environment added to the runtime's base.")
    cwd: str = Field(description="Working directory on the node.")
    workdir: str = Field(description="The node's work directory.")
    model_dir: str = Field(description="Model directory on the node.")
    model_prepare: list[str] = Field(
        default=[], description="Command that writes the model directory when it is missing."
    )
    cache_dirs: dict[str, str] = Field(description="Cache directory per cache kind.")
    kernel_cache: str = Field(description="Name of the kernel cache kind.")
    ready_url: str | None = Field(description="Readiness URL (head only).")
    stop_signal: str = Field(description="Signal that stops the rank.")
    stop_grace_s: float = Field(description="Seconds before a kill follows.")
    secret_keys: list[str] = Field(
        default=[], description="Keys the cluster file lists as secret (beyond secret names)."
    )

    def secrets(self) -> Secrets:
        """The secret names and values of this plan (env and secret options on argv)."""
        return collect([self.env], self.secret_keys, [self.argv, self.model_prepare])

    def redacted(self, extra: Secrets | None = None) -> LaunchPlan:
        """This plan with every secret value replaced, as it may be written to a file."""
        found = self.secrets() if extra is None else self.secrets().merged(extra)
        return self.model_copy(
            update={
                "argv": found.argv(self.argv),
                "env": found.mapping(self.env),
                "model_prepare": found.argv(self.model_prepare),
                "cwd": found.text(self.cwd),
                "ready_url": None if self.ready_url is None else found.text(self.ready_url),
            }
        )


def render_launch(
    cluster: Cluster,
    release: Release,
    node: Node | str,
    extra: Mapping[str, str] | None = None,
) -> LaunchPlan:
    """The launch plan of `node`; `extra` overrides placeholder values (e.g. `python`)."""
    if isinstance(node, str):
        node = _node(cluster, node)
    values = placeholder_values(cluster, release, node, extra)
    profile = cluster.engine
    launch = profile.launch
    role_args = launch.head_args if node.head else launch.worker_args
    argv = _fill_all(
        [*launch.argv, *role_args, *release.engine.serve_args, *node.overrides.args], values
    )
    env = {
        name: fill_checked(_reference_checked(value, f"env.{name}"), values, f"env.{name}")
        for name, value in {**launch.env, **release.engine.env, **node.overrides.env}.items()
    }
    return LaunchPlan(
        node=node.name,
        rank=node.rank,
        head=node.head,
        address=node.address,
        argv=argv,
        env=env,
        cwd=fill_checked(launch.cwd, values, "launch.cwd"),
        workdir=node.workdir,
        model_dir=values["model"],
        model_prepare=_fill_all(profile.model_prepare, values, "model_prepare"),
        cache_dirs={name: values[f"cache.{name}"] for name in profile.caches},
        kernel_cache=profile.kernel_cache,
        ready_url=fill_checked(profile.ready.url, values, "ready.url") if node.head else None,
        stop_signal=profile.stop.signal,
        stop_grace_s=profile.stop.grace_s,
        secret_keys=list(cluster.secret_keys),
    )


def render_all(
    cluster: Cluster, release: Release, extra: Mapping[str, str] | None = None
) -> list[LaunchPlan]:
    """Launch plans of every node, by rank."""
    nodes = sorted(cluster.nodes, key=lambda n: n.rank)
    return [render_launch(cluster, release, node, extra) for node in nodes]


def placeholder_values(
    cluster: Cluster,
    release: Release,
    node: Node,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The value of every placeholder for `node`; release options must exist in the profile."""
    profile = cluster.engine
    unknown = sorted(set(release.engine.options) - set(profile.options))
    if unknown:
        raise SpecError(
            f"not an option of engine profile {profile.name}",
            key=f"engine.options.{unknown[0]}",
            expected="one of " + ", ".join(sorted(profile.options)) if profile.options else None,
        )
    base = {
        "rank": str(node.rank),
        "nnodes": str(len(cluster.nodes)),
        "node": node.name,
        "address": node.address,
        "user": cluster.transport.user if isinstance(cluster.transport, SshTransport) else "",
        "head_address": cluster.head.address,
        "rendezvous_port": str(cluster.ports.rendezvous),
        "port": str(cluster.ports.api),
        "model_id": release.model.id,
        "model_seed": str(release.model.seed),
        "model_size": release.model.size,
        "model_checkpoint": release.model.checkpoint or "",
        "model_revision": release.model.revision or "",
        "workdir": node.workdir,
        "release": release.name,
        "boot_token": "",
    }
    options = {**profile.options, **release.engine.options}
    base.update({f"option.{name}": value for name, value in options.items()})
    base["python"] = fill_checked(cluster.runtime.python, base, "runtime.python")
    base.update(
        {f"cache.{n}": fill_checked(c.path, base, f"caches.{n}") for n, c in profile.caches.items()}
    )
    base["model"] = fill_checked(profile.model_dir, base, "model_dir")
    base.update(extra or {})
    return base


def spec_secrets(cluster: Cluster, release: Release) -> Secrets:
    """Every secret a release on a cluster carries: env of profile, release and nodes, build
    arguments, engine options and the secrets on every command line (launch argv, serve_args,
    node args, model_prepare), with the cluster's `secret_keys`."""
    profile = cluster.engine
    return collect(
        [
            profile.launch.env,
            profile.options,
            release.engine.env,
            release.engine.options,
            release.build.args,
            *(node.overrides.env for node in cluster.nodes),
        ],
        cluster.secret_keys,
        [
            profile.launch.argv,
            profile.launch.head_args,
            profile.launch.worker_args,
            profile.model_prepare,
            release.engine.serve_args,
            release.build.command,
            *(node.overrides.args for node in cluster.nodes),
        ],
    )


def _reference_checked(value: str, where: str) -> str:
    problem = reference_problem(value)
    if problem:
        raise SpecError(problem, key=where, expected="{env:NAME} or {file:relative/path}")
    return value


def _node(cluster: Cluster, name: str) -> Node:
    try:
        return cluster.node(name)
    except KeyError:
        names = ", ".join(node.name for node in cluster.nodes)
        raise SpecError(f"no node {name!r} in cluster {cluster.name}", expected=names) from None


def _fill_all(templates: list[str], values: Mapping[str, str], where: str = "argv") -> list[str]:
    return [fill_checked(text, values, f"{where}[{index}]") for index, text in enumerate(templates)]


UNSET_IS_AN_ERROR = ("model_checkpoint", "model_revision")
"""Placeholders a template may use only when the release sets them: filled with nothing they
would make a wrong path (`.../snapshots/`) or argument, silently."""


def fill_checked(template: str, values: Mapping[str, str], where: str) -> str:
    """`template` filled; SpecError at `where` for an unknown placeholder, or one naming a model
    field the release leaves unset."""
    unknown = unknown_placeholders(template, values)
    if unknown:
        raise SpecError(
            f"unknown placeholder {{{unknown[0]}}} in {template!r}",
            key=where,
            expected="one of " + ", ".join("{" + name + "}" for name in sorted(values)),
        )
    for name in UNSET_IS_AN_ERROR:
        if "{" + name + "}" in template and not values.get(name):
            field = name.removeprefix("model_")
            raise SpecError(
                f"{template!r} names {{{name}}}, but release {values.get('release', '?')} sets "
                f"no model.{field}",
                key=where,
                expected=f"model.{field} in the release",
            )
    return fill(template, values)
