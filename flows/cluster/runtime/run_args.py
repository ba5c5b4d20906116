"""`docker run` style options of a cluster file (`runtime.run_args`) as the docker SDK's.

The runtime creates containers through the SDK, not the CLI, so each `docker run` option a
cluster file may give is translated here; an option it cannot honour is refused rather than
dropped (ranks always use host networking, so `--network` may only say `host`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from docker.types import DeviceRequest, Mount, Ulimit

from flows.errors import ClusterError


def run_arg_options(run_args: Sequence[str]) -> dict[str, Any]:
    """The SDK's create options for `docker run` style arguments; ClusterError for others.

    Ranks always use host networking, so `--network` may only say `host`.
    """
    options: dict[str, Any] = {}
    for flag, value in _flag_values(run_args):
        if flag in ("--network", "--net"):
            if value != "host":
                raise ClusterError(f"run_args {flag}={value}: ranks use host networking only")
        elif flag == "--privileged":
            options["privileged"] = value in ("", "true")
        elif flag in _SCALARS:
            options[_SCALARS[flag]] = value
        elif flag in _LISTS:
            options.setdefault(_LISTS[flag], []).append(value)
        elif flag == "--gpus":
            count = -1 if value == "all" else int(value)
            options.setdefault("device_requests", []).append(
                DeviceRequest(count=count, capabilities=[["gpu"]])
            )
        elif flag == "--mount":
            options.setdefault("mounts", []).append(mount_option(value))
        else:  # --ulimit (_flag_values refused every other flag)
            name, _, limits = value.partition("=")
            soft, _, hard = limits.partition(":")
            options.setdefault("ulimits", []).append(
                Ulimit(name=name, soft=int(soft), hard=int(hard or soft))
            )
    return options


def mount_option(value: str) -> Mount:
    """`--mount type=bind,source=S,target=T[,readonly]` as the SDK's Mount; ClusterError if not."""
    fields: dict[str, str] = {}
    for part in value.split(","):
        key, _, item = part.partition("=")
        fields[key.strip()] = item.strip()
    kind = fields.get("type", "volume")
    source = fields.get("source") or fields.get("src")
    target = fields.get("target") or fields.get("destination") or fields.get("dst")
    unknown = set(fields) - _MOUNT_KEYS
    if kind not in ("bind", "volume", "tmpfs") or not target or unknown:
        raise ClusterError(
            f"run_args --mount={value}: want type=bind|volume|tmpfs,source=...,target=..."
            + (f" (unknown: {', '.join(sorted(unknown))})" if unknown else "")
        )
    read_only = "readonly" in fields or "ro" in fields or fields.get("readonly") == "true"
    return Mount(target=target, source=source, type=kind, read_only=read_only)


_MOUNT_KEYS = {"type", "source", "src", "target", "destination", "dst", "readonly", "ro"}
_SCALARS = {
    "--cpuset-cpus": "cpuset_cpus",
    "--ipc": "ipc_mode",
    "--pid": "pid_mode",
    "--shm-size": "shm_size",
    "--memory": "mem_limit",
    "--memory-swap": "memswap_limit",
}
_LISTS = {
    "--device": "devices",
    "--device-cgroup-rule": "device_cgroup_rules",
    "--cap-add": "cap_add",
    "--security-opt": "security_opt",
}
_VALUELESS = ("--privileged",)
_KNOWN = {*_SCALARS, *_LISTS, *_VALUELESS, "--gpus", "--ulimit", "--mount", "--network", "--net"}


def _flag_values(run_args: Sequence[str]) -> list[tuple[str, str]]:
    """`--flag=value` and `--flag value` pairs (a valueless flag gets "")."""
    pairs, items = [], list(run_args)
    while items:
        item = items.pop(0)
        flag, equals, value = item.partition("=")
        if flag not in _KNOWN:
            raise ClusterError(
                f"run_args {flag}: not supported by the docker runtime "
                f"(supported: {', '.join(sorted(_KNOWN))})"
            )
        if not equals and flag not in _VALUELESS:
            if not items:
                raise ClusterError(f"run_args {flag}: missing value")
            value = items.pop(0)
        pairs.append((flag, value))
    return pairs
