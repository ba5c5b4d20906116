"""Copy files onto a node and check them by SHA-256 (shared by the process and docker runs)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from flows.cluster.transport.base import Transport
from flows.errors import BuildError


def sha256(path: Path) -> str:
    """Hex SHA-256 of a local file."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def put_all(transport: Transport, target: PurePosixPath, files: Mapping[str, Path]) -> None:
    """Copy `files` (name -> local path) under `target` on the node; each must arrive intact."""
    folders = sorted({str((target / name).parent) for name in files} | {str(target)})
    transport.run(["mkdir", "-p", "--", *folders], timeout=60, check=True)
    for name, path in sorted(files.items()):
        transport.put(path, str(target / name))
    listing = transport.run(
        ["sha256sum", "--", *(str(target / name) for name in sorted(files))], timeout=300
    ).check()
    copied = {line.split()[1]: line.split()[0] for line in listing.stdout.splitlines() if line}
    bad = [n for n, p in files.items() if copied.get(str(target / n)) != sha256(p)]
    if bad:
        raise BuildError(f"{transport.node}: test files differ after copying: {', '.join(bad)}")
