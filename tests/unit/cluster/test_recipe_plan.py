"""Issue 26 deliver 5: `qualify --plan` shows each rank as its container will get it."""

from __future__ import annotations

from pathlib import Path

from flows.pipeline.inputs import load_inputs
from flows.pipeline.plan import qualification_plan

ROOT = Path(__file__).resolve().parents[3]
RECIPE = ROOT / "examples" / "spark-ds41f"


def test_the_plan_shows_every_nodes_final_mounts_devices_and_environment(tmp_path: Path) -> None:
    inputs = load_inputs(
        RECIPE / "releases" / "r6x.yaml", RECIPE / "clusters" / "tp3-triangle.yaml"
    )
    cluster, release = inputs.cluster, inputs.release
    plan = qualification_plan(inputs, tmp_path)
    ranks = [step for step in plan.steps if step.stage == "ranks"]
    assert [step.node for step in ranks] == ["dgx1", "dgx2", "dgx3"]
    for step in ranks:
        view = step.detail
        mounts = "\n".join(view["mounts"])
        assert "/dev/dri/by-path/pci-000f:01:00.0-card -> /dev/dri/card0 (rw, bind)" in mounts
        snapshot = f"/snapshots/{release.model.revision}"  # the pinned revision's HF snapshot
        assert any(snapshot in m and m.endswith("-> /models (ro, bind)") for m in view["mounts"])
        assert "/dev/infiniband" in view["devices"]
        assert "gpus: all" in view["devices"]
        assert view["device_cgroup_rules"] == ["c 226:* rw"]
        assert view["environment"]["NCCL_IB_GID_INDEX"] == "3"  # the node's override
        assert view["environment"]["SPARK3_DISPLAY_CARVEOUT_WEIGHTS"] == "1"
        assert view["image"] == "vllm-ds41f-kkref:19f2c20ed4d6-r6x"
    lock = next(step for step in plan.steps if step.stage == "lock")
    assert not lock.detail["path"].startswith(f"{cluster.head.workdir}/")
