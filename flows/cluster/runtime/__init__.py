"""Runtimes: how a release runs on a node (process groups, containers sparkgate creates, or
containers the operator's own launcher creates: `operator.py`).

The only code that knows the runtime kind. `factory.runtime_for` picks one from the cluster
file; `base.Runtime` is what every caller uses: build, install on every node, prepare the model,
empty caches, preflight facts, a host for the release tests, and start/status/logs/stop of ranks.

Add a runtime:
1. Add its settings model to the `runtime` union in `flows/spec/cluster.py` (a new `kind`).
2. Write `flows/cluster/runtime/<kind>.py` with a class that satisfies `base.Runtime`; if it
   has a build kind of its own, add that under `flows/cluster/build/` (see its docstring) and
   to `base.Build`.
3. If its release tests need a host of their own, implement `base.ReleaseTestHost` beside it.
4. Branch on the new kind in `factory.runtime_for` - and nowhere else.
5. Test it like `tests/unit/cluster/test_runtime_process.py` (loopback) does the process one.
"""
