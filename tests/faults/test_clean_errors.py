"""Faults: hostile or damaged input files end in a message and exit 2 (or a clean verdict),
never a traceback. Each test is one finding of issue 15 ("Tracebacks instead of exit 2", "No
size cap on YAML", "A split multi-byte character in a rank log loses the `ready` event").
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from flows.cli import main
from flows.cluster.boot.timeline import LogReader
from flows.cluster.boot.watch import _read_new, _Watch
from flows.record.verify import verify
from flows.record.writer import RecordWriter
from flows.spec.engine import EngineProfile
from flows.spec.load import load_model
from tests.support.records import (  # noqa: F401 - fixtures used by name
    cluster,
    published,
    release_r2,
)

ROOT = Path(__file__).resolve().parents[2]
MAX_BYTES = 1 << 20  # the cap on spec files


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(args)
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert "Traceback" not in text
    return code, text


def test_deeply_nested_yaml_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """1.2 KB of `[[[[...` used to raise RecursionError out of the YAML composer."""
    spec = tmp_path / "deep.yaml"
    spec.write_text("kind: release\nname: " + "[" * 600 + "]" * 600 + "\n")
    code, text = run_cli(["validate", str(spec)], capsys)
    assert code == 2
    assert f"{spec}" in text
    assert "nested" in text


def test_moderately_nested_yaml_is_refused_by_depth(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "deep.yaml"
    spec.write_text("kind: release\nname: " + "[" * 100 + "]" * 100 + "\n")
    code, text = run_cli(["validate", str(spec)], capsys)
    assert code == 2
    assert "nested more than" in text


def test_huge_yaml_is_refused_before_parsing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """5.4 MB of YAML took 21.5 s and 454 MB before anything refused it."""
    spec = tmp_path / "huge.yaml"
    spec.write_text("kind: release\nitems:\n" + "  - aaaaaaaaaaaaaaaaaaaaaaaa\n" * 220_000)
    assert spec.stat().st_size > 5 * MAX_BYTES
    started = time.monotonic()
    code, text = run_cli(["validate", str(spec)], capsys)
    assert code == 2
    assert "too large" in text
    assert time.monotonic() - started < 2


@pytest.mark.parametrize("content", ["[1, 2]", '"text"', "null", "[" * 100_000, "\udcff"])
def test_verify_on_a_non_object_result_json_is_a_clean_verdict(
    content: str,
    published: Callable[..., RecordWriter],  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = published().path
    result = path / "release_tests" / "result.json"
    result.write_bytes(content.encode("utf-8", "surrogateescape"))
    problems = verify(path)
    assert "release_tests: release_tests/result.json unreadable" in "\n".join(problems)
    code, text = run_cli(["verify", str(path)], capsys)
    assert code == 1
    assert "unreadable" in text


@pytest.mark.parametrize("content", ["[1, 2]", "[" * 100_000, "\udcff\udcfe"])
def test_verify_on_a_malformed_record_json_is_a_clean_verdict(
    content: str,
    published: Callable[..., RecordWriter],  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = published().path
    (path / "record.json").write_bytes(content.encode("utf-8", "surrogateescape"))
    assert "not a valid record" in verify(path)[0]
    code, text = run_cli(["verify", str(path)], capsys)
    assert code in {1, 2}
    assert "not a valid record" in text


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"\xff\xfe\x00\x01binary", "not UTF-8"),
        (b'{"label": NaN}', "NaN is not a number"),
        (b'{"label": Infinity}', "Infinity is not a number"),
        (b"[1, 2]", "not a sparkgate arm report"),
        (b"[" * 100_000, "not"),
    ],
)
def test_bench_compare_on_a_bad_arm_json_exits_2(
    content: bytes, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "arm.json"
    bad.write_bytes(content)
    code, text = run_cli(["bench", "compare", str(bad), str(bad)], capsys)
    assert code == 2
    assert str(bad) in text.replace("\n", "")
    assert says in text


class _GrowingLog:
    """A runtime whose read_log behaves like the Docker runtime's: bytes decoded with replace."""

    def __init__(self) -> None:
        self.data = b""

    def read_log(self, handle: Any, offset: int = 0) -> str:
        del handle
        return self.data[offset:].decode(errors="replace")


@pytest.mark.parametrize("split", range(1, 4))
def test_a_split_multibyte_character_does_not_lose_the_ready_event(split: int) -> None:
    profile = load_model(ROOT / "config" / "engines" / "sparkengine.yaml", EngineProfile)
    runtime = _GrowingLog()
    watch = _Watch(handle=object(), reader=LogReader(profile.logs, node="n0", rank=0))  # type: ignore[arg-type]
    seen: list[str] = []
    first = json.dumps({"event": "loaded", "note": "caf\u00e9 \U0001f600"}, ensure_ascii=False)
    ready = json.dumps({"event": "ready", "ts": 1.0})
    data = (first + "\n" + ready + "\n").encode()
    cut = data.index("\U0001f600".encode()) + split  # inside the 4-byte character
    for end in (cut, len(data)):
        runtime.data = data[:end]
        _read_new(runtime, [watch], lambda event: seen.append(event.name))  # type: ignore[arg-type]
    assert seen == ["weights_loaded", "ready"]
    assert watch.offset == len(data)
