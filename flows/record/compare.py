"""Two records side by side: each gate's outcome, then each gate's own rows (its story's).

Pure: records in, (title, header, rows) sections out, for `sparkgate compare` to print. Rows are
matched by name (point, scenario, boot mode); a name only one record has shows a dash on the
other side. The gates' sections come in the registry's order.
"""

from __future__ import annotations

from flows.gates.registry import GATES, REGISTRY
from flows.gates.story import Section
from flows.record.index import gate_cell
from flows.record.model import Record


def sections(first: Record, second: Record) -> list[Section]:
    """Every section with something to show."""
    found = [_gates(first, second)]
    found += [
        section for gate in REGISTRY if (section := gate.story.compare(first, second)) is not None
    ]
    return [section for section in found if section[2]]


def _gates(first: Record, second: Record) -> Section:
    rows = [[gate, gate_cell(first, gate), gate_cell(second, gate)] for gate in GATES]
    rows.append(["verdict", first.verdict or first.status, second.verdict or second.status])
    return ("gates", ["", first.name, second.name], rows)
