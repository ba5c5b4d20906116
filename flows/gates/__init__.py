"""The qualification gates: one package per gate (rules, runner, typed summary) and a registry.

`flows.pipeline.qualify` runs them in order through one harness.
"""
