"""Causal attention over a paged KV cache, one row at a time.

First every row's k and v are written to its block; then each row attends to positions
0..pos of its own sequence in order, with a two-pass softmax. A row reads only its own
sequence's cache, so chunked prefill, decode and prefix-cache hits give identical values.
Keys are stored transposed per block (k_cache[block, head, dim, slot]) so q.k runs across a
block's 16 slots at once, while each score still sums over dims 0..HEAD_DIM-1 in order.
"""

import math

import numba as nb
import numpy as np

# CONFIG
HEADS = 2
HEAD_DIM = 32
BLOCK = 16
# END CONFIG


@nb.njit(cache=True, nogil=True)
def _write_kv(qkv, positions, tables, table_start, k_cache, v_cache):  # noqa: PLR0917
    for i in range(qkv.shape[0]):
        p = positions[i]
        block = tables[table_start[i] + p // BLOCK]
        off = p % BLOCK
        for h in range(HEADS):
            for d in range(HEAD_DIM):
                k_cache[block, h, d, off] = qkv[i, (HEADS + h) * HEAD_DIM + d]
                v_cache[block, off, h, d] = qkv[i, (2 * HEADS + h) * HEAD_DIM + d]


@nb.njit(cache=True, nogil=True)
def _scores(qkv, i, h, p, tables, t0, k_cache, scores):  # noqa: PLR0917
    """scores[s] = (q . k_s) / sqrt(HEAD_DIM) for s in 0..p; returns the maximum."""
    scale = np.float32(1.0 / math.sqrt(HEAD_DIM))
    qbase = h * HEAD_DIM
    best = np.float32(-np.inf)
    for b in range(p // BLOCK + 1):
        block = tables[t0 + b]
        base = b * BLOCK
        count = min(BLOCK, p + 1 - base)
        for off in range(count):
            scores[base + off] = 0.0
        for d in range(HEAD_DIM):
            qd = qkv[i, qbase + d]
            for off in range(count):
                scores[base + off] += qd * k_cache[block, h, d, off]
        for off in range(count):
            scores[base + off] *= scale
            best = max(best, scores[base + off])
    return best


@nb.njit(cache=True, nogil=True)
def kernel(qkv, positions, tables, table_start, k_cache, v_cache, out):  # noqa: PLR0917
    """out[i] = softmax(q_i . k_0..p / sqrt(d)) v_0..p per local head, after caching k, v."""
    _write_kv(qkv, positions, tables, table_start, k_cache, v_cache)
    rows = qkv.shape[0]
    scores = np.empty(positions.max() + 1 if rows > 0 else 1, dtype=np.float32)
    acc = np.empty(HEAD_DIM, dtype=np.float32)
    for i in range(rows):
        p = positions[i]
        t0 = table_start[i]
        for h in range(HEADS):
            best = _scores(qkv, i, h, p, tables, t0, k_cache, scores)
            total = np.float32(0.0)
            for s in range(p + 1):
                e = np.float32(math.exp(scores[s] - best))
                scores[s] = e
                total += e
            acc[:] = 0.0
            for s in range(p + 1):
                block = tables[t0 + s // BLOCK]
                off = s % BLOCK
                w = scores[s]
                for d in range(HEAD_DIM):
                    acc[d] += w * v_cache[block, off, h, d]
            inv = np.float32(1.0) / total
            for d in range(HEAD_DIM):
                out[i, h * HEAD_DIM + d] = acc[d] * inv
