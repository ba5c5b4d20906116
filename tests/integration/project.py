"""A private sparkgate project for tests that run the real CLI end to end.

A test project is a folder used as SPARKGATE_ROOT: release overlays that extend the shipped
files (so tests qualify exactly what users qualify, only trimmed), a two-node local cluster on
free ports and private workdirs, and its own experiments/ and Prefect home. The build cache is
the checkout's state folder, shared by every test, because a build only depends on its inputs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.overlays import cluster_overlay, release_overlay, write_yaml

from .conftest import ROOT

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
        """Stop whatever the project left running on its cluster."""
        self.run("cluster", "stop", "-c", str(self.cluster))
