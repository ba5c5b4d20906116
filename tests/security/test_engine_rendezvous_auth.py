"""Attack: a stranger on the rendezvous port. Its HELLO used to make a waiting head exit
blaming "rank 1", the reply leaked the model digest, and frame lengths were trusted. With a
boot token (SPARKENGINE_BOOT_TOKEN on every rank) the head answers a connection only with a
nonce, refuses any HELLO without the token's HMAC quietly, bounds frames before the
rendezvous, and the real rank still joins.
"""

from __future__ import annotations

import json
import socket
import struct
import time
from pathlib import Path

import pytest
from sparkengine.collectives import Msg
from sparkengine.launch import LocalCluster
from sparkengine.model import manifest_digest
from sparkengine.startup import hello_mac

from .engine_server import _made, assert_serving, running_engine

pytestmark = pytest.mark.integration
TOKEN = "boot-token-for-tests"
HEADER = struct.Struct("!BIQ")


def connect(cluster: LocalCluster) -> socket.socket:
    deadline = time.monotonic() + 60
    while True:
        try:
            return socket.create_connection(("127.0.0.1", cluster.head_port), timeout=10)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def read_frame(sock: socket.socket) -> tuple[int, bytes]:
    header = b""
    while len(header) < HEADER.size:
        chunk = sock.recv(HEADER.size - len(header))
        if not chunk:
            return -1, b""
        header += chunk
    kind, _, length = HEADER.unpack(header)
    payload = b""
    while len(payload) < length:
        payload += sock.recv(length - len(payload))
    return kind, payload


def read_all(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def wait_refusals(cluster: LocalCluster, count: int) -> list[dict[str, object]]:
    deadline = time.monotonic() + 15
    while len(cluster.named(0, "rendezvous_refused")) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return cluster.named(0, "rendezvous_refused")


def frame(kind: int, payload: bytes) -> bytes:
    return HEADER.pack(kind, 0, len(payload)) + payload


def test_strangers_cannot_stop_the_boot_or_learn_the_model(tmp_path: Path) -> None:
    env = {"SPARKENGINE_BOOT_TOKEN": TOKEN}
    with running_engine(tmp_path, nnodes=2, env=env, ranks=[0]) as cluster:
        digest = manifest_digest(_made()[0])
        hello = {"rank": 1, "nnodes": 2, "model_digest": "0" * 64}
        with connect(cluster) as sock:  # no proof at all
            kind, nonce = read_frame(sock)
            assert kind == Msg.CHALLENGE
            assert len(nonce) == 32
            sock.sendall(frame(Msg.HELLO, json.dumps(hello).encode()))
            rest = read_all(sock)
        with connect(cluster) as sock:  # a proof under the wrong token
            _, nonce = read_frame(sock)
            forged = {**hello, "mac": hello_mac("guessed", nonce, hello)}
            sock.sendall(frame(Msg.HELLO, json.dumps(forged).encode()))
            rest += read_all(sock)
        with connect(cluster) as sock:  # a frame claiming a gigabyte
            read_frame(sock)
            sock.sendall(HEADER.pack(Msg.HELLO, 0, 1 << 30))
            rest += read_all(sock)
        refusals = wait_refusals(cluster, 3)
        assert len(refusals) == 3, cluster.log()
        assert "exceeds the limit" in str(refusals[2]["reason"])
        assert rest == b""  # nothing was answered: no REJECT, no digest
        assert digest not in json.dumps(refusals)
        assert cluster.procs[0].poll() is None
        assert not cluster.named(0, "peer_failure")
        cluster.start_rank(1)  # the real rank, with the token, still joins
        cluster.wait_ready()
        assert_serving(cluster)


def test_a_rank_without_the_token_is_refused(tmp_path: Path) -> None:
    rank_env = {0: {"SPARKENGINE_BOOT_TOKEN": TOKEN}}
    with running_engine(tmp_path, nnodes=2, rank_env=rank_env) as cluster:
        assert wait_refusals(cluster, 1), cluster.log()
        assert cluster.wait_exit(1, timeout=60) != 0
        assert cluster.procs[0].poll() is None  # the head is not fooled into blaming rank 1
        assert not cluster.named(0, "peer_failure")
