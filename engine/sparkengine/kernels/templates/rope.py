"""Rotary position embedding, in place on the q and k parts of a fused qkv buffer."""

import numba as nb

# CONFIG
HEADS = 2
HEAD_DIM = 32
# END CONFIG
HALF = HEAD_DIM // 2


@nb.njit(cache=True, nogil=True)
def kernel(qkv, positions, cos, sin):
    """Rotate the q and k heads of each row by its position."""
    for i in range(qkv.shape[0]):
        p = positions[i]
        for part in range(2):  # 0: q, 1: k
            for h in range(HEADS):
                base = (part * HEADS + h) * HEAD_DIM
                for d in range(HALF):
                    a = qkv[i, base + d]
                    b = qkv[i, base + HALF + d]
                    c = cos[p, d]
                    s = sin[p, d]
                    qkv[i, base + d] = a * c - b * s
                    qkv[i, base + HALF + d] = b * c + a * s
