"""Attack: secrets on command lines slipped past the argv redaction of --plan, render and the
record: `-H 'Authorization: Bearer ...'`, a secret flag whose value starts with a dash, a token
inside an `sh -c` string, `https://user:password@host`, and an API key in `engine.serve_args`
(render redacted it, the record's spec dump did not). One set of rules (flows/secrets.py) now
reads every command line and every list of strings in a spec dump, and the plan's every step.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from flows.cli import main
from flows.commands.cluster import load_cluster
from flows.record.writer import open_record
from flows.secrets import Secrets
from flows.spec.release import load_release
from tests.support.overlays import ROOT, cluster_overlay, overlay

VALUES = {
    "dash": "-dash-led-key-1",
    "equals": "hf_equals_value_2",
    "bearer": "bearer-token-value-3",
    "url": "url-password-value-4",
    "shell": "shell-held-key-5",
    "shell-bearer": "shell-bearer-value-6",
}
SERVE_ARGS = [
    "--api-key", VALUES["dash"],
    f"--hf-token={VALUES['equals']}",
    "-H", f"Authorization: Bearer {VALUES['bearer']}",
    "--download-dir", f"https://user:{VALUES['url']}@example.org/models",
]  # fmt: skip
BUILD = [
    "sh", "-c",
    (f"vllm-build --api-key {VALUES['shell']} && "
     f"curl -H 'Authorization: Bearer {VALUES['shell-bearer']}' https://example.org/x"),
]  # fmt: skip


@pytest.fixture
def specs(tmp_path: Path) -> tuple[Path, Path]:
    release = overlay(
        tmp_path / "releases" / "r1.yaml", "releases/r1.yaml",
        engine={"serve_args": SERVE_ARGS},
    )  # fmt: skip
    cluster = cluster_overlay(tmp_path / "cluster.yaml", "argvtest", tmp_path)
    return release, cluster


def _leaks(text: str) -> list[str]:
    return [name for name, value in VALUES.items() if value in text]


@pytest.mark.parametrize(
    ("argv", "shown"),
    [
        (["--api-key", "-starts-with-a-dash"], ["--api-key", "<redacted>"]),
        (["-H", "Authorization: Bearer abcdefgh"], ["-H", "Authorization: <redacted>"]),
        (["-H", "X-Api-Key: abcdefgh"], ["-H", "X-Api-Key: <redacted>"]),
        (["sh", "-c", "serve --api-key abcdefgh --port 1"], ["sh", "-c", "serve --api-key <redacted> --port 1"]),  # noqa: E501
        (["sh", "-c", "export HF_TOKEN='a b c d'; run"], ["sh", "-c", "export HF_TOKEN=<redacted>; run"]),  # noqa: E501
        (["pip", "https://me:pa55word@host/x"], ["pip", "https://me:<redacted>@host/x"]),
        (["--header=Authorization: Basic dXNlcjpwYXNz"], ["--header=Authorization: <redacted>"]),
        (["--max-num-batched-tokens", "8192", "--long-prefill-token-threshold", "64"], None),
        (["--api-key", "{env:ENGINE_KEY}"], None),
    ],
    ids=["dash-value", "auth-header", "key-header", "sh-c", "sh-c-quoted", "url", "header-flag",
         "token-counts", "reference"],
)  # fmt: skip
def test_every_form_of_a_secret_on_a_command_line_is_redacted(
    argv: list[str], shown: list[str] | None
) -> None:
    assert Secrets().argv(argv) == (argv if shown is None else shown)


def test_render_holds_none_of_the_argv_secrets(
    specs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    release, cluster = specs
    assert main(["render", str(release), "-c", str(cluster), "--json"]) == 0
    assert main(["render", str(release), "-c", str(cluster)]) == 0
    printed = capsys.readouterr()
    assert _leaks(printed.out + printed.err) == []


def test_the_plan_holds_none_of_the_argv_secrets(
    specs: tuple[Path, Path],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SPARKGATE_ROOT", str(tmp_path))
    monkeypatch.setenv("SPARKGATE_STATE_DIR", str(tmp_path / ".sparkgate"))
    example = ROOT / "examples" / "spark-ds41f"
    built = overlay(  # the recipe's command build, on a docker cluster
        tmp_path / "example" / "r6y.yaml", example / "releases" / "r6y.yaml",
        build={"command": BUILD}, engine={"serve_args": SERVE_ARGS},
    )  # fmt: skip
    overlay(tmp_path / "example" / "r6x.yaml", example / "releases" / "r6x.yaml")
    for release, cluster in (specs, (built, example / "clusters" / "tp3-triangle.yaml")):
        assert main(["qualify", str(release), "-c", str(cluster), "--plan", "--json"]) == 0
        printed = capsys.readouterr()
        assert _leaks(printed.out + printed.err) == [], release
        assert "<redacted>" in printed.out


def test_the_record_holds_none_of_the_argv_secrets(
    specs: tuple[Path, Path], tmp_path: Path
) -> None:
    release, cluster = specs
    spec = load_release(release)
    writer = open_record(
        tmp_path / "experiments", spec, build_digest="sha256:" + "0" * 64,
        cluster=load_cluster(str(cluster)), previous=None,
    )  # fmt: skip
    text = (writer.path / "record.json").read_text()
    assert _leaks(text) == []
    assert json.loads(text)["release"]["engine"]["serve_args"][:2] == ["--api-key", "<redacted>"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("line", ["a" * 1_000_000, "a." * 500_000, "-a " * 300_000])
def test_redaction_is_linear_in_the_text(line: str) -> None:
    """A 1 MB log line (a base64 blob) went through a pattern that restarted at every letter:
    minutes for one line of a record's log."""
    found = Secrets(values=("a-secret-value-of-a-test",))
    started = time.perf_counter()
    assert found.text(line) == line
    assert found.argv([line]) == [line]
    assert time.perf_counter() - started < 10
