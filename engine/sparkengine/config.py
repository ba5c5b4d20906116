"""Model configuration and how it is split across ranks (tensor parallelism).

Pure data: the same numbers decide the weights each rank loads, the kernel configurations it
declares and the shapes its call sites use, so the three can never disagree.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from sparkengine.errors import ModelError

SIZES: dict[str, dict[str, int]] = {
    "tiny": {"d_model": 128, "layers": 4, "heads": 4, "ffn": 384},
    "small": {"d_model": 256, "layers": 6, "heads": 8, "ffn": 768},
}


@dataclass(frozen=True)
class ModelConfig:
    """Architecture of the decoder-only transformer stored in a model directory."""

    vocab: int
    d_model: int
    layers: int
    heads: int
    ffn: int
    max_context: int
    seed: int
    rope_theta: float = 10000.0

    @property
    def head_dim(self) -> int:
        """Width of one attention head."""
        return self.d_model // self.heads

    def to_json(self) -> str:
        """Canonical JSON (sorted keys) so the manifest digest is stable."""
        return json.dumps(asdict(self), sort_keys=True, indent=2) + "\n"

    @classmethod
    def load(cls, path: Path) -> ModelConfig:
        """Read config.json; a missing or malformed file is a ModelError."""
        try:
            return cls(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError) as exc:
            raise ModelError(f"{path}: unreadable model config: {exc}") from exc


@dataclass(frozen=True)
class Shard:
    """The slice of heads and MLP columns that one rank owns."""

    rank: int
    nnodes: int
    head_start: int
    head_end: int
    ffn_start: int
    ffn_end: int

    @property
    def heads(self) -> int:
        """Number of attention heads on this rank."""
        return self.head_end - self.head_start

    @property
    def ffn(self) -> int:
        """Number of MLP columns on this rank."""
        return self.ffn_end - self.ffn_start


def shard_for(config: ModelConfig, rank: int, nnodes: int) -> Shard:
    """Contiguous, as-even-as-possible split of heads and MLP columns for `rank` of `nnodes`."""
    if not 0 <= rank < nnodes:
        raise ValueError(f"rank {rank} outside 0..{nnodes - 1}")
    if nnodes > config.heads:
        raise ValueError(f"{nnodes} ranks but only {config.heads} heads to split")
    return Shard(
        rank=rank,
        nnodes=nnodes,
        head_start=rank * config.heads // nnodes,
        head_end=(rank + 1) * config.heads // nnodes,
        ffn_start=rank * config.ffn // nnodes,
        ffn_end=(rank + 1) * config.ffn // nnodes,
    )
