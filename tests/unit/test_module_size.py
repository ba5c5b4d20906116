"""No module in `flows/` over 600 lines (a standard of the project): a module that long is
several things, and is split by concern before it lands."""

from __future__ import annotations

from pathlib import Path

import flows

LIMIT = 600


def long_modules(root: Path, limit: int = LIMIT) -> dict[str, int]:
    """Modules under `root` longer than `limit` lines, with their length."""
    lengths = {
        str(path.relative_to(root.parent)): len(path.read_text().splitlines())
        for path in sorted(root.rglob("*.py"))
    }
    return {name: length for name, length in lengths.items() if length > limit}


def test_a_long_module_is_found(tmp_path: Path) -> None:
    package = tmp_path / "flows"
    package.mkdir()
    (package / "short.py").write_text("x = 1\n" * LIMIT)
    (package / "long.py").write_text("x = 1\n" * (LIMIT + 1))
    assert long_modules(package) == {"flows/long.py": LIMIT + 1}


def test_no_module_in_flows_is_over_600_lines() -> None:
    found = long_modules(Path(flows.__file__).resolve().parent)
    assert not found, "split by concern: " + ", ".join(f"{n} ({k} lines)" for n, k in found.items())
