"""Prompts are distinct, exact in length and identical across arms; suites load or fail loudly."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.bench.prompts import PromptFactory, corpus
from flows.engine_api.endpoint import parse_prometheus
from flows.errors import SpecError
from flows.spec.load import load_model
from flows.spec.suite import Suite, combine

ROOT = Path(__file__).resolve().parents[3]


def _chars(text: str) -> list[int]:
    return [ord(c) % 97 for c in text]


def _words(text: str) -> list[int]:
    return [hash(w) % 1000 for w in text.split()]


def test_corpus_is_real_python_source() -> None:
    text = corpus()
    assert len(text) > 1_000_000
    assert "def " in text


@pytest.mark.parametrize("tokenize", [_chars, _words])
def test_prompts_have_exact_length_and_differ(tokenize: object) -> None:
    factory = PromptFactory(tokenize=tokenize, seed=0, nonce="n1")  # type: ignore[arg-type]
    a, b = factory.ids("p/0", 300), factory.ids("p/1", 300)
    assert len(a) == len(b) == 300
    assert a != b
    assert factory.text("x", 40)[:17] != factory.text("y", 40)[:17]  # first cache block differs


def test_same_seed_same_passages_in_every_arm_but_never_a_shared_prefix() -> None:
    one = PromptFactory(tokenize=_chars, seed=5, nonce="arm1")
    two = PromptFactory(tokenize=_chars, seed=5, nonce="arm2")
    t1, t2 = one.text("k", 500), two.text("k", 500)
    assert t1.split("\n", 1)[1] == t2.split("\n", 1)[1]
    assert t1[:16] != t2[:16]


def test_a_prompt_key_cannot_be_reused() -> None:
    factory = PromptFactory(tokenize=_chars, seed=0, nonce="n")
    factory.ids("k", 10)
    with pytest.raises(ValueError, match="used twice"):
        factory.ids("k", 10)


@pytest.mark.parametrize(
    "name", ["release-local", "release", "release-tp3", "release-tp4", "single-stream"]
)
def test_bundled_suites_load(name: str) -> None:
    suite = load_model(ROOT / "config" / "suites" / f"{name}.yaml", Suite)
    assert suite.workloads


def test_recipe_sizes() -> None:
    tp4 = load_model(ROOT / "config" / "suites" / "release-tp4.yaml", Suite)
    tp3 = load_model(ROOT / "config" / "suites" / "release-tp3.yaml", Suite)
    sizes = {s.name: {w.kind: w for w in s.workloads if w.name != "sampled"} for s in (tp3, tp4)}
    thread = [32768, 131072, 262144, 500000, 1000000]  # 32K, 128K, 256K, 512K/500K, 1M
    assert sizes["release-tp4"]["prefill"].depths == thread  # type: ignore[union-attr]
    assert sizes["release-tp3"]["prefill"].depths == thread  # type: ignore[union-attr]
    assert sizes["release-tp3"]["poisson"].rate == 0.42  # type: ignore[union-attr]
    assert sizes["release-tp4"]["poisson"].rate == 0.7  # type: ignore[union-attr]
    assert max(sizes["release-tp4"]["closed_loop"].concurrency) == 16  # type: ignore[union-attr]
    assert max(sizes["release-tp3"]["closed_loop"].concurrency) == 8  # type: ignore[union-attr]


def test_recipe_suites_add_the_sampled_points_and_report_poisson_and_sampled_only() -> None:
    """The thread's sampled rows: temperature 1 at 16/8 streams (TP4) and 8 (TP3); top_p 0.95 and
    256 tokens as ds41f:bin/spark suite_sampled. The decode grid stays the stored reports' 10
    (TP4) and 8 (TP3) points: the thread's 20/15/14 shapes are an engine grid no source lists.
    """
    sampled_at = {"release-tp4": [8, 16], "release-tp3": [8]}
    for name, grid in (("release-tp4", [1, 2, 4, 8, 16]), ("release-tp3", [1, 2, 4, 8])):
        suite = load_model(ROOT / "config" / "suites" / f"{name}.yaml", Suite)
        by_name = {w.name: w for w in suite.workloads}
        sampled = by_name["sampled"]
        assert (sampled.temperature, sampled.top_p, sampled.max_tokens) == (1.0, 0.95, 256)
        assert sampled.concurrency == sampled_at[name]  # type: ignore[union-attr]
        assert sampled.gate is False
        assert by_name["poisson"].gate is False
        gated = [w.name for w in suite.workloads if w.gate is not False]
        assert gated == ["streams", "prefill", "step", "prefix"]
        step = by_name["step"]
        assert step.concurrency == grid
        assert step.context == [68, 75]
        assert suite.temperature == 0.0  # every other workload stays greedy


@pytest.mark.parametrize(
    ("body", "line", "key"),
    [
        (
            "  - kind: closed_loop\n    name: s\n    concurrency: [0, 2]\n",
            7,
            "workloads[0].concurrency",
        ),
        ("  - kind: warp\n    name: s\n", 5, "workloads[0].kind"),
        (
            "  - kind: prefill\n    name: p\n    depths: [8]\n    extra: 1\n",
            8,
            "workloads[0].extra",
        ),
        (
            "  - kind: prefill\n    name: p\n    depths: [8]\n  - kind: prefix\n    name: p\n",
            9,
            "workloads[1].name",
        ),
        (
            "  - kind: prefill\n    name: p\n    depths: [8]\n    gate: {metrics: [speed]}\n",
            8,
            "workloads[0].gate.metrics",
        ),
        ("  - kind: prefill\n    name: p\n    depths: [8]\n    gate: false\n", 4, "workloads"),
        (
            "  - kind: prefill\n    name: p\n    depths: [8]\n    temperature: 3\n",
            8,
            "workloads[0].temperature",
        ),
    ],
)
def test_bad_suites_name_file_line_and_key(tmp_path: Path, body: str, line: int, key: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("kind: suite\nname: bad\nsamples: 2\nworkloads:\n" + body)
    with pytest.raises(SpecError) as caught:
        load_model(path, Suite)
    assert f"bad.yaml:{line}: {key}" in str(caught.value)


def test_prometheus_text_is_summed_over_labels() -> None:
    text = '# HELP x\nrunning 2\nhits_total{a="1"} 3\nhits_total{a="2"} 4.5\nbad line\n'
    assert parse_prometheus(text) == {"running": 2.0, "hits_total": 7.5}


def test_a_gate_with_several_suites_runs_each_with_named_points(tmp_path: Path) -> None:
    """`benchmark.suite: [release-local, single-stream]`: one arm, both suites, no clashes."""
    from flows.spec.release import BenchmarkGate  # noqa: PLC0415
    from flows.spec.suites import load_suites  # noqa: PLC0415

    alone = load_suites(BenchmarkGate(suite="release-local").suites())
    assert alone == load_model(ROOT / "config" / "suites" / "release-local.yaml", Suite)
    both = load_suites(BenchmarkGate(suite=["release-local", "single-stream"]).suites())
    single = load_model(ROOT / "config" / "suites" / "single-stream.yaml", Suite)
    assert both.name == "release-local+single-stream"
    names = [w.name for w in both.workloads]
    assert names[: len(alone.workloads)] == [f"release-local:{w.name}" for w in alone.workloads]
    assert names[len(alone.workloads) :] == ["single-stream:single"]
    # each workload keeps its own suite's samples; the warm-up is the larger one
    assert both.samples_of(both.workloads[-1]) == single.samples == 5
    assert both.samples_of(both.workloads[0]) == alone.samples == 3
    assert both.warmup == max(alone.warmup, single.warmup)
    with pytest.raises(SpecError, match="suites named twice"):
        combine([alone, alone])
    other = single.model_copy(update={"model": "another"})
    with pytest.raises(SpecError, match="different models"):
        combine([alone, other])


def test_a_release_naming_a_suite_twice_is_refused_with_file_line_and_key(tmp_path: Path) -> None:
    from flows.spec.release import Release  # noqa: PLC0415

    text = (ROOT / "releases" / "r2.yaml").read_text().replace("../", f"{ROOT}/")
    path = tmp_path / "r9.yaml"
    path.write_text(text.replace("suite: release\n", "suite: [release, release]\n"))
    line = 1 + text.splitlines().index("    suite: release")
    with pytest.raises(SpecError) as caught:
        load_model(path, Release)
    assert f"r9.yaml:{line}: gates.benchmark.suite: suites must be unique names" in str(
        caught.value
    )
