#!/usr/bin/env python3
"""`bin/spark` of the recipe double's checkout: the recipe's commands where sparkgate meets them.

The build commands are here; `status` and `cluster start|stop` (the launcher sparkgate's operator
runtime drives) are in `spark_cluster.py`, which `make_checkout` puts in the checkout's `scripts/`
and this file imports from there, as the recipe's bin/spark imports its helpers.

Modelled on christopherowen/spark-ds41f `bin/spark` (`command_build_image`, `build_image`
parser, `require_idle_build_host`, `image_labels`, `repository_dirty`, the last one shared with
the cluster commands in `spark_cluster.py`; read at the stored r6d snapshot), with the same
refusals, exit statuses and printed lines:

- `build image` without a prepared build directory: "WARN: ... is not prepared; run bin/spark
  build prepare", exit 1 (the recipe's `build_problems`);
- a checkout with any change or untracked file (`git status --porcelain --untracked-files=all`):
  "WARN: the image records the deployment commit; commit changes first", exit 1;
- without `--apply`: the build command and "plan only; pass --apply on an idle build host to
  build and smoke-test", exit 0;
- a running `dsv41-*` container or the profile's container: "a DS4.1 service is running on this
  host; stop it before building", exit 1;
- an existing tag: "TAG already exists here; pass --tag with a new tag rather than overwrite
  it", exit 1;
- then "building TAG from DIR: ..." and, once the image exists and its `local.spark3.vllm.tree`
  label matches the lock, "built TAG sha256:ID in Ns; lowest MemAvailable N GiB", an import smoke
  in the image, and the receipt `images/<first 16 hex of the ID>.json` in the build directory.

What differs, because the double has no GPU and no sources to compile: `build prepare` copies
`docker/` into `.work/build/<lock digest>/context/` instead of fetching and patching upstreams,
the image is a classic `docker build` of that context (network off) on the host's daemon
(`DOCKER_HOST`), the smoke imports the bundled engine instead of a GPU import, and there is no
memory guard (MemAvailable is only read and reported).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCK = "config/upstreams.lock.json"
sys.path.insert(0, str(ROOT / "scripts"))
spark_cluster = importlib.import_module("spark_cluster")  # the checkout's scripts/


def read_json(relative: str) -> dict[str, object]:
    document = json.loads((ROOT / relative).read_text(encoding="utf-8"))
    assert isinstance(document, dict)
    return document


def build_directory() -> Path:
    digest = hashlib.sha256((ROOT / LOCK).read_bytes()).hexdigest()[:12]
    return ROOT / ".work" / "build" / f"double-{digest}"


def repository_revision() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, text=True, capture_output=True, check=True
    )
    return done.stdout.strip()


def available_memory_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 2**20
    return 0.0


def image_labels(tag: str) -> dict[str, object] | None:
    done = subprocess.run(
        ["docker", "image", "inspect", tag], text=True, capture_output=True, check=False
    )
    if done.returncode:
        return None
    inspection = json.loads(done.stdout)[0]
    return {"id": inspection["Id"], "labels": inspection["Config"].get("Labels") or {}}


def require_idle_build_host(cluster: dict[str, object]) -> None:
    running = subprocess.run(
        ["docker", "ps", "--format", "{{.Names}}"], check=True, text=True, capture_output=True
    ).stdout.split()
    container = cluster["container"]
    assert isinstance(container, dict)
    if any(name == container["name"] or name.startswith("dsv41-") for name in running):
        raise SystemExit("a DS4.1 service is running on this host; stop it before building")


def command_build_prepare(args: argparse.Namespace) -> int:
    directory = build_directory()
    context = directory / "context"
    if not context.is_dir():
        shutil.copytree(ROOT / "docker", context)
    print(f"prepared {directory.relative_to(ROOT)}", flush=True)
    return 0


def build_command(tag: str, context: Path, lock: dict[str, object]) -> list[str]:
    command = ["docker", "build", "--network", "none", "--tag", tag]
    build_args = {
        "BASE_IMAGE": lock["base_image"],
        "DEPLOYMENT_COMMIT": repository_revision(),
        "VLLM_TREE": lock["vllm_tree"],
    }
    for key, value in build_args.items():
        command += ["--build-arg", f"{key}={value}"]
    return [*command, str(context)]


def command_build_image(args: argparse.Namespace) -> int:
    cluster = read_json(args.cluster_config)
    lock = read_json(LOCK)
    directory = build_directory()
    if not (directory / "context").is_dir():
        print(f"WARN: {directory.relative_to(ROOT)} is not prepared; run bin/spark build prepare")
        return 1
    if spark_cluster.repository_dirty():
        print("WARN: the image records the deployment commit; commit changes first")
        return 1
    container = cluster["container"]
    assert isinstance(container, dict)
    tag = args.tag or str(container["image"])
    command = build_command(tag, directory / "context", lock)
    if not args.apply:
        print(shlex.join(command))
        print("plan only; pass --apply on an idle build host to build and smoke-test")
        return 0
    require_idle_build_host(cluster)
    if image_labels(tag) is not None:
        raise SystemExit(
            f"{tag} already exists here; pass --tag with a new tag rather than overwrite it"
        )
    available = available_memory_gib()
    print(
        f"building {tag} from {directory.relative_to(ROOT)}: {available:.1f} GiB available",
        flush=True,
    )
    started = time.monotonic()
    env = {**os.environ, "DOCKER_BUILDKIT": "0"}
    subprocess.run(command, check=True, env=env, stdout=sys.stderr)
    elapsed = time.monotonic() - started
    minimum = min(available, available_memory_gib())
    image = image_labels(tag)
    if image is None:
        raise SystemExit(f"the build finished but {tag} is not present")
    labels = image["labels"]
    assert isinstance(labels, dict)
    if labels.get("local.spark3.vllm.tree") != lock["vllm_tree"]:
        raise SystemExit(
            f"{tag}: label local.spark3.vllm.tree is {labels.get('local.spark3.vllm.tree')!r}"
        )
    print(
        f"built {tag} {image['id']} in {elapsed:.0f}s; lowest MemAvailable {minimum:.1f} GiB",
        flush=True,
    )
    smoke = ["docker", "run", "--rm", "--network", "none", "--entrypoint", "/opt/venv/bin/python",
             tag, "-c", "import sparkengine"]  # fmt: skip
    subprocess.run(smoke, check=True)
    receipts = directory / "images"
    receipts.mkdir(exist_ok=True)
    receipt = {
        "tag": tag,
        "image_id": image["id"],
        "deployment_commit": repository_revision(),
        "elapsed_seconds": round(elapsed),
        "min_available_gib": round(minimum, 1),
    }
    name = str(image["id"]).removeprefix("sha256:")[:16]
    (receipts / f"{name}.json").write_text(json.dumps(receipt, indent=2) + "\n", encoding="utf-8")
    return 0


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="spark")
    root.add_argument("--cluster-config", default="config/cluster.json", metavar="PATH")
    commands = root.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="prepare, verify, and build the pinned image")
    build_commands = build.add_subparsers(dest="build_command", required=True)
    prepare = build_commands.add_parser("prepare", help="create the build directory")
    prepare.set_defaults(func=command_build_prepare)
    image = build_commands.add_parser("image", help="plan, or build and smoke-test, the image")
    image.add_argument("--tag", help="image tag (default: container.image from the cluster config)")
    image.add_argument("--apply", action="store_true", help="build, then run the smoke")
    image.set_defaults(func=command_build_image)
    spark_cluster.add_commands(commands)
    return root


if __name__ == "__main__":
    arguments = parser().parse_args()
    raise SystemExit(arguments.func(arguments))
