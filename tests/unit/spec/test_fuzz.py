"""Arbitrary YAML never escapes as anything but a clean SpecError or a valid model."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flows.errors import SpecError
from flows.spec.kinds import load_spec
from flows.spec.load import load_document

ROOT = Path(__file__).resolve().parents[3]
SEEDS = ["config/local.yaml", "config/examples/tp4-ring.yaml", "releases/r2.yaml"]
WORDS = ["kind", "cluster", "release", "engine", "extends", "set", "nodes", "rank", "head", "name"]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True),
    st.text(max_size=12),
    st.sampled_from([*WORDS, "{rank}", "{cache.x}", "tp9-x", "r1", "extends-me.yaml"]),
)
trees = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(WORDS), st.text(max_size=6)), inner, max_size=5),
    ),
    max_leaves=20,
)
yaml_text = st.one_of(
    st.text(max_size=200),
    st.lists(
        st.sampled_from(
            [
                "kind: cluster\n",
                "kind: release\n",
                "extends: a.yaml\n",
                "set: {name: x}\n",
                "a: &x [1, *x]\n",
                "b: *missing\n",
                "c: !!binary aGk=\n",
                "d: !tag {}\n",
                "? [k]\n: v\n",
                "<<: {kind: engine}\n",
                "e: 2026-02-30\n",
                "\t- x\n",
                "nodes: [{name: a, rank: 0}]\n",
                "---\n",
                "f: 1e999\n",
            ]
        ),
        max_size=6,
    ).map("".join),
)


def check(path: Path) -> None:
    """Either a model, a kind without a model here (None), or a located SpecError."""
    try:
        load_spec(path)
    except SpecError as error:
        problem = error
    else:
        return
    assert problem.file is not None
    assert problem.render().startswith(problem.file)


def seed_data(name: str) -> Any:
    return load_document(ROOT / name).data


def mutate(data: Any, path: list[int], value: Any) -> Any:
    """Replace one value inside `data`, chosen by `path` (indices modulo container size)."""
    if not path or not isinstance(data, dict | list) or not data:
        return value
    result = copy.copy(data)
    if isinstance(result, dict):
        key = sorted(result, key=str)[path[0] % len(result)]
        result[key] = mutate(result[key], path[1:], value)
    else:
        index = path[0] % len(result)
        result[index] = mutate(result[index], path[1:], value)
    return result


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    (tmp_path / "a.yaml").write_text("kind: engine\n", encoding="utf-8")
    return tmp_path / "fuzz.yaml"


@pytest.mark.slow
@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=yaml_text)
def test_arbitrary_text(spec_file: Path, text: str) -> None:
    spec_file.write_text(text, encoding="utf-8")
    check(spec_file)


@pytest.mark.slow
@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(tree=trees)
def test_arbitrary_structures(spec_file: Path, tree: Any) -> None:
    spec_file.write_text(yaml.safe_dump(tree), encoding="utf-8")
    check(spec_file)


@pytest.mark.slow
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    seed=st.sampled_from(SEEDS),
    where=st.lists(st.integers(min_value=0, max_value=50), min_size=1, max_size=5),
    value=trees,
)
def test_mutated_valid_files(spec_file: Path, seed: str, where: list[int], value: Any) -> None:
    data = mutate(seed_data(seed), where, value)
    if isinstance(data, dict) and data.get("kind") == "release":
        data = {**data, "name": "fuzz"}
    spec_file.write_text(yaml.safe_dump(data), encoding="utf-8")
    check(spec_file)
