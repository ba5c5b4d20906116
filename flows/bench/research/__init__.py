"""Research tools about the benchmark itself.

Peer check, Monte-Carlo honesty check, client overhead.
"""
