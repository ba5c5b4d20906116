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
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from pydantic import Field

from flows.errors import GitRangeError
from flows.spec.base import (
    HostPath,
    Problem,
    SpecContext,
    SpecModel,
    SpecPath,
    confined_out,
    shown,
)

GIT_TIMEOUT_S = 60.0
"""Longest `git diff` of a patch range (a fork's history is local; this is generous)."""

PYTEST_OPTIONS = ("-p", "no:cacheprovider", "-rfE", "-q")
"""pytest's options before the gate files unless a release names its runner's own (the recipe's
is `-q --noconftest -p no:cacheprovider -rfE`: recipe-release-process.md §1, its gate bundle)."""
SPARKGATE_PYTEST_OPTIONS = ("--junitxml", "--junit-xml", "--basetemp", "--rootdir")
"""Options sparkgate always sets itself: the gate reads the JUnit XML it asked for and removes
the workspace the temporary folders live in."""


def pytest_option_problems(options: list[str]) -> list[Problem]:
    """Options that would take over what sparkgate sets (pure)."""
    return [
        Problem((index,), f"sparkgate sets {option.split('=')[0]} itself", "another option")
        for index, option in enumerate(options)
        if option.split("=")[0] in SPARKGATE_PYTEST_OPTIONS
    ]


def checkout_path_problems(path: str) -> list[Problem]:
    """A classification in the operator's checkout is named relative to it, inside it (pure)."""
    parts = path.split("/")
    if path.startswith("/") or ".." in parts or "" in parts:
        return [Problem((), "must stay inside the checkout", "e.g. config/release-tests.json")]
    return []


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


class GitRange(SpecModel):
    """The release's patches as commits of a local clone of the patched tree (e.g. the recipe's
    vLLM fork): every test file changed between the two revisions is a candidate.

    The clone is the operator's, anywhere on the controller; sparkgate reads only the names git
    lists for the range (`git diff --name-only`), never a file's content.
    """

    repo: HostPath = Field(description="A git clone of the patched tree on the controller.")
    range: str = Field(
        pattern=r"^[A-Za-z0-9_][A-Za-z0-9_./~^@{}-]*\.\.\.?[A-Za-z0-9_][A-Za-z0-9_./~^@{}-]*$",
        description="BASE..TIP (the tip's changes against the base) or BASE...TIP (against "
        "their merge base), e.g. v0.11.0...spark3-r6x.",
    )

    def changed_files(self) -> list[str]:
        """Files the range adds or changes (deleted ones left out); GitRangeError with git's
        own message when the clone or a revision is unknown."""
        argv = ["git", "-C", str(self.repo), "diff", "--name-only", "--no-renames"]
        argv += ["--diff-filter=d", "-z", self.range, "--"]
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=GIT_TIMEOUT_S, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            raise GitRangeError(f"git diff {self.range} in {shown(self.repo)}: {error}") from error
        if done.returncode != 0:
            said = (done.stderr.strip().splitlines() or ["no message"])[0]
            raise GitRangeError(f"git diff {self.range} in {shown(self.repo)}: {said}")
        return sorted(name for name in done.stdout.split("\0") if name)

    def problems(self, context: SpecContext | None) -> list[Problem]:
        """The clone and both revisions must exist (checked once the path is absolute)."""
        del context
        if not self.repo.is_absolute():
            return []
        if not self.repo.is_dir():
            return [Problem(("repo",), f"no such folder: {shown(self.repo)}", "a git clone")]
        try:
            self.changed_files()
        except GitRangeError as error:
            return [Problem(("range",), str(error), "revisions of a git clone on the controller")]
        return []


class ReleaseTests(SpecModel):
    """Which files are release tests, and the class of each."""

    kind: Literal["release-tests"] = Field(description="Always `release-tests`.")
    root: SpecPath = Field(description="Tree the patterns and file names are relative to.")
    patterns: list[str] = Field(min_length=1, description="Globs selecting candidate files.")
    files: dict[str, Classification] = Field(description="Class of every selected file.")
    patches: SpecPath | list[SpecPath] | None = Field(
        default=None,
        description="The release's patch series: a unified diff, a folder of *.patch / *.diff "
        "files, or a list of either; every test file it adds or changes is a candidate too, so it "
        "must be classified.",
    )
    patch_range: GitRange | None = Field(
        default=None,
        description="The patch series as a git range of a local clone; its changed test files "
        "are candidates like those of `patches`.",
    )

    def selects(self, name: str) -> bool:
        """Whether a file (relative to root, with /) is matched by the patterns."""
        return any(fnmatch.fnmatch(name, pattern) for pattern in self.patterns)

    def unclassified(self, names: Iterable[str]) -> list[str]:
        """Selected files without a class: each one fails the gate."""
        return sorted(n for n in names if self.selects(n) and n not in self.files)

    def series(self) -> list[Path]:
        """The `patches` entries as a list (one path or several)."""
        if self.patches is None:
            return []
        return list(self.patches) if isinstance(self.patches, list) else [self.patches]

    def _readable_patched(self, context: SpecContext | None) -> set[str] | None:
        """The patched test files, or None while the series cannot be read (a relative path in
        the loader's first pass, a path out of the project, a missing one, a git range git
        cannot list: reported elsewhere)."""
        for entry in self.series():
            if not entry.is_absolute() or confined_out(entry, context) or not entry.exists():
                return None
        try:
            return set(self.patched_tests())
        except GitRangeError:
            return None

    def patch_files(self) -> list[Path]:
        """The diffs of the patch series, in order: each entry in turn, a folder's diffs in name
        order (the order a series applies in)."""
        found: list[Path] = []
        for entry in self.series():
            if entry.is_dir():
                found += sorted(
                    p for p in entry.iterdir() if p.suffix in (".patch", ".diff") and p.is_file()
                )
            else:
                found.append(entry)
        return found

    def patched_tests(self) -> list[str]:
        """Test files the patch series (diffs and git range) adds or changes, as they name them."""
        found: set[str] = set()
        for patch in self.patch_files():
            found |= set(patched_test_files(patch.read_text(encoding="utf-8", errors="replace")))
        if self.patch_range is not None:
            found |= {name for name in self.patch_range.changed_files() if is_test_file(name)}
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
        several = isinstance(self.patches, list)
        for index, entry in enumerate(self.series()):
            if entry.is_absolute() and not confined_out(entry, context) and not entry.exists():
                where = ("patches", index) if several else ("patches",)
                found.append(
                    Problem(where, f"no such file or folder: {shown(entry)}", "a patch series")
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
        if is_test_file(name):
            found.append(name)
    return sorted(set(found))


def is_test_file(name: str) -> bool:
    """Whether a path names a pytest file (`test_*.py` or `*_test.py`)."""
    base = name.rsplit("/", 1)[-1]
    return base.endswith(".py") and (base.startswith("test_") or base.endswith("_test.py"))
