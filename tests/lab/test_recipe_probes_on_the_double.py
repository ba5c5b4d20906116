"""The recipe's own probes, as config/examples/tp3-triangle.yaml ships them, on the recipe double.

Issue 28 asks for the probes to be checked over the recipe double as well as the local cluster.
The example file's `probes:` section is read from the file itself (never a copy, so a change to
the shipped probes is what runs here) and put on a lab cluster of three namespace hosts with sshd,
whose SSH sessions find the double Spark's `nvidia-smi`, `cat` and `grep` first on PATH
(tests/lab/recipe_double/spark_probes.py, files in spark_host.py) and the double's meminfo and
64k-page shims behind them (double.write_shims). Every probe runs its real command over the real
SSH transport and is read by the real parsers and rules: preflight's facts match when the double
reports the recipe's values and stop it, naming node, fact and both values, when one differs; an
arm sampled as the benchmark gate samples it (ArmHygiene, HostSampler) is disturbed by a
forbidden clock event reason or an RDMA counter that grows during it, and not otherwise.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Iterator

import pytest

from flows.cluster.lab.hosts import LabPlan
from flows.cluster.ops.preflight import PreflightReport, run_preflight
from flows.cluster.probes.rules import ArmProbes
from flows.cluster.transport.factory import TransportPool
from flows.errors import ClusterError
from flows.gates.benchmark.hygiene import ArmHygiene
from flows.spec.cluster import Cluster
from flows.spec.load import load_model
from tests.lab.recipe_double import double, spark_host
from tests.lab.recipe_double.spark_host import SparkHost
from tests.support.lab import Lab, own_lab
from tests.support.paths import ROOT

pytestmark = [pytest.mark.lab, pytest.mark.timeout(600)]

EXAMPLE = ROOT / "config" / "examples" / "tp3-triangle.yaml"
DOUBLE = ROOT / ".sparkgate" / "recipe-double-probes"
SHIMS = DOUBLE / "spark"
PLAN = LabPlan(
    prefix="sg-p", nodes=3, subnet=ipaddress.IPv4Network("198.18.17.0/24"),
    session_path=(str(DOUBLE / "bin"), str(SHIMS)),
)  # fmt: skip
LAB_DIR = ROOT / ".sparkgate" / "test-lab-probes"
DRIVER, APST_PRIMARY = "NVIDIA driver", "NVMe APST primary timeout (ms)"
HW_THERMAL_SLOWDOWN, SW_POWER_CAP = 0x40, 0x04  # in the forbidden 0xE8, and not


@pytest.fixture(scope="module")
def spark_lab() -> Iterator[Lab]:
    """Three lab hosts whose sessions run the double Spark's probe commands."""
    double.write_shims(SHIMS)
    spark_host.install(DOUBLE)
    with own_lab(PLAN, LAB_DIR) as lab:
        yield lab


@pytest.fixture
def sparks(spark_lab: Lab) -> list[SparkHost]:
    """Each host's Spark files, reset to what the example expects."""
    return [SparkHost(DOUBLE, host.address).as_expected() for host in spark_lab.state.hosts]


@pytest.fixture
def cluster(spark_lab: Lab) -> Cluster:
    """The lab's cluster with the example file's probes, as shipped."""
    probes = load_model(EXAMPLE, Cluster).probes
    assert probes.facts, "the example no longer declares the recipe's facts"
    assert probes.samples, "the example no longer declares the recipe's samples"
    return spark_lab.cluster.model_copy(update={"probes": probes})


def _preflight(cluster: Cluster) -> PreflightReport:
    with TransportPool(cluster) as pool:
        return run_preflight(cluster, lambda node: pool.node(node.name))


def _lines(report: PreflightReport) -> dict[tuple[str, str], tuple[str, str]]:
    return {(r.node, r.check): (r.status, r.detail) for r in report.results}


def test_preflight_reads_the_apst_facts_on_the_double(
    cluster: Cluster, sparks: list[SparkHost]
) -> None:
    names = [node.name for node in cluster.nodes]
    lines = _lines(_preflight(cluster))
    for name in names:
        assert lines[name, APST_PRIMARY] == ("OK", "2000")
        assert lines[name, "NVMe APST secondary timeout (ms)"] == ("OK", "60000")

    sparks[2].sysfs(f"{spark_host.APST_DIR}/apst_primary_timeout_ms", "100")
    report = _preflight(cluster)
    lines = _lines(report)
    assert lines[names[2], APST_PRIMARY] == ("WARN", "is 100, expected at least 2000")
    assert lines[names[0], APST_PRIMARY] == ("OK", "2000")
    assert (names[2], APST_PRIMARY) not in {(e.node, e.check) for e in report.errors}  # a WARN


def test_preflight_checks_the_driver_fact_on_the_double(
    cluster: Cluster, sparks: list[SparkHost]
) -> None:
    names = [node.name for node in cluster.nodes]
    report = _preflight(cluster)
    lines = _lines(report)
    for name in names:
        assert lines[name, DRIVER] == ("OK", "580.178.04")
        assert report.host_facts[name][DRIVER] == "580.178.04"

    sparks[1].gpu(driver_version="580.95.05")
    report = _preflight(cluster)
    assert _lines(report)[names[0], DRIVER] == ("OK", "580.178.04")
    with pytest.raises(ClusterError) as stopped:
        report.raise_for_errors()
    assert str(stopped.value) == (
        f"preflight of {cluster.name} failed: "
        f"{names[1]}: {DRIVER}: is '580.95.05', expected '580.178.04'"
    )


def _arm(hygiene: ArmHygiene) -> ArmProbes:
    with hygiene.watch():
        pass
    assert hygiene.last is not None
    return hygiene.last


def _crossed(probes: ArmProbes) -> list[tuple[str, str, str, str, float]]:
    """Each crossing's node, probe, value, limit and what was seen (not when)."""
    return [(c.node, c.probe, c.value, c.limit, c.seen) for c in probes.crossings]


def _sampled_during(hygiene: ArmHygiene, node: str, probe: str, key: str, seen: float) -> None:
    """Wait until the sampler's thread has read `key` at `seen` on `node` during the arm."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for reading in hygiene.sampler.result().readings:
            found = reading.values.get(key)
            if (reading.phase, reading.node, reading.probe, found) == ("during", node, probe, seen):
                return
        time.sleep(0.2)
    raise AssertionError(f"no reading of {probe} {key} {seen} on {node} during the arm")


def test_an_arm_on_the_double_is_disturbed_by_a_throttle_bit_or_rdma_counter_growth(
    cluster: Cluster, sparks: list[SparkHost]
) -> None:
    names = [node.name for node in cluster.nodes]
    gpu = "clocks_event_reasons.active"
    with TransportPool(cluster) as pool:
        hygiene = ArmHygiene(cluster, {name: pool.node(name) for name in names})
        hygiene.cool_down()  # memory's cool_min 5 GiB, read from the double's meminfo

        sparks[0].event_reasons(SW_POWER_CAP)  # reported, not forbidden
        clean = _arm(hygiene)
        assert [r for r in clean.readings if r.error] == []  # every probe answered, every node
        assert {(r.node, r.probe) for r in clean.readings} == {
            (name, sample.name) for name in names for sample in cluster.probes.samples
        }
        assert clean.crossings == [], [c.text() for c in clean.crossings]
        gpu_0 = next(r for r in clean.readings if r.node == names[0] and r.probe == "gpu")
        assert gpu_0.values[gpu] == SW_POWER_CAP
        assert gpu_0.values["clocks.current.sm"] == 208
        rdma = next(r for r in clean.readings if r.probe == "rdma counters")
        assert rdma.values == {"roce_adp_retrans": 0, "packet_seq_err": 0, "out_of_sequence": 0}

        with hygiene.watch():  # a throttle that is over before the arm ends
            sparks[1].event_reasons(HW_THERMAL_SLOWDOWN)
            _sampled_during(hygiene, names[1], "gpu", gpu, HW_THERMAL_SLOWDOWN)
            sparks[1].event_reasons(0x1)
        throttled = hygiene.last
        assert throttled is not None
        assert _crossed(throttled) == [
            (names[1], "gpu", gpu, "bits 0x40 of forbidden 0xe8", HW_THERMAL_SLOWDOWN)
        ]
        after = [
            r.values[gpu] for r in throttled.readings if r.phase == "after" and r.probe == "gpu"
        ]
        assert HW_THERMAL_SLOWDOWN not in after  # only the sampling during the arm saw it
        assert throttled.disturbed

        with hygiene.watch():  # three retransmissions on one HCA of the third node
            sparks[2].grow("roce_adp_retrans", 3, hca="rocep1s0f1")
        grown = hygiene.last
        assert grown is not None
        assert _crossed(grown) == [
            (names[2], "rdma counters", "roce_adp_retrans", "grew by more than 0", 3)
        ]

        assert not _arm(hygiene).disturbed  # a grown counter that stays put is no growth
