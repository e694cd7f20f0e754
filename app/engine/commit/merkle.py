"""The Merkle commitment of a batch (docs/architecture.md, "Merkle leaf and receipts"), on the CPU.

Leaf data of item i is ``scheme code ‖ verdict byte ‖ SHA-256(pk) ‖ SHA-256(msg) ‖
SHA-256(sig)`` (98 bytes); its leaf hash is the RFC 6962 §2.1 leaf hash
``SHA-256(0x00 ‖ data)``.  Interior nodes are ``SHA-256(0x01 ‖ left ‖ right)`` and a list
of n leaves is split at k, the largest power of two smaller than n.  The root of zero
leaves is SHA-256 of the empty string (RFC 6962 §2.1), although the API refuses empty
batches.  The GPU computes the same tree (kernels/hashes/merkle.cuh) and must give the same root.

Hashing is hashlib's unless the caller passes a :class:`LeafHasher` (``hasher=``): the CPU
backend's native loops (app/engine/backends/native.py: the same leaves and tree in C, GIL
released, about eight times faster on a 4096-leaf batch) are one; the engine's commit step
(:mod:`app.engine.commit.step`) is given them.  This module imports no backend.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Protocol

import numpy as np

# The leaf and proof definitions the client shares (app/core/commitment.py), re-exported:
# this module's callers build and check trees through one name.
from app.core.commitment import (  # noqa: F401
    AGGREGATE_LEAF_TAG,
    BytesLike,
    aggregate_leaf,
    aggregate_leaf_hash,
    leaf_hash,
    node,
    verify_inclusion,
)

_sha256 = hashlib.sha256


class LeafHasher(Protocol):
    """A faster maker of the same leaves and roots as this module's hashlib code."""

    def leaves(self, code: int, verdicts: bytes, pks: np.ndarray, sigs: np.ndarray, msgs: np.ndarray,
               offsets: np.ndarray) -> bytes:
        """Leaf hashes of n items: ``code`` the scheme's wire code, ``verdicts`` n bytes 0/1,
        ``pks`` ``uint8[n, pk_len]``, ``sigs`` ``uint8[n, sig_len]``, ``msgs`` ``uint8[M]``
        with ``offsets`` ``[n + 1]`` relative to it; returns ``32·n`` bytes, those of
        :func:`leaf_hash` item by item."""
        ...

    def merkle_root(self, leaves: np.ndarray) -> bytes:
        """:func:`root` of ``uint8[n, 32]`` leaf hashes (n ≥ 1), 32 bytes."""
        ...


def batch_leaves(batch, verdicts: np.ndarray, hasher: LeafHasher | None = None) -> np.ndarray:
    """Leaf hashes of every item of ``batch`` (an :class:`app.core.batch.Batch`) under
    ``verdicts`` (``bool[N]``), with ``hasher`` where given.

    Returns ``uint8[N, 32]``.
    """
    n = len(batch)
    code = batch.scheme.code
    pks, sigs, msgs, off = batch.pks, batch.sigs, batch.msgs, batch.offsets
    if hasher is not None and n:
        flags = np.asarray(verdicts, dtype=np.uint8).tobytes()
        return np.frombuffer(hasher.leaves(code, flags, pks, sigs, msgs, off), dtype=np.uint8).reshape(n, 32)
    out = np.empty((n, 32), dtype=np.uint8)
    for i in range(n):
        out[i] = np.frombuffer(
            leaf_hash(code, bool(verdicts[i]), pks[i].tobytes(),
                      msgs[int(off[i]):int(off[i + 1])].tobytes(), sigs[i].tobytes()),
            dtype=np.uint8)
    return out


def root(leaves: Sequence[bytes] | np.ndarray, hasher: LeafHasher | None = None) -> bytes:
    """RFC 6962 §2.1 Merkle Tree Hash of ``leaves`` (already leaf-hashed), 32 bytes.

    Bottom-up: adjacent pairs are hashed and an odd last node is carried up unchanged,
    which builds exactly the tree of the "largest power of two below n" split.  Leaves given
    as ``uint8[n, 32]`` go through ``hasher`` where one is given.
    """
    if (hasher is not None and isinstance(leaves, np.ndarray) and leaves.dtype == np.uint8
            and leaves.shape[1:] == (32,) and len(leaves) > 1):
        return hasher.merkle_root(leaves)
    level = [bytes(x) for x in leaves]
    if not level:
        return _sha256(b"").digest()
    while len(level) > 1:
        level = next_level(level)
    return level[0]


def next_level(level: Sequence[bytes]) -> list[bytes]:
    """The level above ``level`` (nodes of 32 bytes): adjacent pairs hashed, an odd last node
    carried up unchanged (RFC 6962 §2.1's tree, built bottom-up)."""
    nxt = [node(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
    if len(level) % 2:
        nxt.append(level[-1])
    return nxt


def audit_path(leaves: Sequence[bytes] | np.ndarray, index: int) -> list[bytes]:
    """RFC 6962 §2.1.1 audit path PATH(index, D[n]) for leaf ``index``, leaf to root order.

    Raises ``IndexError`` when ``index`` is outside ``[0, n)``.
    """
    level = [bytes(x) for x in leaves]
    if not 0 <= index < len(level):
        raise IndexError(f"leaf index {index} outside [0, {len(level)})")
    path: list[bytes] = []
    while len(level) > 1:
        sibling = index ^ 1
        if sibling < len(level):
            path.append(level[sibling])
        level, index = next_level(level), index // 2
    return path
