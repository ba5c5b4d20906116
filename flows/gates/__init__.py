"""The qualification gates: one package per gate (rules, runner, story, typed summary), a registry.

Each gate is a package `flows/gates/<gate>/`: `rules.py` (pure: what the raw observations mean,
the verdict), `summary.py` (the pydantic model of the figures the record keeps), `story.py`
(what the record says of the gate: README section, headline, self-checks, compare rows, plots,
and the recompute step `verify` runs over the raw files, often in its own `recompute.py`) and
`runner.py` (the I/O: boots, traffic, files, and the object of the `flows.gates.base.Gate` shape
the registry lists). `flows.gates.harness.run_gate` runs every gate alike: timing, atomic raw
files, the file listing and boot-failure evidence. `flows.pipeline.gate_loop` runs the
registry's gates in order as cached Prefect tasks; `flows.record` renders, compares, plots and
verifies them by looping over the registry, never naming a gate.

Add a fifth gate:

1. the package `flows/gates/<gate>/` with `rules.py`, `summary.py` (a model with
   `gate: Literal["<gate>"] = "<gate>"`), `story.py` (an object of the
   `flows.gates.story.GateStory` shape) and `runner.py` (a frozen dataclass with `name`,
   `title`, `settings_model`, `summary_model`, `boot_failure`, `story`, `inputs(...)` and
   `run(context, settings, inputs, files) -> GateVerdict`, and a module-level instance);
2. its summary model in the `GateSummary` union of `flows/gates/summaries.py`;
3. its instance in `flows/gates/registry.py` (`REGISTRY`, in flow order: the stage list,
   the loop, the record, the plan and the CLI follow it);
4. its settings model (a `flows.spec.release.GateSettings`) as a field of
   `flows.spec.release.Gates`, named like the gate;
5. `sparkgate schema` to regenerate config/schema/.
"""
