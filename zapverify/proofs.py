"""Offline check of an inclusion proof as ``GET /v1/receipts/{id}/proof/{index}`` serves it
(RFC 6962 §2.1.1 audit paths, checked by the RFC 9162 §2.1.3.2 algorithm of
:func:`app.core.commitment.verify_inclusion`).

The proof JSON goes in as served, ``verify_inclusion(**proof)``, or field by field with
bytes: a well-formed proof answers ``True`` or ``False``; input that is not a proof at all
(text that is not hex, a hash of another length than 32 bytes, a count that is not a whole
number) raises :class:`MalformedProof` naming the field, because a silent ``False`` there
would read as "the server lied".
"""

from __future__ import annotations

from collections.abc import Sequence

from app.core import commitment
from app.core.errors import RequestError

#: The bytes of one hash of a proof (SHA-256).
HASH_BYTES = 32


class MalformedProof(RequestError, ValueError):
    """A proof field that cannot be read (not hex, not 32 bytes, not an integer); ``field``
    names it (``audit_path[2]``)."""

    code = "BAD_PROOF"


def _hash(value: bytes | bytearray | memoryview | str, field: str) -> bytes:
    """32 bytes from bytes or hex text (``0x`` prefix allowed)."""
    if isinstance(value, str):
        text = value[2:] if value[:2] in ("0x", "0X") else value
        try:
            raw = bytes.fromhex(text)
        except ValueError:
            raise MalformedProof(f"{field} is not hex: {value[:80]!r}", field=field) from None
        if any(c.isspace() for c in text):
            raise MalformedProof(f"{field} is not hex: it has whitespace", field=field)
    elif isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
    else:
        raise MalformedProof(f"{field} must be hex text or bytes, not {type(value).__name__}", field=field)
    if len(raw) != HASH_BYTES:
        raise MalformedProof(f"{field} is {len(raw)} bytes; a SHA-256 hash is {HASH_BYTES}", field=field)
    return raw


def _whole(value: object, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise MalformedProof(f"{field} must be an integer, not {type(value).__name__}", field=field)
    return value


def verify_inclusion(merkle_root: bytes | str, leaf_hash: bytes | str, index: int, count: int,
                     audit_path: Sequence[bytes | str], *, receipt_id: str | None = None,
                     verdict: bool | None = None) -> bool:
    """Whether ``audit_path`` proves that ``leaf_hash`` is leaf ``index`` of the ``count``-leaf
    tree whose root is ``merkle_root`` (RFC 9162 §2.1.3.2).

    Takes the proof JSON as served, ``verify_inclusion(**proof)``, or the same fields
    positionally; hashes as hex text (``0x`` optional) or bytes, 32 bytes each.
    ``receipt_id`` and ``verdict`` are accepted so the served JSON can be passed whole, and
    not checked here: the leaf commits to the verdict, so to show that *your* item got that
    verdict, pass the leaf you computed yourself (:func:`zapverify.leaf_hash`) instead of the
    served one.

    Returns ``False`` for a proof that does not hold: a changed hash, leaf, index, count or
    path, or an index outside ``[0, count)``.  Raises :class:`MalformedProof` (a
    ``ValueError``; ``field`` names the field) for a hash that is not hex or not 32 bytes,
    an ``index`` or ``count`` that is not an integer, or an ``audit_path`` that is not a list.
    """
    root = _hash(merkle_root, "merkle_root")
    leaf = _hash(leaf_hash, "leaf_hash")
    i, n = _whole(index, "index"), _whole(count, "count")
    if isinstance(audit_path, (str, bytes, bytearray, memoryview)) or not isinstance(audit_path, Sequence):
        raise MalformedProof("audit_path must be a list of hashes", field="audit_path")
    path = [_hash(p, f"audit_path[{k}]") for k, p in enumerate(audit_path)]
    return commitment.verify_inclusion(root, leaf, i, n, path)
