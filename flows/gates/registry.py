"""The gates of a qualification, in the order they run: the one list the flow and the CLI read.

A gate earns its place by its position: later gates may read earlier ones' results (cold boots
reads the determinism hashes) and a failure stops the loop, so cheaper and more basic proofs run
first. Everything that names the gates (stages, the record's index and README, compare, verify,
the plan) loops over this list.
"""

from __future__ import annotations

from typing import Any

from flows.gates.base import Gate
from flows.gates.benchmark.runner import BENCHMARK
from flows.gates.cold_boots.runner import COLD_BOOTS
from flows.gates.determinism.runner import DETERMINISM
from flows.gates.release_tests.runner import RELEASE_TESTS

REGISTRY: tuple[Gate[Any, Any], ...] = (RELEASE_TESTS, DETERMINISM, COLD_BOOTS, BENCHMARK)
GATES: tuple[str, ...] = tuple(gate.name for gate in REGISTRY)
BY_NAME: dict[str, Gate[Any, Any]] = {gate.name: gate for gate in REGISTRY}
