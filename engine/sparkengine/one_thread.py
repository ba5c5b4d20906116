"""Imported first by entry points: BLAS, OpenMP and numba get one thread before they load.

Each rank computes on one core, deterministically; a measurement in thread CPU time sees all
of its own work instead of a share of a thread pool's.
"""

import os

for _var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
