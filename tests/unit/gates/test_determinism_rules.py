"""The determinism gate's pure rules: exact comparison, first difference, hashes, verdicts."""

from __future__ import annotations

import hashlib
import struct

from hypothesis import given
from hypothesis import strategies as st

from flows.gates.determinism.rules import (
    against_previous,
    compare_outputs,
    determinism_verdict,
    scenario_row,
)
from flows.gates.outputs import (
    Output,
    first_difference,
    hashes,
    logprobs_hash,
    matches_reference,
    max_overlap,
    output_from_completion,
    tokens_hash,
    top_token_agreement,
)
from flows.gates.prompts import long_text, named_prompts


def out(prompt: str, tokens: list[int], logprobs: list[float] | None = None) -> Output:
    values = logprobs if logprobs is not None else [-0.5 - i / 8 for i in range(len(tokens))]
    return Output(
        prompt=prompt,
        token_ids=tokens,
        logprobs=list(values),
        top=[[("a", v), ("b", v - 1)] for v in values],
    )


def test_identical_outputs_have_no_difference() -> None:
    assert first_difference(out("p0", [5, 6, 7]), out("p0", [5, 6, 7])) is None


def test_first_differing_token_is_named_with_its_index() -> None:
    found = first_difference(out("p0", [5, 6, 7, 8]), out("p0", [5, 6, 9, 8]))
    assert found is not None
    assert (found.prompt, found.index, found.what) == ("p0", 2, "token")


def test_a_shorter_output_differs_where_it_ends() -> None:
    found = first_difference(out("p0", [5, 6, 7]), out("p0", [5, 6]))
    assert found is not None
    assert (found.index, found.what) == (2, "length")


def test_equal_tokens_with_a_logprob_one_ulp_away_differ() -> None:
    ref = out("p0", [5, 6, 7], [-0.25, -0.5, -0.75])
    nudged = struct.unpack(
        "<d", struct.pack("<q", struct.unpack("<q", struct.pack("<d", -0.5))[0] + 1)
    )[0]
    assert nudged != -0.5
    found = first_difference(ref, out("p0", [5, 6, 7], [-0.25, nudged, -0.75]))
    assert found is not None
    assert (found.index, found.what) == (1, "logprob")


def test_negative_zero_is_not_zero_bit_for_bit() -> None:
    found = first_difference(out("p0", [1], [0.0]), out("p0", [1], [-0.0]))
    assert found is not None
    assert found.what == "logprob"


def test_a_differing_alternative_counts_as_a_logprob_difference() -> None:
    ref = out("p0", [1, 2], [-0.1, -0.2])
    other = ref.model_copy(update={"top": [ref.top[0], [("a", -0.2), ("c", -1.2)]]})
    found = first_difference(ref, other)
    assert found is not None
    assert (found.index, found.what) == (1, "logprob")


def test_hashes_are_sha256_of_little_endian_ids_and_doubles() -> None:
    output = out("p0", [1, 258], [-0.5, -1.0])
    assert tokens_hash(output) == hashlib.sha256(struct.pack("<II", 1, 258)).hexdigest()
    assert logprobs_hash(output) == hashlib.sha256(struct.pack("<dd", -0.5, -1.0)).hexdigest()
    assert hashes([output]) == {
        "p0": {"tokens": tokens_hash(output), "logprobs": logprobs_hash(output)}
    }


@given(
    st.lists(st.integers(0, 2**32 - 1), max_size=20),
    st.lists(st.integers(0, 2**32 - 1), max_size=20),
)
def test_token_hashes_are_equal_exactly_when_tokens_are(a: list[int], b: list[int]) -> None:
    assert (tokens_hash(out("p", a)) == tokens_hash(out("p", b))) == (a == b)


def test_scenario_counts_identical_and_differing_and_names_the_first() -> None:
    reference = {"p0": out("p0", [1, 2, 3]), "p1": out("p1", [4, 5, 6])}
    report = compare_outputs("all_at_once", reference, [out("p0", [1, 2, 3]), out("p1", [4, 9, 6])])
    assert (report.identical, report.differing) == (1, 1)
    first = scenario_row(report).first_difference
    assert first is not None
    assert first.model_dump() == {"prompt": "p1", "index": 1}


def test_a_response_for_an_unknown_prompt_differs() -> None:
    report = compare_outputs("again", {}, [out("p7", [1])])
    assert report.differing == 1


def test_output_from_a_completion_body() -> None:
    body = {
        "choices": [
            {
                "text": "ab",
                "token_ids": [70, 71],
                "logprobs": {
                    "tokens": ["a", "b"],
                    "token_logprobs": [-0.1, -0.2],
                    "top_logprobs": [{"a": -0.1, "x": -3.0}, {"b": -0.2}],
                },
            }
        ],
        "usage": {"prompt_tokens_details": {"cached_tokens": 16}},
    }
    output = output_from_completion("p3", body)
    assert output.token_ids == [70, 71]
    assert output.logprobs == [-0.1, -0.2]
    assert output.top == [[("a", -0.1), ("x", -3.0)], [("b", -0.2)]]
    assert output.cached_tokens == 16


def test_top_token_agreement_counts_positions_up_to_the_longer_output() -> None:
    assert top_token_agreement({"p0": [1, 2, 3, 4]}, {"p0": [1, 2, 9, 4]}) == 0.75
    assert top_token_agreement({"p0": [1, 2]}, {"p0": [1, 2, 3, 4]}) == 0.5
    assert top_token_agreement({"p0": [1]}, {"p1": [1]}) is None


def test_max_overlap_of_staggered_requests() -> None:
    assert max_overlap([(0.0, 1.0), (0.1, 1.1), (0.2, 1.2)]) == 3
    assert max_overlap([(0.0, 0.1), (0.2, 0.3), (0.4, 0.5)]) == 1
    assert max_overlap([(0.0, 0.2), (0.2, 0.4)]) == 1


def test_prompts_are_named_in_order_and_the_long_prompt_is_seeded() -> None:
    prompts = named_prompts(["a", "b"], 8)
    assert [p.id for p in prompts] == ["p0", "p1"]
    assert len(long_text(1500)) == 1500
    assert long_text(1500) == long_text(1500)
    assert long_text(1500, seed=1) != long_text(1500)


def _previous(outputs: list[Output], with_tokens: bool = True) -> dict[str, dict[str, object]]:
    stored: dict[str, dict[str, object]] = {k: dict(v) for k, v in hashes(outputs).items()}
    if with_tokens:
        for o in outputs:
            stored[o.prompt]["token_ids"] = o.token_ids
    return stored


def test_unchanged_release_with_equal_hashes_passes() -> None:
    current = [out("p0", [1, 2]), out("p1", [3, 4])]
    report = against_previous(current, _previous(current), change="unchanged", change_reason=None)
    assert report.mode == "unchanged"
    assert (report.identical, report.total) == (2, 2)
    assert report.passed


def test_unchanged_release_with_a_different_prompt_fails_naming_it() -> None:
    current = [out("p0", [1, 2]), out("p1", [3, 4])]
    before = [out("p0", [1, 2]), out("p1", [3, 5])]
    report = against_previous(
        current, _previous(before), change="unchanged", change_reason=None, previous_name="r1"
    )
    assert not report.passed
    assert report.differing == ["p1"]
    assert "p1" in report.reason
    assert "r1" in report.reason


def test_unchanged_release_with_only_a_logprob_change_fails() -> None:
    current = [out("p0", [1, 2], [-0.5, -0.25])]
    before = [out("p0", [1, 2], [-0.5, -0.2500001])]
    report = against_previous(current, _previous(before), change="unchanged", change_reason=None)
    assert report.differing == ["p0"]


def test_a_prompt_missing_from_the_previous_record_differs() -> None:
    current = [out("p0", [1]), out("long", [2])]
    report = against_previous(
        current, _previous(current[:1]), change="unchanged", change_reason=None
    )
    assert report.differing == ["long"]


def test_changed_release_reports_reason_identical_count_and_agreement() -> None:
    current = [out("p0", [1, 2, 3, 4]), out("p1", [5, 6])]
    before = [out("p0", [1, 2, 9, 4]), out("p1", [5, 6])]
    report = against_previous(
        current, _previous(before), change="changed", change_reason="new sampler"
    )
    assert report.mode == "changed"
    assert report.passed
    assert (report.identical, report.total) == (1, 2)
    assert report.top_token_agreement == 5 / 6
    assert "new sampler" in report.reason


def test_changed_release_without_stored_tokens_has_no_agreement() -> None:
    current = [out("p0", [1, 2])]
    report = against_previous(
        current, _previous(current, with_tokens=False), change="changed", change_reason="x"
    )
    assert report.top_token_agreement is None
    assert report.identical == 1


def test_no_previous_record_or_comparison_off_is_mode_none() -> None:
    current = [out("p0", [1])]
    assert against_previous(current, None, change="unchanged", change_reason=None).mode == "none"
    off = against_previous(
        current, _previous([out("p0", [2])]), change="unchanged", change_reason=None, enabled=False
    )
    assert off.mode == "none"
    assert off.passed


def test_verdict_names_every_differing_prompt_per_scenario() -> None:
    reference = {"p0": out("p0", [1, 2]), "p1": out("p1", [3, 4])}
    bad = compare_outputs("staggered", reference, [out("p0", [1, 9]), out("p1", [9, 4])])
    good = compare_outputs("again", reference, list(reference.values()))
    previous = against_previous(
        list(reference.values()), None, change="unchanged", change_reason=None
    )
    passed, reason = determinism_verdict([good, bad], previous)
    assert not passed
    assert "staggered" in reason
    assert "p0 (token 1)" in reason
    assert "p1 (token 0)" in reason
    assert "again" not in reason


def test_verdict_fails_when_unchanged_outputs_differ_from_previous() -> None:
    reference = {"p0": out("p0", [1, 2])}
    good = compare_outputs("again", reference, list(reference.values()))
    previous = against_previous(
        list(reference.values()), _previous([out("p0", [1, 3])]), change="unchanged",
        change_reason=None, previous_name="r1",
    )  # fmt: skip
    passed, reason = determinism_verdict([good], previous)
    assert not passed
    assert "r1" in reason


def test_verdict_passes_when_everything_matches() -> None:
    reference = {"p0": out("p0", [1, 2])}
    good = compare_outputs("all_at_once", reference, list(reference.values()))
    previous = against_previous(
        list(reference.values()), _previous(list(reference.values())), change="unchanged",
        change_reason=None,
    )  # fmt: skip
    passed, reason = determinism_verdict([good], previous)
    assert passed
    assert "identical" in reason


def test_a_reference_entry_matches_on_both_hashes_and_ignores_extra_keys() -> None:
    output = out("p0", [1, 2], [-0.5, -0.25])
    entry: dict[str, object] = {**hashes([output])["p0"], "token_ids": [1, 2], "prompt": "x"}
    assert matches_reference({"p0": entry}, output)
    assert not matches_reference({"p0": entry}, out("p0", [1, 2], [-0.5, -0.3]))
    assert not matches_reference({"p1": entry}, output)
