"""Cluster operations around a run: the lock that keeps one driver per cluster, and preflight."""
