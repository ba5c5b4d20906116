"""Fault: `promote -c` with a 300-character name printed an OSError traceback (a file name the
system cannot even look up, ENAMETOOLONG, raised by Path.is_file). Every command now answers a
name too long as bad input, exit 2 and one line, wherever the name is first used."""

from __future__ import annotations

import pytest

from flows.cli import main

LONG = "a" * 300


@pytest.mark.parametrize(
    "argv",
    [
        ["promote", "releases/r1.yaml", "-c", LONG],
        ["promote", LONG, "-c", "local"],
        ["promote", "releases/r1.yaml", "-c", f"{LONG}.yaml"],
        ["validate", f"{LONG}.yaml"],
        ["replay", f"{LONG}.log"],
        ["bench", "compare", LONG, LONG],
    ],
    ids=["promote-cluster", "promote-release", "promote-cluster-file", "validate", "replay",
         "bench-compare"],
)  # fmt: skip
def test_a_name_too_long_to_look_up_is_bad_input(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    printed = capsys.readouterr()
    assert "Traceback" not in printed.err
    reasons = ("too long", "no release", "no cluster")
    assert any(reason in printed.err for reason in reasons), printed.err
