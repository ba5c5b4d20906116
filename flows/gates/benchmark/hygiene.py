"""Arm hygiene: every arm starts on cooled-down nodes, is sampled while it runs, and an arm
during which a declared limit was crossed is kept as evidence and measured again.

An arm is one boot's measurement of a release; a board that throttled, a fabric that
retransmitted, CPU stolen by a neighbour or a node short of memory during it measures the host,
not the release, and would move the comparison by more than the tolerance it decides at. The
cluster file's `probes.samples` say what to read and where the limits are; this module takes the
readings (`flows.cluster.probes.sampler`), writes them beside the arm (`probes.json`), moves a
disturbed arm to `<i>-<role>-disturbed-<k>/` and measures it again, at most `remeasure` times
and only while the gate's time allows; then the gate fails with the crossings, never counting a
disturbed arm.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from flows.cluster.ops.preflight import node_values
from flows.cluster.probes.rules import ArmProbes
from flows.cluster.probes.sampler import HostSampler, wait_until_cool
from flows.cluster.transport.base import Transport
from flows.errors import BenchError
from flows.gates.benchmark.rules import Role, arm_folder, disturbed_folder
from flows.gates.benchmark.summary import DisturbedArm
from flows.spec.cluster import Cluster

PROBES_FILE = "probes.json"
Report = TypeVar("Report")


class ArmHygiene:
    """The cool-down before an arm and the sampler around it, for one benchmark session."""

    def __init__(
        self,
        cluster: Cluster,
        transports: Mapping[str, Transport],
        say: Callable[[str], None] = lambda _line: None,
    ) -> None:
        self.cluster, self.say = cluster, say
        self.active = bool(cluster.probes.samples)
        self.sampler = HostSampler(
            cluster, transports, lambda name: node_values(cluster, cluster.node(name))
        )
        self.last: ArmProbes | None = None
        self.disturbed: list[DisturbedArm] = []

    def cool_down(self) -> None:
        """Wait until every node meets its cool-down conditions (ClusterError after the bound)."""
        self.last = None
        if self.active:
            wait_until_cool(self.sampler, self.cluster, say=self.say)

    @contextmanager
    def watch(self) -> Iterator[None]:
        """Sample every node before, during and after the body; the result is `last`."""
        if not self.active:
            yield
            return
        with self.sampler:
            yield
        self.last = self.sampler.result()

    def keep(self, folder: Path) -> None:
        """Write the arm's readings beside its arm.json."""
        if self.last is not None:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / PROBES_FILE).write_text(self.last.model_dump_json(indent=1) + "\n")


def measure_until_clean(  # noqa: PLR0917 - one arm of one session: all of these name it
    measure: Callable[[], Report],
    hygiene: ArmHygiene,
    out_dir: Path,
    index: int,
    role: Role,
    may_retry: Callable[[], bool],
) -> Report:
    """Measure the arm; while its readings crossed a limit, keep it as evidence and measure it
    again (BenchError naming the crossings once `remeasure` or the time allowed is spent)."""
    allowed = hygiene.cluster.probes.hygiene.remeasure
    attempt = 0
    while True:
        report = measure()
        probes = hygiene.last
        if probes is None or not probes.disturbed:
            return report
        attempt += 1
        kept = disturbed_folder(out_dir, index, role)
        arm_folder(out_dir, index, role).rename(kept)
        reasons = [crossing.text() for crossing in probes.crossings]
        hygiene.disturbed.append(
            DisturbedArm(index=index, role=role, folder=kept.name, reasons=reasons)
        )
        hygiene.say(f"arm {index} ({role}) disturbed, kept as {kept.name}: {'; '.join(reasons)}")
        if attempt > allowed or not may_retry():
            why = f"measured {attempt} times" if attempt > allowed else "no time left"
            raise BenchError(
                f"arm {index} ({role}) was disturbed every time ({why}; remeasure {allowed}): "
                + "; ".join(reasons)
            )
        hygiene.say(f"arm {index} ({role}): measuring again ({attempt} of {allowed})")
