"""RFC 6962 §2.1.1 inclusion proofs of one item of a committed batch, checkable offline."""

from __future__ import annotations

from dataclasses import dataclass

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
