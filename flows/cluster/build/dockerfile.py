"""The dockerfile build kind: sparkgate builds the release's Dockerfile with the docker CLI.

The recipe's image comes from `docker/Dockerfile` built with named contexts (`COPY
--from=vllm-source`, ...) on a vLLM base pulled by digest (`ds41f:docker/Dockerfile`), which
only BuildKit can build. The docker SDK's build API speaks the classic builder only, so the
build runs the docker CLI on the controller with DOCKER_HOST set to the build daemon: a node's
(default the head) or the controller's own (`on: controller`). `docker buildx build` (BuildKit)
is used when `docker buildx version` answers; otherwise the classic builder, which cannot take
named contexts: a release that names some is refused before anything starts, never built
without them.

Offline unless the cluster file says otherwise (`runtime.builds`): RUN steps get `--network
none`, and every image the build would pull (each FROM, the `# syntax` frontend, each
docker-image:// context, each `COPY --from` image) must already be on the build daemon. The
built image must have the nodes' architecture (the controller's may differ: `platform`), and is
then shipped to every node by `distribute.py`, which verifies one image ID everywhere.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from docker.errors import DockerException
from requests.exceptions import RequestException

from flows.cluster.build.distribute import inspect_facts
from flows.cluster.build.release_image import ImageBuild, docker_endpoints
from flows.cluster.build.source_image import BuiltImage
from flows.cluster.transport.docker_client import DockerEndpoint, connect
from flows.errors import BuildError, SpecError
from flows.lines import LineSink
from flows.secrets import Secrets, collect, resolve
from flows.spec.build import CONTROLLER, IMAGE_CONTEXT, Build
from flows.spec.cluster import Cluster, DockerRuntime
from flows.spec.release import Release

Builder = Literal["buildx", "classic"]
OUTPUT_TAIL = 1500
PROBE_TIMEOUT_S = 30
_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
_VARIABLE = re.compile(
    r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?::?[-+][^}]*)?\}|([A-Za-z_][A-Za-z0-9_]*))"
)


# -- pure ----------------------------------------------------------------------------------------


def render_tag(template: str, release: str, now: datetime) -> str:
    """The tag of this build: `{release}` (lowercased) and `{stamp}` (UTC) filled in."""
    return template.format(release=release.lower(), stamp=now.strftime("%Y%m%dt%H%M%S"))


def build_argv(
    build: Build,
    *,
    builder: Builder,
    tag: str,
    args: Mapping[str, str],
    network: bool,
    iidfile: str,
) -> list[str]:
    """The docker CLI command that builds the release (run with DOCKER_HOST = the daemon)."""
    if build.context is None or build.dockerfile_path is None:
        raise SpecError("a dockerfile build needs `context`", key="build.context")
    argv = ["docker", "buildx", "build", "--load"] if builder == "buildx" else ["docker", "build"]
    argv += ["--file", str(build.dockerfile_path), "--tag", tag, "--iidfile", iidfile]
    for name, value in args.items():
        argv += ["--build-arg", f"{name}={value}"]
    folders = build.context_folders
    for name, value in build.contexts.items():
        argv += ["--build-context", f"{name}={folders.get(name, value)}"]
    if build.target is not None:
        argv += ["--target", build.target]
    if build.platform is not None:
        argv += ["--platform", build.platform]
    if not network:
        argv += ["--network", "none"]
    if builder == "buildx":
        argv += ["--progress", "plain"]
    return [*argv, str(build.context)]


def builder_env(builder: Builder, daemon: str) -> dict[str, str]:
    """The variables the docker CLI runs with: the build daemon, and the builder chosen."""
    return {"DOCKER_HOST": daemon, "DOCKER_BUILDKIT": "1" if builder == "buildx" else "0"}


def refusal(build: Build, builder: Builder) -> str | None:
    """Why this builder cannot build the release as written (None: it can)."""
    if build.contexts and builder != "buildx":
        names = ", ".join(sorted(build.contexts))
        return (
            f"the release names build contexts ({names}), which only BuildKit through docker "
            "buildx can take, and `docker buildx version` does not answer on this controller: "
            "install the buildx plugin (Debian: docker-buildx) or drop the named contexts; "
            "sparkgate never builds without them"
        )
    return None


def pulled_images(
    dockerfile: str, args: Mapping[str, str], contexts: Mapping[str, str]
) -> list[str]:
    """Every image the build would fetch from a registry: FROM bases (global ARG defaults and
    build args filled in), the `# syntax` frontend, `COPY --from` images and docker-image://
    contexts. Stage names, named contexts and `scratch` are not images."""
    syntax = re.match(r"^#\s*syntax\s*=\s*(\S+)", dockerfile.lstrip())
    found = [syntax.group(1)] if syntax is not None else []
    values = dict(args)
    stages: set[str] = set()
    seen_from = False
    for line in _logical_lines(dockerfile):
        words = line.split()
        instruction = words[0].upper()
        if instruction == "ARG" and not seen_from:
            for item in words[1:]:
                name, _, default = item.partition("=")
                values.setdefault(name, _unquote(default))
        elif instruction == "FROM":
            seen_from = True
            found += _from_image(words[1:], values, stages, contexts)
        elif instruction in ("COPY", "RUN"):
            sources = [_substitute(source, values) for source in _from_flags(words[1:])]
            found += [
                s for s in sources if s not in stages and s not in contexts and not s.isdigit()
            ]
    found += [
        v.removeprefix(IMAGE_CONTEXT) for v in contexts.values() if v.startswith(IMAGE_CONTEXT)
    ]
    return list(dict.fromkeys(found))


def _from_flags(words: list[str]) -> list[str]:
    """What `COPY --from=X` and `RUN --mount=...,from=X` read from (a stage, context or image)."""
    found = []
    for word in words:
        if not word.startswith("--"):
            break
        if word.startswith("--from="):
            found.append(word.removeprefix("--from="))
        elif word.startswith("--mount="):
            found += re.findall(r"(?:^|,)from=([^,]+)", word.removeprefix("--mount="))
    return found


def _from_image(
    words: list[str], values: Mapping[str, str], stages: set[str], contexts: Mapping[str, str]
) -> list[str]:
    """The image one FROM names (none for a stage, a named context or scratch); notes its stage."""
    rest = [word for word in words if not word.startswith("--")]
    if not rest:
        return []
    image = _substitute(rest[0], values)
    named = image.lower() in stages or image in contexts or image == "scratch"
    if len(rest) >= 3 and rest[1].upper() == "AS":
        stages.add(rest[2].lower())
    return [] if named else [image]


def docker_arch(name: str) -> str:
    """A daemon's or an image's architecture in docker's platform words (amd64, arm64)."""
    return _ARCH.get(name.lower(), name.lower())


def arch_problem(what: str, arch: str, nodes: Mapping[str, str]) -> str | None:
    """Why an image (or platform) of `arch` cannot run on the nodes (None: it can)."""
    wrong = sorted(node for node, node_arch in nodes.items() if docker_arch(node_arch) != arch)
    if not wrong:
        return None
    theirs = ", ".join(f"{node} {docker_arch(nodes[node])}" for node in wrong)
    return (
        f"{what} is {arch}, but the nodes run {theirs}: set build.platform to the nodes' "
        "(linux/<arch>) or build on a node"
    )


def _logical_lines(text: str) -> list[str]:
    """Instructions joined across `\\` continuations, comments dropped."""
    joined: list[str] = []
    current = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        joined.append(current + stripped)
        current = ""
    if current:
        joined.append(current)
    return joined


def _substitute(word: str, values: Mapping[str, str]) -> str:
    return _VARIABLE.sub(lambda m: values.get(m.group(1) or m.group(2), ""), word)


def _unquote(value: str) -> str:
    return value[1:-1] if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"" else value


# -- where and with what -------------------------------------------------------------------------


def build_endpoint(cluster: Cluster, release: Release) -> DockerEndpoint:
    """The daemon the image is built on: a node's (`on`, default the head) or the controller's."""
    runtime = _docker(cluster)
    if release.build.on == CONTROLLER:
        return DockerEndpoint(node=CONTROLLER, base_url=runtime.builds.controller_daemon)
    name = release.build.on or cluster.head.name
    endpoint = next((e for e in docker_endpoints(cluster, release) if e.node == name), None)
    if endpoint is None:
        raise SpecError(
            f"no node {name!r} in cluster {cluster.name}",
            key="build.on",
            expected="a node name or controller",
        )
    return endpoint


def probe_builder(env: Mapping[str, str] | None = None) -> Builder:
    """buildx when `docker buildx version` answers on this machine, else the classic builder;
    SpecError when there is no docker CLI at all."""
    if shutil.which("docker") is None:
        raise SpecError(
            "a dockerfile build runs the docker CLI on the controller, and there is none on PATH",
            key="build.kind",
            expected="the docker CLI installed on the controller",
        )
    try:
        done = subprocess.run(
            ["docker", "buildx", "version"], env={**os.environ, **(env or {})},
            capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return "classic"
    return "buildx" if done.returncode == 0 and "buildx" in done.stdout.lower() else "classic"


def check_buildable(cluster: Cluster, release: Release) -> Builder:
    """SpecError before anything starts when the release cannot be built here as written: an
    input missing, or named contexts without buildx."""
    missing = release.build.missing_inputs()
    if missing:
        key, absent = missing[0]
        raise SpecError(
            f"release {release.name}: {absent}", key=key, expected="what it builds from"
        )
    endpoint = build_endpoint(cluster, release)
    builder = probe_builder({"DOCKER_HOST": endpoint.base_url})
    problem = refusal(release.build, builder)
    if problem is not None:
        raise SpecError(problem, key="build.contexts", expected="docker buildx on the controller")
    return builder


# -- I/O -----------------------------------------------------------------------------------------


def dockerfile_image(cluster: Cluster, release: Release, say: LineSink) -> ImageBuild:
    """Build the release's Dockerfile on its build daemon; the image, checked for the nodes'
    architecture, ready to distribute (BuildError when the build or a check fails)."""
    build = release.build
    policy = _docker(cluster).builds
    source = build_endpoint(cluster, release)
    builder = check_buildable(cluster, release)
    args = {name: resolve(value, key=f"build.args.{name}") for name, value in build.args.items()}
    nodes = _node_archs(cluster, release)
    if build.platform is not None:
        wanted = docker_arch(build.platform.split("/")[1] if "/" in build.platform else "")
        problem = arch_problem(f"build.platform {build.platform}", wanted, nodes)
        if problem is not None:
            raise BuildError(problem)
    if not policy.pull:
        _require_local(source, build, args)
    tag = render_tag(build.tag, release.name, datetime.now(UTC))
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sparkgate-iid-") as folder:
        iidfile = str(Path(folder) / "iid")
        argv = build_argv(
            build, builder=builder, tag=tag, args=args, network=policy.network, iidfile=iidfile
        )
        secrets = collect([args], cluster.secret_keys)
        say(f"{source.node}: building {tag} with {builder}: {' '.join(secrets.argv(argv))}")
        _run(argv, builder_env(builder, source.base_url), build.timeout_s, secrets)
        image_id = Path(iidfile).read_text().strip()
    seconds = time.monotonic() - started
    with closing(connect(source)) as client:
        facts = inspect_facts(client, source.node, tag)
        image_arch = docker_arch(str(client.api.inspect_image(tag).get("Architecture", "")))
    if facts is None or facts.image_id != image_id:
        raise BuildError(f"{source.node}: the build reported {image_id}, but {tag} is not it")
    problem = arch_problem(f"image {tag} built on {source.node}", image_arch, nodes)
    if problem is not None:
        raise BuildError(problem)
    say(f"{source.node}: built {tag} {image_id[:19]} in {seconds:.0f} s")
    return ImageBuild(
        built=BuiltImage(
            tag=tag, image_id=image_id, source_digest="", reused=False, seconds=seconds
        ),
        base_image="",
        lock_digest="",
        seconds={"build": seconds},
        origin="dockerfile",
        built_on=source.node,
    )


def _docker(cluster: Cluster) -> DockerRuntime:
    if not isinstance(cluster.runtime, DockerRuntime):
        raise SpecError(
            f"cluster {cluster.name} runs ranks as processes; a dockerfile build needs docker",
            key="runtime.kind",
            expected="docker",
        )
    return cluster.runtime


def _node_archs(cluster: Cluster, release: Release) -> dict[str, str]:
    """Each node's daemon architecture (what its images must be built for)."""
    found: dict[str, str] = {}
    for endpoint in docker_endpoints(cluster, release):
        with closing(connect(endpoint)) as client:
            try:
                found[endpoint.node] = str(client.info().get("Architecture", ""))
            except (DockerException, RequestException) as error:
                raise BuildError(f"node {endpoint.node}: docker info: {error}") from error
    return found


def _require_local(source: DockerEndpoint, build: Build, args: Mapping[str, str]) -> None:
    """BuildError naming every image the build would pull that the build daemon lacks."""
    dockerfile = build.dockerfile_path
    if dockerfile is None:
        return
    needed = pulled_images(dockerfile.read_text(), args, build.contexts)
    with closing(connect(source)) as client:
        missing = [image for image in needed if inspect_facts(client, source.node, image) is None]
    if missing:
        raise BuildError(
            f"{source.node}'s daemon lacks {', '.join(missing)}, and the cluster does not allow "
            "pulls (runtime.builds.pull: false): load or pull them there first, or allow pulls"
        )


def _run(argv: Sequence[str], env: Mapping[str, str], timeout: float, secrets: Secrets) -> None:
    shown = secrets.argv(argv)
    try:
        done = subprocess.run(
            list(argv), env={**os.environ, **env}, capture_output=True, text=True,
            timeout=timeout, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired as error:
        raise BuildError(f"`{' '.join(shown)}` ran past {timeout:.0f} s") from error
    except OSError as error:
        raise BuildError(f"`{' '.join(shown)}` could not start: {error}") from error
    if done.returncode != 0:
        tail = secrets.text((done.stdout + done.stderr).strip())[-OUTPUT_TAIL:] or "(no output)"
        raise BuildError(f"`{' '.join(shown)}` exited {done.returncode}: {tail}")
