"""Boot a release for a gate and always stop it again, whatever happens inside.

Both output gates boot the candidate, send traffic, and must leave the cluster stopped even
when a request fails or the user interrupts; this context manager is that promise in one place.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from flows.cluster.boot.caches import CacheTarget
from flows.cluster.boot.session import Started, start_release, stop_session
from flows.gates.base import GateContext


@contextmanager
def running_release(
    context: GateContext, *, empty: Sequence[CacheTarget] = ()
) -> Iterator[Started]:
    """The candidate, booted (caches in `empty` emptied first); stopped on the way out."""
    started = start_release(
        context.cluster,
        context.release,
        context.transports,
        context.state,
        empty=empty,
        say=context.say,
    )
    try:
        yield started
    finally:
        stop_session(context.cluster, started.session, context.transports, context.state)
