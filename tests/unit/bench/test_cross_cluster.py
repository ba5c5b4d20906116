"""`sparkgate bench compare` of a user's arm against a published recipe release: the manifest's
report and host facts, side by side with the user's, per-step rows and the caveats."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from flows.bench.compare import compare_arms
from flows.bench.cross import StepRow, caveats, cross_cluster, step_line
from flows.bench.hosts import HostFacts
from flows.bench.legacy import import_recipe_manifest, import_recipe_report
from flows.bench.report import write_arm
from flows.bench.stats import Change
from flows.cli import main
from tests.support.paths import ROOT

# Copies of ../shared/data/recipe-bench: the recipe's r6 TP4 bench report (Oct 5), and its r6d
# release manifest (Oct 10) with the report it names, 2026-10-10-karmic-kraken-r6d-tp4.json.
DATA = Path(__file__).resolve().parent / "data" / "recipe-bench"
MANIFEST = DATA / "baseline-2026-10-10-karmic-kraken-r6d.json"
R6_TP4 = DATA / "2026-10-05-karmic-kraken-r6-tp4.json"
MINE = HostFacts(
    cluster="mine",
    source="probes.facts of mine",
    nodes={
        f"spark{i}": {"kernel": "6.17.0-1008-nvidia", "page size": 4096.0, "NVIDIA driver": None}
        for i in (1, 2, 3, 4)
    },
    errors={f"spark{i}": {"NVIDIA driver": "exited 127: not found"} for i in (1, 2, 3, 4)},
)


def _my_arm(tmp_path: Path) -> Path:
    """The r6 TP4 report as if it were a user's arm read with `bench run -c` (their facts)."""
    arm = import_recipe_report(R6_TP4, label="mine").model_copy(update={"host_facts": MINE})
    return write_arm(arm, tmp_path / "mine")


def test_a_manifest_is_its_report_with_the_manifests_host_facts() -> None:
    arm = import_recipe_manifest(MANIFEST)
    assert arm.source == "recipe-bench-1:2026-10-10-karmic-kraken-r6d-tp4.json"
    assert arm.host_facts is not None
    assert arm.host_facts.shown()["nvidia_driver"] == "580.178.04"
    assert arm.points["decode/prose-c1"].summary("step_ms") is not None


def test_compare_against_a_manifest_shows_both_sides_facts_and_per_step_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code = main(["bench", "compare", str(_my_arm(tmp_path)), str(MANIFEST), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 1, "r6 did not measure the 1M prefill r6d did: lost, as for any candidate"
    assert "this side: mine: mine (probes.facts of mine)" in err
    assert "other side: baseline-2026-10-10-karmic-kraken-r6d: dgx1, dgx2, dgx3, dgx4" in err
    # The r6 report names its image, the manifest's report r6d's: not one release.
    assert "The sides ran different releases" in err
    # The recipe's own figures (the reports' step_ms means), per step and with their interval.
    assert "decode/prose-c1 step_ms: 31.786 here, 31.586 there, +0.6 % [-0.2, +1.5]" in err
    assert "what this comparison cannot prove:" in err
    assert "No A/A ledger covers the other cluster" in err
    cross = json.loads((out / "cross-cluster.json").read_text())
    facts = {row["fact"]: row for row in cross["facts"]}
    assert (facts["page size"]["new"], facts["page size"]["old"]) == ("4096", "65536")
    assert facts["page size"]["same"] is False
    assert facts["memory_saver.version"] == {
        "fact": "memory_saver.version", "new": "not recorded", "old": "0.2.0", "same": None,
    }  # fmt: skip
    assert facts["NVIDIA driver"]["new"] == "unread (exited 127: not found)"
    assert facts["NVIDIA driver"]["old"] == "580.178.04"


def test_a_session_without_host_facts_adds_nothing() -> None:
    """Two reports of one cluster carry no facts: the comparison is the usual one, alone."""
    new, old = import_recipe_report(R6_TP4), import_recipe_manifest(MANIFEST)
    old = old.model_copy(update={"host_facts": None})
    assert cross_cluster(compare_arms([new], [old]), [new], [old]) is None


def test_a_manifest_whose_report_is_not_beside_it_names_the_key_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    alone = tmp_path / MANIFEST.name
    shutil.copy(MANIFEST, alone)
    assert main(["bench", "compare", str(_my_arm(tmp_path)), str(alone)]) == 2
    err = capsys.readouterr().err
    assert f"{alone}: benchmark_reference: " in err
    assert "2026-10-10-karmic-kraken-r6d-tp4.json is not beside the manifest" in err


def test_bench_run_takes_the_host_facts_one_way_and_from_a_cluster_that_declares_some(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Both refusals come before any request is sent (the URL answers nothing), exit 2."""
    run = ["bench", "run", "http://127.0.0.1:9", "--suite", "single-stream", "--out", str(tmp_path)]
    assert main([*run, "-c", "local", "--facts", str(MANIFEST)]) == 2
    assert "--facts: give --cluster or --facts, not both" in capsys.readouterr().err
    bare = tmp_path / "bare.yaml"
    bare.write_text(f"extends: {ROOT / 'config' / 'local.yaml'}\nset:\n  probes:\n    facts: []\n")
    assert main([*run, "-c", str(bare)]) == 2
    assert f"{bare}: probes.facts: declares no host facts to read" in capsys.readouterr().err


def test_a_step_row_speaks_only_when_its_interval_is_clear_of_zero() -> None:
    def row(pct: float, low: float, high: float) -> StepRow:
        return StepRow(point="single/c1", metric="engine_cpu_ms", new_mean=1.0, old_mean=1.1,
                       welch=Change(pct=pct, low=low, high=high))  # fmt: skip

    assert step_line(row(-9.1, -10.0, -8.2)).endswith(": this side spends less per step")
    assert step_line(row(-0.5, -1.0, +0.1)).endswith("[-1.0, +0.1]")
    alone = StepRow(point="single/c1", metric="tpot_p50_ms", new_mean=14.1, old_mean=14.0,
                    welch=None)  # fmt: skip
    assert step_line(alone) == (
        "  single/c1 tpot_p50_ms: 14.100 here, 14.000 there, no interval (n < 2)"
    )


def test_a_ledger_given_is_not_taken_for_the_gap_between_clusters() -> None:
    new, old = import_recipe_report(R6_TP4), import_recipe_manifest(MANIFEST)
    lines = caveats([new], [old], ledger_gaps=4)
    assert not any("No A/A ledger" in line for line in lines)
    assert any(line.startswith("The A/A ledger given (4 sessions)") for line in lines)
