"""A fast SLH-DSA signer (FIPS 205) for generating test items: tests/kernel_harness/slh_dsa_sign.cu
built on the host, with R and the message digest computed here.

pqcrypto signs the "s" sets at 0.04–4 signatures per second per core on the CI machine, too
slow for the 10 000 valid items per set that scripts/agreement --scheme slh-dsa checks; this signer
hashes the trees in SIMD lanes.  It is test tooling only: every signature it makes goes to
pqcrypto for checking before it is trusted (tests/test_slh_dsa_signer.py, and the agreement
script's "expected-valid" check).

Signing follows slh_sign (Alg. 22, pure, hedged): M' = toByte(0, 1) ‖ toByte(|ctx|, 1) ‖ ctx ‖ M;
R = PRF_msg(SK.prf, opt_rand, M') with a fresh n-byte opt_rand (§11.1, §11.2: SHAKE256, or
HMAC-SHA-256 / HMAC-SHA-512 truncated to n bytes); the digest is H_msg (the pure-Python oracle's);
FORS and the hypertree are the harness's.  Keys are slh_keygen_internal (Alg. 18) of seeds drawn
from the caller's random source, so a pool is reproducible from its seed.
"""

from __future__ import annotations

import ctypes
import hashlib
import hmac
import random
from functools import cache
from pathlib import Path

from app.core.batch import Item
from app.engine.device import hostbuild
from tests.oracles.slh_dsa import PARAMS, Params, _Hashes

SOURCE = Path(__file__).resolve().parent / "kernel_harness" / "slh_dsa_sign.cu"


def _simd_defines() -> list[str]:
    """The widest vector extension this CPU has, for the harness's ``#pragma GCC target``."""
    try:
        flags = next((ln.split(":", 1)[1].split() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                      if ln.startswith("flags")), [])
    except OSError:
        return []
    if {"avx512f", "avx512bw", "avx512vl"} <= set(flags):
        return ["ZV_SIGN_AVX512"]
    return ["ZV_SIGN_AVX2"] if "avx2" in flags else []


@cache
def library() -> ctypes.CDLL:
    """The built harness (cached on disk by :mod:`app.engine.device.hostbuild`)."""
    lib = hostbuild.load_code(SOURCE.read_text(), "slh_dsa_sign", [SOURCE.parent], _simd_defines())
    for fn in (lib.zv_slh_sign_pk_root, lib.zv_slh_sign_digests):
        fn.restype = ctypes.c_int
    return lib


#: What a signature depends on besides the key and message: keyed into cached pools.
_INPUTS = (SOURCE, Path(__file__), Path(__file__).parent / "oracles" / "slh_dsa.py",
           *(hostbuild.KERNEL_DIR / name for name in ("zv_port.cuh", "hashes/sha2.cuh", "hashes/keccak.cuh")))


def source_digest() -> str:
    """A short digest of everything that makes the signatures (the harness, the kernel headers
    it includes, this module's PRF_msg, the oracle's H_msg), for keying cached pools."""
    h = hashlib.sha256()
    for path in _INPUTS:
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _set_index(p: Params) -> int:
    return list(PARAMS.values()).index(p)  # the wire-code order of slh_dsa.cuh's ZV_SLH_PARAM_SETS


def prf_msg(p: Params, sk_prf: bytes, opt_rand: bytes, msg: bytes) -> bytes:
    """PRF_msg (FIPS 205 §11.1, §11.2.1, §11.2.2): the n-byte randomizer R."""
    if p.shake:
        return hashlib.shake_256(sk_prf + opt_rand + msg).digest(p.n)
    return hmac.new(sk_prf, opt_rand + msg, hashlib.sha256 if p.n == 16 else hashlib.sha512).digest()[:p.n]


def sign_items(scheme_id: str, contexts_and_messages: list[tuple[bytes, bytes]], rng: random.Random) -> list[Item]:
    """One fresh key pair of ``scheme_id`` (seeds from ``rng``) and a signature by it of every
    (context, message); returns the valid :class:`Item` s in order.  ValueError for a scheme
    id that is not an SLH-DSA set or a context over 255 bytes."""
    p = PARAMS.get(scheme_id)
    if p is None:
        raise ValueError(f"scheme_id: {scheme_id!r} is not an SLH-DSA set")
    n, lib = p.n, library()
    sk_seed, sk_prf, pk_seed = (rng.randbytes(n) for _ in range(3))
    root = ctypes.create_string_buffer(n)
    lib.zv_slh_sign_pk_root(_set_index(p), sk_seed, pk_seed, root)
    pk_root = root.raw
    hashes = _Hashes(p, pk_seed)
    rs, digests = [], []
    for ctx, msg in contexts_and_messages:
        if len(ctx) > 255:
            raise ValueError(f"context: {len(ctx)} bytes, at most 255")
        m_prime = bytes([0, len(ctx)]) + ctx + msg
        r = prf_msg(p, sk_prf, rng.randbytes(n), m_prime)
        rs.append(r)
        digests.append(hashes.H_msg(r, pk_root, m_prime))
    body = p.sig_len - n
    out = ctypes.create_string_buffer(body * len(rs) or 1)
    lib.zv_slh_sign_digests(_set_index(p), sk_seed, pk_seed, len(rs), b"".join(digests), out)
    raw, pk = out.raw, pk_seed + pk_root
    return [Item(scheme_id, pk, msg, r + raw[j * body:(j + 1) * body], ctx)
            for j, ((ctx, msg), r) in enumerate(zip(contexts_and_messages, rs))]
