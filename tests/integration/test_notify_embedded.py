"""An embedded qualification (no PREFECT_API_URL, the default) announces itself: `sparkgate
notify URL --allow-private` keeps the webhook in the project, and the real `sparkgate qualify`
posts from its own process to a real loopback receiver.

A trimmed r1 on a private two-node cluster pauses for a decision nobody gives within 5 s: it
posts Paused (the verdict and the commands that decide, as they run pasted into the project)
then Failed (no decision), each with a one-line message and a link to the record's folder, the
one link an embedded run has (its server's UI ends with it). A second run, still paused, is
stopped with SIGTERM (as a CI job's timeout or `kill` stops it) and posts Crashed.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest

from tests.support.overlays import overlay
from tests.support.project import TRIMMED_GATES, ProjectKind, PromotionProject, projects
from tests.support.waiting import wait_until
from tests.support.webhook import Receiver

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

CLUSTER = "notifyembedded"
WAIT_S = 5  # promotion.timeout_s of the release that pauses: nobody decides
EMBEDDED = projects(ProjectKind(CLUSTER, PromotionProject, server=False))


def _one_line(body: dict[str, Any]) -> str:
    message = body["message"]
    assert isinstance(message, str), body
    assert message, body
    assert "\n" not in message, body
    return message


def _record_link(project: PromotionProject, body: dict[str, Any]) -> Path:
    """The body's url: a file:// link to a published record of the project."""
    url = body["url"]
    assert isinstance(url, str), body
    assert url.startswith("file://"), body
    folder = Path(unquote(urlsplit(url).path))
    assert folder.parent == (project.root / "experiments").resolve(), body
    assert (folder / "record.json").is_file(), body
    return folder


@EMBEDDED
def test_an_embedded_qualification_posts_its_pause_then_its_failure(
    project: PromotionProject,
) -> None:
    with Receiver() as receiver:
        saved = project.run("notify", receiver.url, "--allow-private")
        assert saved.returncode == 0, saved.stdout + saved.stderr
        assert "embedded mode" in saved.stderr, saved.stderr
        impatient = overlay(
            project.root / "impatient/r1.yaml", "releases/r1.yaml",
            gates=TRIMMED_GATES, promotion={"timeout_s": WAIT_S},
        )  # fmt: skip
        done = project.run("qualify", str(impatient), "-c", str(project.cluster), timeout=600)
        assert done.returncode == 1, done.stdout + done.stderr  # nobody decided
        assert "notify: could not post" not in done.stderr, done.stderr

    paused = receiver.posted("r1", "Paused")
    assert paused is not None, receiver.bodies
    assert (paused["source"], paused["cluster"], paused["verdict"]) == ("sparkgate", CLUSTER,
                                                                        "qualified")  # fmt: skip
    assert paused["run"].startswith(f"qualify r1 on {CLUSTER} ("), paused
    assert {"release:r1", f"cluster:{CLUSTER}"} <= set(paused["tags"])
    assert _one_line(paused) == (
        "r1 qualified, waiting for a decision: sparkgate approve impatient/r1.yaml -c cluster.yaml"
        " | sparkgate reject impatient/r1.yaml -c cluster.yaml --reason TEXT"
    )
    record = _record_link(project, paused)

    failed = receiver.posted("r1", "Failed")
    assert failed is not None, receiver.bodies
    assert "no decision within 5 s" in _one_line(failed), failed
    assert _record_link(project, failed) == record
    assert failed["verdict"] == "qualified", failed
    assert list(failed) == list(paused), "one payload shape"


@EMBEDDED
def test_an_embedded_qualification_stopped_while_it_waits_posts_crashed(
    project: PromotionProject,
) -> None:
    with Receiver() as receiver:
        saved = project.run("notify", receiver.url, "--allow-private")
        assert saved.returncode == 0, saved.stdout + saved.stderr
        waiting = project.start("qualify", str(project.r1), "-c", str(project.cluster))
        try:
            wait_until(lambda: receiver.posted("r1", "Paused"), 600, "the Paused post",
                       interval_s=1, detail=lambda: str(receiver.bodies))  # fmt: skip
            os.kill(waiting.pid, signal.SIGTERM)
            output = waiting.communicate(timeout=120)[0]
        finally:
            if waiting.poll() is None:
                os.killpg(waiting.pid, signal.SIGKILL)
                waiting.wait()
        assert waiting.returncode != 0, output

    crashed = receiver.posted("r1", "Crashed")
    assert crashed is not None, f"{receiver.bodies}\n{output}"
    assert _one_line(crashed) == "r1 interrupted (SIGTERM)", crashed
    _record_link(project, crashed)
