"""Research tools about the benchmark and the gate: how honest, how noisy, how costly.

Peer check against guidellm, Monte-Carlo and whole-session simulations of the gate, real
sessions on a cluster and their replay, each point's noise, the client's own overhead. They run
the pipeline, the gates and the terminal, so they live above all of them; nothing in the pipeline
imports them (tests/unit/test_import_graph.py). Findings are in docs/statistics.md and
docs/peer-check.md.
"""
