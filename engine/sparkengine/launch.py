"""Start N ranks of the engine on loopback and watch their JSON-lines events.

Used by the benchmark and by the engine's release tests: every rank is a real
`python -m sparkengine serve` process on free ports, and `stop()` always reaps them.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any


def free_port() -> int:
    """A port that was free a moment ago on loopback."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LocalCluster:
    """N ranks of the engine on loopback."""

    def __init__(
        self,
        model: Path,
        cache_root: Path,
        nnodes: int = 2,
        *,
        env: dict[str, str] | None = None,
        args: list[str] | None = None,
        rank_env: dict[int, dict[str, str]] | None = None,
        rank_args: dict[int, list[str]] | None = None,
        ranks: list[int] | None = None,
    ) -> None:
        """Start `ranks` (all by default); `start_rank` starts any other later."""
        self.nnodes = nnodes
        self.port = free_port()
        self.head_port = free_port()
        self.events: dict[int, list[dict[str, Any]]] = {r: [] for r in range(nnodes)}
        self.procs: dict[int, subprocess.Popen[str]] = {}
        self._readers: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._model, self._cache_root = model, cache_root
        self._env, self._args = env or {}, args or []
        self._rank_env, self._rank_args = rank_env or {}, rank_args or {}
        for rank in range(nnodes) if ranks is None else ranks:
            self.start_rank(rank)

    def start_rank(self, rank: int) -> None:
        """Start one rank's process."""
        cache_root = self._cache_root
        argv = [
            sys.executable, "-m", "sparkengine", "serve",
            "--rank", str(rank), "--nnodes", str(self.nnodes),
            "--head", f"127.0.0.1:{self.head_port}", "--port", str(self.port),
            "--model", str(self._model),
            "--cache", f"kernels={cache_root / str(rank) / 'kernels'}",
            "--cache", f"jit={cache_root / str(rank) / 'jit'}",
            *self._args,
            *self._rank_args.get(rank, []),
        ]  # fmt: skip
        full_env = {**os.environ, **self._env, **self._rank_env.get(rank, {})}
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=full_env
        )
        self.procs[rank] = proc
        reader = threading.Thread(target=self._read, args=(rank, proc), daemon=True)
        reader.start()
        self._readers.append(reader)

    @property
    def url(self) -> str:
        """Base URL of rank 0's HTTP API."""
        return f"http://127.0.0.1:{self.port}"

    def _read(self, rank: int, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        with proc.stdout:  # closed at EOF: the pipe never outlives its rank
            for line in proc.stdout:
                try:
                    event = json.loads(line)
                except ValueError:
                    event = {"event": "_text", "line": line.rstrip()}
                with self._lock:
                    self.events[rank].append(event)

    def named(self, rank: int, name: str) -> list[dict[str, Any]]:
        """Events called `name` from `rank` so far."""
        with self._lock:
            return [e for e in self.events[rank] if e.get("event") == name]

    def wait_event(self, rank: int, name: str, timeout: float = 120.0) -> dict[str, Any]:
        """Wait for the first `name` event of `rank`; fail with the log if it never comes."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.named(rank, name)
            if found:
                return found[0]
            if self.procs[rank].poll() is not None and not self.named(rank, name):
                time.sleep(0.2)  # let the reader drain
                if not self.named(rank, name):
                    break
            time.sleep(0.05)
        raise AssertionError(f"rank {rank}: no {name!r} event; log: {self.log()}")

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Wait for rank 0's `ready`."""
        self.wait_event(0, "ready", timeout)

    def wait_exit(self, rank: int, timeout: float = 60.0) -> int:
        """Wait for a rank to exit; its status."""
        return self.procs[rank].wait(timeout)

    def log(self) -> str:
        """Every event so far (for failure messages)."""
        with self._lock:
            return json.dumps(self.events, indent=None)[-6000:]

    def stop(self) -> None:
        """Terminate every rank (rank 0 first, so workers get STOP), then kill stragglers."""
        for rank in sorted(self.procs):
            if self.procs[rank].poll() is None:
                self.procs[rank].terminate()
        for proc in self.procs.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for reader in self._readers:
            reader.join(10)
