"""Release and cluster names: the one way every command reads `r2`, `local` or a file path.

A reference that looks like a path (it ends in .yaml/.yml or has a `/`) is that file, read from
the current directory, else from the project root; anything else is a name: a release named
`r2` is releases/r2.yaml, a cluster named `local` is config/local.yaml (`lab`: the lab's own
cluster file). A miss is a SpecError (exit 2) that lists the names that exist, so a typo is one
look away from its fix; nothing is guessed (a path is never turned into config/PATH.yaml).
"""

from __future__ import annotations

import re
from pathlib import Path

from flows.bounded_read import is_file
from flows.errors import SpecError
from flows.settings import project_root, state_dir

RELEASES = "releases"
CLUSTERS = "config"
SHOWN_CHARS = 80
"""A reference longer than this is shortened in the error (a pasted blob stays one line)."""
_CLUSTER_KIND = re.compile(r"^kind:\s*cluster\s*$", re.MULTILINE)


def looks_like_path(ref: str) -> bool:
    """Whether a reference names a file rather than a release or cluster."""
    return ref.endswith((".yaml", ".yml")) or "/" in ref or "\\" in ref


def _as_path(ref: str) -> Path | None:
    given = Path(ref).expanduser()
    for candidate in (given, project_root() / given):
        if is_file(candidate):  # a name too long to look up is no file, not a traceback
            return candidate
    return None


def known_releases() -> list[str]:
    """The names of the project's releases (releases/*.yaml)."""
    return sorted(path.stem for path in (project_root() / RELEASES).glob("*.yaml"))


def known_clusters() -> list[str]:
    """The names of the project's cluster files (config/*.yaml of kind cluster), and `lab`
    once the lab made its own."""
    found = [
        path.stem
        for path in (project_root() / CLUSTERS).glob("*.yaml")
        if _CLUSTER_KIND.search(path.read_text(errors="replace"))
    ]
    if _lab_cluster().is_file():
        found.append("lab")
    return sorted(found)


def _lab_cluster() -> Path:
    return state_dir() / "lab" / "cluster.yaml"


def _miss(what: str, ref: str, known: list[str]) -> SpecError:
    listed = ", ".join(known) or "none yet"
    shown = ref if len(ref) <= SHOWN_CHARS else f"{ref[:SHOWN_CHARS]}..."
    return SpecError(
        f"no {what} {shown!r}",
        file=shown,
        expected=f"a {what} name ({listed}) or a {what} file path",
    )


def release_path(ref: str) -> Path:
    """The release file a reference names: a path, or releases/NAME.yaml."""
    if looks_like_path(ref):
        found = _as_path(ref)
    else:
        candidate = project_root() / RELEASES / f"{ref}.yaml"
        found = candidate if is_file(candidate) else None
    if found is None:
        raise _miss("release", ref, known_releases())
    return found


def cluster_path(ref: str) -> Path:
    """The cluster file a reference names: a path, config/NAME.yaml, or `lab`'s own file."""
    if looks_like_path(ref):
        found = _as_path(ref)
    else:
        named = project_root() / CLUSTERS / f"{ref}.yaml"
        found = named if is_file(named) else None
        if found is None and ref == "lab" and is_file(_lab_cluster()):
            found = _lab_cluster()
    if found is None:
        raise _miss("cluster", ref, known_clusters())
    return found
