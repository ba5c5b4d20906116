"""Gated MLP (SiLU(x Wg) * (x Wu)) Wd for one rank's slice of columns.

Two variants with the same arithmetic, term for term: `reference` computes each output as a
dot product (j outer, k inner: strided, scalar); `fused` runs k outer, j inner over gate and up
together (contiguous, vectorised). Every sum still runs k = 0..K-1 from 0.0, so both variants
are bit-identical and `fused` is simply faster.
"""

import math

import numba as nb
import numpy as np

# CONFIG
D = 128
F = 192
FUSED = 1
# END CONFIG


@nb.njit(cache=True, nogil=True)
def _silu(g):
    return g / (np.float32(1.0) + np.float32(math.exp(-g)))


@nb.njit(cache=True, nogil=True)
def _fused_row(xrow, w_gate, w_up, w_down, gate, up, acc):  # noqa: PLR0917
    gate[:] = 0.0
    up[:] = 0.0
    for k in range(D):
        xv = xrow[k]
        for j in range(F):
            gate[j] += xv * w_gate[k, j]
            up[j] += xv * w_up[k, j]
    for j in range(F):
        gate[j] = _silu(gate[j]) * up[j]
    acc[:] = 0.0
    for k in range(F):
        hv = gate[k]
        for j in range(D):
            acc[j] += hv * w_down[k, j]


@nb.njit(cache=True, nogil=True)
def _reference_row(xrow, w_gate, w_up, w_down, gate, acc):  # noqa: PLR0917
    for j in range(F):
        g = np.float32(0.0)
        u = np.float32(0.0)
        for k in range(D):
            g += xrow[k] * w_gate[k, j]
        for k in range(D):
            u += xrow[k] * w_up[k, j]
        gate[j] = _silu(g) * u
    for j in range(D):
        a = np.float32(0.0)
        for k in range(F):
            a += gate[k] * w_down[k, j]
        acc[j] = a


@nb.njit(cache=True, nogil=True)
def kernel(x, w_gate, w_up, w_down, out):
    """out = (silu(x Wg) * (x Wu)) Wd for this rank's columns, one row at a time."""
    gate = np.empty(F, dtype=np.float32)
    up = np.empty(F, dtype=np.float32)
    acc = np.empty(D, dtype=np.float32)
    for i in range(x.shape[0]):
        if FUSED:
            _fused_row(x[i], w_gate, w_up, w_down, gate, up, acc)
        else:
            _reference_row(x[i], w_gate, w_up, w_down, gate, acc)
        for j in range(D):
            out[i, j] = acc[j]
