"""Attack: a catastrophic `image_line` regex ran without a time limit (issue 30, med:
"`build.kind: command` ... a catastrophic `image_line` regex passes validate and runs without a
time limit").

`^(a+)+$` against a line of 40 `a`s and a `b` backtracks about 2^40 times: the build stage never
returned. Now the match runs in a child process killed at its time limit, and the build fails
naming the pattern; a long line is not matched at all (an image name sits on a short line).
"""

from __future__ import annotations

import time

import pytest

from flows.cluster.build.adopted_image import LINE_LIMIT, tag_from_output, tag_in_time
from flows.errors import BuildError

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
