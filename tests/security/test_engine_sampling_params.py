"""Attack: extreme sampling parameters. `temperature: 5e-324` used to yield NaN probabilities
and kill the engine thread (the process exited); now tiny temperatures sample at the minimum,
non-finite or overflowing numbers are a 400 naming the parameter, and the engine serves on.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sparkengine.launch import LocalCluster

from .engine_server import assert_serving, completion, request, running_engine

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_engine(tmp_path_factory.mktemp("sampling")) as cluster:
        cluster.wait_ready()
        yield cluster


@pytest.mark.parametrize(
    "fields",
    [
        {"temperature": 5e-324},
        {"temperature": 1e-300, "top_p": 5e-324},
        {"temperature": 2, "top_p": 1e-300, "seed": 2**200},
    ],
    ids=["denormal-temperature", "tiny-temperature-tiny-top-p", "huge-seed"],
)
def test_extreme_but_valid_sampling_params_generate(
    engine: LocalCluster, fields: dict[str, object]
) -> None:
    status, body = request(engine, "POST", "/v1/completions", completion(**fields))
    assert status == 200, body
    assert body["usage"]["completion_tokens"] >= 1
    assert_serving(engine)


@pytest.mark.parametrize(
    ("raw_value", "param"),
    [
        ("NaN", "temperature"),
        ("Infinity", "temperature"),
        ("-Infinity", "temperature"),
        ("1e400", "temperature"),
        ("1" + "0" * 400, "temperature"),
        ("NaN", "top_p"),
        ("-1e-300", "top_p"),
    ],
)
def test_non_finite_sampling_params_are_a_400_naming_the_param(
    engine: LocalCluster, raw_value: str, param: str
) -> None:
    raw = f'{{"model": "sparkengine", "prompt": "Hello", "max_tokens": 4, "{param}": {raw_value}}}'
    status, body = request(engine, "POST", "/v1/completions", raw=raw.encode())
    assert status == 400, body
    assert body["error"]["param"] == param
    assert "finite number" in body["error"]["message"] or "(0, 1]" in body["error"]["message"]
    assert_serving(engine)
