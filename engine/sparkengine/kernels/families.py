"""Kernel families: which cache kind each lives in, its launch signature, and its keys.

`declare` lists every configuration a rank can launch, computed from the model config, the
rank's shard and the release options alone. The forward pass builds its keys with the same
`*_config` helpers from the shapes it actually has, so a shape nobody declared is caught by the
frozen registry instead of compiling mid-traffic.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkengine.config import ModelConfig, Shard

BLOCK_SIZE = 16
KERNELS = "kernels"
JIT = "jit"


@dataclass(frozen=True)
class Family:
    """A kernel template, the cache kind it belongs to and its numba signature."""

    name: str
    kind: str
    signature: str


_F2 = "float32[:, ::1]"
_F4 = "float32[:, :, :, ::1]"
_I1 = "int32[::1]"
FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family("rmsnorm", KERNELS, f"void({_F2}, float32[::1], {_F2})"),
        Family("matmul", KERNELS, f"void({_F2}, {_F2}, {_F2}, boolean)"),
        Family("rope", KERNELS, f"void({_F2}, {_I1}, {_F2}, {_F2})"),
        Family("attention", KERNELS, f"void({_F2}, {_I1}, {_I1}, {_I1}, {_F4}, {_F4}, {_F2})"),
        Family("mlp", KERNELS, f"void({_F2}, {_F2}, {_F2}, {_F2}, {_F2})"),
        Family("embed", JIT, f"void({_I1}, {_F2}, {_F2})"),
        Family("residual", JIT, f"void({_F2}, {_F2})"),
        Family("logprobs", JIT, f"void({_F2}, {_F2})"),
    )
}


@dataclass(frozen=True, order=True)
class KernelConfig:
    """One launchable configuration: a family plus the constants baked into its source."""

    family: str
    params: tuple[tuple[str, int], ...]

    @property
    def key(self) -> str:
        """Human-readable key, e.g. `K=128,N=192`."""
        return ",".join(f"{k}={v}" for k, v in self.params)

    @property
    def slug(self) -> str:
        """File-name-safe name of the generated module."""
        return self.family + "__" + "_".join(f"{k}{v}" for k, v in self.params)


def rmsnorm_config(d: int) -> KernelConfig:
    """Key of an RMSNorm over rows of width d."""
    return KernelConfig("rmsnorm", (("D", d),))


def matmul_config(k: int, n: int) -> KernelConfig:
    """Key of a (rows x k) @ (k x n) product."""
    return KernelConfig("matmul", (("K", k), ("N", n)))


def rope_config(heads: int, head_dim: int) -> KernelConfig:
    """Key of rotary embedding over `heads` local heads."""
    return KernelConfig("rope", (("HEADS", heads), ("HEAD_DIM", head_dim)))


def attention_config(heads: int, head_dim: int) -> KernelConfig:
    """Key of paged attention over `heads` local heads."""
    return KernelConfig("attention", (("HEADS", heads), ("HEAD_DIM", head_dim), ("BLOCK", 16)))


def mlp_config(d: int, f: int, fused: bool) -> KernelConfig:
    """Key of the gated MLP slice; the variant is part of the key."""
    return KernelConfig("mlp", (("D", d), ("F", f), ("FUSED", int(fused))))


def declare(config: ModelConfig, shard: Shard, *, fused_mlp: bool) -> list[KernelConfig]:
    """Every configuration this rank may launch, from configuration alone."""
    d, hd = config.d_model, config.head_dim
    return sorted(
        {
            KernelConfig("embed", (("D", d),)),
            KernelConfig("residual", (("D", d),)),
            KernelConfig("logprobs", (("V", config.vocab),)),
            rmsnorm_config(d),
            matmul_config(d, 3 * shard.heads * hd),
            matmul_config(shard.heads * hd, d),
            matmul_config(d, config.vocab),
            rope_config(shard.heads, hd),
            attention_config(shard.heads, hd),
            mlp_config(d, shard.ffn, fused_mlp),
        }
    )
