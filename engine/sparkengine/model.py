"""Model directory: seeded weights in safetensors, config.json and a SHA-256 manifest.

`make_model` writes one; `load_shard` verifies the manifest and returns the weights one rank
needs, already sliced for its heads and MLP columns.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

from sparkengine import tokenizer
from sparkengine.config import SIZES, ModelConfig, Shard
from sparkengine.errors import ModelError

WEIGHTS = "model.safetensors"
CONFIG = "config.json"
MANIFEST = "manifest.sha256"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _init_weights(config: ModelConfig) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(config.seed)
    d, f, v = config.d_model, config.ffn, config.vocab

    def mat(rows: int, cols: int, gain: float = 1.0) -> np.ndarray:
        out: np.ndarray = (rng.standard_normal((rows, cols)) * gain / np.sqrt(rows)).astype(
            np.float32
        )
        return out

    def norm() -> np.ndarray:
        return (1.0 + 0.1 * rng.standard_normal(d)).astype(np.float32)

    weights = {"embed": rng.standard_normal((v, d)).astype(np.float32)}
    for layer in range(config.layers):
        p = f"layers.{layer}."
        weights[p + "attn_norm"] = norm()
        weights[p + "wq"] = mat(d, d)
        weights[p + "wk"] = mat(d, d)
        weights[p + "wv"] = mat(d, d)
        weights[p + "wo"] = mat(d, d, 0.5)
        weights[p + "mlp_norm"] = norm()
        weights[p + "w_gate"] = mat(d, f)
        weights[p + "w_up"] = mat(d, f)
        weights[p + "w_down"] = mat(f, d, 0.5)
    weights["final_norm"] = norm()
    lm_head = mat(d, v, 4.0)
    lm_head[:, tokenizer.EOS] *= 0.5  # rarer end of text keeps completions long enough to compare
    lm_head[:, tokenizer.BOS] = 0.0
    weights["lm_head"] = lm_head
    return weights


def make_model(out: Path, seed: int = 0, size: str = "tiny", max_context: int = 8192) -> Path:
    """Write a model directory with seeded weights; the same seed gives the same bytes."""
    if size not in SIZES:
        raise ModelError(f"unknown model size {size!r} (expected one of {sorted(SIZES)})")
    config = ModelConfig(
        vocab=tokenizer.VOCAB_SIZE, max_context=max_context, seed=seed, **SIZES[size]
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / CONFIG).write_text(config.to_json())
    save_file(_init_weights(config), str(out / WEIGHTS), metadata={"format": "sparkengine"})
    lines = [f"{_sha256(out / name)}  {name}\n" for name in (CONFIG, WEIGHTS)]
    (out / MANIFEST).write_text("".join(lines))
    return out


def manifest_digest(model_dir: Path) -> str:
    """SHA-256 of the manifest: one short name for the whole model (\"missing\" if absent)."""
    manifest = model_dir / MANIFEST
    return _sha256(manifest) if manifest.is_file() else "missing"


def verify_manifest(model_dir: Path) -> None:
    """Check every file listed in the manifest; a missing or altered file is a ModelError."""
    manifest = model_dir / MANIFEST
    if not manifest.is_file():
        raise ModelError(f"{manifest}: manifest missing")
    for line in manifest.read_text().splitlines():
        expected, _, name = line.partition("  ")
        path = model_dir / name
        if not path.is_file():
            raise ModelError(f"{path}: listed in the manifest but missing")
        if _sha256(path) != expected:
            raise ModelError(f"{path}: SHA-256 does not match the manifest (corrupt file)")


@dataclass(frozen=True)
class LayerWeights:
    """One layer's weights for one rank (qkv fused by columns: q heads, k heads, v heads)."""

    attn_norm: np.ndarray
    wqkv: np.ndarray
    wo: np.ndarray
    mlp_norm: np.ndarray
    w_gate: np.ndarray
    w_up: np.ndarray
    w_down: np.ndarray


@dataclass(frozen=True)
class ShardWeights:
    """Everything one rank computes with."""

    config: ModelConfig
    embed: np.ndarray
    layers: tuple[LayerWeights, ...]
    final_norm: np.ndarray
    lm_head: np.ndarray
    digest: str


def _c(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32)


def load_shard(model_dir: Path, shard: Shard) -> ShardWeights:
    """Verify the manifest, then slice the weights for `shard`."""
    verify_manifest(model_dir)
    config = ModelConfig.load(model_dir / CONFIG)
    try:
        w = load_file(str(model_dir / WEIGHTS))
    except Exception as exc:  # safetensors raises its own error types
        raise ModelError(f"{model_dir / WEIGHTS}: unreadable weights: {exc}") from exc
    hd = config.head_dim
    cols = slice(shard.head_start * hd, shard.head_end * hd)
    fcols = slice(shard.ffn_start, shard.ffn_end)
    layers = []
    for layer in range(config.layers):
        p = f"layers.{layer}."
        wqkv = np.concatenate([w[p + "wq"][:, cols], w[p + "wk"][:, cols], w[p + "wv"][:, cols]], 1)
        layers.append(
            LayerWeights(
                attn_norm=_c(w[p + "attn_norm"]),
                wqkv=_c(wqkv),
                wo=_c(w[p + "wo"][cols, :]),
                mlp_norm=_c(w[p + "mlp_norm"]),
                w_gate=_c(w[p + "w_gate"][:, fcols]),
                w_up=_c(w[p + "w_up"][:, fcols]),
                w_down=_c(w[p + "w_down"][fcols, :]),
            )
        )
    return ShardWeights(
        config=config,
        embed=_c(w["embed"]),
        layers=tuple(layers),
        final_norm=_c(w["final_norm"]),
        lm_head=_c(w["lm_head"]),
        digest=manifest_digest(model_dir),
    )
