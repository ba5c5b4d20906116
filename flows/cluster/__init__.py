"""Nodes and how to reach them, one sub-package per seam.

transport/ (local, ssh, docker endpoints), runtime/ (process groups or containers: the only code
that knows the runtime kind), build/ (build kinds and distribution), boot/ (boot, session,
timeline, evidence, caches), ops/ (lock, preflight) and lab/ (namespace hosts, private daemons).
"""
