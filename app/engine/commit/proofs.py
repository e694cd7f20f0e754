"""RFC 6962 §2.1.1 inclusion proofs of one item of a committed batch, checkable offline, and
the tree levels (:class:`ProofTree`) that make one proof O(log n)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from app.engine.commit import merkle


@dataclass(frozen=True)
class InclusionProof:
    """An RFC 6962 §2.1.1 inclusion proof of one item of a receipt.

    Attributes:
        receipt_id: the receipt (batch) id.
        index: the item's position in the batch, 0-based.
        count: the number of items (leaves) of the batch.
        leaf_hash: the item's 32-byte leaf hash, ``SHA-256(0x00 ‖ code ‖ verdict ‖ H(pk) ‖
            H(msg) ‖ H(sig))`` (docs/architecture.md, "Merkle leaf and receipts").
        audit_path: sibling hashes from the leaf up to the root, 32 bytes each.
        merkle_root: the 32-byte root of the batch.
        verdict: the item's verdict, which the leaf hash commits to.
    """

    receipt_id: str
    index: int
    count: int
    leaf_hash: bytes
    audit_path: list[bytes]
    merkle_root: bytes
    verdict: bool

    def verify(self) -> bool:
        """Check this proof with the RFC 9162 §2.1.3.2 algorithm."""
        return merkle.verify_inclusion(self.merkle_root, self.leaf_hash, self.index, self.count,
                                       self.audit_path)

    def to_json(self) -> dict:
        """JSON form; hashes as lowercase hex."""
        return {"receipt_id": self.receipt_id, "index": self.index, "count": self.count,
                "verdict": self.verdict, "leaf_hash": self.leaf_hash.hex(),
                "audit_path": [p.hex() for p in self.audit_path],
                "merkle_root": self.merkle_root.hex()}


class ProofTree:
    """What inclusion proofs of one receipt need, kept so that one proof costs O(log n)
    (issue 48): the leaf hashes and the tree's levels from :attr:`LOW` up.  The levels below
    it are rebuilt per proof from the leaf's block of ``2**LOW`` leaves (63 hashes): storing
    them would double the memory for microseconds.

    Node ``i`` of level ``j`` is the RFC 6962 §2.1 hash of leaves ``[i·2ʲ, min((i+1)·2ʲ, n))``
    (the bottom-up tree with the odd last node carried up, :func:`merkle.root`), so a block's
    root is its level-:attr:`LOW` node, and the audit path walks the same levels as
    :func:`merkle.audit_path`.

    Args:
        leaves: ``uint8[n, 32]`` leaf hashes, n ≥ 1.
        hasher: a :class:`merkle.LeafHasher` that builds block roots in C (the CPU backend's
            native loops); hashlib without.
    """

    #: Levels below this one are not kept (blocks of 64 leaves: 63 hashes per proof, and
    #: the kept levels are 1/32 of the leaves' size).
    LOW = 6

    def __init__(self, leaves: np.ndarray, hasher: merkle.LeafHasher | None = None):
        leaves = np.ascontiguousarray(leaves, dtype=np.uint8)
        self.count = int(leaves.shape[0])
        if self.count < 1 or leaves.shape[1:] != (32,):
            raise ValueError(f"need uint8[n >= 1, 32] leaf hashes, got {leaves.shape}")
        self.leaves = leaves
        block = 1 << self.LOW
        level = [merkle.root(leaves[lo:lo + block], hasher) for lo in range(0, self.count, block)]
        self.levels: list[list[bytes]] = [level]  # levels LOW, LOW + 1, ..., the root's
        while len(level) > 1:
            level = merkle.next_level(level)
            self.levels.append(level)

    @property
    def root(self) -> bytes:
        return self.levels[-1][0]

    @property
    def nbytes(self) -> int:
        """Memory held, bytes (about 32·n)."""
        return self.leaves.nbytes + 32 * sum(len(lv) for lv in self.levels)

    def audit_path(self, index: int) -> list[bytes]:
        """RFC 6962 §2.1.1 audit path of leaf ``index``, leaf to root order (what
        :func:`merkle.audit_path` gives over all the leaves).  Raises ``IndexError`` outside
        ``[0, n)``."""
        if not 0 <= index < self.count:
            raise IndexError(f"leaf index {index} outside [0, {self.count})")
        lo = index >> self.LOW << self.LOW
        block = self.leaves[lo:lo + (1 << self.LOW)].tobytes()
        path = merkle.audit_path([block[k:k + 32] for k in range(0, len(block), 32)], index - lo)
        i = index >> self.LOW
        for level in self.levels[:-1]:
            if (i ^ 1) < len(level):
                path.append(level[i ^ 1])
            i //= 2
        return path
