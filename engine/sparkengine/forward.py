"""One rank's share of a forward step: embedding, layers with two all-reduces each, logits.

Every kernel is looked up in the frozen registry by a key built from the shapes at hand, the
same way the registry declared it. Rows are independent throughout (batch-invariant kernels),
so a row's hidden state, KV entries and logits are the same whatever else is in the step.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass

import numpy as np

from sparkengine.collectives import Group
from sparkengine.config import Shard
from sparkengine.faults import Faults
from sparkengine.kernels import families as fam
from sparkengine.kernels.registry import Registry
from sparkengine.model import ShardWeights

_COUNTS = struct.Struct("!III")


@dataclass(frozen=True)
class StepBatch:
    """The rows of one step: token, position, the row's block table, and rows to sample."""

    tokens: np.ndarray  # int32[n]
    positions: np.ndarray  # int32[n]
    tables: np.ndarray  # int32[sum of table lengths]
    table_start: np.ndarray  # int32[n]: where each row's block table starts in `tables`
    sample_rows: np.ndarray  # int32[m]

    def encode(self) -> bytes:
        """Wire form broadcast by rank 0."""
        arrays = (self.tokens, self.positions, self.table_start, self.tables, self.sample_rows)
        head = _COUNTS.pack(len(self.tokens), len(self.tables), len(self.sample_rows))
        return head + b"".join(a.astype(np.int32).tobytes() for a in arrays)

    @classmethod
    def decode(cls, data: bytes) -> StepBatch:
        """Inverse of encode."""
        n, t, m = _COUNTS.unpack_from(data)
        flat = np.frombuffer(data, dtype=np.int32, offset=_COUNTS.size).copy()
        tokens, positions, starts = flat[:n], flat[n : 2 * n], flat[2 * n : 3 * n]
        return cls(tokens, positions, flat[3 * n : 3 * n + t], starts, flat[3 * n + t :][:m])


def resident_zeros(shape: tuple[int, ...]) -> np.ndarray:
    """A zeroed float32 array whose memory is mapped now, at start-up, not at its first write.

    `np.zeros` leaves the pages to the kernel's first-touch faults; numpy asks for transparent
    huge pages on large arrays, and a fault that needs a fresh 2 MB page may stall for
    compaction, so whichever request first wrote into a new stretch of the KV cache paid for it
    (prefill/512 samples of 50 ms jumped to 68-113 ms, docs/statistics.md). A GPU engine
    allocates and zeroes its KV cache at start-up too.
    """
    array = np.empty(shape, np.float32)
    array.fill(0.0)
    return array


class Forward:
    """The model on one rank, with its KV cache pool."""

    def __init__(
        self,
        weights: ShardWeights,
        shard: Shard,
        registry: Registry,
        *,
        kv_blocks: int,
        fused_mlp: bool,
        faults: Faults,
    ) -> None:
        self.w = weights
        self.cfg = weights.config
        self.shard = shard
        self.registry = registry
        self.fused_mlp = fused_mlp
        self.faults = faults
        self.group: Group | None = None
        hd = self.cfg.head_dim
        k_shape = (kv_blocks, shard.heads, hd, fam.BLOCK_SIZE)  # keys transposed per block
        v_shape = (kv_blocks, fam.BLOCK_SIZE, shard.heads, hd)
        self.k_cache = [resident_zeros(k_shape) for _ in range(self.cfg.layers)]
        self.v_cache = [resident_zeros(v_shape) for _ in range(self.cfg.layers)]
        inv = 1.0 / (self.cfg.rope_theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
        angles = np.outer(np.arange(self.cfg.max_context, dtype=np.float64), inv)
        self.cos = np.ascontiguousarray(np.cos(angles), dtype=np.float32)
        self.sin = np.ascontiguousarray(np.sin(angles), dtype=np.float32)

    def _matmul(self, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        out = np.empty((x.shape[0], w.shape[1]), np.float32)
        kernel = self.registry.get(fam.matmul_config(*w.shape))
        kernel(x, w, out, self.faults.batch_variant)
        return out

    def _rmsnorm(self, x: np.ndarray, weight: np.ndarray) -> np.ndarray:
        out = np.empty_like(x)
        self.registry.get(fam.rmsnorm_config(x.shape[1]))(x, weight, out)
        return out

    def _allreduce(self, part: np.ndarray) -> np.ndarray:
        return self.group.allreduce(part) if self.group is not None else part

    def run(self, batch: StepBatch) -> np.ndarray | None:
        """Compute the step; rank 0 returns log-probabilities of the sample rows."""
        started = time.perf_counter()
        d, hd, heads = self.cfg.d_model, self.cfg.head_dim, self.shard.heads
        n = len(batch.tokens)
        x = np.empty((n, d), np.float32)
        self.registry.get(fam.KernelConfig("embed", (("D", d),)))(batch.tokens, self.w.embed, x)
        residual = self.registry.get(fam.KernelConfig("residual", (("D", d),)))
        rope = self.registry.get(fam.rope_config(heads, hd))
        attention = self.registry.get(fam.attention_config(heads, hd))
        for i, layer in enumerate(self.w.layers):
            qkv = self._matmul(self._rmsnorm(x, layer.attn_norm), layer.wqkv)
            rope(qkv, batch.positions, self.cos, self.sin)
            attn = np.empty((n, heads * hd), np.float32)
            kc, vc = self.k_cache[i], self.v_cache[i]
            attention(qkv, batch.positions, batch.tables, batch.table_start, kc, vc, attn)
            residual(x, self._allreduce(self._matmul(attn, layer.wo)))
            h = self._rmsnorm(x, layer.mlp_norm)
            part = np.empty_like(x)
            mlp = self.registry.get(fam.mlp_config(d, layer.w_gate.shape[1], self.fused_mlp))
            mlp(h, layer.w_gate, layer.w_up, layer.w_down, part)
            residual(x, self._allreduce(part))
        if self.faults.slowdown > 0:
            self._extra_work(time.perf_counter() - started, x)
        if self.shard.rank != 0 or len(batch.sample_rows) == 0:
            return None
        rows = np.ascontiguousarray(x[batch.sample_rows])
        logits = self._matmul(self._rmsnorm(rows, self.w.final_norm), self.w.lm_head)
        out = np.empty_like(logits)
        self.registry.get(fam.KernelConfig("logprobs", (("V", self.cfg.vocab),)))(logits, out)
        return out

    def _extra_work(self, elapsed: float, x: np.ndarray) -> None:
        """Fault SLOWDOWN: repeat real MLP work until the step took `slowdown` longer."""
        layer = self.w.layers[0]
        mlp = self.registry.get(fam.mlp_config(x.shape[1], layer.w_gate.shape[1], self.fused_mlp))
        scratch = np.empty_like(x[:1])
        row = np.ascontiguousarray(x[:1])
        deadline = time.perf_counter() + elapsed * self.faults.slowdown
        while time.perf_counter() < deadline:
            mlp(row, layer.w_gate, layer.w_up, layer.w_down, scratch)
