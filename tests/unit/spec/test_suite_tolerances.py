"""A suite states per metric the tolerance its cluster resolves; the release's is the default."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.bench.policy import suite_rules
from flows.cli import main
from flows.errors import SpecError
from flows.spec.gate_policy import GatePolicy
from flows.spec.load import load_model
from flows.spec.suite import Suite, combine
from flows.spec.suites import load_suites

ROOT = Path(__file__).resolve().parents[3]


def _suite(name: str = "tiny", **extra: object) -> Suite:
    return Suite.model_validate({"name": name, **extra, "workloads": [
        {"kind": "step_grid", "name": "step", "concurrency": [1], "context": [128]},
        {"kind": "prefill", "name": "prefill", "depths": [512],
         "gate": {"tolerance": 0.2}},
        {"kind": "prefix", "name": "prefix", "gate": {"tolerances": {"engine_cpu_ms": 0.3}}},
    ]})  # fmt: skip


def _policy(suite: Suite, **release: float) -> GatePolicy:
    return GatePolicy.of_settings(None, release).with_suite(
        suite_rules(suite.model_dump(mode="json"))
    )


def test_the_suites_tolerance_per_metric_wins_over_the_releases() -> None:
    policy = _policy(_suite(tolerances={"engine_cpu_ms": 0.15}), engine_cpu_ms=0.05)
    assert policy.tolerance_at("step/grid", "engine_cpu_ms", 3.0) == pytest.approx(15.0)
    # a metric the suite names nothing for: the release's own, else its `tolerance`
    assert policy.tolerance_at("step/grid", "engine_step_ms", 3.0) == 3.0
    # a workload's own tolerance wins on its points, its per-metric one over that
    assert policy.tolerance_at("prefill/512", "engine_cpu_ms", 3.0) == pytest.approx(20.0)
    assert policy.tolerance_at("prefix/2048", "engine_cpu_ms", 3.0) == pytest.approx(30.0)


def test_without_suite_tolerances_the_release_decides_as_before() -> None:
    policy = _policy(_suite(), engine_cpu_ms=0.05)
    assert policy.tolerance_at("step/grid", "engine_cpu_ms", 3.0) == pytest.approx(5.0)
    assert policy.tolerance_at("step/grid", "engine_step_ms", 3.0) == 3.0


def test_combined_suites_keep_each_suites_tolerances_on_its_own_points() -> None:
    combined = combine([_suite("a", tolerances={"engine_cpu_ms": 0.15}), _suite("b")])
    policy = _policy(combined)
    assert policy.tolerance_at("a:step/grid", "engine_cpu_ms", 3.0) == pytest.approx(15.0)
    assert policy.tolerance_at("b:step/grid", "engine_cpu_ms", 3.0) == 3.0
    assert policy.tolerance_at("a:prefill/512", "engine_cpu_ms", 3.0) == pytest.approx(20.0)


def test_the_bundled_local_suite_judges_engine_cpu_at_15_percent() -> None:
    suite = load_suites(["release"])
    assert suite.tolerances == {"engine_cpu_ms": 0.15}
    assert _policy(suite).tolerance_at("step/grid", "engine_cpu_ms", 3.0) == pytest.approx(15.0)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("tolerances: {engine_cpu_ms: 1.5}\n", "tolerances.engine_cpu_ms"),
        ("tolerances: {cpu: 0.1}\n", "tolerances.cpu"),
    ],
)
def test_a_bad_suite_tolerance_names_file_line_and_key(tmp_path: Path, text: str, key: str) -> None:
    file = tmp_path / "bad.yaml"
    file.write_text(
        "kind: suite\nname: bad\n" + text
        + "workloads: [{kind: step_grid, name: step, concurrency: [1], context: [128]}]\n"
    )  # fmt: skip
    with pytest.raises(SpecError) as caught:
        load_model(file, Suite)
    assert caught.value.file == str(file)
    assert caught.value.line == 3
    assert caught.value.key == key
    assert main(["validate", str(file)]) == 2
