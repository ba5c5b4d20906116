"""The qualification gates: one package per gate (rules, runner, typed summary) and a registry.

Each gate is a package `flows/gates/<gate>/` of three modules: `rules.py` (pure: what the raw
observations mean, the verdict; `verify` recomputes with it), `summary.py` (the pydantic model of
the figures the record keeps and renders) and `runner.py` (the I/O: boots, traffic, files, and
the object of the `flows.gates.base.Gate` shape the registry lists). `flows.gates.harness.run_gate`
runs every gate alike: timing, atomic raw files, the file listing and boot-failure evidence.
`flows.pipeline.gate_loop` runs the registry's gates in order as cached Prefect tasks.

Add a fifth gate:

1. the package `flows/gates/<gate>/` with `rules.py`, `summary.py` (a model with
   `gate: Literal["<gate>"] = "<gate>"`) and `runner.py` (a frozen dataclass with `name`,
   `title`, `settings_model`, `summary_model`, `boot_failure`, `inputs(...)` and
   `run(context, settings, inputs, files) -> GateVerdict`, and a module-level instance);
2. its summary model in `flows/gates/summaries.py` (the `GateSummary` union and
   `GATE_SUMMARIES`, in flow order);
3. its instance in `flows/gates/registry.py` (`REGISTRY`, in flow order: the stage list,
   the loop and the CLI follow it);
4. its settings model (a `flows.spec.release.GateSettings`) as a field of
   `flows.spec.release.Gates`, named like the gate;
5. `sparkgate schema` to regenerate config/schema/, and the README section in
   `flows/record/readme.py` (plus its headline and problems in `flows/record/tables.py`) that
   read the typed summary.
"""
