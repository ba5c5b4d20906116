"""Row-wise matmul: out[i, j] = sum over k (in order 0..K-1) of x[i, k] * w[k, j].

The k-outer, j-inner loop vectorises across j without reordering any sum, so each row's result
is the same whatever the batch. `batch_variant` (a fault switch) sums in reverse order whenever
the batch has more than one row: exactly the bug the determinism gate exists to catch.
"""

import numba as nb
import numpy as np

# CONFIG
K = 128
N = 128
# END CONFIG


@nb.njit(cache=True, nogil=True)
def kernel(x, w, out, batch_variant):
    """out = x @ w, one row at a time."""
    rows = x.shape[0]
    acc = np.empty(N, dtype=np.float32)
    for i in range(rows):
        acc[:] = 0.0
        if batch_variant and rows > 1:
            for kk in range(K):
                k = K - 1 - kk
                xv = x[i, k]
                for j in range(N):
                    acc[j] += xv * w[k, j]
        else:
            for k in range(K):
                xv = x[i, k]
                for j in range(N):
                    acc[j] += xv * w[k, j]
        for j in range(N):
            out[i, j] = acc[j]
