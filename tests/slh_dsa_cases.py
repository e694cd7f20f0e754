"""SLH-DSA cases for the kernel tests and scripts/agreement --scheme slh-dsa: signed pools, mutations
that reach every part of an item, and the two verdicts to compare.

Signing is the slow part (pqcrypto: up to ~2 s per signature for the "s" sets here), so a
pool is signed once and cached on disk (``$ZAPVERIFY_KAT_CACHE``, as
app/engine/reference/kat.py does), keyed by the pqcrypto version and the pool's shape; every
mutated item derives from a pool item.  Verdicts: :func:`kernel_verdicts` calls the kernel
contract's entry point ``zv_verify_slh_dsa_<set>`` of a host-built library directly (so a
256-byte context or a wrong length reaches the kernel, which a
:class:`app.core.batch.Batch` would refuse), and :func:`reference_verdicts` asks
pqcrypto through app.engine.reference.reference.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib
import json
import os
import random
from dataclasses import replace
from importlib import metadata
from pathlib import Path

import numpy as np

from app.core.batch import Item
from app.core.schemes import SCHEMES
from app.engine.reference import reference
from tests import slh_dsa_signer
from tests.oracles.slh_dsa import PARAMS

SLH_IDS = [s for s in SCHEMES if s.startswith("slh-dsa-")]

#: The contexts a pool's signatures use, in turn: 0, 1 and 255 bytes (FIPS 205 allows ≤ 255).
POOL_CONTEXTS = (b"", b"\x07", bytes(range(255)))
#: Message lengths, in turn: empty, short, several SHA-512 blocks.
POOL_MSG_LENS = (0, 33, 300)


def entry(scheme_id: str) -> str:
    """The kernel entry point of ``scheme_id`` (``zv_verify_slh_dsa_sha2_128s``)."""
    return "zv_verify_" + scheme_id.replace("-", "_")


def _cache_dir() -> Path:
    return Path(os.environ.get("ZAPVERIFY_KAT_CACHE", Path.home() / ".cache" / "zapverify"))


def sign_pool(scheme_id: str, count: int, *, seed: int = 0, cache: bool = True,
              signer: str = "pqcrypto") -> list[Item]:
    """``count`` valid items of one set under one fresh key; item i has context
    ``POOL_CONTEXTS[i % 3]`` and a message of ``POOL_MSG_LENS[i % 3]`` bytes.  Signed by
    pqcrypto or, with ``signer="native"``, by tests/slh_dsa_signer.py (whose signatures the
    callers check with pqcrypto).  Cached on disk, keyed by the signer's version."""
    if signer == "pqcrypto":
        version = metadata.version("pqcrypto")
    elif signer == "native":
        version = "native/" + slh_dsa_signer.source_digest()
    else:
        raise ValueError(f"signer: {signer!r}, not 'pqcrypto' or 'native'")
    tag = hashlib.sha256(f"{scheme_id}/{count}/{seed}/{version}".encode()).hexdigest()[:16]
    path = _cache_dir() / f"slh-pool-{scheme_id}-{tag}.json"
    if cache:
        try:
            return [Item(scheme_id, *(bytes.fromhex(x) for x in row)) for row in json.loads(path.read_text())]
        except (OSError, ValueError, TypeError):
            pass
    rng = random.Random(f"{scheme_id}/{seed}")
    cases = [(POOL_CONTEXTS[i % 3], rng.randbytes(POOL_MSG_LENS[i % 3])) for i in range(count)]
    if signer == "native":
        items = slh_dsa_signer.sign_items(scheme_id, cases, rng)
    else:
        mod = importlib.import_module("pqcrypto.sign." + scheme_id.replace("-", "_"))
        pk, sk = mod.keygen()
        items = [Item(scheme_id, pk, msg, mod.sign(sk, msg, context=ctx), ctx) for ctx, msg in cases]
    if cache:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps([[it.public_key.hex(), it.message.hex(), it.signature.hex(), it.context.hex()]
                                       for it in items]))
            tmp.replace(path)
        except OSError:
            pass
    return items


def _flip(data: bytes, lo: int, hi: int, rng: random.Random) -> bytes:
    """``data`` with one random bit of bytes [lo, hi) flipped."""
    b = bytearray(data)
    bit = rng.randrange((hi - lo) * 8)
    b[lo + bit // 8] ^= 1 << (bit % 8)
    return bytes(b)


def sig_regions(scheme_id: str) -> dict[str, list[tuple[int, int]]]:
    """Byte ranges of every part of a signature (FIPS 205 §9.2, Fig. 17): R, each FORS
    tree's secret value and auth path, each layer's WOTS+ signature and XMSS auth path."""
    p = PARAMS[scheme_id]
    n = p.n
    out: dict[str, list[tuple[int, int]]] = {"sig.R": [(0, n)], "sig.fors.sk": [], "sig.fors.auth": [],
                                             "sig.wots": [], "sig.xmss.auth": []}
    for i in range(p.k):
        base = n + i * (p.a + 1) * n
        out["sig.fors.sk"].append((base, base + n))
        out["sig.fors.auth"].append((base + n, base + (p.a + 1) * n))
    ht = (1 + p.k * (1 + p.a)) * n
    for j in range(p.d):
        base = ht + j * (p.hp + p.len) * n
        out["sig.wots"].append((base, base + p.len * n))
        out["sig.xmss.auth"].append((base + p.len * n, base + (p.len + p.hp) * n))
    assert ht + p.d * (p.hp + p.len) * n == p.sig_len == SCHEMES[scheme_id].sig_len
    return out


#: Every kind of mutation :func:`mutants` makes (one item each; msg/ctx flips need bytes).
MUTANT_KINDS = ("pk.seed", "pk.root", "msg", "ctx", "sig.R", "sig.fors.sk", "sig.fors.auth", "sig.wots",
                "sig.xmss.auth", "ctx.longer", "ctx.shorter", "ctx.256", "len.pk-1", "len.pk+1",
                "len.sig-1", "len.sig+1", "msg.longer")


def mutants(item: Item, rng: random.Random) -> list[tuple[str, Item]]:
    """One mutation of ``item`` of each kind in :data:`MUTANT_KINDS` that applies: a one-bit
    flip in each part of pk, msg, ctx and sig (a random tree or layer of the part), a context
    one byte longer or shorter or of 256 bytes, keys and signatures one byte short or long,
    and a message one byte longer."""
    n = PARAMS[item.scheme].n
    pk, sig, msg, ctx = item.public_key, item.signature, item.message, item.context
    out = [("pk.seed", replace(item, public_key=_flip(pk, 0, n, rng))),
           ("pk.root", replace(item, public_key=_flip(pk, n, 2 * n, rng)))]
    if msg:
        out.append(("msg", replace(item, message=_flip(msg, 0, len(msg), rng))))
    if ctx:
        out.append(("ctx", replace(item, context=_flip(ctx, 0, len(ctx), rng))))
    for kind, ranges in sig_regions(item.scheme).items():
        lo, hi = rng.choice(ranges)
        out.append((kind, replace(item, signature=_flip(sig, lo, hi, rng))))
    if len(ctx) < 255:
        out.append(("ctx.longer", replace(item, context=ctx + bytes([rng.randrange(256)]))))
    if ctx:
        out.append(("ctx.shorter", replace(item, context=ctx[:-1])))
    out += [("ctx.256", replace(item, context=ctx + rng.randbytes(256 - len(ctx)))),
            ("len.pk-1", replace(item, public_key=pk[:-1])),
            ("len.pk+1", replace(item, public_key=pk + b"\0")),
            ("len.sig-1", replace(item, signature=sig[:-1])),
            ("len.sig+1", replace(item, signature=sig + b"\0")),
            ("msg.longer", replace(item, message=msg + bytes([rng.randrange(256)])))]
    return out


def kernel_verdicts(lib: ctypes.CDLL, items: list[Item]) -> list[bool]:
    """Verdicts of the host-built kernel ``lib`` (slh_dsa.cu) on ``items``: one call of the
    set's entry point per (set, pk length, sig length, context) group, as a batch carries
    one context."""
    out: list[bool | None] = [None] * len(items)
    groups: dict[tuple, list[int]] = {}
    for i, it in enumerate(items):
        groups.setdefault((it.scheme, len(it.public_key), len(it.signature), it.context), []).append(i)
    for (sid, pk_len, sig_len, ctx), idx in groups.items():
        pks = np.frombuffer(b"".join(items[i].public_key for i in idx) + b"\0", np.uint8)
        sigs = np.frombuffer(b"".join(items[i].signature for i in idx) + b"\0", np.uint8)
        msgs = np.frombuffer(b"".join(items[i].message for i in idx) + b"\0", np.uint8)
        offsets = np.zeros(len(idx) + 1, np.uint64)
        offsets[1:] = np.cumsum([len(items[i].message) for i in idx])
        c = np.frombuffer(ctx + b"\0", np.uint8)
        verdicts = np.full(len(idx), 7, np.uint8)
        getattr(lib, entry(sid))(
            ctypes.c_void_p(pks.ctypes.data), ctypes.c_uint32(pk_len),
            ctypes.c_void_p(sigs.ctypes.data), ctypes.c_uint32(sig_len),
            ctypes.c_void_p(msgs.ctypes.data), ctypes.c_void_p(offsets.ctypes.data),
            ctypes.c_void_p(c.ctypes.data), ctypes.c_uint32(len(ctx)), ctypes.c_uint32(0),
            ctypes.c_uint64(len(idx)), ctypes.c_void_p(verdicts.ctypes.data))
        if not set(verdicts.tolist()) <= {0, 1}:
            raise AssertionError(f"{sid}: verdicts other than 0/1: {sorted(set(verdicts.tolist()))}")
        for j, i in enumerate(idx):
            out[i] = bool(verdicts[j])
    return out  # type: ignore[return-value]


def reference_verdicts(items: list[Item]) -> list[bool]:
    """pqcrypto's verdicts (FIPS 205 slh_verify, pure) on ``items``."""
    fns = {sid: reference.verifier(SCHEMES[sid]) for sid in {it.scheme for it in items}}
    return [fns[it.scheme](it.public_key, it.message, it.signature, it.context) for it in items]


def verify_internal(lib: ctypes.CDLL, scheme_id: str, pk: bytes, msg: bytes, sig: bytes) -> bool:
    """The kernel's slh_verify_internal (Alg. 20) through the host-build hook."""
    buf = [np.frombuffer(b + b"\0", np.uint8) for b in (pk, sig, msg)]
    r = lib.zv_slh_dsa_hook_verify_internal(
        ctypes.c_uint32(SLH_IDS.index(scheme_id)), ctypes.c_void_p(buf[0].ctypes.data), ctypes.c_uint32(len(pk)),
        ctypes.c_void_p(buf[1].ctypes.data), ctypes.c_uint32(len(sig)), ctypes.c_void_p(buf[2].ctypes.data),
        ctypes.c_uint64(len(msg)))
    if r not in (0, 1):
        raise AssertionError(f"hook returned {r} for {scheme_id}")
    return bool(r)
