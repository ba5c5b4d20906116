"""Where the checkout and its shipped files are, for tests that run what users run."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENGINE_FILE = ROOT / "config" / "engines" / "sparkengine.yaml"
