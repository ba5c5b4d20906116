"""One source stream read once and delivered whole to every reader, even when one gives up."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from flows.cluster.build.fanout import Fanout

CHUNKS = [bytes([n]) * 1000 for n in range(50)]


def run_readers(fanout: Fanout, names: list[str], fail_after: dict[str, int]) -> dict[str, bytes]:
    received: dict[str, bytes] = {}

    def read(name: str) -> None:
        data = b""
        try:
            for index, chunk in enumerate(fanout.reader(name)):
                if index == fail_after.get(name, -1):
                    raise OSError("target went away")
                data += chunk
        except OSError:
            fanout.drop(name)
            return
        received[name] = data

    threads = [threading.Thread(target=read, args=(name,)) for name in names]
    for thread in threads:
        thread.start()
    fanout_thread = threading.Thread(target=fanout.pump, args=(iter(CHUNKS),))
    fanout_thread.start()
    for thread in [*threads, fanout_thread]:
        thread.join(timeout=10)
        assert not thread.is_alive()
    return received


def test_every_reader_gets_every_chunk_in_order() -> None:
    fanout = Fanout(["a", "b", "c"], depth=2)
    received = run_readers(fanout, ["a", "b", "c"], {})
    assert received == {name: b"".join(CHUNKS) for name in "abc"}


def test_a_reader_that_fails_does_not_stall_the_others() -> None:
    fanout = Fanout(["a", "b"], depth=1)
    received = run_readers(fanout, ["a", "b"], {"a": 3})
    assert received == {"b": b"".join(CHUNKS)}


def test_the_source_is_read_once() -> None:
    reads = 0

    def source() -> Iterator[bytes]:
        nonlocal reads
        for chunk in CHUNKS:
            reads += 1
            yield chunk

    fanout = Fanout(["a", "b", "c"], depth=64)
    fanout.pump(source())
    assert reads == len(CHUNKS)
    assert all(b"".join(fanout.reader(name)) == b"".join(CHUNKS) for name in "abc")


def test_a_failing_source_fails_every_reader() -> None:
    def source() -> Iterator[bytes]:
        yield b"x"
        raise ConnectionError("build node daemon died")

    fanout = Fanout(["a"], depth=4)
    with pytest.raises(ConnectionError):
        fanout.pump(source())
    with pytest.raises(OSError, match="source stream failed: build node daemon died"):
        list(fanout.reader("a"))
