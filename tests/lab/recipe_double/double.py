"""Setting up the recipe double: the Sparks' files, the recipe checkout and the lab overlay.

Pure file work and git, no docker: the lab tests call these on the shared file system (namespace
hosts share it). Paths follow the recipe's (`/home/swank/...`, r6d's r6d-tp3.json `host.home`,
`deployment.path`, `container.mounts`), rooted in a lab folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from flows.spec.cluster import Cluster
from flows.spec.load import load_model
from flows.spec.release_tests import ReleaseTests
from tests.lab.recipe_double import runc_memlock

HERE = Path(__file__).resolve().parent
# The recipe's classification as sparkgate ships it (r6d's list in sparkgate's schema), which the
# example releases read from the checkout's config/release-tests.json (checkout_classification).
EXAMPLE_CLASSIFICATION = (
    HERE.parents[2] / "examples" / "spark-ds41f" / "config" / "release-tests.yaml"
)
RECIPE_HOME = "/home/swank"
RECIPE_CHECKOUT = f"{RECIPE_HOME}/projects/spark-ds41f"
# The display device's by-path node in the recipe's run arguments (R3 docker_run_args).
DISPLAY_NODE = "/dev/dri/by-path/pci-000f:01:00.0-card"
# What the examples' preflight expects of a Spark (R3 host.kernel: release and page size).
SPARK_KERNEL = "7.0.0-1019-nvidia-64k"
SPARK_PAGE_SIZE = "65536"
SPARK_MEMORY_BYTES = 128 * 10**9  # "GB10, 128 GB unified memory each" (release thread)
GIT = ["git", "-c", "user.name=recipe double", "-c", "user.email=double@sparkgate.invalid"]


def git(checkout: Path, *argv: str) -> str:
    done = subprocess.run([*GIT, *argv], cwd=checkout, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def write_shims(folder: Path) -> Path:
    """`uname -r` and `getconf PAGESIZE` as a Spark answers them; anything else as this machine."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, question, answer in (
        ("uname", "-r", SPARK_KERNEL),
        ("getconf", "PAGESIZE", SPARK_PAGE_SIZE),
    ):
        real = shutil.which(name, path="/usr/bin:/bin")
        shim = folder / name
        shim.write_text(
            f'#!/bin/sh\nif [ "$*" = "{question}" ]; then echo {answer}; exit 0; fi\n'
            f'exec {real} "$@"\n'
        )
        shim.chmod(0o755)
    _write_meminfo_shim(folder / "cat")
    return folder


def _write_meminfo_shim(shim: Path) -> None:
    """`cat /proc/meminfo` as a Spark's: this machine's figures grown to a GB10's 128 GB (the
    release thread's hardware lines), so the profile's 112 GiB free-memory preflight is met."""
    total_kb = next(
        int(line.split()[1])
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal:")
    )
    extra_kb = max(0, SPARK_MEMORY_BYTES // 1024 - total_kb)
    grow = (
        '/^(MemTotal|MemFree|MemAvailable):/ {printf "%s %d kB\\n", $1, $2 + extra; next} {print}'
    )
    shim.write_text(
        '#!/bin/sh\nif [ "$*" = "/proc/meminfo" ]; then\n'
        f"  exec /usr/bin/awk -v extra={extra_kb} '{grow}' /proc/meminfo\nfi\n"
        'exec /usr/bin/cat "$@"\n'
    )
    shim.chmod(0o755)


def write_gpu_hook(folder: Path) -> Path:
    """A do-nothing `nvidia-container-runtime-hook` for the lab's dockerd PATH.

    dockerd registers its NVIDIA device driver (what `--gpus=all` asks for) only when this hook is
    on its PATH, and then runs it before each such container starts (moby
    daemon/nvidia_linux.go). The double's hook reads the container state and exits 0: the
    container starts as on a Spark, with no GPU to pass.
    """
    folder.mkdir(parents=True, exist_ok=True)
    hook = folder / "nvidia-container-runtime-hook"
    hook.write_text("#!/bin/sh\ncat >/dev/null\nexit 0\n")
    hook.chmod(0o755)
    return folder


def write_runc_wrapper(folder: Path) -> Path:
    """`runc` for the lab's dockerd PATH: the recipe's `--ulimit=memlock=-1:-1` within this machine.

    The stub runs `runc_memlock` (why: its docstring) with the real runc, found now on PATH
    without `folder` (never itself), and its log `folder/memlock.jsonl`.
    """
    folder.mkdir(parents=True, exist_ok=True)
    here = folder.resolve()
    search = [entry for entry in os.environ.get("PATH", "").split(os.pathsep) if entry]
    others = [entry for entry in search if Path(entry).resolve() != here]
    real = shutil.which("runc", path=os.pathsep.join(others))
    if real is None:
        raise FileNotFoundError(f"no runc on PATH {os.pathsep.join(others)!r}")
    shutil.copy(HERE / "runc_memlock.py", folder / "runc_memlock.py")
    stub = folder / "runc"
    stub.write_text(
        f"#!{sys.executable} -S\nimport sys\nsys.path.insert(0, {str(here)!r})\n"
        "import runc_memlock\n"
        f"runc_memlock.main(sys.argv, {str(Path(real).resolve())!r}, "
        f"{str(here / runc_memlock.LOG_NAME)!r})\n"
    )
    stub.chmod(0o755)
    return folder


def make_spark_files(root: Path, snapshot: str) -> None:
    """A Spark's files under `root` (the lab's `/`): the HF snapshot with a bundled-engine model,
    the display device's node and /dev/infiniband's stand-in (a character device: /dev/null's)."""
    model = root / snapshot.lstrip("/")
    if not (model / "manifest.sha256").is_file():
        model.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "sparkengine", "make-model", "--out", str(model),
             "--size", "tiny", "--max-context", "16384"],
            check=True, capture_output=True,
        )  # fmt: skip
    if not (model / "manifest.sha256").is_symlink():
        _as_hub_snapshot(model)
    display = root / DISPLAY_NODE.lstrip("/")
    display.parent.mkdir(parents=True, exist_ok=True)
    display.touch()
    infiniband = root / "dev" / "infiniband"
    infiniband.mkdir(parents=True, exist_ok=True)
    uverbs = infiniband / "uverbs0"
    if not uverbs.exists():
        subprocess.run(["mknod", str(uverbs), "c", "1", "3"], check=True)


def _as_hub_snapshot(model: Path) -> None:
    """Lay a model folder out as the HF hub cache does: each file a blob named by its sha256 in
    `<repo>/blobs/`, the snapshot's entries relative links to them (`../../blobs/<sha256>`). The
    recipe mounts the snapshot at /models and the blobs at /blobs, so the links resolve inside
    the container as they do on a Spark."""
    blobs = model.parents[1] / "blobs"
    blobs.mkdir(exist_ok=True)
    for file in sorted(p for p in model.iterdir() if p.is_file() and not p.is_symlink()):
        digest = hashlib.sha256(file.read_bytes()).hexdigest()
        file.replace(blobs / digest)
        file.symlink_to(Path("..") / ".." / "blobs" / digest)


def make_checkout(
    checkout: Path,
    *,
    base_image: str,
    tag: str,
    tests: list[str],
    classification: Path = EXAMPLE_CLASSIFICATION,
    launcher: tuple[dict[str, Any], dict[str, Any]] | None = None,
) -> str:
    """The double's recipe checkout at its first release (container.image `tag`); its commit.

    `tests` are the tree's test files (paths under the candidate vLLM tree): each runs the bundled
    engine's tokenizer tests, so the release-tests gate runs real tests in the image.
    `classification` (a release-tests file) is committed as `config/release-tests.json`, where
    the recipe keeps its own since r6u and the example releases read it. `launcher` is what
    `bin/spark cluster start` renders the containers from (`recipe_config.launcher_files`): the
    first part is committed in `config/cluster.json`, the node map is the site's
    `config/nodes.json`, git-ignored as the recipe's is.
    """
    shutil.rmtree(checkout, ignore_errors=True)
    (checkout / "bin").mkdir(parents=True)
    (checkout / "config").mkdir()
    docker = checkout / "docker"
    shutil.copytree(HERE / "image", docker)
    shutil.copy(HERE / "vllm_double.py", docker / "vllm")
    engine_tests = HERE.parents[2] / "engine" / "tests" / "test_engine_tokenizer.py"
    for name in tests:
        target = docker / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(engine_tests, target)
    shutil.copy(HERE / "spark_double.py", checkout / "bin" / "spark")
    (checkout / "bin" / "spark").chmod(0o755)
    (checkout / "scripts").mkdir()
    shutil.copy(HERE / "spark_cluster.py", checkout / "scripts" / "spark_cluster.py")
    (checkout / ".gitignore").write_text(".work/\ncache/\nconfig/nodes.json\n__pycache__/\n")
    lock = {"base_image": base_image, "vllm_tree": "double-" + tag.rsplit("-", 1)[-1]}
    (checkout / "config" / "upstreams.lock.json").write_text(json.dumps(lock, indent=2) + "\n")
    (checkout / "config" / "release-tests.json").write_text(
        classification_json(classification.read_text())
    )
    config, nodes = launcher or ({}, None)
    (checkout / "config" / "cluster.json").write_text(json.dumps(config, indent=2) + "\n")
    if nodes is not None:
        (checkout / "config" / "nodes.json").write_text(json.dumps(nodes, indent=2) + "\n")
    _set_image(checkout, tag)
    subprocess.run([*GIT, "init", "-q", "-b", "main"], cwd=checkout, check=True)
    git(checkout, "add", "-A")
    git(checkout, "commit", "-q", "-m", f"release {tag}")
    return git(checkout, "rev-parse", "HEAD")


def classification_json(text: str) -> str:
    """A release-tests classification (YAML or JSON text) as the JSON file the recipe's checkout
    holds: the same document in sparkgate's schema, comments dropped (pure)."""
    document = yaml.safe_load(text)
    ReleaseTests.model_validate(document)  # the schema the example releases read it with
    return json.dumps(document, indent=2) + "\n"


def next_release(checkout: Path, tag: str) -> str:
    """Commit the next release: a new container.image tag (and so a new image); its commit."""
    _set_image(checkout, tag)
    git(checkout, "commit", "-q", "-am", f"release {tag}")
    return git(checkout, "rev-parse", "HEAD")


def _set_image(checkout: Path, tag: str) -> None:
    """container.image of config/cluster.json set to `tag`, every other key kept."""
    path = checkout / "config" / "cluster.json"
    cluster = json.loads(path.read_text())
    container = {"name": "dsv41-karmic-kraken", **cluster.get("container", {}), "image": tag}
    path.write_text(json.dumps({**cluster, "container": container}, indent=2) + "\n")


def lab_overlay(
    example: dict[str, Any], lab: dict[str, Any], root: Path, workdirs: dict[str, str]
) -> dict[str, Any]:
    """The example cluster with only addresses, users and paths changed for the lab.

    `example` is the example cluster file's document, `lab` the lab's own cluster file (ssh user,
    key, known_hosts, node addresses and docker sockets). Every recipe path under `/home/swank` or
    `/dev` moves under `root`; each node's workdir comes from `workdirs`.
    """

    def moved(value: Any) -> Any:
        if isinstance(value, str):
            for prefix in ("/home/swank", "/dev/dri/by-path", "/dev/infiniband"):
                value = value.replace(f"source={prefix}", f"source={root}{prefix}")
                if value.startswith((prefix, f"--device={prefix}")):
                    head, _, tail = value.partition(prefix)
                    target = f":{prefix}" if head == "--device=" else ""
                    value = f"{head}{root}{prefix}{tail}{target}"
            return value
        if isinstance(value, list):
            return [moved(item) for item in value]
        if isinstance(value, dict):
            return {key: moved(item) for key, item in value.items()}
        return value

    transport = {key: lab["transport"][key] for key in ("user", "key_file", "known_hosts")}
    runtime = example["runtime"]
    nodes = []
    for node, lab_node in zip(example["nodes"], lab["nodes"], strict=True):
        overrides = {**node.get("overrides", {}), **lab_node["overrides"]}
        nodes.append({**node, "address": lab_node["address"], "workdir": workdirs[node["name"]],
                      "overrides": overrides})  # fmt: skip
    # The profile's ready URL is the recipe's deployment.ready_url, 127.0.0.1: right where
    # sparkgate runs on the head, not from a controller elsewhere (the lab's root namespace), so
    # the head's address stands in for the loopback one.
    ready = str(example["engine"]["ready"]["url"]).replace("127.0.0.1", "{address}")
    return {
        "transport": transport,
        "engine": {"ready": {"url": ready}},
        "runtime": {"run_args": moved(runtime["run_args"]), "mounts": moved(runtime["mounts"])},
        "preflight": moved(example.get("preflight", [])),
        "nodes": nodes,
    }


def write_lab_cluster(
    example: Path, lab: dict[str, Any], root: Path, workdirs: dict[str, str], path: Path
) -> Path:
    """`path`: a cluster file that extends the `example` file with `lab_overlay`'s changes."""
    document = load_model(example, Cluster).model_dump(mode="json")
    changes = lab_overlay(document, lab, root, workdirs)
    path.write_text(yaml.safe_dump({"kind": "cluster", "extends": str(example), "set": changes},
                                   sort_keys=False))  # fmt: skip
    return path


# The double's sizes for the recipe's suites. The thread's (prefill to 1,000,000 tokens, 48
# Poisson requests at 0.42 req/s, 100 single-stream requests of 256 tokens) would take hours on
# this machine's CPU engine, whose model serves 16,384 tokens; every other property of a
# workload (kind, name, gate, stream counts, rate, sampling, samples, warm-up) stays the thread's.
DOUBLE_DEPTH_DIVISOR = 512  # 32K..1M -> 64..1,953 tokens, in the thread's proportions
DOUBLE_PROMPT_TOKENS = 256
DOUBLE_MAX_TOKENS = 32
DOUBLE_REQUESTS = 2
DOUBLE_SIZES = ("depths", "prompt_tokens", "max_tokens", "requests")
"""The only workload keys `at_double_size` changes."""


def at_double_size(suite: dict[str, Any], tolerance: float) -> dict[str, Any]:
    """One of the recipe's suites (a loaded suite's document) at the double's sizes (pure).

    Sizes only (`DOUBLE_SIZES`), plus what is the cluster's in sparkgate's design: the
    tolerance its A/A noise resolves (every workload's points that gate, at `tolerance`), in
    place of the recipe's 3 % measured by servebench on Sparks, and one client process.
    """
    workloads = []
    for workload in suite["workloads"]:
        resized = dict(workload)
        if "depths" in workload:
            resized["depths"] = [depth // DOUBLE_DEPTH_DIVISOR for depth in workload["depths"]]
        for key, most in (
            ("prompt_tokens", DOUBLE_PROMPT_TOKENS),
            ("max_tokens", DOUBLE_MAX_TOKENS),
            ("requests", DOUBLE_REQUESTS),
        ):
            if key in workload:
                resized[key] = min(workload[key], most)
        if workload.get("gate", True) is not False:
            resized["gate"] = {"tolerance": tolerance}
        workloads.append(resized)
    description = f"{suite.get('description', suite['name'])}, at the recipe double's sizes"
    # One client process: sparkgate's client sizing (not the thread's) is for 16 streams of
    # 2,048-token prompts; a sharded batch waits 2 s for its processes, longer than a double's
    # whole sample.
    client = {**suite.get("client", {}), "processes": 1}
    return {**suite, "description": description, "client": client, "workloads": workloads}
