"""Client-side helpers for zapverify users.

:func:`verify_inclusion` checks an inclusion proof from ``GET /v1/receipts/{id}/proof/{index}``
offline: it needs only the proof's numbers and hashes, never the server.
:func:`leaf_hash` recomputes an item's leaf from what the user sent (scheme wire code,
verdict, public key, message, signature), so a user can show that *their* item got that
verdict::

    from app.client import leaf_hash, verify_inclusion
    leaf = leaf_hash(0x01, True, pk, msg, sig)          # must equal the proof's leaf_hash
    verify_inclusion(bytes.fromhex(p["merkle_root"]), leaf, p["index"], p["count"],
                     [bytes.fromhex(h) for h in p["audit_path"]])   # -> True
"""

from __future__ import annotations

from app.engine.merkle import leaf_hash, verify_inclusion

__all__ = ["leaf_hash", "verify_inclusion"]
