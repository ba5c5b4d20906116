"""The benchmark gate: the arm session and its decision (rules), summary, arms (runner)."""
