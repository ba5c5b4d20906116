"""The one SSE parser, the one readiness probe and the atomic writes, without an engine."""

from __future__ import annotations

import hashlib
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from flows.engine_api.ready import probe_ready
from flows.engine_api.sse import SseDecoder, message_events
from flows.fileio import marker_digest, sha256_file, write_json, write_text
from flows.net import free_port


def test_messages_split_across_pieces_are_joined() -> None:
    decoder = SseDecoder()
    stream = b'data: {"a": 1}\r\n\r\ndata: {"b"' + b": 2}\n\n: comment\n\ndata: [DONE]\n\n"
    got = [events for i in range(0, len(stream), 7) for events in decoder.feed(stream[i : i + 7])]
    assert got == [[{"a": 1}], [{"b": 2}], [], None]
    assert decoder.finish() == []


def test_a_last_message_without_a_blank_line_is_read_at_the_end() -> None:
    decoder = SseDecoder()
    assert list(decoder.feed(b'data: {"a": 1}\n')) == []
    assert decoder.finish() == [[{"a": 1}]]


def test_a_message_of_several_data_lines_gives_each_event() -> None:
    assert message_events(b'event: x\ndata: {"a": 1}\ndata: {"b": 2}') == [{"a": 1}, {"b": 2}]
    with pytest.raises(ValueError):
        message_events(b"data: {not json")


@pytest.fixture
def server() -> Iterator[str]:
    """A loopback server answering 200 on /health and 404 elsewhere."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *_args: object) -> None:
            pass

    httpd = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def test_the_probe_is_true_for_2xx_only(server: str) -> None:
    assert probe_ready(f"{server}/health")
    assert not probe_ready(f"{server}/missing")
    assert not probe_ready(f"http://127.0.0.1:{free_port()}/health", timeout_s=1)
    assert not probe_ready("not a url")


def test_atomic_writes_leave_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "file.json"
    write_json(target, {"b": 1, "a": 2})
    assert target.read_text() == '{\n  "a": 2,\n  "b": 1\n}\n'
    write_text(target, "replaced")
    assert [p.name for p in target.parent.iterdir()] == ["file.json"]
    assert sha256_file(target) == hashlib.sha256(b"replaced").hexdigest()


def test_a_marker_digest_is_read_or_none() -> None:
    assert marker_digest('{"digest": "abc"}') == "abc"
    assert marker_digest("[1]") is None
    assert marker_digest("not json") is None
    assert marker_digest('{"digest": 3}') is None
