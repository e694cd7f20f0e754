"""Batch verification of plain BLS12-381 items by random linear combination (docs/bls-aggregate.md).

n CoreVerify checks e(PK_i, H(m_i)) · e(−G1, σ_i) == 1 cost 2n Miller loops and n final
exponentiations.  With secret random scalars r_i the product

    P_S = ∏_{i∈S} e(r_i·PK_i, H(m_i)) · e(−G1, Σ_{i∈S} r_i·σ_i)

is one multi-pairing: |S| + 1 Miller loops and one final exponentiation.  P_S = ∏ c_i^{r_i}
with c_i = e(PK_i, H(m_i)) · e(−G1, σ_i) in the order-q group GT, so

* an item alone (|S| = 1) gives exactly CoreVerify's verdict: r_i is in [1, 2^64) < q, so
  c_i^{r_i} = 1 exactly when c_i = 1;
* a set with an invalid item passes with probability at most 2^-64 over r (the r_i are
  drawn from ``secrets`` after the inputs are fixed, never derived from them); a batch makes
  at most 2n such checks.

Items that do not decode (KeyValidate, signature subgroup check: the same helpers CoreVerify
uses) are ``False`` and leave the batch.  The rest are checked in groups; a failing group is
bisected: with P_S known and P_L computed for its left half, P_L == 1 clears the left half
and P_L == P_S clears the right one (P_S = P_L · P_R), so a group with one bad item costs
about one extra Miller loop per item and log2|S| final exponentiations.  The group size
follows a running estimate of the invalid fraction, and when many items fail (in the
estimate, or within a batch) the verifier falls back to single checks, which are then
cheaper than bisection.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Sequence

from app.engine.reference.reference import bls_constants, bls_hash, bls_public_key, bls_signature

#: Below this many decodable items, single checks (two items batched are already faster:
#: bench/results/bls_batch.md, tiny batches).
MIN_BATCH = 2
#: Largest group checked with one multi-pairing.
MAX_GROUP = 64
#: Invalid fraction above which single checks beat bisection: a single check costs
#: 2 Miller loops + 1 final exponentiation ≈ 4.3 Miller loops here, while a bisected
#: group of two costs more once half the items are bad.
FALLBACK_FRACTION = 0.25
#: The first group of a batch is at most this large, so that a batch full of bad items is
#: noticed (and falls back to single checks) before it costs a long bisection.
FIRST_GROUP = 16
#: Weight of the running estimate against this batch's own count, in items.
PRIOR_ITEMS = 16
#: (Miller loop + final exponentiation) / Miller loop, measured on arkworks (≈ 3.3).
_FIXED_OVER_ML = 3.3
#: Weight of the newest batch in the running invalid-fraction estimate.
EWMA = 0.5
#: Bits of each random scalar r_i (draft-irtf-cfrg-bls-signature-04 leaves the batch
#: equation open; 64 bits as blst's and the Ethereum clients' batch verification use).
SCALAR_BITS = 64


def _random_scalar() -> int:
    while True:
        r = secrets.randbits(SCALAR_BITS)
        if r:
            return r


def group_size(invalid_fraction: float, largest: int = MAX_GROUP) -> int:
    """Group size minimising expected Miller loops per item for an invalid fraction p.

    Per item a group of g costs 1 + (1 + F)/g Miller loops, plus about g·p extra when a bad
    item is bisected out; the minimum is at g = √(F/p), F = (loop + final exp) / loop.
    """
    if invalid_fraction <= 0:
        return largest
    return max(1, min(largest, round(math.sqrt(_FIXED_OVER_ML / invalid_fraction))))


class BlsBatchVerifier:
    """CoreVerify (POP suite) of many items at once, with per-item verdicts equal to
    :func:`app.engine.reference.reference.verify_bls12_381` (see the module docstring for the bound).

    Args:
        min_batch: fewer decodable items than this are checked one by one.
        max_group: largest group per multi-pairing.

    Safe to share between threads: the only state is the running invalid-fraction
    estimate, whose lost updates only change a group size.
    """

    def __init__(self, min_batch: int = MIN_BATCH, max_group: int = MAX_GROUP):
        self.min_batch = max(1, min_batch)
        self.max_group = max(1, max_group)
        self.invalid_fraction = 0.0
        #: Multi-pairings computed so far (single checks included), for tests and benchmarks.
        self.pairing_checks = 0

    def verify(self, pks: Sequence[bytes], msgs: Sequence[bytes], sigs: Sequence[bytes]) -> list[bool]:
        """Verdicts of the items (pks[i], msgs[i], sigs[i]) in input order.

        Shapes: three equal-length sequences of bytes-like (48-byte keys, messages of any
        length, 96-byte signatures).  Never raises for bad items; they are ``False``.
        """
        n = len(pks)
        out = [False] * n
        live: list[int] = []
        points: dict[int, tuple] = {}
        for i in range(n):
            pk, sig = bls_public_key(pks[i]), bls_signature(sigs[i])
            if pk is not None and sig is not None:
                live.append(i)
                points[i] = (pk, sig)
        if not live:
            return out
        hashes: dict[bytes, object] = {}
        h = {}
        for i in live:
            m = bytes(msgs[i])
            if m not in hashes:
                hashes[m] = bls_hash(m)
            h[i] = hashes[m]
        if len(live) < self.min_batch or self.invalid_fraction > FALLBACK_FRACTION:
            bad = self._singles(live, points, h, out)
        else:
            bad = self._grouped(live, points, h, out)
        self.invalid_fraction += EWMA * (bad / len(live) - self.invalid_fraction)
        return out

    # ---------------------------------------------------------------- single checks
    def _singles(self, idx: list[int], points: dict, h: dict, out: list[bool]) -> int:
        ark, neg_g1, _ = bls_constants()
        bad = 0
        for i in idx:
            pk, sig = points[i]
            ok = bool(ark.GT.pairing_check([pk, neg_g1], [h[i], sig]))
            self.pairing_checks += 1
            out[i] = ok
            bad += not ok
        return bad

    # ---------------------------------------------------------------- random linear combination
    def _grouped(self, live: list[int], points: dict, h: dict, out: list[bool]) -> int:
        ark, neg_g1, _ = bls_constants()
        one = ark.GT.one()
        r = {i: ark.Scalar(_random_scalar()) for i in live}
        scaled = {i: points[i][0] * r[i] for i in live}

        def product(s: list[int]):
            self.pairing_checks += 1
            agg = ark.G2Point.multiexp_unchecked([points[i][1] for i in s], [r[i] for i in s])
            return ark.GT.multi_pairing([scaled[i] for i in s] + [neg_g1], [h[i] for i in s] + [agg])

        def mark(s: list[int]) -> None:
            for i in s:
                out[i] = True

        def bisect(s: list[int], p_s) -> int:
            """Resolve a set known to fail with product ``p_s``; returns how many are bad."""
            if len(s) == 1:
                return 1  # exact: c_i^{r_i} != 1 means c_i != 1
            left, right = s[:len(s) // 2], s[len(s) // 2:]
            p_l = product(left)
            if p_l == one:
                mark(left)
                return bisect(right, p_s)  # P_R = P_S
            if p_l == p_s:
                mark(right)  # P_R = 1
                return bisect(left, p_l)
            bad = bisect(left, p_l)
            if len(right) == 1:
                return bad + 1  # P_R = P_S / P_L != 1
            return bad + bisect(right, product(right))

        bad = seen = pos = 0
        while pos < len(live):
            # The invalid fraction seen so far in this batch, with the running estimate
            # counted as PRIOR_ITEMS earlier items.
            p = (bad + self.invalid_fraction * PRIOR_ITEMS) / (seen + PRIOR_ITEMS)
            if p > FALLBACK_FRACTION:
                # Many failures: single checks are cheaper than bisecting.
                return bad + self._singles(live[pos:], points, h, out)
            size = group_size(p, self.max_group if seen else min(self.max_group, FIRST_GROUP))
            group = live[pos:pos + size]
            pos += len(group)
            product_g = product(group)
            if product_g == one:
                mark(group)
            else:
                bad += bisect(group, product_g)
            seen += len(group)
        return bad
