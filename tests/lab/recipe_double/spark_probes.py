#!/usr/bin/env python3
"""`nvidia-smi`, `cat` and `grep` of a recipe double's Spark: what the example clusters' probes ask.

`config/examples/tp3-triangle.yaml` (and tp4-ring.yaml) read, on every node: the driver with
`nvidia-smi --query-gpu=driver_version --format=csv,noheader`, the NVMe APST timeouts with
`cat /sys/module/nvme_core/parameters/apst_{primary,secondary}_timeout_ms`, the GPU's clocks,
power, temperature and clock event reasons with an `nvidia-smi --query-gpu=... --format=csv`
query, and the RDMA counters with `grep -H . /sys/class/infiniband/*/ports/*/hw_counters/NAME`.
A lab host has no GPU, no NVMe module and no HCA, so this script, copied under each command's
name into a folder first on the SSH sessions' PATH, answers those reads from the Spark's files in
`../hosts/<address>/` (the address the session reached, from `SSH_CONNECTION`), which a test
may change while an arm is sampled, as a throttling board or a retransmitting fabric would:

- `nvidia-smi --query-gpu=A,B --format=csv[,noheader][,nounits]`: a header of the columns (the
  full names nvidia-smi prints for its aliases, units in brackets) and one GPU's row, from
  `gpu.json` (`{column: value as printed}`); an unknown column fails as nvidia-smi does;
- `cat PATH` and `grep ... PATH`: a `/sys/...` path (or glob the shell left unexpanded) that
  the Spark's folder holds is read there; `grep -H` prints it under its `/sys` name. Anything
  else goes to the next command of that name on PATH (the double's meminfo `cat`, then the
  system's), so /proc/vmstat, /proc/stat and /proc/loadavg are this machine's own.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

BIN = Path(__file__).resolve().parent
HOSTS = BIN.parent / "hosts"
GPU_FILE = "gpu.json"
# nvidia-smi's aliases, printed in the header under the full name (`nvidia-smi --help-query-gpu`).
ALIASES = {"clocks.sm": "clocks.current.sm", "clocks.mem": "clocks.current.memory"}


def host_folder() -> Path:
    """The Spark this session reached: the server address of `SSH_CONNECTION`."""
    fields = os.environ.get("SSH_CONNECTION", "").split()
    if len(fields) != 4:
        raise SystemExit("spark double: not an SSH session of the lab (no SSH_CONNECTION)")
    return HOSTS / fields[2]


def nvidia_smi(argv: list[str]) -> int:
    """One GPU's `--query-gpu` row as CSV, from the Spark's gpu.json."""
    query = next((a.split("=", 1)[1] for a in argv if a.startswith("--query-gpu=")), None)
    form = next((a.split("=", 1)[1] for a in argv if a.startswith("--format=")), "")
    if query is None or not form.startswith("csv"):
        print("spark double: only `--query-gpu=... --format=csv` is answered", file=sys.stderr)
        return 2
    gpu = json.loads((host_folder() / GPU_FILE).read_text(encoding="utf-8"))
    columns = [ALIASES.get(name, name) for name in query.split(",")]
    for name in columns:
        if name not in gpu:
            print(f'Field "{name}" is not a valid field to query.', file=sys.stderr)
            return 2
    options = form.split(",")[1:]
    cells = [str(gpu[name]) for name in columns]
    if "nounits" in options:
        cells = [cell.split(" ")[0] for cell in cells]
    if "noheader" not in options:
        print(", ".join(_header(name, str(gpu[name]), options) for name in columns))
    print(", ".join(cells))
    return 0


def _header(name: str, value: str, options: list[str]) -> str:
    unit = value.split(" ", 1)[1] if " " in value and not value.startswith("[") else ""
    return f"{name} [{unit}]" if unit and "nounits" not in options else name


def files_of(argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """argv with each `/sys` path or glob the Spark's folder holds moved there, and the moved
    paths back to their `/sys` names (an unknown path stays, and fails as on any host)."""
    folder = host_folder()
    moved: list[str] = []
    names: dict[str, str] = {}
    for arg in argv:
        found = sorted(map(str, folder.glob(arg[1:]))) if arg.startswith("/sys/") else []
        for path in found:
            names[path] = path.removeprefix(str(folder))
        moved.extend(found or [arg])
    return moved, names


def next_command(name: str) -> str:
    """The command of this name on PATH after the double's own folder."""
    entries = os.environ.get("PATH", "").split(os.pathsep)
    later = [e for e in entries if e and Path(e).resolve() != BIN]
    found = shutil.which(name, path=os.pathsep.join(later))
    if found is None:
        raise SystemExit(f"spark double: no {name} on PATH after {BIN}")
    return found


def main() -> int:
    name, argv = Path(sys.argv[0]).name, sys.argv[1:]
    if name == "nvidia-smi":
        return nvidia_smi(argv)
    if not any(arg.startswith("/sys/") for arg in argv):
        os.execv(next_command(name), [name, *argv])
    moved, names = files_of(argv)
    if name == "cat":
        os.execv(next_command(name), [name, *moved])
    done = subprocess.run([next_command(name), *moved], check=False, capture_output=True, text=True)
    for line in done.stdout.splitlines():
        path, sep, rest = line.partition(":")
        print(f"{names.get(path, path)}{sep}{rest}")
    sys.stderr.write(done.stderr)
    return done.returncode


if __name__ == "__main__":
    raise SystemExit(main())
