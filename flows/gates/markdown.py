"""How figures read in every table of a record: decimals, signed changes, intervals, markdown.

One place for the formatting the gates' stories and the record's own tables (index, compare,
`sparkgate records`) share, so a number reads the same wherever it is shown (pure).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

Row = list[str]
DASH = "—"


def number(value: Any, unit: str = "") -> str:
    """A figure with sensible decimals (198.6, 38.21, 0.512), or a dash when absent."""
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        return DASH
    size = abs(value)
    decimals = 0 if isinstance(value, int) else 1 if size >= 100 else 2 if size >= 1 else 3
    text = f"{value:,.{decimals}f}"
    return f"{text} {unit}".rstrip() if unit else text


def signed_pct(value: Any) -> str:
    """A percent change with its sign, e.g. +16.0%."""
    return f"{value:+.1f}%" if isinstance(value, int | float) else DASH


def interval(low: Any, high: Any) -> str:
    """A 95 % interval in percent, e.g. [+6.9, +25.1]."""
    if not isinstance(low, int | float) or not isinstance(high, int | float):
        return "[no interval]"
    return f"[{low:+.1f}, {high:+.1f}]"


def markdown_table(header: Sequence[str], rows: Sequence[Row]) -> list[str]:
    """Markdown table lines (cells with a `|` are escaped)."""

    def cells(values: Sequence[str]) -> str:
        return "| " + " | ".join(str(v).replace("|", "\\|") for v in values) + " |"

    return [cells(header), "|" + "---|" * len(header), *(cells(row) for row in rows)]
