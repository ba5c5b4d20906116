"""A private sparkgate project for tests that run the real CLI end to end.

A test project is a folder used as SPARKGATE_ROOT: release overlays that extend the shipped
files (so tests qualify exactly what users qualify, only trimmed), a two-node local cluster on
free ports and private workdirs, and its own experiments/ and Prefect home. The build cache is
the checkout's state folder, shared by every test, because a build only depends on its inputs.

Tests get one through the `project` fixture (tests/integration/conftest.py), one project per
module, which the module shapes with `projects(ProjectKind(...))`: the cluster's name, the class
(a module's own subclass with its releases) and whether sparkgate talks to the session's Prefect
server (the default) or starts its embedded one. Whatever a project started on its cluster is
stopped when the module ends.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from flows.record import list_records

from .local_cluster import WarmNodes
from .overlays import cluster_overlay, release_overlay, write_yaml
from .paths import ROOT
from .prefect_server import Server
from .waiting import wait_until

# A qualification small enough for a test: two short prompts, the long one short too, no
# release tests, the other gates off unless a test turns them on.
TRIMMED_DETERMINISM = {
    "prompts": ["The quick brown fox", "Once upon a time"], "max_tokens": 8,
    "long_prompt_tokens": 200, "sampled_streams": 1, "stagger_ms": 20,
}  # fmt: skip
TRIMMED_COLD_BOOTS = {
    "modes": ["warm", "one-rank-kernels"], "spot_check": 1, "requests_after_ready": 2,
    "max_tokens": 4,
}  # fmt: skip
TRIMMED_GATES: dict[str, Any] = {
    "release_tests": {"enabled": False},
    "determinism": TRIMMED_DETERMINISM,
    "cold_boots": {"enabled": False},
    "benchmark": {"enabled": False},
}
# A benchmark suite for tests: decode and prefill, briefly, where a 5 % slower step still shows.
SHORT_SUITE = {
    "kind": "suite", "name": "short", "description": "decode and prefill, briefly",
    "seed": 0, "samples": 3, "warmup": 1,
    "workloads": [
        {"kind": "closed_loop", "name": "streams", "concurrency": [1], "prompt_tokens": 64,
         "max_tokens": 96},
        {"kind": "prefill", "name": "prefill", "depths": [1024]},
    ],
}  # fmt: skip


class Project:
    """A project root with a private two-node cluster; runs `sparkgate` inside it."""

    def __init__(self, root: Path, cluster_name: str) -> None:
        self.root = root
        self.cluster = cluster_overlay(root / "cluster.yaml", cluster_name, root)
        self.workdirs = [root / "n0", root / "n1"]  # cluster_overlay's, in rank order
        WarmNodes.seed(self.workdirs)
        prefect = root / "prefect"
        self.env = {
            **os.environ, "SPARKGATE_ROOT": str(root),
            "SPARKGATE_STATE_DIR": str(ROOT / ".sparkgate"),
            "PREFECT_HOME": str(prefect), "PREFECT_RESULTS_LOCAL_STORAGE_PATH": str(prefect / "r"),
            "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "600",
        }  # fmt: skip

    def release(self, name: str, shipped: str, **gates: Any) -> Path:
        """releases/NAME.yaml: the shipped release with the trimmed gates, then `gates`."""
        return release_overlay(self.root / "releases" / f"{name}.yaml", shipped,
                               gates={**TRIMMED_GATES, **gates})  # fmt: skip

    def short_r2(self) -> Path:
        """releases/r2.yaml, trimmed, with a short benchmark of up to three arms against r1.

        r1 is not qualified first (the tests using it are about resuming and the UI), so r2 does
        not compare its outputs with r1's record, which would be refused before the run starts.
        """
        self.release("r1", "releases/r1.yaml")
        suite = write_yaml(self.root / "suites/short.yaml", SHORT_SUITE)
        return self.release(
            "r2", "releases/r2.yaml", cold_boots=TRIMMED_COLD_BOOTS,
            determinism={**TRIMMED_DETERMINISM, "against_previous": False},
            benchmark={"enabled": True, "suite": str(suite), "max_arms": 3},
        )  # fmt: skip

    def start(self, *args: str) -> subprocess.Popen[str]:
        """`sparkgate ARGS` in the project, output captured, in its own process group."""
        return subprocess.Popen(
            [sys.executable, "-m", "flows", *args], env=self.env, cwd=self.root,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )  # fmt: skip

    def run(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """`sparkgate ARGS` to the end."""
        return subprocess.run(
            [sys.executable, "-m", "flows", *args], env=self.env, cwd=self.root, text=True,
            capture_output=True, timeout=timeout, check=False,
        )  # fmt: skip

    def qualify(self, release: Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        """`sparkgate qualify RELEASE --no-wait --json` on the project's cluster."""
        return self.run("qualify", str(release), "-c", str(self.cluster), "--no-wait", "--json",
                        timeout=timeout)  # fmt: skip

    def stop(self) -> None:
        """Stop whatever the project left running on its cluster; keep what its nodes prepared
        for the session's next project (only once nothing runs on them)."""
        stopped = self.run("cluster", "stop", "-c", str(self.cluster))
        if stopped.returncode == 0:
            WarmNodes.keep(self.workdirs)

    def use_server(self, server: Server) -> None:
        """Talk to `server` instead of an ephemeral one (its environment, this project's root)."""
        self.env = {
            **server.env, "SPARKGATE_ROOT": str(self.root),
            "SPARKGATE_STATE_DIR": str(ROOT / ".sparkgate"),  # the shared build cache
            "COLUMNS": "300",  # one-line messages stay on one line
        }  # fmt: skip


class PromotionProject(Project):
    """A project with a trimmed r1 and crash-on-boot, and readers of the promotion files."""

    def __init__(self, root: Path, cluster: str = "promotetest") -> None:
        super().__init__(root, cluster)
        self.name = cluster
        self.r1 = self.release("r1", "releases/r1.yaml")
        self.crash = self.release("crash-on-boot", "releases/faulty/crash-on-boot.yaml")

    def pointer(self) -> dict[str, object]:
        """The cluster's pointer, config/promoted/<cluster>.yaml, as data."""
        path = self.root / "config/promoted" / f"{self.name}.yaml"
        return dict(yaml.safe_load(path.read_text()))

    def published(self, release: str) -> list[str]:
        """Names of the release's published records."""
        return [
            r.name for r in list_records(self.root / "experiments")
            if r.release_name == release and r.status == "published"
        ]  # fmt: skip

    def log(self) -> list[dict[str, object]]:
        """The promotions log."""
        text = (self.root / "experiments/promotions.jsonl").read_text()
        return [json.loads(line) for line in text.splitlines()]

    def decide(self, waiting: subprocess.Popen[str], records: int, *args: str) -> str:
        """Send approve/reject ARGS from another process once `waiting` is paused; its output.

        The qualification pauses right after publishing its record, so the decision is first
        sent once `records` published records of r1 exist (one ephemeral server at a time).
        """
        started = time.monotonic()

        def published() -> bool:
            assert waiting.poll() is None, f"qualify ended early:\n{waiting.communicate()[0]}"
            return len(self.published("r1")) >= records

        def decided() -> subprocess.CompletedProcess[str] | None:
            assert waiting.poll() is None, f"qualify ended early:\n{waiting.communicate()[0]}"
            done = self.run(*args)
            assert done.returncode == 0 or "no paused qualification" in done.stderr, done.stderr
            return done if done.returncode == 0 else None

        wait_until(published, 600, "qualify to publish its record", interval_s=1)
        left = 600 - (time.monotonic() - started)
        return wait_until(decided, left, "qualify to pause for a decision", interval_s=2).stderr


@dataclass(frozen=True)
class ProjectKind:
    """How a module's `project` is made: its cluster's name, its class, its Prefect server.

    By default sparkgate talks to the session's server (`prefect_api`, one for every module that
    can share it): an embedded qualification starts a temporary server of its own, about 12 s of
    every flow command here. `server=False` keeps the embedded mode users get by default, for a
    module about that mode (the promotion gate in tests/integration/test_promote.py). A module
    whose project uses the server carries the `prefect_server` marker (tests/conftest.py).
    """

    cluster: str
    make: type[Project] = Project
    server: bool = True


def projects(kind: ProjectKind) -> pytest.MarkDecorator:
    """The mark that gives a module's tests its `project`, made as `kind` says."""
    return pytest.mark.parametrize("project", [kind], indirect=True, ids=[kind.cluster])


@pytest.fixture(scope="module")
def project(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Project]:
    """The module's private project (see `projects`), its cluster stopped at the end."""
    kind = getattr(request, "param", None)
    if not isinstance(kind, ProjectKind):
        raise pytest.UsageError(f"{request.node.nodeid}: mark the module with projects(...)")
    made = kind.make(tmp_path_factory.mktemp(kind.cluster), kind.cluster)
    if kind.server:
        made.use_server(request.getfixturevalue("prefect_api"))
    try:
        yield made
    finally:
        made.stop()
