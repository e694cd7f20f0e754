"""ML-DSA (FIPS 204) pieces in Python for testing the kernel: parameters, the signature
layout, SampleInBall and UseHint, and the adversarial mutations of a signed item.

The kernel (ml_dsa.cuh) is compared with OpenSSL through ``cryptography`` on whole items;
this module makes the items that reach every check of the verification (tests/
test_kernel_ml_dsa.py, scripts/agreement --scheme ml-dsa), and gives the two small algorithms the
host build's hooks are checked against one by one.
"""

from __future__ import annotations

import ctypes
import hashlib
import random
from dataclasses import dataclass, replace

import numpy as np

from app.core.batch import Item
from app.core.schemes import SCHEMES
from app.engine.reference import reference

Q = 8380417  # FIPS 204 §4, Table 1
D = 13


@dataclass(frozen=True)
class Params:
    """FIPS 204 Table 1 for one parameter set, with Table 2's sizes (bytes)."""

    level: int
    k: int
    l: int  # noqa: E741 — FIPS 204's name
    eta: int
    tau: int
    omega: int
    lam: int
    gamma1: int
    gamma2: int

    @property
    def beta(self) -> int:
        return self.tau * self.eta

    @property
    def ct_bytes(self) -> int:
        return self.lam // 4

    @property
    def z_bits(self) -> int:
        return self.gamma1.bit_length()  # bitlen(2γ1 − 1) = log2(γ1) + 1

    @property
    def z_offset(self) -> int:
        return self.ct_bytes

    @property
    def hint_offset(self) -> int:
        return self.ct_bytes + self.l * 32 * self.z_bits

    @property
    def pk_bytes(self) -> int:
        return 32 + 320 * self.k

    @property
    def sig_bytes(self) -> int:
        return self.hint_offset + self.omega + self.k

    @property
    def w1_m(self) -> int:
        return (Q - 1) // (2 * self.gamma2)


PARAMS: dict[int, Params] = {
    44: Params(44, 4, 4, 2, 39, 80, 128, 1 << 17, (Q - 1) // 88),
    65: Params(65, 6, 5, 4, 49, 55, 192, 1 << 19, (Q - 1) // 32),
    87: Params(87, 8, 7, 2, 60, 75, 256, 1 << 19, (Q - 1) // 32),
}


def params_of(scheme_id: str) -> Params:
    """The parameters of ``"ml-dsa-44"`` etc.; raises ``KeyError`` for another id."""
    return PARAMS[int(scheme_id.rsplit("-", 1)[1])]


# ------------------------------------------------------------------ running the kernel
def buf(data: bytes) -> np.ndarray:
    """``data`` as a kernel buffer (one zero byte appended: never empty, ctypes needs an address)."""
    return np.frombuffer(data + b"\0", np.uint8)


def kernel_verdicts(lib, items: list[Item], kernel: str = "thread") -> list[bool]:
    """Verdicts of ``zv_verify_ml_dsa_<level>`` (``kernel="thread"``) or
    ``zv_verify_ml_dsa_block_<level>`` (``"block"``, one block per signature) in the host
    library ``lib`` over ``items`` (ML-DSA items of any scheme, lengths and contexts): one
    call per (scheme, pk length, sig length, context), the way the kernel contract passes a
    batch."""
    if kernel not in ("thread", "block"):
        raise ValueError(f"kernel must be 'thread' or 'block', not {kernel!r}")
    out: list[bool | None] = [None] * len(items)
    groups: dict[tuple, list[int]] = {}
    for i, it in enumerate(items):
        groups.setdefault((it.scheme, len(it.public_key), len(it.signature), it.context), []).append(i)
    for (scheme, pk_len, sig_len, ctx), idx in groups.items():
        pks, sigs = buf(b"".join(items[i].public_key for i in idx)), buf(b"".join(items[i].signature for i in idx))
        msgs, ctx_buf = buf(b"".join(items[i].message for i in idx)), buf(ctx)
        offsets = np.zeros(len(idx) + 1, np.uint64)
        offsets[1:] = np.cumsum([len(items[i].message) for i in idx])
        verdicts = np.full(len(idx), 7, np.uint8)
        entry = "zv_verify_" + scheme.replace("-", "_")
        if kernel == "block":
            entry = entry.replace("zv_verify_ml_dsa_", "zv_verify_ml_dsa_block_")
        getattr(lib, entry)(
            ctypes.c_void_p(pks.ctypes.data), ctypes.c_uint32(pk_len),
            ctypes.c_void_p(sigs.ctypes.data), ctypes.c_uint32(sig_len),
            ctypes.c_void_p(msgs.ctypes.data), ctypes.c_void_p(offsets.ctypes.data),
            ctypes.c_void_p(ctx_buf.ctypes.data), ctypes.c_uint32(len(ctx)), ctypes.c_uint32(0),
            ctypes.c_uint64(len(idx)), ctypes.c_void_p(verdicts.ctypes.data))
        if not set(verdicts.tolist()) <= {0, 1}:
            raise RuntimeError(f"{scheme}: the kernel wrote a verdict other than 0 or 1")
        for j, i in enumerate(idx):
            out[i] = bool(verdicts[j])
    return out  # type: ignore[return-value]


def cpu_verdicts(verifier, items: list[Item], isa: int = -1) -> list[bool]:
    """Verdicts of the CPU backend's own ML-DSA verify (``verifier``: an
    :class:`app.engine.backends.native_ml_dsa.MlDsaVerifier`) over ``items`` on code path
    ``isa`` (-1: the best this CPU runs): one call per (scheme, pk length, sig length, context), the
    columns as the CPU backend passes a chunk, so wrong lengths reach it too."""
    out: list[bool | None] = [None] * len(items)
    groups: dict[tuple, list[int]] = {}
    for i, it in enumerate(items):
        groups.setdefault((it.scheme, len(it.public_key), len(it.signature), it.context), []).append(i)
    for (scheme, pk_len, sig_len, ctx), idx in groups.items():
        pks = np.frombuffer(b"".join(items[i].public_key for i in idx), np.uint8).reshape(len(idx), pk_len)
        sigs = np.frombuffer(b"".join(items[i].signature for i in idx), np.uint8).reshape(len(idx), sig_len)
        msgs = buf(b"".join(items[i].message for i in idx))
        offsets = np.zeros(len(idx) + 1, np.uint64)
        offsets[1:] = np.cumsum([len(items[i].message) for i in idx])
        verdicts = verifier.verdicts(params_of(scheme).level, pks, sigs, msgs[:-1], offsets, ctx, isa)
        if not set(verdicts.tolist()) <= {0, 1}:
            raise RuntimeError("the CPU verify wrote a verdict other than 0 or 1")
        for j, i in enumerate(idx):
            out[i] = bool(verdicts[j])
    return out  # type: ignore[return-value]


def assert_agrees_with_openssl(items: list[Item], got: list[bool]) -> list[bool]:
    """``got`` (verdicts of ``items`` from the code under test) equals OpenSSL's on every item;
    returns it."""
    want = openssl_verdicts(items)
    bad = [(i, items[i].scheme, len(items[i].context), want[i], got[i]) for i in range(len(items)) if got[i] != want[i]]
    assert not bad, f"{len(bad)} disagreements with OpenSSL, first: {bad[:5]}"
    return got


def openssl_verdicts(items: list[Item]) -> list[bool]:
    """The CPU backend's reference verdicts (OpenSSL through ``cryptography``) for ``items``."""
    return [reference.verifier(SCHEMES[it.scheme])(it.public_key, it.message, it.signature, it.context)
            for it in items]


# ------------------------------------------------------------------ FIPS 204 algorithms
def sample_in_ball(ct: bytes, p: Params) -> list[int]:
    """Alg. 29 SampleInBall(c̃): 256 coefficients in {−1, 0, 1}, τ of them nonzero."""
    # A long enough SHAKE256 prefix: the sampler reads 8 bytes, then one byte per try
    # (each try succeeds with probability > 1/2 at i ≥ 196, so 1024 bytes never run out).
    stream = hashlib.shake_256(ct).digest(8 + 1024)
    signs = int.from_bytes(stream[:8], "little")
    pos = 8
    c = [0] * 256
    for i in range(256 - p.tau, 256):
        while stream[pos] > i:
            pos += 1
        j = stream[pos]
        pos += 1
        c[i] = c[j]
        c[j] = -1 if (signs >> (i + p.tau - 256)) & 1 else 1
    return c


def decompose(r: int, p: Params) -> tuple[int, int]:
    """Alg. 36 Decompose(r) for r in [0, q): (r1, r0) with r = r1·2γ2 + r0."""
    r0 = r % (2 * p.gamma2)
    if r0 > p.gamma2:
        r0 -= 2 * p.gamma2
    if r - r0 == Q - 1:
        return 0, r0 - 1
    return (r - r0) // (2 * p.gamma2), r0


def use_hint(r: int, hint: bool, p: Params) -> int:
    """Alg. 40 UseHint(h, r) for one coefficient r in [0, q)."""
    r1, r0 = decompose(r, p)
    if not hint:
        return r1
    return (r1 + 1) % p.w1_m if r0 > 0 else (r1 - 1) % p.w1_m


def polymul(a: list[int], b: list[int]) -> list[int]:
    """a·b in Z_q[X]/(X^256 + 1), coefficients in [0, q) (schoolbook)."""
    out = [0] * 256
    for i, x in enumerate(a):
        if x:
            for j, y in enumerate(b):
                k = i + j
                if k < 256:
                    out[k] += x * y
                else:
                    out[k - 256] -= x * y
    return [v % Q for v in out]


# ------------------------------------------------------------------ signature layout
def z_coefficient(sig: bytes, p: Params, poly: int, j: int) -> int:
    """Coefficient j of z[poly] (Alg. 19 BitUnpack with a = γ1 − 1, b = γ1)."""
    bit = (p.z_offset + poly * 32 * p.z_bits) * 8 + j * p.z_bits
    v = (int.from_bytes(sig, "little") >> bit) & ((1 << p.z_bits) - 1)
    return p.gamma1 - v


def with_z_coefficient(sig: bytes, p: Params, poly: int, j: int, value: int) -> bytes:
    """``sig`` with coefficient j of z[poly] replaced by ``value`` (−γ1 < value ≤ γ1)."""
    if not -p.gamma1 < value <= p.gamma1:
        raise ValueError(f"z coefficient {value} has no encoding")
    bit = (p.z_offset + poly * 32 * p.z_bits) * 8 + j * p.z_bits
    n = int.from_bytes(sig, "little")
    n &= ~(((1 << p.z_bits) - 1) << bit)
    n |= (p.gamma1 - value) << bit
    return n.to_bytes(len(sig), "little")


def hints(sig: bytes, p: Params) -> list[list[int]]:
    """The hint indices per polynomial of a well-formed signature (Alg. 21's reading)."""
    y = sig[p.hint_offset:]
    out, start = [], 0
    for i in range(p.k):
        end = y[p.omega + i]
        out.append(list(y[start:end]))
        start = end
    return out


def with_hint_bytes(sig: bytes, p: Params, y: bytes) -> bytes:
    assert len(y) == p.omega + p.k
    return sig[:p.hint_offset] + y


# ------------------------------------------------------------------ mutations
#: Kinds of :func:`mutant`.  Every one gives an item OpenSSL rejects (the tests check that
#: too, so a kind that accidentally stays valid is noticed) except where the test says.
MUTANT_KINDS = (
    "flip_pk", "flip_msg", "flip_sig", "flip_ctx",
    "z_at_bound", "z_over_bound", "z_below_bound", "z_max",
    "hint_unsorted", "hint_repeated", "hint_count_decreasing", "hint_count_over_omega",
    "hint_padding", "hint_moved",
)


def _flip(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    bit = rng.randrange(len(b) * 8)
    b[bit // 8] ^= 1 << (bit % 8)
    return bytes(b)


def mutant(item: Item, kind: str, rng: random.Random) -> Item:
    """A mutation of the valid ML-DSA ``item`` of the given kind (see :data:`MUTANT_KINDS`).

    - ``flip_*``: one random bit of the key, message (an empty one gains a byte), signature
      or context (an empty one becomes one random byte);
    - ``z_at_bound`` / ``z_over_bound``: one z coefficient set to ±(γ1 − β) / ±(γ1 − β + 1)
      (the norm check fails); ``z_below_bound``: ±(γ1 − β − 1) (passes the norm check, fails
      c̃); ``z_max``: γ1, the largest value the encoding holds;
    - ``hint_*``: the hint bytes y made malformed in one way of Alg. 21 (two indices of one
      polynomial swapped or repeated, a count lower than the one before, a count above ω,
      a nonzero byte in the padding), or well-formed but with one index moved.
    Raises ``ValueError`` for an unknown kind.
    """
    p = params_of(item.scheme)
    sig = item.signature
    if kind == "flip_pk":
        return replace(item, public_key=_flip(item.public_key, rng))
    if kind == "flip_msg":
        return replace(item, message=_flip(item.message, rng) if item.message else bytes([rng.randrange(256)]))
    if kind == "flip_sig":
        return replace(item, signature=_flip(sig, rng))
    if kind == "flip_ctx":
        return replace(item, context=_flip(item.context, rng) if item.context else bytes([rng.randrange(256)]))
    if kind.startswith("z_"):
        bound = p.gamma1 - p.beta
        value = {"z_at_bound": bound, "z_over_bound": bound + 1, "z_below_bound": bound - 1,
                 "z_max": p.gamma1}[kind]
        if kind != "z_max" and rng.random() < 0.5:
            value = -value
        poly, j = rng.randrange(p.l), rng.randrange(256)
        return replace(item, signature=with_z_coefficient(sig, p, poly, j, value))
    if kind.startswith("hint_"):
        return replace(item, signature=with_hint_bytes(sig, p, _bad_hint(sig, p, kind, rng)))
    raise ValueError(f"unknown mutant kind {kind!r}")


def mutants(base: list[Item], rng: random.Random) -> tuple[list[Item], list[str]]:
    """Every kind of :data:`MUTANT_KINDS` applied to every item of ``base`` (kind by kind):
    the mutants and the kind of each."""
    items, kinds = [], []
    for kind in MUTANT_KINDS:
        for it in base:
            items.append(mutant(it, kind, rng))
            kinds.append(kind)
    return items, kinds


def _encode_hints(h: list[list[int]], p: Params) -> bytearray:
    y = bytearray(p.omega + p.k)
    idx = 0
    for i, row in enumerate(h):
        for v in row:
            y[idx] = v
            idx += 1
        y[p.omega + i] = idx
    return y


def _bad_hint(sig: bytes, p: Params, kind: str, rng: random.Random) -> bytes:
    h = hints(sig, p)
    total = sum(len(r) for r in h)
    y = _encode_hints(h, p)
    if kind in ("hint_unsorted", "hint_repeated"):
        rows = [i for i, r in enumerate(h) if len(r) >= 2]
        if not rows:  # too few hints to reorder: give one row two (equal or swapped) indices
            h[0] = [5, 3] if kind == "hint_unsorted" else [4, 4]
            return bytes(_encode_hints(h, p))
        i = rng.choice(rows)
        a = rng.randrange(len(h[i]) - 1)
        if kind == "hint_unsorted":
            h[i][a], h[i][a + 1] = h[i][a + 1], h[i][a]
        else:
            h[i][a + 1] = h[i][a]
        return bytes(_encode_hints(h, p))
    if kind == "hint_count_decreasing":
        # Some count below its predecessor (possible once a predecessor is nonzero).
        cands = [i for i in range(1, p.k) if y[p.omega + i - 1] > 0]
        if not cands:
            y[p.omega] = 1
            y[p.omega + 1] = 0
        else:
            i = rng.choice(cands)
            y[p.omega + i] = rng.randrange(y[p.omega + i - 1])
        return bytes(y)
    if kind == "hint_count_over_omega":
        i = rng.randrange(p.k)
        for t in range(i, p.k):
            y[p.omega + t] = max(y[p.omega + t], p.omega + 1 + rng.randrange(256 - p.omega - 1))
        return bytes(y)
    if kind == "hint_padding":
        if total >= p.omega:  # no padding: the counts take all ω slots; the last slot becomes
            y[p.omega + p.k - 1] = p.omega - 1  # padding, nonzero (or the counts decrease)
            y[p.omega - 1] = y[p.omega - 1] or 1
            return bytes(y)
        y[rng.randrange(total, p.omega)] = 1 + rng.randrange(255)
        return bytes(y)
    if kind == "hint_moved":
        # Still well-formed, another hint: one index of a row moved to a position free in
        # that row, or (while there is room) one index added to a row.
        rows = [i for i in range(p.k) if h[i]]
        if rows and (total >= p.omega or rng.random() < 0.5):
            i = rng.choice(rows)
            free = sorted(set(range(256)) - set(h[i]))
            h[i].remove(rng.choice(h[i]))
        else:
            i = rng.randrange(p.k)
            free = sorted(set(range(256)) - set(h[i]))
        h[i] = sorted(h[i] + [rng.choice(free)])
        return bytes(_encode_hints(h, p))
    raise ValueError(f"unknown mutant kind {kind!r}")
