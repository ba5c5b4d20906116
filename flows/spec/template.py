"""Placeholders in spec strings: `{rank}`, `{cache.kernels}`, `{option.mlp_kernel}`, ...

Only `{name}` and `{group.key}` made of identifier characters are placeholders, so JSON in an
argument (`{"method": "dspark"}`, `{{.State.Running}}`) passes through untouched. There is no
escape: braces around a bare identifier are always a placeholder.
The same parser checks templates at load time (unknown names) and fills them at render time.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_.-]+)?)\}")

NODE_PLACEHOLDERS = frozenset(
    {
        "rank",
        "nnodes",
        "node",
        "address",
        "user",
        "head_address",
        "rendezvous_port",
        "port",
        "model",
        "model_id",
        "model_seed",
        "model_size",
        "model_checkpoint",
        "model_revision",
        "workdir",
        "release",
        "boot_token",
    }
)
"""Names every launch template may use; `cache.<kind>` and `option.<name>` come on top.

`boot_token` is the secret every rank of one boot shares (empty outside a boot).
"""


def placeholders(template: str) -> list[str]:
    """The placeholder names used in `template`, in order."""
    return [match.group(1) for match in PLACEHOLDER.finditer(template)]


def unknown_placeholders(template: str, known: Iterable[str]) -> list[str]:
    """Placeholder names in `template` that are not in `known`."""
    allowed = set(known)
    return [name for name in placeholders(template) if name not in allowed]


def fill(template: str, values: Mapping[str, str]) -> str:
    """Replace every placeholder; a name missing from `values` raises KeyError."""

    return PLACEHOLDER.sub(lambda match: values[match.group(1)], template)
