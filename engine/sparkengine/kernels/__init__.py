"""Numba kernels: declared configurations, on-disk caches per kind, prepare -> freeze."""
