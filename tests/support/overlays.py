"""Spec files for tests that extend the shipped ones, so tests run what users run, trimmed.

An overlay is `{extends: <shipped file>, set: {...}}`; the loader deep-merges `set` over the
shipped file. A test cluster is `config/local.yaml` with private workdirs and free ports.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .net import free_port
from .paths import ROOT

# The smallest qualification that still publishes a verifiable record: one short determinism
# gate, every other gate off (for tests of scheduling and scale-out, not of the gates).
SMALLEST_GATES: dict[str, Any] = {
    "release_tests": {"enabled": False},
    "determinism": {"prompts": ["The quick brown fox"], "max_tokens": 4,
                    "long_prompt_tokens": 64, "sampled_streams": 1, "stagger_ms": 10},
    "cold_boots": {"enabled": False},
    "benchmark": {"enabled": False},
}  # fmt: skip


def write_yaml(path: Path, document: dict[str, Any]) -> Path:
    """Write a YAML document, making its folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(document))
    return path


def overlay(path: Path, shipped: str | Path, **settings: Any) -> Path:
    """A spec file at `path` that extends `shipped` (relative to the checkout) with `settings`."""
    return write_yaml(path, {"extends": str(ROOT / shipped), "set": settings})


def release_overlay(path: Path, shipped: str | Path = "releases/r1.yaml", **settings: Any) -> Path:
    """A release extending a shipped one (r1 by default), with `settings` set over it."""
    return overlay(path, shipped, **settings)


def cluster_overlay(
    path: Path, name: str, workdirs: Path, nodes: tuple[str, str] | None = None
) -> Path:
    """A two-node cluster extending config/local.yaml on free ports, workdirs `workdirs/n0|n1`.

    `nodes` names the head and the worker (default `<name>0` and `<name>1`).
    """
    head, worker = nodes or (f"{name}0", f"{name}1")
    return overlay(path, "config/local.yaml",
        name=name,
        ports={"rendezvous": free_port(), "api": free_port()},
        nodes=[
            {"name": head, "rank": 0, "head": True, "address": "127.0.0.1",
             "workdir": str(workdirs / "n0")},
            {"name": worker, "rank": 1, "address": "127.0.0.1",
             "workdir": str(workdirs / "n1")},
        ],
    )  # fmt: skip
