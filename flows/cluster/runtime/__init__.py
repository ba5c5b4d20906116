"""Runtimes.

How a rank runs on a node (process groups or containers); the only code that knows the runtime
kind.
"""
