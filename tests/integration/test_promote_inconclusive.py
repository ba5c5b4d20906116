"""An inconclusive benchmark goes to a person through the real CLI (issue 27, item 3).

The release `same` is r1 again, only its description changed, benchmarked against r1 on the
real engine: an A/A pair. Its benchmark runs two arms (candidate, previous) and may not add
any (max_arms 2): without an A/A ledger two arms leave boot noise unknown, so every point is
inconclusive by design (docs/statistics.md), in about a minute. No other gate runs.

The waiting `qualify` is refused a plain `approve` from a second process (the server checks the
answer against the run's form; the run still waits), promotes on `approve --accept-inconclusive`,
and the pointer, the log, `verify` and `records` keep who accepted it and why. With `--no-wait`
the same run ends awaiting a decision, exit 3, never "failed".
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from flows.record import latest_record
from tests.support.overlays import release_overlay, write_yaml
from tests.support.project import (
    SHORT_SUITE,
    TRIMMED_GATES,
    ProjectKind,
    PromotionProject,
    projects,
)
from tests.support.waiting import wait_until

pytestmark = [
    pytest.mark.integration, pytest.mark.slow, pytest.mark.prefect_server,
    projects(ProjectKind("undecidedtest", PromotionProject, server=True)),
]  # fmt: skip
REASON = "a description-only change; the A/A noise is known"


def _same(project: PromotionProject) -> Path:
    """releases/same.yaml: r1 with another description, its benchmark an A/A pair of two arms."""
    suite = write_yaml(project.root / "suites/short.yaml", SHORT_SUITE)
    gates = {
        **TRIMMED_GATES, "determinism": {"enabled": False},
        "benchmark": {"enabled": True, "suite": str(suite), "arms": ["candidate", "previous"],
                      "max_arms": 2},
    }  # fmt: skip
    return release_overlay(
        project.root / "releases/same.yaml", "releases/r1.yaml", name="same", previous="r1",
        description="r1 again: only this description changed", gates=gates,
    )  # fmt: skip


def _answer(project: PromotionProject, waiting: subprocess.Popen[str], *args: str) -> str:
    """`sparkgate approve same ARGS` once the qualification waits; its stderr (any exit code)."""

    def answered() -> subprocess.CompletedProcess[str] | None:
        assert waiting.poll() is None, f"qualify ended early:\n{waiting.communicate()[0]}"
        done = project.run("approve", "same", "-c", str(project.cluster), "--by", "ana", *args)
        return None if "no paused qualification" in done.stderr else done

    done = wait_until(answered, 900, "qualify to pause for a decision", interval_s=2)
    return f"exit {done.returncode}: {' '.join(done.stderr.split())}"


def test_an_inconclusive_run_waits_and_only_an_accepted_approval_promotes(
    project: PromotionProject,
) -> None:
    same = _same(project)
    waiting = project.start("qualify", str(same), "-c", str(project.cluster))
    try:
        refused = _answer(project, waiting)
        assert refused.startswith("exit 1:"), refused
        assert 'sparkgate approve same --accept-inconclusive "REASON"' in refused
        assert waiting.poll() is None, "a refused answer ended the waiting qualification"
        accepted = _answer(project, waiting, "--accept-inconclusive", REASON)
        assert accepted.startswith("exit 0:"), accepted
        output = waiting.communicate(timeout=300)[0]
    finally:
        if waiting.poll() is None:
            waiting.kill()
    assert waiting.returncode == 0, output
    said = " ".join(output.split())
    assert f"promoted by ana, inconclusive benchmark accepted: {REASON}" in said
    assert "failed at benchmark" not in said

    record = latest_record(project.root / "experiments", "same")
    assert record is not None
    assert record.stages["benchmark"].outcome == "inconclusive"
    assert (record.verdict or "").startswith("inconclusive after 2 arms")
    readme = (project.root / "experiments" / record.name / "README.md").read_text()
    assert readme.splitlines()[2].startswith(
        f"**Verdict: {record.verdict}.** Benchmark: **inconclusive**."
    )
    current = project.pointer()["current"]
    assert isinstance(current, dict)
    assert (current["release"], current["by"], current["accepted_inconclusive"]) == (
        "same", "ana", REASON,
    )  # fmt: skip
    promoted = project.log()[-1]
    assert (promoted["action"], promoted["by"], promoted["accepted_inconclusive"]) == (
        "promoted", "ana", REASON,
    )  # fmt: skip

    verified = project.run("verify", record.name)
    assert verified.returncode == 0, verified.stderr
    listed = subprocess.run(
        [sys.executable, "-m", "flows", "records"], env={**project.env, "COLUMNS": "80"},
        cwd=project.root, text=True, capture_output=True, check=False,
    )  # fmt: skip
    row = next(line for line in listed.stdout.splitlines() if record.name in line)
    cells = [cell.split()[0] for cell in row.split("│")[3:6:2]]
    assert cells == ["inconclusive", "promoted"], listed.stdout

    # a promotion of it that kept no reason is what verify refuses
    log = project.root / "experiments/promotions.jsonl"
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    lines[-1]["accepted_inconclusive"] = None
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    tampered = project.run("verify", record.name)
    assert tampered.returncode == 1, tampered.stderr
    assert "with no reason for accepting it" in tampered.stderr


def test_without_waiting_an_inconclusive_run_ends_awaiting_a_decision_exit_3(
    project: PromotionProject,
) -> None:
    same = _same(project)
    done = project.run("qualify", str(same), "-c", str(project.cluster), "--no-wait",
                       timeout=900)  # fmt: skip
    said = " ".join(done.stderr.split())
    assert done.returncode == 3, said
    assert "awaiting a person's decision" in said
    assert '--accept-inconclusive "REASON"' in said
    assert "failed at benchmark" not in said
    listed = project.run("records", "--brief")
    assert "same: inconclusive after 2 arms" in listed.stdout, listed.stdout
    assert "benchmark inconclusive" in listed.stdout
