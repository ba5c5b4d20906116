"""The recording proxy passes a stream through unchanged and records each exchange, redacted."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from aiohttp import web

from flows.bench.session_file import read_session
from flows.bench.session_proxy import Recorder, make_app, redact_headers
from flows.secrets import REDACTED, Secrets
from tests.support.servers import serving

KEY = "sk-live-0123456789abcdef"
EXTRA = "hunter2-configured-secret"
CHUNKS = [
    {"choices": [{"index": 0, "delta": {"role": "assistant"}}]},
    {"choices": [{"index": 0, "delta": {"content": "hi"}}]},
    {"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 1,
                              "prompt_tokens_details": {"cached_tokens": 8}}},
]  # fmt: skip


def _upstream() -> web.Application:
    """A scripted engine: chat streams SSE, /v1/models answers JSON."""

    async def chat(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for chunk in CHUNKS:
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        return response

    async def models(_request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "m"}]})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    return app


def _post(url: str, body: dict[str, object]) -> bytes:
    request = urllib.request.Request(
        url + "/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return bytes(response.read())


def test_the_proxy_streams_through_and_appends_each_exchange_redacted(tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl"
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": f"my key is {EXTRA}, and {KEY}"}],
        "stream": True,
        "api_key": "abc",
    }
    with serving(_upstream()) as upstream, path.open("x") as out:
        recorder = Recorder(upstream, out, Secrets(frozenset({"X-Team"}), (EXTRA,)))
        recorder.begin("unit")
        with serving(make_app(recorder)) as proxy:
            first = _post(proxy, body)
            assert len(read_session(path).turns) == 1  # on disk as soon as the exchange ended
            second = _post(proxy, body)
            with urllib.request.urlopen(proxy + "/v1/models", timeout=10) as response:
                assert json.loads(response.read())["data"][0]["id"] == "m"  # passed, not recorded
    assert first == second
    assert first.count(b"data: ") == len(CHUNKS) + 1
    assert first.endswith(b"data: [DONE]\n\n")
    text = path.read_text()
    assert KEY not in text
    assert EXTRA not in text
    session = read_session(path)
    assert session.header.note == "unit"
    assert [t.index for t in session.turns] == [0, 1]
    turn = session.turns[1]
    assert turn.path == "/v1/chat/completions"
    assert turn.status == 200
    assert turn.headers["Authorization"] == REDACTED
    assert turn.body["api_key"] == REDACTED
    assert turn.body["messages"] == [
        {"role": "user", "content": f"my key is {REDACTED}, and {REDACTED}"}
    ]
    assert turn.usage["prompt_tokens"] == 12
    assert turn.ttft_s is not None
    assert turn.ttft_s <= turn.duration_s
    assert turn.gap_s >= 0
    assert turn.sent_s >= session.turns[0].sent_s


def test_recorded_headers_drop_connection_headers_and_hide_secret_ones() -> None:
    headers = {"Host": "h", "Cookie": "c=1", "X-Api-Key": "k", "X-Team": "t", "Accept": "a"}
    assert redact_headers(headers, Secrets(frozenset({"X-Team"}))) == {
        "Cookie": REDACTED, "X-Api-Key": REDACTED, "X-Team": REDACTED, "Accept": "a",
    }  # fmt: skip
