"""Issue 26 item 5: cold-boot caches written by the image's root user are emptied as root."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from flows.cluster.boot.caches import cache_targets, emptying_script
from flows.cluster.runtime.docker import DockerRanks
from flows.cluster.transport.base import CommandResult
from flows.spec.cluster import Cluster
from flows.spec.launch import render_all
from flows.spec.load import load_model
from flows.spec.release import Release

ROOT = Path(__file__).resolve().parents[3]
RECIPE = ROOT / "examples" / "spark-ds41f"


class SshUser:
    """A node's transport as the SSH user: mkdir works, rm of root's files would not."""

    def __init__(self, node: str) -> None:
        self.node, self.ran = node, []  # type: list[list[str]]

    def run(self, argv: list[str], **_: object) -> CommandResult:
        self.ran.append(argv)
        rc = 1 if argv[0] == "rm" else 0  # Permission denied on the root-owned cache files
        return CommandResult(
            node=self.node, argv=tuple(argv), rc=rc, stdout="", stderr="", duration=0
        )


def test_the_docker_runtime_empties_caches_in_a_root_container_of_the_image(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = load_model(RECIPE / "clusters" / "tp3-triangle.yaml", Cluster)
    release = load_model(RECIPE / "releases" / "r6x.yaml", Release)
    plans = render_all(cluster, release)
    targets = cache_targets(plans, "all-caches")
    transports = {p.node: SshUser(p.node) for p in plans}
    runtime = DockerRanks(cluster, transports, release=release, image="vllm-ds41f-kkref:x")  # type: ignore[arg-type]
    shots: list[dict[str, Any]] = []

    def one_shot(
        node: str, label: str, argv: list[str], folders: list[str], timeout: float, **kw: Any
    ) -> tuple[int, str]:
        shots.append({"node": node, "argv": argv, "folders": folders, **kw})
        return 0, ""

    monkeypatch.setattr(runtime, "one_shot", one_shot)
    runtime.empty_caches(targets)
    assert [shot["node"] for shot in shots] == ["dgx1", "dgx2", "dgx3"]  # one container a node
    for shot in shots:
        assert shot["user"] == "0", "caches written by the image's root user need root"
        mine = [t.path for t in targets if t.node == shot["node"]]
        assert shot["argv"][-len(mine) :] == mine
        assert all(str(Path(path).parent) in shot["folders"] for path in mine)
    assert not any(argv[0] == "rm" for t in transports.values() for argv in t.ran)


def test_the_emptying_script_removes_root_owned_contents_and_recreates_each_folder(
    tmp_path: Path,
) -> None:
    caches = [tmp_path / "triton", tmp_path / "vllm"]
    for cache in caches:
        (cache / "deep").mkdir(parents=True)
        (cache / "deep" / "kernel.bin").write_bytes(b"x")
        (cache / "deep" / "kernel.bin").chmod(0o400)  # as root wrote it: read-only
    subprocess.run(emptying_script([str(c) for c in caches]), check=True)
    assert all(cache.is_dir() and not any(cache.iterdir()) for cache in caches)
