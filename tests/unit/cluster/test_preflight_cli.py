"""`sparkgate doctor`: a table on stderr or JSON on stdout; ERROR exits 1, WARN exits 0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flows.cli import main
from tests.support.net import free_port

ENGINE = Path(__file__).resolve().parents[3] / "config" / "engines" / "sparkengine.yaml"


def cluster_file(tmp_path: Path, port: int, check: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(
        f"""kind: cluster
name: doctortest
shape: tp1-local
transport: {{kind: local}}
runtime: {{kind: process}}
ports: {{api: {port}}}
preflight: [{check}]
engine: {{extends: {ENGINE}}}
nodes: [{{name: a, rank: 0, head: true, address: 127.0.0.1, workdir: '{tmp_path}'}}]
"""
    )
    return path


def test_doctor_json_and_warn_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    check = "{name: odd, argv: [echo, hi], expect: bye, severity: WARN}"
    path = cluster_file(tmp_path, free_port(), check)
    assert main(["doctor", "--cluster", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    statuses = {line["check"]: line["status"] for line in report["results"]}
    assert statuses["odd"] == "WARN"
    assert statuses["reachable"] == "OK"


def test_doctor_error_exits_1_with_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    check = "{name: must match, argv: [echo, hi], expect: bye}"
    path = cluster_file(tmp_path, free_port(), check)
    assert main(["doctor", "--cluster", str(path)]) == 1
    err = capsys.readouterr().err
    assert "preflight of doctortest" in err
    assert "does not match /bye/" in err
