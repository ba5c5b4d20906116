"""The registry is the one ordered list of gates, and every entry has the plug-in shape."""

from __future__ import annotations

import typing
from pathlib import Path

from flows.errors import boot_failure_reason
from flows.gates.registry import GATES, REGISTRY
from flows.gates.summaries import GateSummary
from flows.pipeline.stages import GATES as STAGE_GATES
from flows.spec.release import Gates
from flows.stages import STAGES


def test_every_list_of_gates_is_the_registry_order() -> None:
    assert GATES == ("release_tests", "determinism", "cold_boots", "benchmark")
    assert STAGE_GATES == GATES
    assert [stage for stage in STAGES if stage in GATES] == list(GATES)


def test_each_gate_names_its_settings_and_a_summary_of_the_union() -> None:
    union = typing.get_args(typing.get_args(GateSummary)[0])
    for gate in REGISTRY:
        assert Gates.model_fields[gate.name].annotation is gate.settings_model
        assert gate.summary_model in union
        assert gate.summary_model.model_fields["gate"].default == gate.name
        assert gate.title


def test_a_failed_boot_is_named_once_by_the_gate() -> None:
    said = "boot failed: node local1 rank 1: exited 70 during boot"
    assert boot_failure_reason("boot failed", said) == said
    assert boot_failure_reason("an arm failed to boot", said) == f"an arm failed to boot: {said}"


def test_the_record_and_the_plan_name_no_gate_package() -> None:
    """Each gate owns its story: `flows.record` and the plan loop over the registry instead."""
    flows = Path(__file__).resolve().parents[3] / "flows"
    sources = [*sorted((flows / "record").glob("*.py")), flows / "pipeline" / "plan.py"]
    named = [
        f"{path.relative_to(flows.parent)} imports flows.gates.{gate.name}"
        for path in sources
        for gate in REGISTRY
        if f"flows.gates.{gate.name}" in path.read_text()
    ]
    assert named == []
