"""Nodes and how to reach them: transports, runtimes, boots, caches, evidence, lock, lab hosts."""
