"""One stream read once, consumed by several readers at their own pace, in bounded memory.

Distribution sends one `docker save` stream to every other node. Saving once per node would make
the build node read and tar the image N-1 times (a vLLM image is tens of GB), so the stream is
read once and each chunk is handed to every reader through a small queue. A slow reader slows the
producer (the queues are bounded, nothing is buffered whole); a reader that fails calls `drop`
and the others go on without it.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator, Sequence

QUEUE_CHUNKS = 8
_PUT_WAIT_S = 0.2
_END = b""


class Fanout:
    """Copies of one iterable of byte chunks, one per named reader."""

    def __init__(self, names: Sequence[str], depth: int = QUEUE_CHUNKS) -> None:
        self._queues: dict[str, queue.Queue[bytes]] = {n: queue.Queue(depth) for n in names}
        self._dropped: set[str] = set()
        self._lock = threading.Lock()
        self.error: BaseException | None = None

    def pump(self, chunks: Iterable[bytes]) -> None:
        """Read chunks once and hand each to every reader still there; then end every reader."""
        try:
            for chunk in chunks:
                if not chunk:
                    continue
                for name in self._live():
                    self._put(name, chunk)
                if not self._live():
                    return
        except BaseException as exc:
            self.error = exc
            raise
        finally:
            for name in self._live():
                self._put(name, _END)

    def reader(self, name: str) -> Iterator[bytes]:
        """The chunks for one reader; raises the producer's error if the source failed."""
        source = self._queues[name]
        while True:
            chunk = source.get()
            if chunk == _END:
                if self.error is not None:
                    raise OSError(f"the source stream failed: {self.error}")
                return
            yield chunk

    def drop(self, name: str) -> None:
        """A reader gives up: stop feeding it and free its queue so the producer never blocks."""
        with self._lock:
            self._dropped.add(name)
        source = self._queues[name]
        while not source.empty():
            source.get_nowait()

    def _live(self) -> list[str]:
        with self._lock:
            return [name for name in self._queues if name not in self._dropped]

    def _put(self, name: str, chunk: bytes) -> None:
        while name in self._live():
            try:
                self._queues[name].put(chunk, timeout=_PUT_WAIT_S)
            except queue.Full:
                continue
            return
