"""Build kinds: build a release once, put it on every node, prove they hold the same build.

Two kinds today, each content-addressed over the engine's source, its locked wheelhouse and the
release's build arguments:

- `wheel.ProcessBuild` (process runtime): an engine wheel plus its hashed wheelhouse, installed
  into a virtual environment on every node (`wheel.py`; shared inputs in `wheelhouse.py`).
- `release_image.ImageBuild` (docker runtime): a release image built from the engine's source
  on the head's daemon (`base_image.py`, `source_image.py`) and streamed to every other daemon
  (`distribute.py`, `fanout.py`); `release_image.py` is the one build-and-distribute path.

Images sparkgate does not make from the engine's source are adopted by their image ID
(`adopted_image.py`: a prebuilt tag, or the operator's build command, not run again for the
same inputs on the same host), or built from the release's
own Dockerfile with the docker CLI, BuildKit where offered, on a node's or the controller's
daemon (`dockerfile.py`); all are distributed and verified like the source kind's image.

Add a build kind:
1. Write `flows/cluster/build/<kind>.py` with a frozen pydantic build model (a `digest` and a
   `short` name) and a function that makes it from a `Release`, reporting to `say: LineSink`.
2. Add a function that installs it on a node and one that verifies all nodes hold the same one.
3. Add the model to `flows.cluster.runtime.base.Build` and call both from the runtime that
   uses it (`build` and `install` of `flows/cluster/runtime/<kind>.py`); callers never see the
   kind.
"""
