"""KV block pool with a prefix cache over hashed token blocks.

A full block's identity is the hash of its tokens chained with the hash of every block before
it, so a hit means the same tokens at the same positions: the KV values are those the same
kernels computed before, bit for bit. Unreferenced cached blocks stay reusable until evicted,
least recently used first.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict, deque
from collections.abc import Sequence

import numpy as np


def block_hashes(tokens: Sequence[int], block_size: int, limit: int) -> list[bytes]:
    """Chained hashes of the first `limit` full blocks of `tokens`."""
    hashes: list[bytes] = []
    prev = b""
    for b in range(min(limit, len(tokens) // block_size)):
        chunk = np.asarray(tokens[b * block_size : (b + 1) * block_size], dtype=np.int32)
        prev = hashlib.sha256(prev + chunk.tobytes()).digest()
        hashes.append(prev)
    return hashes


class BlockPool:
    """Fixed pool of KV blocks shared by all sequences on every rank (rank 0 decides)."""

    def __init__(self, n_blocks: int, block_size: int) -> None:
        self.n_blocks = n_blocks
        self.block_size = block_size
        self.reset()

    def reset(self) -> None:
        """Forget every block and cached prefix (after warm-up)."""
        self._free: deque[int] = deque(range(self.n_blocks))
        self._refs = [0] * self.n_blocks
        self._hash_of: dict[int, bytes] = {}
        self._block_of: dict[bytes, int] = {}
        self._lru: OrderedDict[int, None] = OrderedDict()

    @property
    def available(self) -> int:
        """Blocks that can be handed out now (free or evictable)."""
        return len(self._free) + len(self._lru)

    def match(self, tokens: Sequence[int]) -> list[int]:
        """Reference the cached blocks of the longest cached prefix of `tokens`.

        At least one token is always left to compute, so the last prompt token produces logits.
        """
        limit = (len(tokens) - 1) // self.block_size
        found: list[int] = []
        for digest in block_hashes(tokens, self.block_size, limit):
            block = self._block_of.get(digest)
            if block is None:
                break
            found.append(block)
        for block in found:
            self._take(block)
        return found

    def allocate(self, count: int) -> list[int] | None:
        """`count` fresh blocks, evicting cached ones if needed; None if not enough."""
        if count > self.available:
            return None
        blocks = []
        for _ in range(count):
            if self._free:
                block = self._free.popleft()
            else:
                block, _ = self._lru.popitem(last=False)
                del self._block_of[self._hash_of.pop(block)]
            self._refs[block] = 1
            blocks.append(block)
        return blocks

    def register(self, block: int, digest: bytes) -> None:
        """Publish a block that just became full under its chained hash."""
        if digest not in self._block_of and block not in self._hash_of:
            self._block_of[digest] = block
            self._hash_of[block] = digest

    def release(self, blocks: Sequence[int]) -> None:
        """Drop one reference from each block; cached ones stay reusable."""
        for block in blocks:
            self._refs[block] -= 1
            if self._refs[block] == 0:
                if block in self._hash_of:
                    self._lru[block] = None
                else:
                    self._free.append(block)

    def _take(self, block: int) -> None:
        if self._refs[block] == 0:
            self._lru.pop(block, None)
        self._refs[block] += 1
