"""Host facts: read from preflight's copy or a recipe manifest, lined up by name across sides."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flows.bench.hosts import (
    ALL_HOSTS,
    NOT_RECORDED,
    FactsFileError,
    HostFacts,
    read_host_facts,
    side_by_side,
)

# A copy of ../shared/data/recipe-bench/baseline-2026-10-10-karmic-kraken-r6d.json: the recipe's
# r6d release manifest, whose `hosts:` section is the published cluster's host facts.
MANIFEST = (
    Path(__file__).resolve().parent
    / "data"
    / "recipe-bench"
    / "baseline-2026-10-10-karmic-kraken-r6d.json"
)


def _ours(kernel_n1: str = "7.0.0-1019-nvidia-64k") -> HostFacts:
    return HostFacts(
        cluster="mine",
        source="preflight",
        nodes={
            "n0": {"page size": 4096.0, "kernel": "7.0.0-1019-nvidia-64k", "NVIDIA driver": None},
            "n1": {"page size": 4096.0, "kernel": kernel_n1, "NVIDIA driver": None},
        },
        errors={"n0": {"NVIDIA driver": "exited 127: nvidia-smi: not found"}},
    )


def test_the_manifest_hosts_are_the_published_clusters_facts() -> None:
    facts = read_host_facts(MANIFEST)
    assert facts.cluster == "dgx1, dgx2, dgx3, dgx4"
    assert facts.source == "recipe manifest baseline-2026-10-10-karmic-kraken-r6d.json"
    shown = facts.shown()
    assert shown["nvidia_driver"] == "580.178.04"
    assert shown["page_size"] == "65536"
    assert shown["memory_saver.version"] == "0.2.0"
    assert shown["memory_policy.thp"] == "never"
    assert list(facts.nodes) == [ALL_HOSTS]


def test_side_by_side_matches_names_loosely_and_says_not_recorded() -> None:
    rows = {row.fact: row for row in side_by_side(_ours(), read_host_facts(MANIFEST))}
    assert (rows["page size"].new, rows["page size"].old, rows["page size"].same) == (
        "4096",
        "65536",
        False,
    )
    driver = rows["NVIDIA driver"]
    assert driver.old == "580.178.04"
    assert driver.new.startswith("n0: unread (exited 127")  # n1 has no reason kept
    assert rows["memory_saver.version"].new == NOT_RECORDED
    assert rows["memory_saver.version"].same is None
    assert rows["kernel"].same is False  # the manifest adds "with kho=off" to the release


def test_nodes_that_disagree_are_each_shown() -> None:
    shown = _ours(kernel_n1="6.8.0").shown()
    assert shown["kernel"] == "n0: 7.0.0-1019-nvidia-64k; n1: 6.8.0"
    assert shown["page size"] == "4096"


def test_a_record_folder_or_facts_file_round_trips(tmp_path: Path) -> None:
    (tmp_path / "host-facts.json").write_text(_ours().model_dump_json())
    assert read_host_facts(tmp_path) == _ours()


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{", "x.json:1: not JSON"),
        ("[]", "x.json: expected host facts"),
        ('{"kind": "host-facts", "cluster": "c"}', "x.json: source: Field required"),
        ('{"schema_version": 1}', "x.json: kind: expected host facts"),
        ('{"hosts": [1]}', "x.json: hosts: expected a mapping"),
    ],
)
def test_bad_facts_files_name_the_file_and_key_and_exit_2(
    tmp_path: Path, text: str, says: str
) -> None:
    file = tmp_path / "x.json"
    file.write_text(text)
    with pytest.raises(FactsFileError) as refused:
        read_host_facts(file)
    assert says in str(refused.value)
    assert refused.value.exit_code == 2
    assert json.loads(MANIFEST.read_text())["hosts"]["page_size"] == 65536
