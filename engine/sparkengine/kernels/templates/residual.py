"""Residual add: x += y, element by element."""

import numba as nb

# CONFIG
D = 128
# END CONFIG


@nb.njit(cache=True, nogil=True)
def kernel(x, y):
    """x += y."""
    for i in range(x.shape[0]):
        for k in range(D):
            x[i, k] += y[i, k]
