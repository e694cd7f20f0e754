"""An independent, pure-Python FIPS 205 (SLH-DSA) verifier for the tests.

Written from FIPS 205 (August 2024) to check vectors the reference library cannot: the
ACVP sigVer vectors use the *internal* interface (Alg. 20), while pqcrypto only exposes
the external pure one (Alg. 24).  Only verification is implemented.  Speed: 2–11 ms per
signature measured here ("s" sets verify faster than "f" sets).
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass


@dataclass(frozen=True)
class Params:
    """One parameter set of FIPS 205 Table 2 (lg_w = 4 for all of them)."""

    name: str
    n: int
    h: int
    d: int
    hp: int  # h' = h / d, the height of one XMSS tree
    a: int
    k: int
    m: int
    shake: bool
    lg_w: int = 4

    @property
    def w(self) -> int:
        return 1 << self.lg_w

    @property
    def len1(self) -> int:  # Eq. 5.1
        return 8 * self.n // self.lg_w

    @property
    def len2(self) -> int:  # Eq. 5.2; 3 for every set here (len1·(w−1) < 2^12)
        return 3

    @property
    def len(self) -> int:
        return self.len1 + self.len2

    @property
    def sig_len(self) -> int:
        return (1 + self.k * (1 + self.a) + self.h + self.d * self.len) * self.n


# FIPS 205 Table 2: (n, h, d, h', a, k, m) per security level and s/f variant.
_TABLE2 = {"128s": (16, 63, 7, 9, 12, 14, 30), "128f": (16, 66, 22, 3, 6, 33, 34),
           "192s": (24, 63, 7, 9, 14, 17, 39), "192f": (24, 66, 22, 3, 8, 33, 42),
           "256s": (32, 64, 8, 8, 14, 22, 47), "256f": (32, 68, 17, 4, 9, 35, 49)}

#: All 12 parameter sets, keyed like the project's scheme ids ("slh-dsa-sha2-128s").
PARAMS = {f"slh-dsa-{hf}-{lvl}": Params(f"SLH-DSA-{hf.upper()}-{lvl}", *t, shake=hf == "shake")
          for hf in ("sha2", "shake") for lvl, t in _TABLE2.items()}

# Address types (FIPS 205 §4.2)
WOTS_HASH, WOTS_PK, TREE, FORS_TREE, FORS_ROOTS = 0, 1, 2, 3, 4


class ADRS:
    """The 32-byte hash address (FIPS 205 §4.2): layer(4) ‖ tree(12) ‖ type(4) ‖ 3 words(12)."""

    __slots__ = ("b",)

    def __init__(self) -> None:
        self.b = bytearray(32)

    def copy(self) -> ADRS:
        c = ADRS()
        c.b[:] = self.b
        return c

    def _set(self, off: int, v: int) -> None:
        self.b[off:off + 4] = v.to_bytes(4, "big")

    def set_layer_address(self, v: int) -> None:
        self._set(0, v)

    def set_tree_address(self, v: int) -> None:
        self.b[4:16] = v.to_bytes(12, "big")

    def set_type_and_clear(self, t: int) -> None:
        self._set(16, t)
        self.b[20:32] = bytes(12)

    def set_key_pair_address(self, v: int) -> None:
        self._set(20, v)

    def get_key_pair_address(self) -> int:
        return int.from_bytes(self.b[20:24], "big")

    def set_chain_address(self, v: int) -> None:  # same word as the tree height
        self._set(24, v)

    set_tree_height = set_chain_address

    def set_hash_address(self, v: int) -> None:  # same word as the tree index
        self._set(28, v)

    set_tree_index = set_hash_address

    def get_tree_index(self) -> int:
        return int.from_bytes(self.b[28:32], "big")

    def compressed(self) -> bytes:
        """ADRSc (§11.2): layer(1) ‖ tree(8) ‖ type(1) ‖ 3 words(12) = 22 bytes."""
        b = self.b
        return bytes(b[3:4] + b[8:16] + b[19:20] + b[20:32])


def _mgf1(hash_fn, seed: bytes, length: int) -> bytes:
    """MGF1 (RFC 8017 §B.2.1) as used by H_msg for the SHA2 sets."""
    out = b"".join(hash_fn(seed + c.to_bytes(4, "big")).digest()
                   for c in range(-(-length // hash_fn().digest_size)))
    return out[:length]


class _Hashes:
    """F, H, T_l and H_msg for one parameter set and PK.seed (FIPS 205 §11.1, §11.2.1, §11.2.2)."""

    def __init__(self, p: Params, pk_seed: bytes) -> None:
        self.p, self.seed = p, pk_seed
        if p.shake:
            self._f = self._h = hashlib.shake_256(pk_seed)
        else:
            # PK.seed is padded to a full block so the state after it can be reused (§11.2).
            self._f = hashlib.sha256(pk_seed + bytes(64 - p.n))
            # Categories 3 and 5 (n ≥ 24) use SHA-512 for H and T_l (§11.2.2); F stays SHA-256.
            self._h = self._f if p.n == 16 else hashlib.sha512(pk_seed + bytes(128 - p.n))

    def _run(self, state, adrs: ADRS, data: bytes) -> bytes:
        s = state.copy()
        if self.p.shake:
            s.update(bytes(adrs.b) + data)
            return s.digest(self.p.n)
        s.update(adrs.compressed() + data)
        return s.digest()[:self.p.n]

    def F(self, adrs: ADRS, m1: bytes) -> bytes:
        return self._run(self._f, adrs, m1)

    def H(self, adrs: ADRS, m2: bytes) -> bytes:  # also T_l: same construction, longer input
        return self._run(self._h, adrs, m2)

    T = H

    def H_msg(self, r: bytes, pk_root: bytes, msg: bytes) -> bytes:
        p, seed = self.p, self.seed
        if p.shake:
            return hashlib.shake_256(r + seed + pk_root + msg).digest(p.m)
        hf = hashlib.sha256 if p.n == 16 else hashlib.sha512
        return _mgf1(hf, r + seed + hf(r + seed + pk_root + msg).digest(), p.m)


def base_2b(x: bytes, b: int, out_len: int) -> list[int]:
    """Alg. 4: the first ``out_len`` b-bit big-endian digits of ``x``."""
    out, total, bits, i = [], 0, 0, 0
    for _ in range(out_len):
        while bits < b:
            total = (total << 8) | x[i]
            i, bits = i + 1, bits + 8
        bits -= b
        out.append((total >> bits) & ((1 << b) - 1))
    return out


def _chain(hs: _Hashes, x: bytes, start: int, steps: int, adrs: ADRS) -> bytes:
    """Alg. 5: ``steps`` applications of F from chain position ``start``."""
    for j in range(start, start + steps):
        adrs.set_hash_address(j)
        x = hs.F(adrs, x)
    return x


def wots_pk_from_sig(hs: _Hashes, sig: bytes, msg: bytes, adrs: ADRS) -> bytes:
    """Alg. 8: the WOTS+ public key a signature of the n-byte ``msg`` implies."""
    p = hs.p
    digits = base_2b(msg, p.lg_w, p.len1)
    csum = sum(p.w - 1 - d for d in digits)
    csum <<= (8 - (p.len2 * p.lg_w) % 8) % 8
    digits += base_2b(csum.to_bytes(-(-p.len2 * p.lg_w // 8), "big"), p.lg_w, p.len2)
    tops = []
    for i, d in enumerate(digits):
        adrs.set_chain_address(i)
        tops.append(_chain(hs, sig[i * p.n:(i + 1) * p.n], d, p.w - 1 - d, adrs))
    pk_adrs = adrs.copy()
    pk_adrs.set_type_and_clear(WOTS_PK)
    pk_adrs.set_key_pair_address(adrs.get_key_pair_address())
    return hs.T(pk_adrs, b"".join(tops))


def _climb(hs: _Hashes, node: bytes, idx: int, auth: bytes, height: int, adrs: ADRS) -> bytes:
    """The authentication-path loop shared by Alg. 11 (lines 7–17) and Alg. 17 (lines 10–20):
    ``adrs`` already holds the leaf's tree index; the side of each sibling follows ``idx``."""
    n = hs.p.n
    for j in range(height):
        adrs.set_tree_height(j + 1)
        sibling = auth[j * n:(j + 1) * n]
        if (idx >> j) & 1 == 0:
            adrs.set_tree_index(adrs.get_tree_index() // 2)
            node = hs.H(adrs, node + sibling)
        else:
            adrs.set_tree_index((adrs.get_tree_index() - 1) // 2)
            node = hs.H(adrs, sibling + node)
    return node


def xmss_pk_from_sig(hs: _Hashes, idx: int, sig_xmss: bytes, msg: bytes, adrs: ADRS) -> bytes:
    """Alg. 11: the XMSS root implied by a signature at leaf ``idx``."""
    p = hs.p
    adrs.set_type_and_clear(WOTS_HASH)
    adrs.set_key_pair_address(idx)
    node = wots_pk_from_sig(hs, sig_xmss[:p.len * p.n], msg, adrs)
    adrs.set_type_and_clear(TREE)
    adrs.set_tree_index(idx)
    return _climb(hs, node, idx, sig_xmss[p.len * p.n:], p.hp, adrs)


def ht_verify(hs: _Hashes, msg: bytes, sig_ht: bytes, idx_tree: int, idx_leaf: int,
              pk_root: bytes) -> bool:
    """Alg. 13: climb the d layers of the hypertree and compare with PK.root."""
    p = hs.p
    step = (p.hp + p.len) * p.n
    adrs = ADRS()
    adrs.set_tree_address(idx_tree)
    node = xmss_pk_from_sig(hs, idx_leaf, sig_ht[:step], msg, adrs)
    for j in range(1, p.d):
        idx_leaf, idx_tree = idx_tree % (1 << p.hp), idx_tree >> p.hp
        adrs.set_layer_address(j)
        adrs.set_tree_address(idx_tree)
        node = xmss_pk_from_sig(hs, idx_leaf, sig_ht[j * step:(j + 1) * step], node, adrs)
    return hmac.compare_digest(node, pk_root)


def fors_pk_from_sig(hs: _Hashes, sig_fors: bytes, md: bytes, adrs: ADRS) -> bytes:
    """Alg. 17: the FORS public key implied by a signature of the message digest ``md``."""
    p, n = hs.p, hs.p.n
    roots = []
    for i, idx in enumerate(base_2b(md, p.a, p.k)):
        off = i * (p.a + 1) * n
        adrs.set_tree_height(0)
        adrs.set_tree_index((i << p.a) + idx)
        leaf = hs.F(adrs, sig_fors[off:off + n])
        roots.append(_climb(hs, leaf, idx, sig_fors[off + n:off + (p.a + 1) * n], p.a, adrs))
    pk_adrs = adrs.copy()
    pk_adrs.set_type_and_clear(FORS_ROOTS)
    pk_adrs.set_key_pair_address(adrs.get_key_pair_address())
    return hs.T(pk_adrs, b"".join(roots))


def slh_verify_internal(params: Params | str, msg: bytes, sig: bytes, pk: bytes) -> bool:
    """Alg. 20: verify ``sig`` on ``msg`` as is (no domain separator or context).

    ``params`` is a :data:`PARAMS` value or key.  Wrong-length keys or signatures are False.
    """
    p = PARAMS[params] if isinstance(params, str) else params
    if len(sig) != p.sig_len or len(pk) != 2 * p.n:
        return False
    n = p.n
    hs = _Hashes(p, pk[:n])
    pk_root = pk[n:]
    r, fors_end = sig[:n], (1 + p.k * (1 + p.a)) * n
    digest = hs.H_msg(r, pk_root, msg)
    md_len, tree_len, leaf_len = -(-p.k * p.a // 8), -(-(p.h - p.hp) // 8), -(-p.hp // 8)
    md = digest[:md_len]
    idx_tree = int.from_bytes(digest[md_len:md_len + tree_len], "big") % (1 << (p.h - p.hp))
    idx_leaf = int.from_bytes(digest[md_len + tree_len:md_len + tree_len + leaf_len],
                              "big") % (1 << p.hp)
    adrs = ADRS()
    adrs.set_tree_address(idx_tree)
    adrs.set_type_and_clear(FORS_TREE)
    adrs.set_key_pair_address(idx_leaf)
    pk_fors = fors_pk_from_sig(hs, sig[n:fors_end], md, adrs)
    return ht_verify(hs, pk_fors, sig[fors_end:], idx_tree, idx_leaf, pk_root)


def slh_verify(params: Params | str, msg: bytes, sig: bytes, ctx: bytes, pk: bytes) -> bool:
    """Alg. 24 (pure): M' = toByte(0,1) ‖ toByte(|ctx|,1) ‖ ctx ‖ M; contexts over 255 bytes
    are False."""
    if len(ctx) > 255:
        return False
    return slh_verify_internal(params, bytes([0, len(ctx)]) + ctx + msg, sig, pk)
