"""The Prefect UI as a reviewer sees it, in a real headless Chromium, after a real qualification.

A trimmed r2 against r1 (short suite, three arms, two boot modes) qualifies against `prefect
server start` with its web UI on. Then Chromium (Debian's `chromium` and `chromium-driver`)
opens the pages a reviewer opens: the runs list, filtered by the release tag, shows the run by
its name with its tags; the record artifact shows the verdict table and every plot loads
(natural width above zero) in both of Prefect's UIs (the default one under /v2 and the classic
one); the benchmark artifact shows its table of points and the headline `sparkgate show`
prints for the record. A second test lets a trimmed r1 pause for approval and opens the UI's
Resume form: above the fields it says what is being approved
(verdict, gates, record path), and `sparkgate reject` then ends the wait, the run's state
message the rejection in one line. Screenshots of the pages land in the test's output folder
(printed with -s). Without Chromium the tests skip, and fail under CI=true, which installs it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.common.exceptions import TimeoutException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from flows.gates.benchmark.story import bench_headline
from flows.gates.benchmark.summary import BenchmarkSummary
from flows.record import read_record, verify
from tests.support.prefect_server import Server
from tests.support.project import Project
from tests.support.waiting import wait_until

# a server with its UI, a qualification with a benchmark and a browser: minutes on two cores
pytestmark = [
    pytest.mark.integration, pytest.mark.slow, pytest.mark.prefect_server,
    pytest.mark.timeout(2400),
]  # fmt: skip

CHROMIUM = ("/usr/bin/chromium", "chromium")
CHROMEDRIVER = ("/usr/bin/chromedriver", "chromedriver")
PAGE_S = 180  # a page's data arrive through the API from a server busy on a loaded machine
CLUSTER = "uitest"
# the rendered README in each UI: (path prefix, CSS selector of the markdown's container)
RECORD_VIEWS = {"v2": ("/v2", '[data-testid="markdown-display"]'),
                "v1": ("", ".artifact-data-markdown")}  # fmt: skip
IMAGES = """
const box = document.querySelector(arguments[0]);
if (!box) { return null; }
return Array.from(box.querySelectorAll('img')).map(
    (img) => ({alt: img.getAttribute('alt'), complete: img.complete, width: img.naturalWidth,
               src: (img.getAttribute('src') || '').slice(0, 40)}));
"""
SHOW_PLOTS = "document.querySelector(arguments[0] + ' img').scrollIntoView({block: 'start'});"
PAUSED = {
    "flow_runs": {
        "state": {"type": {"any_": ["PAUSED"]}},
        "tags": {"all_": [f"cluster:{CLUSTER}"]},  # this module's, on the shared server
    }
}
MENU = '[role="menuitem"]'
DIALOG = "const d = document.querySelector('[role=\"dialog\"]'); return d ? d.innerText : '';"
HEADERS = "return Array.from(document.querySelectorAll(arguments[0])).map((c) => c.textContent);"


def _found(names: tuple[str, str]) -> str | None:
    path, command = names
    return path if Path(path).exists() else shutil.which(command)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[WebDriver]:
    """Headless Chromium through chromedriver; skips without them (fails under CI=true)."""
    binary, driver = _found(CHROMIUM), _found(CHROMEDRIVER)
    if binary is None or driver is None:
        why = "needs chromium and chromium-driver (apt-get install chromium chromium-driver)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true installs the browser, yet it is missing: {why}")
        pytest.skip(why)
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--disable-gpu", "--window-size=1400,2200", "--lang=en-US"):  # fmt: skip
        options.add_argument(argument)
    service = Service(executable_path=driver, log_output=str(tmp_path / "chromedriver.log"))
    started = webdriver.Chrome(options=options, service=service)
    started.set_page_load_timeout(PAGE_S)
    try:
        yield started
    finally:
        started.quit()


@pytest.fixture
def server(prefect_api: Server) -> Server:
    """The session's `prefect server start`, which serves its UI (runs told apart by cluster)."""
    return prefect_api


class Pages:
    """Opens UI pages, waits for what they must show, keeps a screenshot of each."""

    def __init__(self, browser: WebDriver, server: Server, shots: Path) -> None:
        self.browser = browser
        self.server = server
        self.shots = shots
        self.current = ""
        shots.mkdir(parents=True, exist_ok=True)

    def open(self, name: str, path: str) -> None:
        self.browser.get(self.server.ui + path)
        self.current = name

    def wait(self, what: str, condition: Callable[[WebDriver], Any]) -> Any:
        """`condition`'s truthy value, or a failure naming `what` with the page's text."""
        try:
            return WebDriverWait(self.browser, PAGE_S, poll_frequency=1).until(condition)
        except TimeoutException:
            self.shoot(f"{self.current}-timeout")
            text = self.browser.execute_script("return document.body.innerText") or ""
            pytest.fail(
                f"{self.current} ({self.browser.current_url}): no {what} within {PAGE_S} s; "
                f"the page shows:\n{str(text)[:3000]}\n{self.server.tails()}"
            )

    def text(self) -> str:
        return str(self.browser.execute_script("return document.body.innerText") or "")

    def shoot(self, name: str) -> Path:
        path = self.shots / f"{name}.png"
        self.browser.save_screenshot(str(path))
        return path


def _qualify(project: Project) -> Path:
    """A trimmed r2 against r1 with a short benchmark; the published record's folder."""
    done = project.qualify(project.short_r2(), timeout=1500)
    # the benchmark decides on this machine's noise: pass, fail or inconclusive (0, 1, 3)
    assert done.returncode in (0, 1, 3), done.stdout + done.stderr
    records = sorted((project.root / "experiments").glob("*-r2"))
    assert len(records) == 1, done.stdout + done.stderr
    return records[0]


def _run_and_artifacts(server: Server) -> tuple[dict[str, Any], dict[str, str]]:
    """The qualification's flow run and its artifacts' ids by key."""
    status, runs = server.post("/flow_runs/filter", {})
    assert status == 200, runs
    named = [run for run in runs if str(run["name"]).startswith(f"qualify r2 on {CLUSTER} (")]
    assert len(named) == 1, [run["name"] for run in runs]
    run = named[0]
    body = {"artifacts": {"flow_run_id": {"any_": [run["id"]]}}}
    status, artifacts = server.post("/artifacts/filter", body)
    assert status == 200, artifacts
    return run, {str(a["key"]): str(a["id"]) for a in artifacts if a.get("key")}


def test_a_reviewer_sees_the_named_run_its_verdict_table_and_every_plot(
    browser: WebDriver, server: Server, tmp_path: Path
) -> None:
    project = Project(tmp_path / "project", CLUSTER)
    project.env["PREFECT_API_URL"] = server.api
    try:
        record_dir = _qualify(project)
    finally:
        project.stop()
    record = read_record(record_dir)
    assert verify(record_dir) == []
    run, artifacts = _run_and_artifacts(server)
    assert {"record-r2", "benchmark-r2"} <= set(artifacts), artifacts
    shots = tmp_path / "screenshots"
    print(f"\nscreenshots: {shots}")
    pages = Pages(browser, server, shots)

    # the runs list, filtered by the release tag, names the run and shows its tags
    tags = sorted(run["tags"])
    assert {"release:r2", "previous:r1", f"cluster:{CLUSTER}"} <= set(tags), tags
    assert any(tag.startswith("shape:") for tag in tags), tags
    pages.open("runs", "/v2/runs?tab=flow-runs&tags=release%3Ar2")
    pages.wait("run named qualify r2", lambda _: run["name"] in pages.text())
    pages.wait(f"tags {tags}", lambda _: all(tag in pages.text() for tag in tags))
    pages.shoot("runs")
    # its page (the header shows the first tags, then "+N"), with its artifacts tab
    pages.open("run", f"/v2/runs/flow-run/{run['id']}")
    pages.wait("run's name and tags", lambda _: run["name"] in pages.text() and all(
        tag in pages.text() for tag in tags[:3]
    ))  # fmt: skip
    assert "Artifacts" in pages.text()
    pages.shoot("run")

    # the record: its verdict table, every plot loaded, in both UIs
    linked = re.findall(r"!\[[^\]]*\]\(([^)\s]+)", (record_dir / "README.md").read_text())
    assert len(linked) >= 2, f"the record links too few plots: {linked}"  # benchmark, boots
    for ui, (prefix, box) in RECORD_VIEWS.items():
        pages.open(f"record-{ui}", f"{prefix}/artifacts/artifact/{artifacts['record-r2']}")

        def verdict_table(_: WebDriver, box: str = box) -> bool:
            heads = set(_strip(browser.execute_script(HEADERS, f"{box} th")))
            return {"gate", "outcome"} <= heads

        pages.wait("verdict table", verdict_table)
        for gate in record.stages:
            assert gate in pages.text(), f"{gate} missing from the verdict table ({ui})"

        def loaded(_: WebDriver, box: str = box) -> list[dict[str, Any]] | None:
            images = browser.execute_script(IMAGES, box)
            if not images or len(images) < len(linked) or not all(i["complete"] for i in images):
                return None
            return list(images)

        images = pages.wait(f"{len(linked)} loaded plots", loaded)
        browser.execute_script(SHOW_PLOTS, box)
        pages.shoot(f"record-{ui}")
        broken = [image for image in images if image["width"] <= 0]
        assert not broken, f"plots that do not load in the {ui} UI: {json.dumps(broken)}"
        assert len(images) == len(linked), images

    # the benchmark's points as a table
    summary = record.stages["benchmark"].summary_as(BenchmarkSummary)
    assert summary is not None
    pages.open("benchmark", f"/v2/artifacts/artifact/{artifacts['benchmark-r2']}")
    pages.wait(
        "benchmark table",
        lambda _: (
            {"point", "verdict", "95% interval %"}
            <= set(_strip(browser.execute_script(HEADERS, "th")))
        ),
    )
    for point in {row.point for row in summary.points}:
        assert point in pages.text(), f"point {point} missing from the benchmark table"
    # one benchmark headline: the artifact says the words `sparkgate show` prints for the record
    headline = bench_headline(summary)
    shown = project.run("show", record_dir.name, "--raw")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert f"Headline: {headline}." in _words(shown.stdout), shown.stdout
    assert headline in _words(pages.text()), pages.text()
    pages.shoot("benchmark")
    assert sorted(path.name for path in shots.glob("*.png")) == [
        "benchmark.png", "record-v1.png", "record-v2.png", "run.png", "runs.png",
    ]  # fmt: skip


def _words(text: str) -> str:
    """`text` with every run of whitespace one space (a page or a terminal may wrap lines)."""
    return " ".join(text.split())


def _strip(cells: object) -> list[str]:
    return [str(cell).strip() for cell in cells] if isinstance(cells, list) else []


def test_the_browser_starts(browser: WebDriver) -> None:
    """The browser itself works (a fast check that CI's Chromium and driver match)."""
    try:
        browser.get("data:text/html,<title>ok</title>")
    except WebDriverException as error:  # pragma: no cover - a broken browser install
        pytest.fail(f"Chromium does not start: {error}")
    assert browser.title == "ok"


def _click(browser: WebDriver, selector: str, words: str) -> bool:
    """Click (as a pointer does) the first `selector` whose text or aria-label is `words`."""
    for element in browser.find_elements(By.CSS_SELECTOR, selector):
        if words in (element.text.strip(), element.get_attribute("aria-label")):
            element.click()
            return True
    return False


def _paused(server: Server, waiting: subprocess.Popen[str]) -> dict[str, Any]:
    def paused() -> dict[str, Any] | None:
        assert waiting.poll() is None, f"qualify ended early:\n{waiting.communicate()[0]}"
        status, runs = server.post("/flow_runs/filter", PAUSED)
        assert status == 200, runs
        return dict(runs[0]) if runs else None

    return wait_until(paused, 900, "the qualification to pause", interval_s=2, detail=server.tails)


def test_the_resume_form_says_what_is_being_approved(
    browser: WebDriver, server: Server, tmp_path: Path
) -> None:
    project = Project(tmp_path / "project", CLUSTER)
    project.env["PREFECT_API_URL"] = server.api
    release = project.release("r1", "releases/r1.yaml")
    waiting = project.start("qualify", str(release), "-c", str(project.cluster))
    try:
        run = _paused(server, waiting)
        shots = tmp_path / "screenshots"
        print(f"\nscreenshots: {shots}")
        pages = Pages(browser, server, shots)
        pages.open("paused", f"/v2/runs/flow-run/{run['id']}")
        pages.wait("the run's menu", lambda _: _click(browser, "button", "Open menu"))
        pages.wait("Resume in the menu", lambda _: _click(browser, MENU, "Resume"))

        def form(_: WebDriver) -> str:
            text = str(browser.execute_script(DIALOG) or "")
            return text if "Promote r1?" in text and "Record:" in text else ""

        shown = pages.wait("the Resume form's description", form)
        pages.shoot("resume-form")
        assert "Verdict: qualified" in shown, shown
        assert "Gates: release_tests skipped, determinism passed" in shown, shown
        records = list((project.root / "experiments").glob("*-r1"))
        assert len(records) == 1, records
        assert str(records[0]) in shown, shown
        assert "sparkgate approve r1" in shown, shown
        assert "By" in shown  # the form itself: who decides
        rejected = project.run("reject", "r1", "--by", "browser-test", "--reason", "ui check")
        assert rejected.returncode == 0, rejected.stdout + rejected.stderr
        assert waiting.wait(timeout=300) == 1
        state = server.get(f"/flow_runs/{run['id']}")["state"]
        # what the run's page shows: the rejection in one line, not "encountered an exception"
        assert (state["type"], state["message"]) == (
            "FAILED", "r1 rejected by browser-test: ui check",
        ), state  # fmt: skip
    finally:
        if waiting.poll() is None:
            os.killpg(waiting.pid, signal.SIGINT)
            waiting.wait(timeout=120)
        if waiting.stdout is not None:
            waiting.stdout.close()
        project.stop()
