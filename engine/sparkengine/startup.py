"""Meeting on liveness: heartbeats with phase and progress, and a rendezvous with no deadline.

Workers connect to rank 0 first thing and both sides publish heartbeats while they load and
prepare. The rendezvous waits as long as every missing rank is alive and advancing; it fails at
once, naming the rank, when a connection drops, and after `stall_timeout` without progress when
a rank stops advancing. A rank already waiting in the rendezvous is not expected to advance.

With a boot token (one secret shared by every rank of a boot, from SPARKENGINE_BOOT_TOKEN),
rank 0 sends each connection a fresh nonce and accepts only a HELLO that carries the HMAC of
that nonce and the HELLO under the token. Anything else is refused quietly (an event, no blame,
no reply), so a stranger on the port can neither stop the boot nor learn about the model.
Before that check a frame may carry at most HELLO_MAX_BYTES.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import secrets
import socket
import threading
import time
from dataclasses import dataclass, field

from sparkengine import events
from sparkengine.collectives import MAX_FRAME, Group, Link, Msg, connect
from sparkengine.errors import CollectiveTimeoutError, EngineError, PeerFailureError

HEARTBEAT_S = 0.25
WAITING_EVENT_S = 1.0
READY_PHASE = "rendezvous"
BOOT_TOKEN_ENV = "SPARKENGINE_BOOT_TOKEN"  # noqa: S105 - the variable's name, not a secret
HELLO_MAX_BYTES = 64 << 10  # HELLO, heartbeats and control frames before the rendezvous
HELLO_TIMEOUT_S = 10.0


def hello_mac(token: str, nonce: bytes, hello: dict[str, object]) -> str:
    """HMAC-SHA256 of the challenge nonce and the HELLO (without its mac) under the token."""
    body = json.dumps({k: v for k, v in hello.items() if k != "mac"}, sort_keys=True)
    return hmac.new(token.encode(), nonce + body.encode(), hashlib.sha256).hexdigest()


def _authentic(token: str, nonce: bytes, hello: dict[str, object]) -> bool:
    mac = hello.get("mac")
    return isinstance(mac, str) and hmac.compare_digest(mac, hello_mac(token, nonce, hello))


@dataclass
class Progress:
    """This rank's phase and progress, read by the heartbeat thread."""

    phase: str = "start"
    done: int = 0
    total: int = 0

    def set(self, phase: str, done: int = 0, total: int = 0) -> None:
        """Move to a phase or advance within it."""
        self.phase, self.done, self.total = phase, done, total

    def snapshot(self) -> dict[str, object]:
        """What one heartbeat carries."""
        return {"phase": self.phase, "done": self.done, "total": self.total}


@dataclass
class PeerState:
    """What this rank knows about one peer from its heartbeats."""

    phase: str = "absent"
    mark: tuple[str, int] = ("absent", 0)
    total: int = 0
    last_advance: float = field(default_factory=time.monotonic)
    failure: str | None = None
    acked: bool = False
    link: Link | None = None

    def update(self, beat: dict[str, object]) -> None:
        """Record a heartbeat; progress is any change of phase or count."""
        self.phase = str(beat["phase"])
        mark = (self.phase, int(beat["done"]))  # type: ignore[call-overload]
        if mark != self.mark:
            self.mark = mark
            self.last_advance = time.monotonic()
        self.total = int(beat.get("total", 0))  # type: ignore[call-overload]

    def describe(self) -> str:
        """e.g. `prepare 3/10`."""
        return f"{self.phase} {self.mark[1]}/{self.total}" if self.total else self.phase


class Heartbeats:
    """Background sender of this rank's progress to its peers until stopped."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self._links: list[Link] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="heartbeats", daemon=True)

    def start(self) -> None:
        """Start beating."""
        self._thread.start()

    def add(self, link: Link) -> None:
        """Beat to one more peer."""
        with self._lock:
            self._links.append(link)

    def stop(self) -> None:
        """Stop and wait, so no heartbeat follows the frames sent after this."""
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            payload = json.dumps(self._progress.snapshot()).encode()
            with self._lock:
                links = list(self._links)
            for link in links:
                with contextlib.suppress(OSError):  # the reader notices a dead peer, names it
                    link.send(Msg.HEARTBEAT, 0, payload)


class HeadListener:
    """Rank 0's side: accept workers, track their heartbeats, run the rendezvous."""

    def __init__(
        self,
        host: str,
        port: int,
        nnodes: int,
        progress: Progress,
        *,
        model_digest: str,
        token: str | None = None,
    ) -> None:
        self.nnodes = nnodes
        self.model_digest = model_digest
        self.token = token
        self.peers = {r: PeerState() for r in range(1, nnodes)}
        self.heartbeats = Heartbeats(progress)
        self._lock = threading.Lock()
        self._server = socket.create_server((host, port), reuse_port=False)
        self.port = self._server.getsockname()[1]
        threading.Thread(target=self._accept, name="accept", daemon=True).start()
        self.heartbeats.start()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve_peer, args=(sock,), daemon=True).start()

    def _serve_peer(self, sock: socket.socket) -> None:
        link = Link(sock, -1, max_frame=HELLO_MAX_BYTES)
        try:
            rank, hello = self._hello(link)
        except Exception as exc:  # noqa: BLE001 - whatever a stranger sends, the head goes on
            events.emit("rendezvous_refused", reason=f"{type(exc).__name__}: {exc}"[:200])
            link.close()
            return
        link.peer = rank
        state = self.peers[rank]
        mismatch = _mismatch(hello, self.nnodes, self.model_digest)
        if mismatch:
            with self._lock:
                state.failure = mismatch
            with contextlib.suppress(OSError):  # the reply names what differs, not our values
                link.send_json(Msg.REJECT, {"reason": mismatch.split(":")[0]})
            link.close()
            return
        with self._lock:
            state.link = link
            state.update({"phase": "connected", "done": 0})
        self.heartbeats.add(link)
        self._read_beats(state, link)

    def _hello(self, link: Link) -> tuple[int, dict[str, object]]:
        """The rank a connection speaks for, once its HELLO is well formed (and authentic)."""
        nonce = secrets.token_bytes(32)
        if self.token:
            link.send(Msg.CHALLENGE, 0, nonce)
        kind, _, payload = link.recv(HELLO_TIMEOUT_S)
        hello = json.loads(payload)
        if kind != Msg.HELLO or not isinstance(hello, dict):
            raise EngineError("the first frame is not a HELLO object")
        if self.token and not _authentic(self.token, nonce, hello):
            raise EngineError("HELLO without a valid boot-token proof")
        rank = hello.get("rank")
        if not isinstance(rank, int) or rank not in self.peers:
            raise EngineError("HELLO names no worker rank of this boot")
        if self.peers[rank].link is not None:
            raise EngineError(f"rank {rank} is already connected")
        return rank, hello

    def _read_beats(self, state: PeerState, link: Link) -> None:
        try:
            while True:
                kind, _, payload = link.recv(None)
                if kind == Msg.ACK:
                    state.acked = True
                    return
                if kind == Msg.HEARTBEAT:
                    with self._lock:
                        state.update(json.loads(payload))
        except (OSError, PeerFailureError) as exc:
            with self._lock:
                state.failure = f"died in phase {state.phase} ({exc})"

    def rendezvous(self, stall_timeout: float, join_timeout: float, ack_timeout: float) -> Group:
        """Wait for every worker to be ready; fail at once naming a dead or stalled rank."""
        started = time.monotonic()
        last_event = 0.0
        while True:
            with self._lock:
                _check_peers(self.peers, stall_timeout, join_timeout, started)
                missing = [r for r, s in self.peers.items() if s.phase != READY_PHASE]
                phases = {str(r): self.peers[r].describe() for r in missing}
            if not missing:
                break
            if time.monotonic() - last_event >= WAITING_EVENT_S:
                events.emit("waiting", missing=missing, phases=phases)
                last_event = time.monotonic()
            time.sleep(0.05)
        self.heartbeats.stop()
        links = {}
        for rank, state in self.peers.items():
            assert state.link is not None
            try:
                state.link.send(Msg.GO)
            except OSError as exc:
                raise PeerFailureError(rank, f"died at the rendezvous ({exc})") from None
            state.link.max_frame = MAX_FRAME
            links[rank] = state.link
        deadline = time.monotonic() + ack_timeout
        for rank, state in self.peers.items():
            while not state.acked:
                if state.failure:
                    raise PeerFailureError(rank, state.failure)
                if time.monotonic() > deadline:
                    raise CollectiveTimeoutError(rank, 0, "rendezvous", ack_timeout)
                time.sleep(0.01)
        self._server.close()
        return Group(0, self.nnodes, links, ack_timeout)


def _mismatch(hello: dict[str, object], nnodes: int, digest: str) -> str | None:
    """Why a worker cannot join this deployment, if it cannot."""
    if hello.get("nnodes") != nnodes:
        return f"--nnodes differs: this rank has {hello.get('nnodes')}, rank 0 {nnodes}"
    if hello.get("model_digest") != digest:
        return f"model digest differs from rank 0's: {hello.get('model_digest')} vs {digest}"
    return None


def _check_peers(
    peers: dict[int, PeerState], stall_timeout: float, join_timeout: float, started: float
) -> None:
    now = time.monotonic()
    for rank, state in peers.items():
        if state.failure:
            raise PeerFailureError(rank, state.failure)
        if state.link is None and now - started > join_timeout:
            raise PeerFailureError(rank, f"never connected within {join_timeout:g} s")
        stalled = now - state.last_advance > stall_timeout
        if state.link is not None and state.phase != READY_PHASE and stalled:
            raise PeerFailureError(
                rank, f"stopped advancing in phase {state.describe()} for {stall_timeout:g} s"
            )


class WorkerLink:
    """A worker's side: connect to rank 0, beat, then wait in the rendezvous for GO."""

    def __init__(
        self,
        host: str,
        port: int,
        hello: dict[str, object],
        progress: Progress,
        join_timeout: float,
        *,
        token: str | None = None,
    ) -> None:
        self.rank = int(hello["rank"])  # type: ignore[call-overload]
        self.link = _connect_retrying(host, port, join_timeout)
        self.link.max_frame = HELLO_MAX_BYTES
        if token:
            hello = {**hello, "mac": hello_mac(token, self._challenge(), hello)}
        self.link.send_json(Msg.HELLO, hello)
        self.heartbeats = Heartbeats(progress)
        self.heartbeats.add(self.link)
        self.heartbeats.start()

    def _challenge(self) -> bytes:
        try:
            kind, _, nonce = self.link.recv(HELLO_TIMEOUT_S)
        except (TimeoutError, OSError) as exc:
            raise PeerFailureError(0, f"sent no boot-token challenge ({exc})") from None
        if kind != Msg.CHALLENGE:
            raise PeerFailureError(0, f"sent {kind.name} instead of a boot-token challenge")
        return nonce

    def rendezvous(self, nnodes: int, stall_timeout: float, timeout: float) -> Group:
        """Wait for GO as long as rank 0 is alive and advancing (or itself waiting)."""
        head = PeerState(phase="connected")
        last_event = 0.0
        while True:
            try:
                kind, _, payload = self.link.recv(HEARTBEAT_S * 4)
            except TimeoutError:
                kind, payload = Msg.PING, b""
            except OSError as exc:
                raise PeerFailureError(0, f"died in phase {head.phase} ({exc})") from None
            if kind == Msg.GO:
                break
            if kind == Msg.REJECT:
                raise EngineError("rank 0 refused this rank: " + json.loads(payload)["reason"])
            if kind == Msg.HEARTBEAT:
                head.update(json.loads(payload))
            stalled = time.monotonic() - head.last_advance > stall_timeout
            if head.phase != READY_PHASE and stalled:
                raise PeerFailureError(
                    0, f"stopped advancing in phase {head.describe()} for {stall_timeout:g} s"
                )
            if head.phase != READY_PHASE and time.monotonic() - last_event >= WAITING_EVENT_S:
                events.emit("waiting", missing=[0], phases={"0": head.describe()})
                last_event = time.monotonic()
        self.heartbeats.stop()
        self.link.max_frame = MAX_FRAME
        try:
            self.link.send(Msg.ACK)
        except OSError as exc:
            raise PeerFailureError(0, f"died at the rendezvous ({exc})") from None
        return Group(self.rank, nnodes, {0: self.link}, timeout)


def _connect_retrying(host: str, port: int, join_timeout: float) -> Link:
    deadline = time.monotonic() + join_timeout
    while True:
        try:
            return connect(host, port, 0, timeout=5.0)
        except OSError as exc:
            if time.monotonic() > deadline:
                raise PeerFailureError(0, f"unreachable at {host}:{port}: {exc}") from None
            time.sleep(0.2)
