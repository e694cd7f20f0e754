"""BLS12-381 aggregate verification: FastAggregateVerify and AggregateVerify, POP ciphersuite.

Semantics are those of ``BLS_SIG_BLS12381G2_XMD:SHA-256_SSWU_RO_POP_`` as Ethereum's
consensus specs use it (draft-irtf-cfrg-bls-signature-04 §3.3.4, §2.9; docs/bls-aggregate.md):

* every public key passes KeyValidate (§2.5): a valid encoding, in the prime-order
  subgroup, not the identity — the stand-in for the proof of possession the POP suite
  presumes of every key;
* the signature is decoded with its subgroup check (the identity is a valid point);
* no public keys → ``False``; in ``aggregate`` mode, ``public_keys`` and ``messages`` of
  different lengths → ``False``; messages need not be distinct (POP suite, §3.3);
* ``fast_aggregate``: the sum of the keys must not be the identity (CoreVerify's
  KeyValidate of the aggregate key, as py_ecc does), then e(Σ PK_i, H(m)) · e(−G1, σ) == 1;
* ``aggregate``: ∏ e(PK_i, H(m_i)) · e(−G1, σ) == 1, checked with one multi-pairing.

Like :mod:`app.engine.reference.reference`, the functions return a plain ``bool`` and never raise for
bad input.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.core.batch import G2_INFINITY, AggregateItem
from app.engine.commit import merkle
from app.engine.reference.reference import bls_constants, bls_hash, bls_public_key, bls_signature


def _keys(pks: Sequence[bytes]) -> list | None:
    points = []
    for pk in pks:
        point = bls_public_key(pk)
        if point is None:
            return None
        points.append(point)
    return points


def fast_aggregate_verify(pks: Sequence[bytes], msg: bytes, sig: bytes) -> bool:
    """FastAggregateVerify(PK_1..PK_n, message, signature) (draft-04 §3.3.4), KeyValidate on each key.

    Args: ``pks`` 48-byte compressed G1 keys, ``msg`` any bytes, ``sig`` a 96-byte
    compressed G2 signature.  Returns the verdict; never raises for bad input.
    """
    if not pks:
        return False
    points, signature = _keys(pks), bls_signature(sig)
    if points is None or signature is None:
        return False
    ark, neg_g1, identity = bls_constants()
    total = points[0]
    for p in points[1:]:
        total = total + p
    if total == identity:
        return False
    return bool(ark.GT.pairing_check([total, neg_g1], [bls_hash(msg), signature]))


def eth_fast_aggregate_verify(pks: Sequence[bytes], msg: bytes, sig: bytes) -> bool:
    """``eth_fast_aggregate_verify`` of Ethereum's consensus specs (altair/bls.md): ``True`` for
    no keys together with the signature G2_POINT_AT_INFINITY (the 96 bytes ``0xc0 00 … 00``,
    compared as bytes: the sync-committee rule for an empty participation), else
    :func:`fast_aggregate_verify`.  Never raises for bad input."""
    if len(pks) == 0 and bytes(sig) == G2_INFINITY:
        return True
    return fast_aggregate_verify(pks, msg, sig)


def aggregate_verify(pks: Sequence[bytes], msgs: Sequence[bytes], sig: bytes) -> bool:
    """AggregateVerify((PK_1, m_1)..(PK_n, m_n), signature) (draft-04 §2.9), no distinct-message rule.

    Keys that share a message are summed first (e(A, H) · e(B, H) = e(A + B, H)), so the
    multi-pairing has one Miller loop per distinct message plus one; the verdict is the same.
    Returns ``False`` for no keys or ``len(pks) != len(msgs)``; never raises for bad input.
    """
    if not pks or len(pks) != len(msgs):
        return False
    points, signature = _keys(pks), bls_signature(sig)
    if points is None or signature is None:
        return False
    ark, neg_g1, _ = bls_constants()
    by_msg: dict[bytes, object] = {}
    for p, m in zip(points, msgs):
        m = bytes(m)
        by_msg[m] = by_msg[m] + p if m in by_msg else p
    g1s = list(by_msg.values()) + [neg_g1]
    g2s = [bls_hash(m) for m in by_msg] + [signature]
    return bool(ark.GT.pairing_check(g1s, g2s))


def verify_item(item: AggregateItem) -> bool:
    """The verdict of one :class:`AggregateItem` (an unknown mode or variant, or ``eth`` on an
    ``aggregate`` item, is ``False``)."""
    try:
        if item.mode == "fast_aggregate" and item.variant in ("ietf", "eth"):
            rule = eth_fast_aggregate_verify if item.variant == "eth" else fast_aggregate_verify
            return len(item.messages) == 1 and rule(item.public_keys, item.messages[0], item.signature)
        if item.mode == "aggregate" and item.variant == "ietf":
            return aggregate_verify(item.public_keys, item.messages, item.signature)
    except Exception:  # a library surprise on one item must not fail the request
        return False
    return False


def verify_with_leaf(item: AggregateItem) -> tuple[bool, bytes]:
    """The verdict of ``item`` and its leaf hash."""
    ok = verify_item(item)
    return ok, merkle.aggregate_leaf(item, ok)
