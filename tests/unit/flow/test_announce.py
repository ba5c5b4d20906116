"""An embedded qualification's own announcements (`flows.pipeline.announce`), with a real
loopback receiver: the Paused post comes before the prompt (which stays last), once; the end is
posted with the record's link; a post that fails is a warning, never an error; and `sparkgate
notify` without a server keeps the webhook for the project, refusing a private address unless
--allow-private."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from flows.cli import main
from flows.errors import SpecError
from flows.pipeline.announce import (
    Announcer,
    Webhook,
    load_webhook,
    post,
    save_webhook,
    webhook_file,
)
from tests.support.net import free_port
from tests.support.webhook import Receiver

TAGS = ["cluster:local", "previous:r1", "release:r2", "shape:tp2-local"]
COMMANDS = ("sparkgate approve r2 -c local", "sparkgate reject r2 -c local")


class Seen:
    """An observer that keeps what it was told, in order."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def started(self, stage: str) -> None:
        self.events.append(f"started {stage}")

    def progressed(self, what: str, done: int, total: int) -> None:
        self.events.append(f"progressed {what} {done}/{total}")

    def note(self, line: str) -> None:
        self.events.append(f"note {line}")

    def finished(self, stage: str, status: str, detail: str = "") -> None:
        self.events.append(f"finished {stage} {status} {detail}")

    def waiting(self, prompt: str) -> None:
        self.events.append(f"waiting {prompt}")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private Prefect home; the environment `prefect_environment()` changes is put back."""
    saved = dict(os.environ)
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect"))
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    yield tmp_path / "prefect"
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as running:
        yield running


def _announcer(hook: Webhook, seen: Seen, warned: list[str], tmp_path: Path) -> Announcer:
    return Announcer(
        seen, hook, run="qualify r2 on local (tp2-local)", tags=TAGS, commands=COMMANDS,
        experiments=tmp_path / "experiments", warn=warned.append,
    )  # fmt: skip


def test_a_pause_is_posted_once_before_the_prompt_and_the_end_with_its_link(
    tmp_path: Path, receiver: Receiver
) -> None:
    seen, warned = Seen(), []
    record = tmp_path / "experiments/2026-12-06-r2"
    announcer = _announcer(Webhook(url=receiver.url, allow_private=True), seen, warned, tmp_path)
    announcer.finished("record", "passed", str(record))
    announcer.waiting("r2 waits for your decision")
    announcer.waiting("the benchmark of r2 was inconclusive")  # a second line: no second post
    announcer.ended("Failed", "r2: qualified, but no decision\nwithin 5 s")
    assert seen.events == [
        f"finished record passed {record}",
        "waiting r2 waits for your decision",
        "waiting the benchmark of r2 was inconclusive",
    ]
    assert warned == []
    paused, failed = receiver.bodies
    assert paused["state"] == "Paused"
    assert paused["message"] == (
        "r2 passed, waiting for a decision: sparkgate approve r2 -c local | "
        "sparkgate reject r2 -c local --reason TEXT"
    )  # the record cannot be read here: no verdict, no headline
    assert (paused["release"], paused["cluster"], paused["tags"]) == ("r2", "local", TAGS)
    assert paused["url"] == failed["url"] == record.resolve().as_uri()
    assert failed["state"] == "Failed"
    assert failed["message"] == "r2: qualified, but no decision within 5 s"


def test_a_crash_before_the_record_links_the_experiments_folder(
    tmp_path: Path, receiver: Receiver
) -> None:
    warned: list[str] = []
    announcer = _announcer(Webhook(url=receiver.url, allow_private=True), Seen(), warned, tmp_path)
    announcer.ended("Crashed", "")
    (body,) = receiver.bodies
    assert body["message"] == "r2 crashed"
    assert body["url"] == (tmp_path / "experiments").resolve().as_uri()


def test_a_post_that_fails_is_a_warning_before_the_prompt(tmp_path: Path) -> None:
    seen, warned = Seen(), []
    gone = Webhook(url=f"http://user:secret@127.0.0.1:{free_port()}/hook", allow_private=True)
    announcer = _announcer(gone, seen, warned, tmp_path)
    announcer.waiting("r2 waits for your decision")
    announcer.ended("Failed", "r2 failed at determinism")
    assert seen.events[-1] == "waiting r2 waits for your decision"
    assert seen.events[0].startswith("note notify: could not post Paused to "), seen.events
    assert len(warned) == 1, warned
    assert warned[0].startswith("notify: could not post Failed to "), warned
    assert "secret" not in " ".join(seen.events + warned)


def test_a_private_address_is_not_posted_to_without_allow_private() -> None:
    hook = Webhook(url="http://127.0.0.1:9/hook")
    from flows.pipeline.announce import Notice  # noqa: PLC0415

    notice = Notice(run="r", release="r2", cluster="local", tags=[], state="Failed", verdict="",
                    benchmark="", message="m", url="file:///x")  # fmt: skip
    assert "not a public address" in str(post(hook, notice))


def test_notify_without_a_server_keeps_the_webhook_for_embedded_runs(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["notify", "http://127.0.0.1:9/hook", "--allow-private"]) == 0
    said = capsys.readouterr().err
    assert "embedded mode" in said
    assert "record's folder" in said
    assert webhook_file() == home / "sparkgate-notify.json"
    assert load_webhook() == Webhook(url="http://127.0.0.1:9/hook", allow_private=True)
    assert stat.S_IMODE(webhook_file().stat().st_mode) == 0o600


def test_notify_without_a_server_refuses_a_private_address(home: Path) -> None:
    assert main(["notify", "http://10.0.0.1/hook"]) == 2
    assert load_webhook() is None


def test_a_saved_webhook_edited_into_another_shape_is_refused(home: Path) -> None:
    save_webhook(Webhook(url="https://hooks.example.org/x"))
    webhook_file().write_text('{"address": "x"}')
    with pytest.raises(SpecError, match="not a saved webhook"):
        load_webhook()
