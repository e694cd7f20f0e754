"""What a batch's Merkle commitment is, shared by the server and the client
(docs/architecture.md, "Merkle leaf and receipts"): the leaf hash of an item and of a BLS
aggregate item, and the RFC 9162 §2.1.3.2 check of an inclusion proof.

The engine builds trees from these leaves (:mod:`app.engine.commit.merkle`, with faster
hashers where it has them); the client (:mod:`zapverify`) recomputes a user's leaf and checks
a served proof with the same definitions, without importing the engine.  hashlib only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from app.core.batch import AggregateItem

_sha256 = hashlib.sha256
#: What a leaf hashes: bytes, or a zero-copy view of a batch's columns.
BytesLike = bytes | bytearray | memoryview

#: First byte of an aggregate item's leaf data, a value no scheme's wire code takes
#: (app/core/schemes.py), so aggregate and single leaves never share a preimage.
AGGREGATE_LEAF_TAG = 0xA9


def leaf_hash(code: int, verdict: bool, pk: BytesLike, msg: BytesLike, sig: BytesLike) -> bytes:
    """The 32-byte leaf hash of one item: RFC 6962 §2.1's ``SHA-256(0x00 ‖ data)`` over the
    98 bytes ``code ‖ verdict ‖ SHA-256(pk) ‖ SHA-256(msg) ‖ SHA-256(sig)`` (``code`` the
    scheme's wire code, ``verdict`` one byte 0/1)."""
    return _sha256(b"\x00" + bytes((code, 1 if verdict else 0)) + _sha256(pk).digest()
                   + _sha256(msg).digest() + _sha256(sig).digest()).digest()


def _list_digest(parts: Sequence[bytes]) -> bytes:
    """SHA-256 of the count and each part, all length-prefixed (4-byte big-endian)."""
    h = _sha256(len(parts).to_bytes(4, "big"))
    for part in parts:
        h.update(len(part).to_bytes(4, "big"))
        h.update(part)
    return h.digest()


def aggregate_leaf_hash(mode: int, verdict: bool, pks: Sequence[bytes], msgs: Sequence[bytes],
                        sig: bytes) -> bytes:
    """The 32-byte leaf hash of one BLS aggregate item (docs/bls-aggregate.md).

    Leaf data is ``0xA9 ‖ mode ‖ verdict ‖ L(pks) ‖ L(msgs) ‖ SHA-256(sig)`` (99 bytes),
    with ``mode`` 1 for ``fast_aggregate`` (``msgs`` is its one message), 2 for
    ``aggregate`` and 3 for ``fast_aggregate`` under the ``eth`` variant, and
    L(list) = SHA-256(u32(len(list)) ‖ u32(len(e)) ‖ e ‖ …) with u32
    big-endian; the leaf hash is RFC 6962's ``SHA-256(0x00 ‖ data)``.  A single item's data
    is 98 bytes starting with a scheme code, so no aggregate leaf equals a single one.
    """
    data = (bytes((AGGREGATE_LEAF_TAG, mode, 1 if verdict else 0)) + _list_digest([bytes(p) for p in pks])
            + _list_digest([bytes(m) for m in msgs]) + _sha256(bytes(sig)).digest())
    return _sha256(b"\x00" + data).digest()


def aggregate_leaf(item: AggregateItem, verdict: bool) -> bytes:
    """The leaf hash of one :class:`app.core.batch.AggregateItem` with ``verdict``; the mode
    byte is :attr:`~app.core.batch.AggregateItem.leaf_mode` (3 for ``fast_aggregate`` under
    the ``eth`` variant, whose verdict can differ); an unknown mode or variant hashes as
    mode 0 (the API refuses those before they get here)."""
    return aggregate_leaf_hash(item.leaf_mode, verdict, item.public_keys, item.messages, item.signature)


def node(left: bytes, right: bytes) -> bytes:
    """An interior node, RFC 6962 §2.1: ``SHA-256(0x01 ‖ left ‖ right)``."""
    return _sha256(b"\x01" + left + right).digest()


def verify_inclusion(root_hash: bytes, leaf: bytes, index: int, count: int, path: Sequence[bytes]) -> bool:
    """True when ``path`` (sibling hashes, leaf to root) proves ``leaf`` is leaf ``index`` of a
    ``count``-leaf tree with root ``root_hash``: the RFC 9162 §2.1.3.2 verification algorithm,
    on bytes already parsed.  An index outside ``[0, count)``, a leaf that is not 32 bytes or
    a path of the wrong length is ``False``.  Pure; never raises."""
    if not 0 <= index < count or len(leaf) != 32:
        return False
    fn, sn, r = index, count - 1, bytes(leaf)
    for p in path:
        p = bytes(p)
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == bytes(root_hash)
