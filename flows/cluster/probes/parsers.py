"""Typed parsers of host probe output (pure): a command's text in, named values out.

Every parser returns `Values`, a flat mapping from a value's name to a number or, where the
host printed something that is not one (`[N/A]`, a version), its text. Names are what a cluster
file's limits and facts refer to. One reading of /proc/stat says nothing about steal on its own:
`derive` turns two consecutive readings into the share of CPU time stolen between them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from flows.spec.probes import Parser

Value = float | str
Values = dict[str, Value]
GIB_KIB = 1024 * 1024
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def number(text: str) -> Value:
    """A number from a value as hosts print it: `1234 MHz`, `45.6 W`, `0x01` (a bitmask), `7`;
    its text when it holds none (`[N/A]`, `Not Supported`)."""
    word = text.strip()
    if re.fullmatch(r"0[xX][0-9a-fA-F]+", word):
        return float(int(word, 16))
    found = _NUMBER.match(word)
    return float(found.group(0)) if found else word


def parse_text(output: str) -> Values:
    """The output, stripped, as `value`."""
    return {"value": output.strip()}


def parse_number(output: str) -> Values:
    """The first number of the output as `value` (its text when there is none)."""
    found = _NUMBER.search(output)
    return {"value": float(found.group(0)) if found else output.strip()}


def parse_proc_stat(output: str) -> Values:
    """The aggregate `cpu` line of /proc/stat: `steal` and `total` ticks (see `derive`)."""
    for line in output.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            ticks = [float(field) for field in fields[1:]]
            guest = sum(ticks[8:10])  # guest time is already counted in user and nice
            steal = ticks[7] if len(ticks) > 7 else 0.0
            return {"steal": steal, "total": sum(ticks) - guest}
    raise ValueError("no cpu line in /proc/stat")


def parse_meminfo(output: str) -> Values:
    """Every /proc/meminfo field given in kB, in GiB (`MemAvailable`, `SwapFree`, ...)."""
    found: Values = {}
    for line in output.splitlines():
        fields = line.replace(":", " ").split()
        if len(fields) == 3 and fields[2] == "kB":
            found[fields[0]] = int(fields[1]) / GIB_KIB
    if "MemAvailable" not in found:
        raise ValueError("no MemAvailable in /proc/meminfo")
    return found


def parse_pressure(output: str) -> Values:
    """A /proc/pressure file: `some_avg10`, `some_avg60`, ..., `full_avg10`, ... (percent)."""
    found: Values = {}
    for line in output.splitlines():
        kind, *pairs = line.split()
        for pair in pairs:
            key, _, amount = pair.partition("=")
            if key.startswith("avg"):
                found[f"{kind}_{key}"] = float(amount)
    if not found:
        raise ValueError(f"not a pressure file: {output.strip()[:80]!r}")
    return found


def parse_thermal(output: str) -> Values:
    """Thermal zone `temp` files (millidegrees, one a line): `zones`, `max_c`, `zone<i>_c`; a
    host without zones (a VM) reads `zones` 0 and nothing else, which is no crossing."""
    temps = [int(line) / 1000 for line in output.split() if line.strip().lstrip("-").isdigit()]
    if not temps:
        return {"zones": 0.0}
    zones = {f"zone{i}_c": t for i, t in enumerate(temps)}
    return {"zones": float(len(temps)), "max_c": max(temps), **zones}


def parse_nvidia_smi(output: str) -> Values:
    """`nvidia-smi --query-gpu=A,B --format=csv` (header kept): the first GPU's value per
    column, named as queried (`clocks.sm`, `temperature.gpu`, ...), units dropped."""
    lines = [line for line in output.splitlines() if line.strip()]
    if len(lines) < 2:
        raise ValueError(f"no GPU row in nvidia-smi output: {output.strip()[:80]!r}")
    names = [re.sub(r"\s*\[.*\]$", "", name.strip()) for name in lines[0].split(",")]
    cells = [cell.strip() for cell in lines[1].split(",")]
    if len(cells) != len(names):
        raise ValueError(f"nvidia-smi row has {len(cells)} values for {len(names)} columns")
    return {name: number(cell) for name, cell in zip(names, cells, strict=True)}


def parse_counters(output: str) -> Values:
    """Counter lines `name: value` (`ethtool -S`), `dir/name:value` (`grep -H . files`) or
    `name value` (/proc/vmstat): summed per name, so one counter read on every port of a node
    is one value."""
    found: dict[str, float] = {}
    for line in output.splitlines():
        key, sep, amount = line.rpartition(":")
        if not sep:
            key, sep, amount = line.strip().partition(" ")
        value = number(amount)
        if sep and isinstance(value, float):
            name = key.strip().rsplit("/", 1)[-1]
            found[name] = found.get(name, 0.0) + value
    return dict(found)


PARSERS: Mapping[Parser, Callable[[str], Values]] = {
    "text": parse_text,
    "number": parse_number,
    "proc_stat": parse_proc_stat,
    "meminfo": parse_meminfo,
    "pressure": parse_pressure,
    "thermal": parse_thermal,
    "nvidia_smi": parse_nvidia_smi,
    "counters": parse_counters,
}


def parse(kind: Parser, output: str) -> Values:
    """The values of one reading; ValueError when the output is not what `kind` reads."""
    return PARSERS[kind](output)


def derive(kind: Parser, before: Values | None, now: Values) -> Values:
    """`now` with the values that need the previous reading: `steal_pct` for proc_stat."""
    if kind != "proc_stat" or before is None:
        return now
    steal = _delta(before, now, "steal")
    total = _delta(before, now, "total")
    if steal is None or total is None or total <= 0:
        return now
    return {**now, "steal_pct": round(100 * steal / total, 3)}


def _delta(before: Values, now: Values, key: str) -> float | None:
    old, new = before.get(key), now.get(key)
    if isinstance(old, float) and isinstance(new, float):
        return new - old
    return None
