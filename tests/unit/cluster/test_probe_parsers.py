"""Host probe parsers and rules are pure: exact on the texts hosts print."""

from __future__ import annotations

import pytest

from flows.cluster.probes.parsers import derive, parse
from flows.cluster.probes.rules import Reading, crossings, fact_problem, not_cooled
from flows.spec.cluster import Cluster
from flows.spec.load import load_model
from flows.spec.probes import HostFact, HostSample, Limit
from tests.support.paths import ROOT

STAT = "cpu  100 0 50 800 10 0 5 {steal} 0 0\ncpu0 1 2 3 4\nintr 5\n"
# The release thread's query (`nvidia-smi --query-gpu=... --format=csv`), as a GB10 prints it.
SMI = (
    "clocks.sm [MHz], clocks.mem [MHz], power.draw [W], temperature.gpu, "
    "clocks_event_reasons.active\n2405 MHz, [N/A], 31.52 W, 47, 0x0000000000000020\n"
)


def test_proc_stat_steal_is_a_share_between_two_readings() -> None:
    first = parse("proc_stat", STAT.format(steal=35))
    assert first == {"steal": 35.0, "total": 1000.0}
    assert "steal_pct" not in derive("proc_stat", None, first)
    later = parse("proc_stat", STAT.format(steal=135)) | {"total": 1400.0}
    assert derive("proc_stat", first, later)["steal_pct"] == 25.0


def test_meminfo_pressure_thermal_nvidia_smi_counters_number_text() -> None:
    meminfo = parse("meminfo", "MemTotal: 8388608 kB\nMemAvailable:  2097152 kB\nHuge: 1\n")
    assert meminfo == {"MemTotal": 8.0, "MemAvailable": 2.0}
    pressure = parse("pressure", "some avg10=1.50 avg60=0.20 avg300=0.00 total=9\n"
                     "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")  # fmt: skip
    assert pressure["some_avg10"] == 1.5
    assert pressure["full_avg60"] == 0.0
    assert parse("thermal", "45000\n61500\n") == {
        "zones": 2.0,
        "max_c": 61.5,
        "zone0_c": 45.0,
        "zone1_c": 61.5,
    }
    assert parse("thermal", "") == {"zones": 0.0}  # a VM without zones: nothing to cross
    smi = parse("nvidia_smi", SMI)
    assert smi == {"clocks.sm": 2405.0, "clocks.mem": "[N/A]", "power.draw": 31.52,
                   "temperature.gpu": 47.0, "clocks_event_reasons.active": 32.0}  # fmt: skip
    ethtool = "NIC statistics:\n     rx_packets: 10\n     roce_adp_retrans: 3\n"
    assert parse("counters", ethtool) == {"rx_packets": 10.0, "roce_adp_retrans": 3.0}
    grep = "/sys/a/hw_counters/packet_seq_err:2\n/sys/b/hw_counters/packet_seq_err:5\n"
    assert parse("counters", grep) == {"packet_seq_err": 7.0}
    assert parse("counters", "pswpin 4\npswpout 0\nnr_free_pages 12\n")["pswpin"] == 4.0
    assert parse("number", "65536\n") == {"value": 65536.0}
    assert parse("text", " 7.0.0-1019-nvidia-64k\n") == {"value": "7.0.0-1019-nvidia-64k"}
    with pytest.raises(ValueError, match="no GPU row"):
        parse("nvidia_smi", "clocks.sm [MHz]\n")
    with pytest.raises(ValueError, match="MemAvailable"):
        parse("meminfo", "MemTotal: 1 kB\n")


def _reading(at_s: float, node: str = "n1", **values: float) -> Reading:
    return Reading(node=node, probe="p", phase="during", at_s=at_s, values=values)


def test_limits_cross_once_per_node_and_counters_by_growth() -> None:
    sample = HostSample(
        name="p", argv=["x"], parse="counters",
        limits=[Limit(value="temp", max=80), Limit(value="retrans", max_growth=0),
                Limit(value="reasons", forbid_bits=0x68), Limit(value="free", min=1)],
    )  # fmt: skip
    readings = [
        _reading(0, temp=70, retrans=5, reasons=1, free=3),
        _reading(5, temp=85, retrans=5, reasons=0x21, free=3),
        _reading(10, temp=90, retrans=7, reasons=1, free=0.5),
        _reading(10, node="n2", temp=60, retrans=9, reasons=0, free=9),
    ]
    found = [c.text() for c in crossings([sample], readings)]
    assert found == [
        "n1 p temp 85 (above max 80) at 5s",
        "n1 p retrans 2 (grew by more than 0) at 10s",
        "n1 p reasons 33 (bits 0x20 of forbidden 0x68) at 5s",
        "n1 p free 0.5 (below min 1) at 10s",
    ]


def test_cool_down_waits_for_every_condition_and_a_missing_value() -> None:
    limits = [Limit(value="steal_pct", cool_max=5), Limit(value="x", max=1)]
    sample = HostSample(name="p", argv=["x"], parse="proc_stat", limits=limits)
    assert not_cooled([sample], [_reading(0, steal_pct=4)]) == []
    assert not_cooled([sample], [_reading(0, steal_pct=6)]) == ["n1 p steal_pct 6 above 5"]
    assert not_cooled([sample], [_reading(0)]) == ["n1 p steal_pct: no reading (not a number)"]


def test_a_fact_names_both_values() -> None:
    kernel = HostFact(name="kernel", argv=["uname", "-r"], expect="7.0.0-1019-nvidia-64k")
    assert fact_problem(kernel, "6.8.0-1") == "is '6.8.0-1', expected '7.0.0-1019-nvidia-64k'"
    assert fact_problem(kernel, "7.0.0-1019-nvidia-64k") is None
    apst = HostFact(name="apst", argv=["cat", "f"], parse="number", at_least=2000)
    assert fact_problem(apst, 100.0) == "is 100, expected at least 2000"
    page = HostFact(name="page", argv=["getconf"], parse="number", pattern="^65536$")
    assert fact_problem(page, 4096.0) == "is '4096', expected to match /^65536$/"


@pytest.mark.parametrize("name", ["tp3-triangle", "tp4-ring"])
def test_the_example_clusters_carry_the_recipes_probes(name: str) -> None:
    """The release thread's values and readings (docs/host-probes.md lists the sources)."""
    cluster = load_model(ROOT / "config" / "examples" / f"{name}.yaml", Cluster)
    facts = {fact.name: fact for fact in cluster.probes.facts}
    assert facts["NVIDIA driver"].expect == "580.178.04"
    assert facts["NVMe APST primary timeout (ms)"].at_least == 2000
    assert facts["NVMe APST secondary timeout (ms)"].at_least == 60000
    samples = {sample.name: sample for sample in cluster.probes.samples}
    assert samples["gpu"].argv[1] == (
        "--query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active"
    )
    grown = {limit.value for limit in samples["rdma counters"].limits if limit.max_growth == 0}
    assert grown == {"roce_adp_retrans", "packet_seq_err", "out_of_sequence"}
    [memory] = samples["memory"].limits
    assert (memory.min, memory.cool_min) == (3, 5)  # the running and startup memory guards
