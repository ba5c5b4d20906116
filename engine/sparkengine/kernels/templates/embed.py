"""Token embedding lookup (rows of the embedding table by id)."""

import numba as nb

# CONFIG
D = 128
# END CONFIG


@nb.njit(cache=True, nogil=True)
def kernel(tokens, table, out):
    """out[i] = table[tokens[i]]."""
    for i in range(tokens.shape[0]):
        t = tokens[i]
        for k in range(D):
            out[i, k] = table[t, k]
