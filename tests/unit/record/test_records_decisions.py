"""`sparkgate records`: a person's decision per record, and whole words at 80 columns (issue 29)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from flows.promotion.models import LogEntry
from flows.record.decisions import decision_of
from flows.record.reader import list_records

RECORDS = Path(__file__).resolve().parents[2] / "data" / "records" / "schema-1"
ROOT = Path(__file__).resolve().parents[3]


def _copy_of_r2(folder: Path, name: str, *, outcome: str, decision: str, **fields: str) -> None:
    """The r2 record again as another release's, its benchmark stage ending as given."""
    copy = folder / name
    shutil.copytree(RECORDS / "2026-12-03-r2", copy)
    record = json.loads((copy / "record.json").read_text())
    record.update(name=name, **fields)
    benchmark = record["stages"]["benchmark"]
    benchmark["outcome"] = outcome
    benchmark["summary"]["decision"] = decision
    (copy / "record.json").write_text(json.dumps(record))


def _experiments(tmp_path: Path) -> Path:
    """r1 qualified (then rejected), r2 failed inconclusive (as records were written before
    issue 27), r3 failed slower, r4 inconclusive (awaiting a person)."""
    folder = tmp_path / "experiments"
    for name in ("2026-12-03-r1", "2026-12-03-r2"):
        shutil.copytree(RECORDS / name, folder / name)
    _copy_of_r2(
        folder, "2026-12-04-r3", outcome="failed", decision="fail-slower", release_name="r3",
        created_at="2026-12-04T07:00:00Z",
        verdict="failed at benchmark: slower beyond 3%: decode/c1 tps -5.2% [-7.0, -3.4]%",
    )  # fmt: skip
    _copy_of_r2(
        folder, "2026-12-05-r4", outcome="inconclusive", decision="fail-inconclusive",
        release_name="r4", created_at="2026-12-05T07:00:00Z",
        verdict="inconclusive after 3 arms (max_arms 3): prefill/1024 prefill_tps",
    )  # fmt: skip
    rejected = LogEntry(
        at=datetime(2026, 12, 3, 9, tzinfo=UTC), action="rejected", release="r1", by="ana",
        reason="prefill too slow on the ring",
    )  # fmt: skip
    (folder / "promotions.jsonl").write_text(rejected.model_dump_json() + "\n")
    return folder


def test_decisions_come_from_the_promotions_log(tmp_path: Path) -> None:
    records = {r.release_name: r for r in list_records(RECORDS)}
    promoted = LogEntry(
        at=datetime(2026, 12, 3, 9, tzinfo=UTC), action="promoted", release="r1", by="ana",
        reason="", record="experiments/2026-12-03-r1",
    )  # fmt: skip
    earlier = promoted.model_copy(update={"action": "rejected", "record": None,
                                          "at": datetime(2026, 12, 1, tzinfo=UTC)})  # fmt: skip
    assert decision_of(records["r1"], []) == "awaiting"  # qualified, nobody decided
    assert decision_of(records["r1"], [promoted]) == "promoted"
    assert decision_of(records["r1"], [earlier]) == "awaiting"  # rejected an older record
    assert decision_of(records["r2"], [promoted]) == "—"  # failed: nothing to decide


def test_records_at_80_columns_keep_verdicts_and_decisions_whole(tmp_path: Path) -> None:
    folder = _experiments(tmp_path)
    env = {**os.environ, "COLUMNS": "80", "LINES": "50", "SPARKGATE_ROOT": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "flows", "records", "--experiments", str(folder)],
        capture_output=True, text=True, env=env, cwd=ROOT, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    words = done.stdout.split()
    for word in ("qualified", "rejected", "inconclusive", "slower", "2026-12-04-r3"):
        assert word in words, f"{word!r} cut or missing:\n{done.stdout}"
    # each record's first line: what the benchmark found, whole, and the decision (issue 27)
    rows = {line.split()[1]: line.split("│")[3:6] for line in lines if "│ 2026-" in line}
    found = {name: [cell.split()[0] if cell.split() else "" for cell in cells]
             for name, cells in rows.items()}  # fmt: skip
    assert found["2026-12-05-r4"] == ["inconclusive", "inconclusive", "awaiting"], done.stdout
    assert found["2026-12-04-r3"] == ["slower", "failed", "—"], done.stdout
    assert found["2026-12-03-r2"] == ["inconclusive", "failed", "—"], done.stdout
    assert found["2026-12-03-r1"] == ["skipped", "qualified", "rejected"], done.stdout
