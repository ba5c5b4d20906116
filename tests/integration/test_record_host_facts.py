"""A real qualification keeps the host facts its preflight read, for `bench compare` later.

The smallest qualification that publishes a record (one short determinism gate, sparkgate's
embedded Prefect) on a private two-node local cluster: its record holds `host-facts.json`, each
node's value of every `probes.facts` entry of config/local.yaml, hashed like every record file.
"""

from __future__ import annotations

import pytest

from flows.bench.hosts import FACTS_FILE, read_host_facts
from flows.record import read_record, verify
from tests.support.overlays import SMALLEST_GATES
from tests.support.project import Project, ProjectKind, projects

pytestmark = [
    pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900),
    projects(ProjectKind("factstest", server=False)),
]  # fmt: skip


def test_a_qualified_record_keeps_the_host_facts_preflight_read(project: Project) -> None:
    r1 = project.release("r1", "releases/r1.yaml", **SMALLEST_GATES)
    done = project.qualify(r1)
    assert done.returncode == 0, done.stdout + done.stderr
    folder = next((project.root / "experiments").glob("*-r1"))
    facts = read_host_facts(folder)
    assert (facts.cluster, facts.source) == ("factstest", "preflight")
    assert set(facts.nodes) == {"factstest0", "factstest1"}
    for values in facts.nodes.values():
        assert {"page size", "kernel"} <= set(values)
        assert values["kernel"]
    record = read_record(folder)
    assert FACTS_FILE in {entry.path for entry in record.extras}
    assert verify(folder) == []
