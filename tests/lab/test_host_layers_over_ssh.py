"""A reversible host change on the lab hosts, over SSH: the layer's apply and revert commands
run on every host through the real SSH transport, its fact is read with the cluster's fact
probe, and the benchmark alternates arms with it on (candidate) and off (previous) in one
session, leaving every host as it was found. The setting is a sysfs-like file in each host's
workdir (`echo 1 > {workdir}/knob`), as a Spark's APST timeout or governor would be written.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from flows.cluster.ops.host_layers import host_layers_on
from flows.cluster.transport.base import Transport
from flows.cluster.transport.factory import TransportPool
from flows.errors import ClusterError
from flows.pipeline.inputs import QualificationInputs, load_inputs
from tests.support.lab import Lab
from tests.support.overlays import overlay
from tests.unit.cluster.test_host_layers import (
    KNOB_FACT,
    LAYER,
    alternating_session,
    knobs_over,
    release_file,
)

pytestmark = pytest.mark.lab


def _inputs(lab: Lab, tmp_path: Path, layer: dict[str, object]) -> QualificationInputs:
    assert lab.state.cluster_file is not None
    cluster_file = overlay(tmp_path / "lab.yaml", lab.state.cluster_file,
                           probes={"facts": [KNOB_FACT]})  # fmt: skip
    return load_inputs(release_file(tmp_path, layer), cluster_file)


def _knobs_off(inputs: QualificationInputs, transports: Mapping[str, Transport]) -> None:
    """Every host's sysfs-like file, in its workdir, at 0."""
    for node in inputs.cluster.nodes:
        argv = ["sh", "-c", f"mkdir -p {node.workdir} && echo 0 > {node.workdir}/knob"]
        transports[node.name].run(argv, check=True)


def test_a_reversible_host_change_qualifies_with_alternating_arms_over_ssh(
    lab: Lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inputs = _inputs(lab, tmp_path, LAYER)
    with TransportPool(inputs.cluster) as pool:
        transports = {node.name: pool.node(node.name) for node in inputs.cluster.nodes}
        _knobs_off(inputs, transports)
        alternating_session(inputs, transports, tmp_path, monkeypatch)


def test_a_host_whose_setting_does_not_take_stops_the_run_reverted_over_ssh(
    lab: Lab, tmp_path: Path
) -> None:
    cut = lab.state.hosts[1].name
    broken = LAYER | {"apply": ["sh", "-c", f"[ {{node}} = {cut} ] || echo 1 > {{workdir}}/knob"]}
    inputs = _inputs(lab, tmp_path, broken)
    with TransportPool(inputs.cluster) as pool:
        transports = {node.name: pool.node(node.name) for node in inputs.cluster.nodes}
        _knobs_off(inputs, transports)
        with (
            pytest.raises(ClusterError, match=rf"{cut}: knob-on apply: knob is 0, expected at "
                          r"least 1"),
            host_layers_on(inputs.cluster, inputs.release.host, transports),
        ):  # fmt: skip
            pytest.fail("the body must not run")
        assert set(knobs_over(transports, inputs.cluster)) == {"0"}
