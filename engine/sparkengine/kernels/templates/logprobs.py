"""Log-softmax of each row of logits, summing left to right in float64."""

import math

import numba as nb
import numpy as np

# CONFIG
V = 100
# END CONFIG


@nb.njit(cache=True, nogil=True)
def kernel(logits, out):
    """out[i] = log_softmax(logits[i])."""
    for i in range(logits.shape[0]):
        best = logits[i, 0]
        for j in range(1, V):
            best = max(best, logits[i, j])
        total = 0.0
        for j in range(V):
            total += math.exp(np.float64(logits[i, j] - best))
        log_total = math.log(total)
        for j in range(V):
            out[i, j] = np.float32(np.float64(logits[i, j] - best) - log_total)
