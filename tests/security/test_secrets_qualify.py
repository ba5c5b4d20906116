"""Attack: a release whose env holds `HF_TOKEN: hf_...` was qualified and its token landed in
record.json (release dump, launch plans), in evidence and in the state folder, and records are
meant to be committed. A real, trimmed qualification on the local cluster now leaves the value
nowhere but the release file itself; a `{env:NAME}` reference is kept as written."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from flows.record import read_record
from tests.support.overlays import overlay
from tests.support.paths import ROOT
from tests.support.project import TRIMMED_GATES, Project

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1200)]
LITERAL = "hf_secret_value_of_a_qualify_test"
FROM_ENV = "api_key_value_only_in_the_environment"


def _holding(value: str, *folders: Path) -> list[str]:
    """`grep -rlF value` over folders (binary files too): the files that hold the value."""
    existing = [str(folder) for folder in folders if folder.exists()]
    done = subprocess.run(
        ["grep", "-rlaF", "--", value, *existing], capture_output=True, text=True, check=False
    )
    assert done.returncode in (0, 1), done.stderr
    return done.stdout.splitlines()


def test_a_record_holds_no_secret(tmp_path: Path) -> None:
    project = Project(tmp_path, "sectest")
    project.env.update({"SPARKGATE_TEST_API_KEY": FROM_ENV, "SSH_AUTH_SOCK": "/tmp/ssh-x/agent.1"})
    release = overlay(
        tmp_path / "releases" / "r1.yaml", "releases/r1.yaml",
        gates=TRIMMED_GATES,
        engine={"env": {"HF_TOKEN": LITERAL, "SOME_SERVICE_KEY": "{env:SPARKGATE_TEST_API_KEY}"}},
    )  # fmt: skip
    done = project.run(
        "qualify", str(release), "-c", str(project.cluster), "--no-wait", timeout=900
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert LITERAL not in done.stdout + done.stderr
    records = sorted(p for p in (tmp_path / "experiments").iterdir() if p.is_dir())
    assert len(records) == 1
    record = read_record(records[0])
    assert record.release["engine"]["env"]["HF_TOKEN"] == "<redacted>"
    assert record.release["engine"]["env"]["SOME_SERVICE_KEY"] == "{env:SPARKGATE_TEST_API_KEY}"
    # the record, the Prefect home, rank workdirs, the session files and evidence in the state
    searched = [tmp_path / "experiments", tmp_path / "prefect", tmp_path / "n0", tmp_path / "n1"]
    searched += [ROOT / ".sparkgate" / "clusters", ROOT / ".sparkgate" / "evidence"]
    for value in (LITERAL, FROM_ENV):
        assert _holding(value, *searched) == []
