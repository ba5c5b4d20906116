"""Kernels against numpy reference arithmetic, batch invariance, and the registry's rules."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from sparkengine.errors import UnpreparedKernelError
from sparkengine.kernels import families as fam
from sparkengine.kernels.registry import Registry

RNG = np.random.default_rng(7)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.fixture(scope="module")
def registry(warm_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Registry:
    root = tmp_path_factory.mktemp("kernel-tests")
    for kind in ("kernels", "jit"):
        shutil.copytree(warm_cache / kind, root / kind)
    reg = Registry({"kernels": root / "kernels", "jit": root / "jit"})
    reg.declare(
        [
            fam.matmul_config(128, 192),
            fam.rmsnorm_config(128),
            fam.rope_config(2, 32),
            fam.attention_config(2, 32),
            fam.mlp_config(128, 192, True),
            fam.mlp_config(128, 192, False),
            fam.KernelConfig("logprobs", (("V", 100),)),
            fam.KernelConfig("embed", (("D", 128),)),
            fam.KernelConfig("residual", (("D", 128),)),
        ]
    )
    stats = reg.prepare()
    assert stats.cached == stats.kernels  # the session's warm cache served every one
    reg.freeze()
    return reg


def test_matmul_matches_numpy_and_is_batch_invariant(registry: Registry) -> None:
    kernel = registry.get(fam.matmul_config(128, 192))
    x, w = rand(9, 128), rand(128, 192)
    out = np.empty((9, 192), np.float32)
    kernel(x, w, out, False)
    np.testing.assert_allclose(out, x.astype(np.float64) @ w, rtol=1e-4, atol=1e-4)
    for i in range(9):
        alone = np.empty((1, 192), np.float32)
        kernel(np.ascontiguousarray(x[i : i + 1]), w, alone, False)
        assert np.array_equal(alone[0], out[i])  # bit for bit, whatever the batch


def test_batch_variant_fault_changes_batched_rows_only(registry: Registry) -> None:
    kernel = registry.get(fam.matmul_config(128, 192))
    x, w = rand(4, 128), rand(128, 192)
    normal, variant = np.empty((4, 192), np.float32), np.empty((4, 192), np.float32)
    kernel(x, w, normal, False)
    kernel(x, w, variant, True)
    assert not np.array_equal(normal, variant)
    one_normal, one_variant = np.empty((1, 192), np.float32), np.empty((1, 192), np.float32)
    kernel(x[:1].copy(), w, one_normal, False)
    kernel(x[:1].copy(), w, one_variant, True)
    assert np.array_equal(one_normal, one_variant)


def test_rmsnorm_matches_numpy(registry: Registry) -> None:
    x, weight = rand(5, 128), rand(128)
    out = np.empty_like(x)
    registry.get(fam.rmsnorm_config(128))(x, weight, out)
    x64 = x.astype(np.float64)
    expected = x64 / np.sqrt((x64**2).mean(axis=1, keepdims=True) + 1e-5) * weight
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def _rope_tables(positions: int, head_dim: int) -> tuple[np.ndarray, np.ndarray]:
    inv = 1.0 / (10000.0 ** (np.arange(0, head_dim, 2) / head_dim))
    angles = np.outer(np.arange(positions), inv)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def test_rope_matches_numpy(registry: Registry) -> None:
    qkv = rand(3, 6 * 32)
    positions = np.array([0, 5, 17], np.int32)
    cos, sin = _rope_tables(32, 32)
    expected = qkv.astype(np.float64).copy()
    for part in range(4):  # q and k heads (2 each); v untouched
        a, b = expected[:, part * 32 : part * 32 + 16], expected[:, part * 32 + 16 : part * 32 + 32]
        c, s = cos[positions], sin[positions]
        a[:], b[:] = a * c - b * s, b * c + a * s
    registry.get(fam.rope_config(2, 32))(qkv, positions, cos, sin)
    np.testing.assert_allclose(qkv, expected, rtol=1e-5, atol=1e-5)


def test_paged_attention_matches_causal_numpy(registry: Registry) -> None:
    n, heads, hd = 20, 2, 32
    qkv = rand(n, 3 * heads * hd)
    positions = np.arange(n, dtype=np.int32)
    tables = np.array([3, 1], np.int32)  # blocks deliberately out of order
    starts = np.zeros(n, np.int32)
    kc = np.zeros((4, heads, hd, 16), np.float32)
    vc = np.zeros((4, 16, heads, hd), np.float32)
    out = np.empty((n, heads * hd), np.float32)
    registry.get(fam.attention_config(heads, hd))(qkv, positions, tables, starts, kc, vc, out)
    q = qkv[:, : heads * hd].reshape(n, heads, hd).astype(np.float64)
    k = qkv[:, heads * hd : 2 * heads * hd].reshape(n, heads, hd).astype(np.float64)
    v = qkv[:, 2 * heads * hd :].reshape(n, heads, hd).astype(np.float64)
    scores = np.einsum("ihd,jhd->hij", q, k) / np.sqrt(hd)
    scores += np.triu(np.full((n, n), -np.inf), 1)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    expected = np.einsum("hij,jhd->ihd", weights, v).reshape(n, heads * hd)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)
    # the decode of the last row, alone, reading the cache the prefill wrote: same bits
    single = np.empty((1, heads * hd), np.float32)
    last = np.ascontiguousarray(qkv[-1:])
    registry.get(fam.attention_config(heads, hd))(
        last, positions[-1:].copy(), tables, starts[:1].copy(), kc, vc, single
    )
    assert np.array_equal(single[0], out[-1])


def _mlp_reference(x: np.ndarray, wg: np.ndarray, wu: np.ndarray, wd: np.ndarray) -> np.ndarray:
    g, u = x.astype(np.float64) @ wg, x.astype(np.float64) @ wu
    return (g / (1 + np.exp(-g)) * u) @ wd


def test_mlp_variants_are_bit_identical_and_match_numpy(registry: Registry) -> None:
    x, wg, wu, wd = rand(6, 128), rand(128, 192), rand(128, 192), rand(192, 128)
    fused, reference = np.empty((6, 128), np.float32), np.empty((6, 128), np.float32)
    registry.get(fam.mlp_config(128, 192, True))(x, wg, wu, wd, fused)
    registry.get(fam.mlp_config(128, 192, False))(x, wg, wu, wd, reference)
    assert np.array_equal(fused, reference)
    np.testing.assert_allclose(fused, _mlp_reference(x, wg, wu, wd), rtol=1e-3, atol=1e-3)


def test_logprobs_embed_residual(registry: Registry) -> None:
    logits = rand(3, 100) * 4
    out = np.empty_like(logits)
    registry.get(fam.KernelConfig("logprobs", (("V", 100),)))(logits, out)
    l64 = logits.astype(np.float64)
    expected = l64 - l64.max(1, keepdims=True)
    expected -= np.log(np.exp(expected).sum(1, keepdims=True))
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)
    table, tokens = rand(100, 128), np.array([4, 99, 0], np.int32)
    emb = np.empty((3, 128), np.float32)
    registry.get(fam.KernelConfig("embed", (("D", 128),)))(tokens, table, emb)
    assert np.array_equal(emb, table[tokens])
    y = rand(3, 128)
    before = emb.copy()
    registry.get(fam.KernelConfig("residual", (("D", 128),)))(emb, y)
    assert np.array_equal(emb, before + y)


def test_frozen_registry_refuses_unprepared_configuration(registry: Registry) -> None:
    with pytest.raises(UnpreparedKernelError) as err:
        registry.get(fam.matmul_config(128, 7))
    assert err.value.family == "matmul"
    assert "K=128,N=7" in str(err.value)


def test_cold_then_warm_preparation_and_separate_kinds(tmp_path: Path) -> None:
    dirs = {"kernels": tmp_path / "k", "jit": tmp_path / "j"}
    configs = [fam.rmsnorm_config(24), fam.KernelConfig("residual", (("D", 24),))]
    cold = Registry(dirs)
    cold.declare(configs)
    first = cold.prepare()
    assert (first.compiled, first.cached) == (2, 0)
    assert [p.name for p in dirs["kernels"].glob("*.py")] == ["rmsnorm__D24.py"]
    assert [p.name for p in dirs["jit"].glob("*.py")] == ["residual__D24.py"]
    assert list((dirs["kernels"] / "__pycache__").glob("*.nbi"))
    shutil.rmtree(dirs["jit"])  # empty one kind only
    warm = Registry(dirs)
    warm.declare(configs)
    second = warm.prepare()
    assert (second.compiled, second.cached) == (1, 1)


def test_lazy_family_compiles_after_freeze_and_is_reported(tmp_path: Path) -> None:
    late: list[str] = []
    reg = Registry(
        {"kernels": tmp_path / "k", "jit": tmp_path / "j"},
        lazy_families=["residual"],
        on_late_compile=lambda c: late.append(c.family),
    )
    reg.declare([fam.KernelConfig("residual", (("D", 8),))])
    assert reg.prepare().kernels == 0
    reg.freeze()
    x = np.zeros((1, 8), np.float32)
    reg.get(fam.KernelConfig("residual", (("D", 8),)))(x, np.ones((1, 8), np.float32))
    assert late == ["residual"]
    assert x.sum() == 8
