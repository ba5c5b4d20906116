"""The cold-boots gate: per-boot rules, typed summary, emptied caches and boots (runner)."""
