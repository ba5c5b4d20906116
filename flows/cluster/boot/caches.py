"""Engine caches on the nodes: how big each kind is, and emptying them for the cold-boot modes.

The cold-boot gate needs four distinct boots: warm, one rank's kernel cache empty, every rank's
kernel cache empty, and every cache kind empty on every node. Which folders those are comes from
the launch plans (the engine profile's cache kinds, resolved per node), so the same code empties
numba caches here and Triton/TileLang/vLLM caches on a Spark.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic import BaseModel, ConfigDict

from flows.cluster.transport.base import Transport
from flows.errors import ClusterError
from flows.spec.launch import LaunchPlan
from flows.spec.release import BootMode


class CacheTarget(BaseModel):
    """One cache folder of one kind on one node."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node: str
    rank: int
    kind: str
    path: str


class CacheSize(BaseModel):
    """Size of one cache folder (bytes and files; 0 when it does not exist yet)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node: str
    rank: int
    kind: str
    path: str
    bytes: int
    files: int


def cache_targets(
    plans: Sequence[LaunchPlan],
    mode: BootMode,
    *,
    rank: int | None = None,
) -> list[CacheTarget]:
    """The folders a cold-boot mode empties (pure). `rank` picks the one-rank mode's rank."""
    if mode == "warm":
        return []
    if mode == "one-rank-kernels":
        chosen = max(p.rank for p in plans) if rank is None else rank
        selected = [p for p in plans if p.rank == chosen]
        if not selected:
            ranks = ", ".join(str(p.rank) for p in plans)
            raise ClusterError(f"no rank {chosen} to empty the kernel cache of (ranks: {ranks})")
        return [_kernel_target(plan) for plan in selected]
    if mode == "all-kernels":
        return [_kernel_target(plan) for plan in plans]
    return [
        CacheTarget(node=plan.node, rank=plan.rank, kind=kind, path=path)
        for plan in plans
        for kind, path in sorted(plan.cache_dirs.items())
    ]


def parse_target(spec: str, plans: Sequence[LaunchPlan]) -> list[CacheTarget]:
    """`KIND` (every node) or `KIND@NODE` (one node), as the CLI's --empty-cache takes it."""
    kind, _, node = spec.partition("@")
    kinds = sorted({k for plan in plans for k in plan.cache_dirs})
    if kind not in kinds:
        raise ClusterError(f"--empty-cache {spec}: no cache kind {kind!r} (kinds: {kinds})")
    chosen = [p for p in plans if not node or p.node == node]
    if not chosen:
        nodes = ", ".join(p.node for p in plans)
        raise ClusterError(f"--empty-cache {spec}: no node {node!r} (nodes: {nodes})")
    return [
        CacheTarget(node=p.node, rank=p.rank, kind=kind, path=p.cache_dirs[kind]) for p in chosen
    ]


def emptying_script(paths: Sequence[str]) -> list[str]:
    """One command that removes and re-creates each folder (run as the caches' owner)."""
    loop = 'for p in "$@"; do rm -rf -- "$p" && mkdir -p -- "$p" || exit 1; done'
    return ["sh", "-c", loop, "empty-caches", *paths]


def empty_caches(transports: Mapping[str, Transport], targets: Sequence[CacheTarget]) -> None:
    """Remove and re-create each target folder on its node."""
    for target in targets:
        check_path(target)
        transport = transports[target.node]
        transport.run(["rm", "-rf", "--", target.path], check=True, timeout=300)
        transport.run(["mkdir", "-p", "--", target.path], check=True)


def cache_sizes(
    transports: Mapping[str, Transport], plans: Sequence[LaunchPlan]
) -> list[CacheSize]:
    """Bytes and file count of every cache kind on every node."""
    sizes = []
    for plan in plans:
        transport = transports[plan.node]
        for kind, path in sorted(plan.cache_dirs.items()):
            used = transport.run(["du", "-sb", "--", path], timeout=120)
            count = transport.run(["find", path, "-type", "f"], timeout=120)
            sizes.append(
                CacheSize(
                    node=plan.node,
                    rank=plan.rank,
                    kind=kind,
                    path=path,
                    bytes=int(used.stdout.split()[0]) if used.ok and used.stdout else 0,
                    files=len(count.stdout.splitlines()) if count.ok else 0,
                )
            )
    return sizes


def _kernel_target(plan: LaunchPlan) -> CacheTarget:
    kind = plan.kernel_cache
    return CacheTarget(node=plan.node, rank=plan.rank, kind=kind, path=plan.cache_dirs[kind])


def check_path(target: CacheTarget) -> None:
    """Refuse to `rm -rf` anything that cannot be a cache folder."""
    path = target.path.rstrip("/")
    if not path.startswith("/") or path.count("/") < 2 or ".." in path.split("/"):
        raise ClusterError(
            f"node {target.node}: refusing to empty cache {target.kind} at {target.path!r} "
            "(an absolute path at least two levels deep is required)"
        )
