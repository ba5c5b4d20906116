"""A release's benchmark suites load with the release: a missing or broken one is refused before
anything starts (it used to surface at the benchmark gate, after every earlier gate)."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.cli import main
from flows.errors import SpecError
from flows.spec.release import load_release

ROOT = Path(__file__).resolve().parents[3]


def _release(tmp_path: Path, suite: str, *, enabled: bool = True) -> Path:
    """r2 copied beside its previous, naming `suite` (the benchmark on or off)."""
    releases = tmp_path / "releases"
    releases.mkdir(exist_ok=True)
    (releases / "r1.yaml").write_text((ROOT / "releases" / "r1.yaml").read_text())
    text = (ROOT / "releases" / "r2.yaml").read_text().replace("suite: release\n", suite)
    if not enabled:
        text = text.replace("  benchmark:\n", "  benchmark:\n    enabled: false\n")
    file = releases / "r2.yaml"
    file.write_text(
        text.replace("../engine", str(ROOT / "engine")).replace(
            "../config/", str(ROOT / "config") + "/"
        )
    )
    return file


def test_a_suite_nobody_can_find_is_an_error_at_the_release_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = _release(tmp_path, "suite: [release, nosuch]\n")
    with pytest.raises(SpecError, match=r"gates\.benchmark\.suite: no suite 'nosuch'") as caught:
        load_release(file)
    assert caught.value.file == str(file)
    assert caught.value.line is not None
    assert main(["validate", str(file)]) == 2
    assert "no suite 'nosuch'" in capsys.readouterr().err


def test_a_broken_suite_is_reported_in_its_own_file(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: suite\nname: broken\nsamples: 0\nworkloads: []\n")
    file = _release(tmp_path, f"suite: {broken}\n")
    with pytest.raises(SpecError) as caught:
        load_release(file)
    assert caught.value.file == str(broken)


def test_suites_that_do_not_combine_are_an_error_at_the_release_key(tmp_path: Path) -> None:
    twin = tmp_path / "release.yaml"
    twin.write_text((ROOT / "config" / "suites" / "single-stream.yaml").read_text())
    twin.write_text(twin.read_text().replace("name: single-stream", "name: release"))
    file = _release(tmp_path, f"suite: [release, {twin}]\n")
    with pytest.raises(SpecError, match=r"gates\.benchmark\.suite: benchmark suites named twice"):
        load_release(file)


def test_a_disabled_benchmark_names_no_suite_that_must_exist(tmp_path: Path) -> None:
    assert load_release(_release(tmp_path, "suite: nosuch\n", enabled=False)).name == "r2"
