"""The wait for a decision: its timeout ends in a logged, named state, and a second terminal
finds the server the waiting qualification polls.

No Prefect server is started: the pause is replaced where it is called, and the "embedded server"
is a loopback HTTP server answering /api/health like Prefect's.
"""

from __future__ import annotations

import http.server
import json
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from flows.errors import PromotionError
from flows.pipeline import embedded
from flows.pipeline.embedded import SERVERS_DIR, advertised, running_backend
from flows.promotion import decision, paused, promote
from flows.promotion.decision import decide_promotion, no_decision, pause_timeout_s
from flows.promotion.paused import Decision
from flows.promotion.store import read_log, read_pointer
from flows.spec.release import Promotion, Release, load_release
from tests.support.promotion_records import DIGEST, GATE_NAMES, stage


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _release(project: Path, timeout_s: float) -> Release:
    release = load_release(project / "releases/r1.yaml")
    return release.model_copy(update={"promotion": Promotion(timeout_s=timeout_s)})


def test_the_pause_lasts_whole_seconds_and_at_least_one(project: Path) -> None:
    assert pause_timeout_s(_release(project, 0.2)) == 1
    assert pause_timeout_s(_release(project, 5)) == 5
    assert pause_timeout_s(_release(project, 5.1)) == 6


def test_no_decision_names_the_timeout_and_keeps_the_record(project: Path) -> None:
    record = project / "experiments/2026-12-02-r1"
    entry, message = no_decision(_release(project, 3), "releases/r1.yaml", record, 3)
    assert (entry.action, entry.release) == ("no-decision", "r1")
    assert entry.record == "experiments/2026-12-02-r1"
    assert entry.detail == "no decision within 3 s (promotion.timeout_s)"
    assert message.startswith("r1: qualified, but no decision within 3 s")
    assert "sparkgate promote releases/r1.yaml" in message


def test_a_pause_that_times_out_is_logged_and_raised(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from prefect.exceptions import FlowPauseTimeout  # noqa: PLC0415

    asked: list[int] = []

    def pause(**kwargs: object) -> None:
        asked.append(int(str(kwargs["timeout"])))
        raise FlowPauseTimeout("Flow run was paused and never resumed.")

    monkeypatch.setattr(decision, "pause_flow_run", pause)
    record = project / "experiments/2026-12-02-r1"
    with pytest.raises(PromotionError, match="no decision within 2 s"):
        decide_promotion("releases/r1.yaml", _release(project, 1.5), record, wait=True, say=print)
    assert asked == [2]
    log = read_log(project)
    assert [(e.action, e.record) for e in log] == [("no-decision", "experiments/2026-12-02-r1")]


def test_no_wait_asks_nobody_and_logs_nothing(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(decision, "pause_flow_run", _never_called)
    record = project / "experiments/2026-12-02-r1"
    said = decide_promotion("r1", _release(project, 1), record, wait=False, say=print)
    assert said == decision.AWAITING
    assert read_log(project) == []


def _never_called(**_kwargs: object) -> None:
    raise AssertionError("paused although --no-wait")


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/api/health" else 404)
        self.end_headers()
        self.wfile.write(b"true")

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def live_server() -> Iterator[str]:
    """A loopback server that answers /api/health like a running Prefect server; its API URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/api"
    server.shutdown()
    server.server_close()


def _advertise(folder: Path, pid: int, url: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{pid}.url").write_text(url + "\n")


def test_a_second_terminal_uses_the_live_embedded_server(
    tmp_path: Path, live_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from prefect.settings import get_current_settings  # noqa: PLC0415

    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    _advertise(tmp_path, 1, f"http://127.0.0.1:{_closed_port()}/api")  # a dead one
    _advertise(tmp_path, 2, live_server)
    assert len(advertised(tmp_path)) == 2
    with running_backend(tmp_path) as url:
        assert url == live_server
        assert get_current_settings().api.url == live_server


def test_without_a_running_qualification_nothing_is_started(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setattr(embedded, "servers_dir", lambda: project / SERVERS_DIR)
    monkeypatch.setattr(paused, "served_dir", lambda: project / paused.SERVED_DIR)
    with running_backend() as url:
        assert url is None
    answer = Decision(decision="approve", by="alice", reason="")
    with pytest.raises(PromotionError) as refused:
        paused.resume_paused("r1", answer)
    said = str(refused.value)
    assert "no `sparkgate qualify` of this project runs here" in said
    assert "PREFECT_API_URL=" in said  # how to point at a qualification on a Prefect server


def test_a_qualification_on_a_configured_server_is_found_without_prefect_api_url(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`qualify` with PREFECT_API_URL leaves the server's URL; `approve` in a terminal without
    it asks that server (here a closed port: the refusal names the URL it tried)."""
    monkeypatch.setattr(embedded, "servers_dir", lambda: project / SERVERS_DIR)
    monkeypatch.setattr(paused, "served_dir", lambda: project / paused.SERVED_DIR)
    served = f"http://127.0.0.1:{_closed_port()}/api"
    answer = Decision(decision="approve", by="alice", reason="")
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    with paused.served_by(served), pytest.raises(PromotionError) as refused:
        paused.resume_paused("r1", answer)
    assert f"could not reach the Prefect API at {served}" in str(refused.value)
    assert paused.served_urls() == []  # gone with the qualification


def test_a_configured_server_is_used_as_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")
    with running_backend(tmp_path) as url:
        assert url == "http://127.0.0.1:9/api"


def test_an_approval_promotes_on_the_cluster_the_record_qualified_on(
    project: Path, write_record: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The waiting qualification ran on `beta`: its approval moves beta's pointer, no other."""
    record = write_record("r1", stages={name: stage(name) for name in GATE_NAMES})
    document = json.loads((record / "record.json").read_text())
    (record / "record.json").write_text(json.dumps({**document, "cluster_name": "beta"}))
    monkeypatch.setattr(promote, "build_release", lambda *_a, **_k: SimpleNamespace(digest=DIGEST))
    answer = Decision(decision="approve", by="alice", reason="ok")
    monkeypatch.setattr(decision, "pause_flow_run", lambda **_k: answer)
    said = decide_promotion(
        str(project / "releases/r1.yaml"), _release(project, 5), record, wait=True, say=print
    )
    assert said == "promoted by alice"
    beta = read_pointer(project, "beta")
    assert beta is not None
    assert beta.current.release == "r1"
    assert read_pointer(project, "local") is None
    assert [(e.action, e.cluster) for e in read_log(project)] == [("promoted", "beta")]


def test_a_timeout_names_the_cluster_to_decide_for_later(
    project: Path, write_record: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from prefect.exceptions import FlowPauseTimeout  # noqa: PLC0415

    record = write_record("r1", stages={name: stage(name) for name in GATE_NAMES})
    document = json.loads((record / "record.json").read_text())
    (record / "record.json").write_text(json.dumps({**document, "cluster_name": "beta"}))

    def pause(**_kwargs: object) -> None:
        raise FlowPauseTimeout("Flow run was paused and never resumed.")

    monkeypatch.setattr(decision, "pause_flow_run", pause)
    with pytest.raises(PromotionError, match=r"sparkgate promote releases/r1\.yaml -c beta"):
        decide_promotion("releases/r1.yaml", _release(project, 1), record, wait=True, say=print)
    assert [(e.action, e.cluster) for e in read_log(project)] == [("no-decision", "beta")]


def _two_shapes(write_record: Callable[..., Path], *, shown_digest: str, other_digest: str) -> Path:
    """r1 qualified on a TP3 triangle (the record the form shows) and, later, on a TP4 ring.

    The ring's record is the newest of the release, so "the latest record of any shape" is the
    ring's; only the triangle's was shown.
    """
    passing = {name: stage(name) for name in GATE_NAMES}
    shown = write_record(
        "r1", name="2026-12-02-r1", shape="tp3-triangle", stages=passing, digest=shown_digest
    )
    write_record("r1", name="2026-12-03-r1", shape="tp4-ring", stages=passing, digest=other_digest)
    return shown


def _approve_shown(
    project: Path, shown: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[str], Callable[[], str]]:
    """Approve the paused qualification of `shown`; (the forms' descriptions, the decision)."""
    monkeypatch.setattr(promote, "build_release", lambda *_a, **_k: SimpleNamespace(digest=DIGEST))
    forms: list[str] = []

    def pause(**kwargs: object) -> Decision:
        forms.append(str(getattr(kwargs["wait_for_input"], "_description", "")))
        return Decision(decision="approve", by="alice", reason="as shown")

    monkeypatch.setattr(decision, "pause_flow_run", pause)
    release_file = str(project / "releases/r1.yaml")
    return forms, lambda: decide_promotion(
        release_file, _release(project, 5), shown, wait=True, say=print
    )


def test_an_approval_promotes_the_record_the_form_showed(
    project: Path, write_record: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The newer record on another shape fails the build check; the shown one passes and is
    the one promoted (the record was looked up again before: the ring's, refused)."""
    shown = _two_shapes(write_record, shown_digest=DIGEST, other_digest="b" * 64)
    forms, decide = _approve_shown(project, shown, monkeypatch)
    assert decide() == "promoted by alice"
    assert len(forms) == 1
    assert f"`{shown}`" in forms[0]
    pointer = read_pointer(project)
    assert pointer is not None
    assert pointer.current.record == "experiments/2026-12-02-r1", "not the record shown"
    assert [(e.action, e.record) for e in read_log(project)] == [
        ("promoted", "experiments/2026-12-02-r1")
    ]


def test_an_approval_never_promotes_on_a_record_it_did_not_show(
    project: Path, write_record: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shown record qualified another build than the one a deploy would run: refused, by
    that record's name, although the newer record on the other shape would pass."""
    shown = _two_shapes(write_record, shown_digest="b" * 64, other_digest=DIGEST)
    _forms, decide = _approve_shown(project, shown, monkeypatch)
    with pytest.raises(PromotionError, match=r"record 2026-12-02-r1 qualified build bbbbbbbbbbbb"):
        decide()
    assert read_pointer(project) is None
    assert read_log(project) == []


def test_an_approval_of_a_record_the_form_could_not_show_promotes_nothing(
    project: Path, write_record: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The form showed only a path (its record unreadable): no other record is promoted."""
    write_record("r1", stages={name: stage(name) for name in GATE_NAMES})  # a passing one exists
    unreadable = project / "experiments/2026-12-04-r1"
    unreadable.mkdir()
    (unreadable / "record.json").write_text("{not json")
    forms, decide = _approve_shown(project, unreadable, monkeypatch)
    with pytest.raises(PromotionError, match="could not be read, so the form showed nothing"):
        decide()
    assert "### Promote r1?\n\n- **Record:**" in forms[0]
    assert read_pointer(project) is None
