"""TCP collectives in a star: every rank sends its partial to rank 0, which sums in rank
order 0..N-1 and sends the sum back, so the result is bit-identical whatever order bytes arrive.

Frames are `type (u8) | seq (u32) | length (u64) | payload`. A receive that hears nothing from
its peer for the collective timeout raises CollectiveTimeoutError naming peer, sequence number
and phase; a closed connection raises PeerFailureError, and so does a frame longer than the
link's `max_frame` (small until the rendezvous authenticated the peer), before it is read.
"""

from __future__ import annotations

import contextlib
import enum
import json
import socket
import struct
import threading
from typing import Any

import numpy as np

from sparkengine.errors import CollectiveTimeoutError, EngineError, PeerFailureError

_HEADER = struct.Struct("!BIQ")
MAX_FRAME = 256 << 20  # a step's partial sums are a few MiB at most


class Msg(enum.IntEnum):
    """Frame types."""

    HELLO = 1
    HEARTBEAT = 2
    GO = 3
    ACK = 4
    STEP = 5
    PARTIAL = 6
    SUM = 7
    PING = 8
    STOP = 9
    CONTROL = 10
    REJECT = 11
    CHALLENGE = 12


class Link:
    """One framed TCP connection to one peer rank."""

    def __init__(self, sock: socket.socket, peer: int, max_frame: int = MAX_FRAME) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = sock
        self.peer = peer
        self.max_frame = max_frame
        self._send_lock = threading.Lock()

    def send(self, kind: Msg, seq: int = 0, payload: bytes | memoryview = b"") -> None:
        """Send one frame (thread-safe)."""
        with self._send_lock:
            self.sock.sendall(_HEADER.pack(kind, seq, len(payload)) + bytes(payload))

    def send_json(self, kind: Msg, obj: Any) -> None:
        """Send a frame whose payload is JSON."""
        self.send(kind, 0, json.dumps(obj).encode())

    def recv(self, timeout: float | None) -> tuple[Msg, int, bytes]:
        """Receive one frame; TimeoutError if nothing arrives for `timeout` seconds."""
        self.sock.settimeout(timeout)
        kind, seq, length = _HEADER.unpack(self._exact(_HEADER.size))
        if length > self.max_frame:
            raise PeerFailureError(
                self.peer, f"frame of {length} bytes exceeds the limit of {self.max_frame}"
            )
        return Msg(kind), seq, self._exact(length)

    def _exact(self, n: int) -> bytes:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            count = self.sock.recv_into(view[got:], n - got)
            if count == 0:
                raise PeerFailureError(self.peer, "connection closed")
            got += count
        return bytes(buf)

    def close(self) -> None:
        """Close the socket, ignoring errors (the peer may already be gone)."""
        with contextlib.suppress(OSError):
            self.sock.close()


def connect(host: str, port: int, peer: int, timeout: float) -> Link:
    """Open a link to `host:port` (one attempt)."""
    sock = socket.create_connection((host, port), timeout=timeout)
    return Link(sock, peer)


class Group:
    """The ranks after rendezvous: rank 0 holds a link per worker, a worker holds one to 0."""

    def __init__(self, rank: int, nnodes: int, links: dict[int, Link], timeout: float) -> None:
        self.rank = rank
        self.nnodes = nnodes
        self.links = links
        self.timeout = timeout
        self.seq = 0
        self.phase = "warmup"

    def expect(self, peer: int, kind: Msg) -> tuple[int, bytes]:
        """Receive the next frame from `peer`, which must be `kind`, within the timeout."""
        try:
            got, seq, payload = self.links[peer].recv(self.timeout)
        except TimeoutError:
            raise CollectiveTimeoutError(peer, self.seq, self.phase, self.timeout) from None
        except (ConnectionError, OSError) as exc:
            raise PeerFailureError(peer, f"connection error: {exc}") from None
        if got == Msg.STOP:
            raise PeerFailureError(peer, "stopped")
        if got != kind:
            raise EngineError(
                f"protocol error: expected {kind.name} from rank {peer}, got {got.name}"
            )
        return seq, payload

    def allreduce(self, part: np.ndarray) -> np.ndarray:
        """Sum `part` over all ranks in rank order; every rank gets the same bytes back."""
        if self.nnodes == 1:
            return part
        seq = self.seq
        if self.rank != 0:
            self._send(0, Msg.PARTIAL, seq, part.data.cast("B"))
            got_seq, payload = self.expect(0, Msg.SUM)
            self._check_seq(0, got_seq, seq)
            total = np.frombuffer(payload, dtype=np.float32).reshape(part.shape).copy()
        else:
            total = part.copy()
            for peer in range(1, self.nnodes):
                got_seq, payload = self.expect(peer, Msg.PARTIAL)
                self._check_seq(peer, got_seq, seq)
                total += np.frombuffer(payload, dtype=np.float32).reshape(part.shape)
            data = total.data.cast("B")
            for peer in range(1, self.nnodes):
                self._send(peer, Msg.SUM, seq, data)
        self.seq += 1
        return total

    def _check_seq(self, peer: int, got: int, want: int) -> None:
        if got != want:
            raise EngineError(
                f"protocol error: rank {peer} sent collective #{got}, expected #{want}"
            )

    def broadcast(self, kind: Msg, payload: bytes) -> None:
        """Rank 0 sends one frame to every worker."""
        for peer in range(1, self.nnodes):
            self._send(peer, kind, self.seq, payload)

    def _send(self, peer: int, kind: Msg, seq: int, payload: bytes | memoryview) -> None:
        try:
            self.links[peer].send(kind, seq, payload)
        except OSError as exc:
            raise PeerFailureError(peer, f"send failed in phase {self.phase}: {exc}") from None

    def close(self) -> None:
        """Close every link."""
        for link in self.links.values():
            link.close()
