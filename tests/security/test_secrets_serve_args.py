"""Attack: an API key passed on the engine's command line (`engine.serve_args: [--api-key,
VALUE]`) was written in clear into record.json, in the release's spec dump (render and --plan
redacted it). Every list of strings in a spec dump is now read as a command line by the one set
of rules in flows/secrets.py, and every command line's secrets are collected to scrub logs and
evidence. A real qualification with the key in serve_args leaves the value nowhere under
experiments/ or the Prefect home."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from flows.record import read_record
from tests.support.overlays import overlay
from tests.support.project import TRIMMED_GATES, Project

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1200)]
KEY = "sk-serve-args-key-of-a-qualify-test"


def _holding(value: str, *folders: Path) -> list[str]:
    """`grep -rlF value` over folders (binary files too): the files that hold the value."""
    existing = [str(folder) for folder in folders if folder.exists()]
    done = subprocess.run(
        ["grep", "-rlaF", "--", value, *existing], capture_output=True, text=True, check=False
    )
    assert done.returncode in (0, 1), done.stderr
    return done.stdout.splitlines()


def test_an_api_key_in_serve_args_is_nowhere_in_the_record_or_the_prefect_home(
    tmp_path: Path,
) -> None:
    project = Project(tmp_path, "sectest")
    release = overlay(
        tmp_path / "releases" / "r1.yaml", "releases/r1.yaml",
        gates=TRIMMED_GATES, engine={"serve_args": ["--api-key", KEY]},
    )  # fmt: skip
    done = project.run(
        "qualify", str(release), "-c", str(project.cluster), "--no-wait", timeout=900
    )
    # the engine now wants the key, which sparkgate's own clients do not send: gates may fail,
    # what matters here is that the record was written and holds no key
    assert KEY not in done.stdout + done.stderr
    records = sorted(p for p in (tmp_path / "experiments").iterdir() if p.is_dir())
    assert len(records) == 1, done.stdout + done.stderr
    record = read_record(records[0])
    assert record.release["engine"]["serve_args"] == ["--api-key", "<redacted>"]
    assert _holding(KEY, tmp_path / "experiments", tmp_path / "prefect") == []
