"""The files behind each double Spark's probe answers (`spark_probes.py`), one folder per lab host.

A test installs the double's commands once (`install`), writes each host as the recipe expects
it (`SparkHost.as_expected`), then changes one host's file, during an arm or before preflight, as
a Spark changes: a throttle bit in the GPU's clock event reasons, a retransmission counter that
grows, a different driver or APST timeout. Every write replaces the file whole, so a reading
taken at the same moment sees the old value or the new one, never half a file.

The expected values are the example clusters' (`config/examples/tp3-triangle.yaml`, from the
recipe's release thread): driver 580.178.04, APST timeouts of 2 s and 60 s, no clock event
reason of 0xE8, RDMA counters that do not grow. The HCAs are the recipe's four
(`NCCL_IB_HCA` of config/engines/vllm-recipe.yaml). The clocks, power and temperature are a
plausible idle GB10's, not read from one: no probe limits them.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from flows.fileio import write_text
from tests.lab.recipe_double.spark_probes import GPU_FILE

HERE = Path(__file__).resolve().parent
COMMANDS = ("nvidia-smi", "cat", "grep")
DRIVER = "580.178.04"
APST_DIR = "/sys/module/nvme_core/parameters"
APST_MS = {"apst_primary_timeout_ms": 2000, "apst_secondary_timeout_ms": 60000}
HCAS = ("rocep1s0f0", "roceP2p1s0f0", "rocep1s0f1", "roceP2p1s0f1")
RDMA_COUNTERS = ("roce_adp_retrans", "packet_seq_err", "out_of_sequence")
IDLE_GPU = {
    "driver_version": DRIVER,
    "clocks.current.sm": "208 MHz",
    "clocks.current.memory": "4266 MHz",
    "power.draw": "11.52 W",
    "temperature.gpu": "41",
    "clocks_event_reasons.active": "0x0000000000000001",  # GPU idle: not a forbidden bit
}


def install(root: Path) -> Path:
    """The double's commands in `root/bin` (put it first on the sessions' PATH); returns it."""
    folder = root / "bin"
    folder.mkdir(parents=True, exist_ok=True)
    for name in COMMANDS:
        shutil.copy(HERE / "spark_probes.py", folder / name)
        (folder / name).chmod(0o755)
    return folder


class SparkHost:
    """One double Spark's files: the host reached at `address`."""

    def __init__(self, root: Path, address: str) -> None:
        self.folder = root / "hosts" / address

    def as_expected(self) -> SparkHost:
        """Every file as the example clusters expect a Spark's: idle GPU, counters at zero."""
        shutil.rmtree(self.folder, ignore_errors=True)
        self.gpu(**IDLE_GPU)
        for name, ms in APST_MS.items():
            self.sysfs(f"{APST_DIR}/{name}", str(ms))
        for hca in HCAS:
            for counter in RDMA_COUNTERS:
                self.sysfs(self.counter_path(hca, counter), "0")
        return self

    def gpu(self, **columns: str) -> None:
        """Change what nvidia-smi reports (column names as nvidia-smi prints them)."""
        path = self.folder / GPU_FILE
        current = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        write_text(path, json.dumps(current | columns, indent=1) + "\n")

    def event_reasons(self, bits: int) -> None:
        """The GPU's `clocks_event_reasons.active`, printed as nvidia-smi prints the mask."""
        self.gpu(**{"clocks_event_reasons.active": f"0x{bits:016x}"})

    def sysfs(self, path: str, text: str) -> None:
        """Write the Spark's `/sys/...` file `path`."""
        write_text(self.folder / path.lstrip("/"), text + "\n")

    @staticmethod
    def counter_path(hca: str, counter: str) -> str:
        return f"/sys/class/infiniband/{hca}/ports/1/hw_counters/{counter}"

    def grow(self, counter: str, by: int, hca: str = HCAS[0]) -> None:
        """An RDMA counter of one HCA grows, as retransmissions on a bad link do."""
        path = self.folder / self.counter_path(hca, counter).lstrip("/")
        write_text(path, f"{int(path.read_text()) + by}\n")
