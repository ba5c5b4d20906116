"""The release-test classification (kind: release-tests): every engine test file is a gate or
excluded with a reason.

The recipe's release tests are chosen by a script; a test file nobody classified silently stays
out of the gate. Here the patterns select candidate files and every selected file must appear in
`files` as `{gate: true}` or `{excluded: true, reason: ...}`; the gate fails on an unclassified
file (checked where the tree is, by the release-tests gate, with `unclassified`).
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from pydantic import Field

from flows.spec.base import Problem, SpecContext, SpecModel, SpecPath, confined_out, shown


class Classification(SpecModel):
    """One test file: part of the gate, or excluded for a stated reason."""

    gate: bool = Field(default=False, description="Run this file in the release-tests gate.")
    excluded: bool = Field(default=False, description="Leave this file out of the gate.")
    reason: str | None = Field(default=None, description="Why it is excluded (required then).")

    def problems(self, context: SpecContext | None) -> list[Problem]:
        """Exactly one of gate/excluded; exclusions need a reason."""
        del context
        if self.gate == self.excluded:
            return [Problem((), "classify as gate or excluded", "gate: true or excluded: true")]
        if self.excluded and not (self.reason or "").strip():
            return [Problem(("reason",), "required for an excluded file", "a non-empty reason")]
        if self.gate and self.reason is not None:
            return [Problem(("reason",), "only excluded files carry a reason", "no reason")]
        return []


class ReleaseTests(SpecModel):
    """Which files are release tests, and the class of each."""

    kind: Literal["release-tests"] = Field(description="Always `release-tests`.")
    root: SpecPath = Field(description="Tree the patterns and file names are relative to.")
    patterns: list[str] = Field(min_length=1, description="Globs selecting candidate files.")
    files: dict[str, Classification] = Field(description="Class of every selected file.")
    patches: SpecPath | None = Field(
        default=None,
        description="The release's patch series: a unified diff, or a folder of *.patch / *.diff "
        "files; every test file it adds or changes is a candidate too, so it must be classified.",
    )

    def selects(self, name: str) -> bool:
        """Whether a file (relative to root, with /) is matched by the patterns."""
        return any(fnmatch.fnmatch(name, pattern) for pattern in self.patterns)

    def unclassified(self, names: Iterable[str]) -> list[str]:
        """Selected files without a class: each one fails the gate."""
        return sorted(n for n in names if self.selects(n) and n not in self.files)

    def _readable_patched(self, context: SpecContext | None) -> set[str] | None:
        """The patched test files, or None while the series cannot be read (a relative path in
        the loader's first pass, a path out of the project, a missing one: reported elsewhere)."""
        series = self.patches
        if series is not None and (
            not series.is_absolute() or confined_out(series, context) or not series.exists()
        ):
            return None
        return set(self.patched_tests())

    def patch_files(self) -> list[Path]:
        """The diffs of the patch series, in name order (the order a series applies in)."""
        if self.patches is None:
            return []
        if self.patches.is_dir():
            return sorted(
                p for p in self.patches.iterdir() if p.suffix in (".patch", ".diff") and p.is_file()
            )
        return [self.patches]

    def patched_tests(self) -> list[str]:
        """Test files the patch series adds or changes (paths as the diffs name them)."""
        found: set[str] = set()
        for patch in self.patch_files():
            found |= set(patched_test_files(patch.read_text(encoding="utf-8", errors="replace")))
        return sorted(found)

    def gate_files(self) -> list[str]:
        """Files the gate runs."""
        return sorted(name for name, entry in self.files.items() if entry.gate)

    def problems(self, context: SpecContext | None) -> list[Problem]:
        """Every classified file must match a pattern or be a test file the patch series touches
        (else it is dead configuration); every patch must exist."""
        patched = self._readable_patched(context)
        found = [
            Problem(("files", name), "matches none of the patterns", "a file the patterns select")
            for name in self.files
            if patched is not None and not self.selects(name) and name not in patched
        ]
        series = self.patches
        if (
            series is not None
            and series.is_absolute()
            and not confined_out(series, context)
            and not series.exists()
        ):
            found.append(
                Problem(("patches",), f"no such file or folder: {shown(series)}", "a patch series")
            )
        if confined_out(self.root, context):
            pass  # the loader refuses it without saying whether it exists
        elif self.root.is_absolute() and not self.root.is_dir():
            found.append(
                Problem(("root",), f"no such directory: {shown(self.root)}", "a directory")
            )
        elif self.root.is_absolute():
            found += [
                Problem(("root",), f"{shown(link)}: a symlink that leaves the tree", "no link out")
                for link in links_out(self.root)
            ]
        return found


def links_out(root: Path) -> list[Path]:
    """Symlinks under `root` whose target resolves outside it (they would be copied over the
    release's tests, and the file they point at shipped to a node)."""
    tree = root.resolve()
    found = []
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(folder) / name
            if path.is_symlink() and not path.resolve().is_relative_to(tree):
                found.append(path)
    return sorted(found)


def patched_test_files(diff: str) -> list[str]:
    """Test files (`test_*.py` or `*_test.py`) a unified diff creates or changes (pure).

    Reads the `+++ b/PATH` headers; a deleted file (`+++ /dev/null`) is not a candidate.
    """
    found = []
    for line in diff.splitlines():
        if not line.startswith("+++ "):
            continue
        target = line[4:].split("\t")[0].strip()
        if target == "/dev/null":
            continue
        name = target.removeprefix("b/")
        base = name.rsplit("/", 1)[-1]
        if base.endswith(".py") and (base.startswith("test_") or base.endswith("_test.py")):
            found.append(name)
    return sorted(set(found))
