"""Attack: a catastrophic `image_line` regex ran without a time limit (issue 30, med:
"`build.kind: command` ... a catastrophic `image_line` regex passes validate and runs without a
time limit").

`^(a+)+$` against a line of 40 `a`s and a `b` backtracks about 2^40 times: the build stage never
returned. Now the match runs in a child process killed at its time limit, and the build fails
naming the pattern; a long line is not matched at all (an image name sits on a short line).
Before that, `sparkgate validate` refuses such a pattern by its shape (flows/spec/regex_cost.py),
exit 2 naming file, line and key: the runtime limit stays for what is merely slow.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from flows.cluster.build.adopted_image import LINE_LIMIT, tag_from_output, tag_in_time
from flows.errors import BuildError
from flows.spec.regex_cost import backtracking_risk
from tests.support.overlays import ROOT

CATASTROPHIC = r"^(a+)+$"


def test_a_catastrophic_image_line_fails_the_build_in_its_time_limit() -> None:
    output = "building\n" + "a" * 40 + "b\n"
    began = time.monotonic()
    with pytest.raises(BuildError, match=r"image_line /\^\(a\+\)\+\$/ took over 3 s") as raised:
        tag_in_time("node0", CATASTROPHIC, output, seconds=3.0)
    assert time.monotonic() - began < 15
    assert str(raised.value).startswith("node0: ")


def test_a_good_image_line_still_finds_the_last_tag_in_time() -> None:
    output = "built vllm:old\nbuilt vllm-ds41f-kkref:bbbb-r6x\ndone\n"
    assert tag_in_time("node0", r"^built (\S+)$", output) == "vllm-ds41f-kkref:bbbb-r6x"


def test_a_line_longer_than_the_limit_is_not_matched() -> None:
    long_line = "built " + "x" * LINE_LIMIT
    assert tag_from_output(r"^built (\S+)$", f"built vllm:r6x\n{long_line}\n") == "vllm:r6x"


# -- refused at validate time (before: it passed validate and ran at the build stage) ------------

RELEASE = (
    "kind: release\nname: r6x\nprevious: null\n"
    "build: {{kind: command, command: [make, image], image_line: '{pattern}'}}\n"
    "outputs: {{change: changed, reason: first release here}}\n"
    "gates:\n  release_tests: {{classification: {classification}}}\n"
    "  determinism: {{against_previous: false}}\n  benchmark: {{enabled: false}}\n"
)


def _validate(tmp_path: Path, pattern: str) -> subprocess.CompletedProcess[str]:
    spec = tmp_path / "r6x.yaml"
    classification = ROOT / "config" / "release-tests.yaml"
    spec.write_text(RELEASE.format(pattern=pattern, classification=classification))
    return subprocess.run(
        [sys.executable, "-m", "flows", "validate", str(spec)],
        capture_output=True, text=True, timeout=60, cwd=ROOT, check=False,
    )  # fmt: skip


def test_validate_refuses_a_catastrophic_image_line_naming_file_line_and_key(
    tmp_path: Path,
) -> None:
    done = _validate(tmp_path, CATASTROPHIC)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{tmp_path / 'r6x.yaml'}:4: build.image_line: may backtrack without end" in done.stderr
    assert "a repeat inside a repeat" in done.stderr
    assert "Traceback" not in done.stderr


def test_validate_accepts_the_recipe_s_image_line(tmp_path: Path) -> None:
    done = _validate(tmp_path, r"^built (vllm-ds41f-kkref:\S+)$")
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        (r"^(a+)+$", "a repeat inside a repeat"),
        (r"(\w+\s?)+$", "a repeat inside a repeat"),
        (r"(.*a){20}", "a repeat inside a repeat"),
        (r"(a{1,100}){1,100}b", "a repeat inside a repeat"),
        (r"(a|a)*b", "alternatives that can begin with the same character"),
        (r"(ab|a.)*c", "alternatives that can begin with the same character"),
    ],
)
def test_each_shape_that_backtracks_without_end_is_named(pattern: str, why: str) -> None:
    risk = backtracking_risk(pattern)
    assert risk is not None, pattern
    assert why in risk, (pattern, risk)


@pytest.mark.parametrize(
    "pattern",
    [
        r"^built (\S+) sha256:[0-9a-f]+ in ",
        r"^built ((?:[a-z]+/)*[a-z]+:\S+)$",  # each round ends at a `/` it cannot match
        r"(\d{1,3}\.){3}\d{1,3}",
        r"(\w+-)*(\w+)",
        r"(a++)+b",  # possessive: never backtracks
        r"((?>a+))+b",  # atomic group
        r"(foo|bar)+",
    ],
)
def test_patterns_that_split_a_line_one_way_pass(pattern: str) -> None:
    assert backtracking_risk(pattern) is None
