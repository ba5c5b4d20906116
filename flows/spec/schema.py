"""JSON Schemas of every spec kind, so editors complete and check keys while people type.

The schemas are pydantic's, with one addition: any mapping may instead be an overlay
(`extends: FILE` plus `set:`), so files that use overlays are not flagged by the editor.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from flows.spec.kinds import available_kinds

OVERLAY_PROPERTIES = {
    "extends": {
        "type": "string",
        "description": "Start from this file (relative to this one), then apply `set`.",
    },
    "set": {"type": "object", "description": "Keys deep-merged over the extended file."},
}


def spec_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON Schema of `model`, with overlays allowed on every object."""
    schema = model.model_json_schema()
    for definition in [schema, *schema.get("$defs", {}).values()]:
        _allow_overlay(definition)
    return schema


def _allow_overlay(definition: dict[str, Any]) -> None:
    properties = definition.get("properties")
    if not isinstance(properties, dict):
        return
    properties.update(OVERLAY_PROPERTIES)
    required = definition.pop("required", None)
    if required:
        definition["anyOf"] = [{"required": required}, {"required": ["extends"]}]


def write_schemas(out: Path) -> list[Path]:
    """Write `<kind>.schema.json` for every available kind into `out`; returns the files."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for kind, model in sorted(available_kinds().items()):
        path = out / f"{kind}.schema.json"
        path.write_text(json.dumps(spec_schema(model), indent=2) + "\n", encoding="utf-8")
        written.append(path)
    return written
