"""Announce an embedded qualification that waits for a person, failed or crashed: the qualifying
process posts to the webhook itself.

An embedded run's Prefect server lives inside one `sparkgate qualify` and runs no automations,
so `sparkgate notify URL` without a server keeps the webhook in the project's Prefect home
(`webhook_file()`), and an embedded `qualify` posts the body a server's automation posts
(`flows.pipeline.notify`, the same fields, checked in tests/unit/flow/test_notify_payload.py):
on Paused (the verdict, the commands that decide, the benchmark headline), Failed (a failed
gate's verdict, a refusal) and Crashed (an exception in the flow, Ctrl-C or SIGTERM; `kill -9`
ends the process before it can say anything). Its `url` is the record's folder as a
file:// link, since the embedded server's UI ends with the process. A post that fails is a
warning, never the run's failure. Nothing here runs for a run on a configured server: there the
server's automation announces it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import httpx
from pydantic import BaseModel, ConfigDict, ValidationError

from flows.errors import SpecError
from flows.fileio import PRIVATE_MODE, write_text
from flows.lines import LineSink
from flows.pipeline.events import Forwarder
from flows.pipeline.inputs import QualificationInputs
from flows.pipeline.notify import WAITING, url_problem
from flows.pipeline.run_label import run_tags, run_title
from flows.record import read_record
from flows.record.tables import headline
from flows.secrets import Secrets
from flows.settings import prefect_home, project_root
from flows.stages import StageObserver

WEBHOOK_FILE = "sparkgate-notify.json"
POST_TIMEOUT_S = 10.0


class Webhook(BaseModel):
    """Where an embedded qualification posts (`sparkgate notify URL` without a server)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str
    allow_private: bool = False


class Notice(BaseModel):
    """The webhook's JSON body: the fields a server's automation renders, in the same order."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: Literal["sparkgate"] = "sparkgate"
    run: str
    release: str
    cluster: str
    tags: list[str]
    state: str
    verdict: str
    benchmark: str
    message: str
    url: str


def webhook_file() -> Path:
    """The project's saved webhook, in its Prefect home (the embedded server's home: call after
    `flows.settings.prefect_environment()`)."""
    return prefect_home() / WEBHOOK_FILE


def save_webhook(hook: Webhook) -> Path:
    """Keep `hook` for this project's embedded runs (owner-only: a URL can hold a token)."""
    path = webhook_file()
    write_text(path, hook.model_dump_json(indent=2) + "\n", mode=PRIVATE_MODE)
    return path


def load_webhook() -> Webhook | None:
    """The saved webhook, or None; a file edited into another shape is refused (exit 2)."""
    path = webhook_file()
    try:
        return Webhook.model_validate_json(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValidationError) as error:
        raise SpecError(
            f"not a saved webhook: {error}".splitlines()[0],
            file=path,
            expected="the file `sparkgate notify URL` writes; run it again",
        ) from None


def waiting_message(
    release: str, verdict: str, approve: str, reject: str, benchmark: str = ""
) -> str:
    """A pause's one line, as the server's template words it: the verdict and the commands that
    decide (approving an inconclusive benchmark needs a reason), then the headline."""
    accept = ' --accept-inconclusive "REASON"' if verdict.startswith("inconclusive") else ""
    said = f"{release} {verdict or 'passed'}, {WAITING}: {approve}{accept} | {reject} --reason TEXT"
    return with_headline(said, benchmark)


def with_headline(message: str, benchmark: str) -> str:
    """`message`, then the benchmark's headline when there is one."""
    return f"{message}; benchmark: {benchmark}" if benchmark else message


def record_facts(record: str | None) -> tuple[str, str]:
    """The verdict and the benchmark headline of a published record ("" when unknown)."""
    if not record:
        return "", ""
    try:
        read = read_record(Path(record))
    except Exception:  # noqa: BLE001 - a notice loses detail, never the run
        return "", ""
    bench = read.stages.get("benchmark")
    return read.verdict or "", headline("benchmark", bench.summary) if bench is not None else ""


def post(hook: Webhook, notice: Notice) -> str | None:
    """POST the notice; None when delivered, else why not (no redirects are followed: the
    address checked is the one posted to)."""
    problem = None if hook.allow_private else url_problem(hook.url)
    if problem:
        return problem
    try:
        answer = httpx.post(hook.url, json=notice.model_dump(mode="json"), timeout=POST_TIMEOUT_S)
        answer.raise_for_status()
    except httpx.HTTPError as error:
        return f"{type(error).__name__}: {error}"
    return None


class Announcer(Forwarder):
    """A `StageObserver` in front of the command's own: forwards every event, notes the record
    when it is published, and posts when the run waits for a person; the command tells it how
    the run ended (`ended`)."""

    def __init__(
        self,
        observer: StageObserver,
        hook: Webhook,
        *,
        run: str,
        tags: list[str],
        commands: tuple[str, str],
        experiments: Path,
        warn: LineSink,
    ) -> None:
        super().__init__(observer)
        self.hook = hook
        self.run = run
        self.tags = tags
        self.commands = commands
        self.experiments = experiments
        self.warn = warn
        self.record: str | None = None
        self._paused = False

    def finished(self, stage: str, status: str, detail: str = "") -> None:
        """Forwarded; the published record's path is kept (the `record` stage's detail)."""
        if stage == "record" and status == "passed" and detail:
            self.record = detail
        super().finished(stage, status, detail)

    def waiting(self, prompt: str) -> None:
        """Post Paused once (a warning if it fails), then show the prompt: it stays last."""
        if not self._paused:
            self._paused = True
            verdict, bench = record_facts(self.record)
            approve, reject = self.commands
            message = waiting_message(self._tag("release"), verdict, approve, reject, bench)
            self._send("Paused", message, verdict, bench, self.observer.note)
        self.observer.waiting(prompt)

    def ended(self, state: str, message: str, record: str | None = None) -> None:
        """Post how the run ended (Failed, Crashed, Inconclusive); the message made one line."""
        self.record = record or self.record
        verdict, bench = record_facts(self.record)
        said = " ".join(message.split()) or f"{self._tag('release')} {state.lower()}"
        self._send(state, with_headline(said, bench), verdict, bench, self.warn)

    def _send(self, state: str, message: str, verdict: str, bench: str, warn: LineSink) -> None:
        where = Path(self.record) if self.record else self.experiments
        notice = Notice(
            run=self.run, release=self._tag("release"), cluster=self._tag("cluster"),
            tags=self.tags, state=state, verdict=verdict, benchmark=bench, message=message,
            url=where.resolve().as_uri(),
        )  # fmt: skip
        failed = post(self.hook, notice)
        if failed:
            shown = Secrets().text(self.hook.url)
            warn(f"notify: could not post {state} to {shown}: {Secrets().text(failed)}")

    def _tag(self, name: str) -> str:
        prefix = f"{name}:"
        return next((tag[len(prefix) :] for tag in self.tags if tag.startswith(prefix)), "")


def embedded_announcer(
    observer: StageObserver, inputs: QualificationInputs, *, warn: LineSink
) -> Announcer | None:
    """An `Announcer` in front of `observer` when this run is embedded and `notify` saved a
    webhook for the project; else None (a server's automation announces a served run)."""
    from flows.pipeline.embedded import embedded_url  # noqa: PLC0415
    from flows.promotion.paused import decision_commands  # noqa: PLC0415 - imports prefect

    if embedded_url() is None:
        return None
    hook = load_webhook()
    if hook is None:
        return None
    release, cluster = inputs.release, inputs.cluster
    return Announcer(
        observer, hook, run=run_title("qualify", release, cluster),
        tags=sorted(run_tags(release, inputs.previous, cluster)),
        commands=decision_commands(
            str(inputs.release_file.resolve()), str(inputs.cluster_file.resolve())
        ),
        experiments=project_root() / "experiments", warn=warn,
    )  # fmt: skip
