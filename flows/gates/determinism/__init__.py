"""The determinism gate: pure judgement (rules), typed summary, boots and traffic (runner)."""
