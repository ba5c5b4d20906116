"""Matplotlib for the gates' plots: the Agg backend, loaded only when a plot is drawn."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def seconds(value: Any) -> float:
    """A figure in seconds, zero when absent."""
    return float(value) if isinstance(value, int | float) else 0.0


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (heavy: only loaded when plotting)."""
    import matplotlib as mpl  # noqa: PLC0415 - heavy; only loaded when plotting

    mpl.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    return plt


def save(plt: Any, fig: Any, path: Path) -> Path:
    """Write the figure as a PNG (no software stamp, so a plot drawn again is the same file)."""
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)
    return path
