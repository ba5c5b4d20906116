"""A gate's stage folder: raw files written atomically, and the listing the record keeps."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flows.fileio import write_text


@dataclass(frozen=True)
class GateFiles:
    """The stage folder of one gate; every write is atomic (a reader never sees half a file)."""

    root: Path

    def path(self, name: str) -> Path:
        """Where a raw file goes (its folder created)."""
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def write_text(self, name: str, text: str) -> str:
        """Write text under the stage folder; the name relative to it."""
        write_text(self.path(name), text)
        return name

    def write_json(self, name: str, data: Any) -> str:
        """Write `data` as JSON (the gates' raw layout); the name relative to the folder."""
        return self.write_text(name, json.dumps(data, indent=1, sort_keys=False) + "\n")

    def listing(self) -> list[str]:
        """Every file the stage folder holds (hidden and partial files aside), sorted."""
        if not self.root.is_dir():
            return []
        return sorted(
            p.relative_to(self.root).as_posix()
            for p in self.root.rglob("*")
            if p.is_file() and not p.name.startswith(".")
        )
