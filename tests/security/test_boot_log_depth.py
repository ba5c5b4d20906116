"""Attack: a boot log line nested thousands deep crashed the cold-boots gate's log reader
(issue 30, low: "200k-deep JSONL -> RecursionError"; `replay` caught it, the gate did not).

An engine's log is not the pipeline's to trust: a JSON-lines boot log with one line of 200,000
open brackets raised RecursionError out of `LogReader`, so the boot ended as a crash instead of
a timeline. Such a line is now what any unparseable line is: no event, and the lines around it
still count.
"""

from __future__ import annotations

import json

from flows.cluster.boot.timeline import LogReader
from flows.spec.engine import LogEvents, Logs

JSONL = Logs(format="jsonl", events=LogEvents(weights_loaded="loaded", ready="ready"))

DEEP = "[" * 200_000 + "]" * 200_000


def test_a_line_nested_200k_deep_is_no_event_and_the_lines_around_it_still_count() -> None:
    reader = LogReader(JSONL, node="node0", rank=0)
    lines = [
        json.dumps({"ts": "2026-12-06T04:00:00+00:00", "event": "loaded"}),
        DEEP,
        '{"event": ' + DEEP + "}",
        json.dumps({"ts": "2026-12-06T04:00:05+00:00", "event": "ready"}),
    ]
    events = reader.read(lines)
    assert [event.name for event in events] == ["weights_loaded", "ready"]
