"""``scripts/agreement --scheme bls12-381-arith``: the BLS12-381 arithmetic kernels of the
bls12_381_parts compilation unit (host build) against arkworks (py_arkworks_bls12381), in
three sets:

- ``hash_to_g2``: hash_to_G2 with the POP DST on random messages (0–255 random bytes; the
  ``--valid`` count), compared with G2Point.hash_to_curve, compressed;
- ``g1_decode`` / ``g2_decode``: decoding with subgroup checks of valid encodings (``--valid``:
  valid, sign bit flipped, infinity) and deliberately corrupted ones (``--mutated``: the other
  KINDS: flag bits, x ≥ p, off the curve, on the curve but outside the subgroup, random
  bytes), compared with arkworks' from_compressed_bytes, and the kernel's error code with the
  one the kind implies.

It stays a suite of its own, not part of ``--scheme bls12-381``: it checks the pieces below
the verify entry point (hash to curve, decoding) on inputs the verify path cannot isolate.
This module is also the ctypes layer over those batch kernels that
tests/test_kernel_bls12_381_arith.py runs on small samples, and its :func:`make_encoding`
builds the corrupted keys and signatures of the bls12-381 suite.
"""

from __future__ import annotations

import ctypes
import random
import time

from app.engine.device import hostbuild
from scripts.lib import kernels
from scripts.lib.agreement import CheckFailures, Chunk, Tally, hexed

SCHEME = "bls12-381-arith"
TITLE = "BLS12-381 arithmetic kernels (host build) vs arkworks"
RESULTS = "bls12_381_arith_agreement"
UNIT = "bls12_381_parts"
KERNEL = "the batch kernels of bls12_381_parts (host build): hash_to_G2, G1/G2 decoding with subgroup checks"
REFERENCE, REFERENCE_SHORT = "arkworks (py_arkworks_bls12381)", "arkworks"
VERSIONS = ("py_arkworks_bls12381",)
SETS = ["hash_to_g2", "g1_decode", "g2_decode"]
DEFAULTS = {"valid": 10_000, "mutated": 10_000}
CHUNK = 250
VALID_KINDS = ("hash", "valid", "sign_flipped", "infinity")

P = 0x1A0111EA397FE69A4B1BA7B6434BACD764774B84F38512BF6730D2A0F6B0F6241EABFFFEB153FFFFB9FEFFFFFFFFAAAB

#: Operation codes of zv_bls_fp_batch / zv_bls_fp2_batch (bls12_381_parts.cu).
OP = {"add": 0, "sub": 1, "mul": 2, "sqr": 3, "neg": 4, "inv": 5, "sqrt": 6, "dbl": 7, "conj": 8,
      "mul_by_xi": 9, "mul_fp": 10, "sgn0": 11, "eq": 12, "is_square": 13}

_lib = None


def lib() -> ctypes.CDLL:
    """The host build of bls12_381_parts (built once, cached by hostbuild)."""
    global _lib
    if _lib is None:
        path = kernels.source(UNIT)
        _lib = hostbuild.load(path.stem, path.parent)
    return _lib


def _be(v: int, n: int = 48) -> bytes:
    return v.to_bytes(n, "big")


def _run(fn_name: str, op: int | None, inputs: list[bytes], out_size: int, n: int):
    args = [ctypes.create_string_buffer(b, len(b)) for b in inputs]
    out = ctypes.create_string_buffer(out_size * n)
    ok = ctypes.create_string_buffer(n)
    fn = getattr(lib(), fn_name)
    head = [ctypes.c_uint32(op)] if op is not None else []
    fn(*head, *args, ctypes.c_uint64(n), out, ok)
    return out.raw, list(ok.raw)


def fp_batch(op: str, a: list[int], b: list[int]) -> tuple[list[int], list[int]]:
    """zv_bls_fp_batch: canonical integers in and out (values ≥ 2^384 are not representable)."""
    raw, ok = _run("zv_bls_fp_batch", OP[op], [b"".join(_be(x) for x in a), b"".join(_be(x) for x in b)],
                   48, len(a))
    return [int.from_bytes(raw[48 * i:48 * i + 48], "big") for i in range(len(a))], ok


def _fp2_bytes(xs) -> bytes:
    return b"".join(_be(c0) + _be(c1) for c0, c1 in xs)


def fp2_batch(op: str, a, b):
    """zv_bls_fp2_batch on (c0, c1) integer pairs."""
    raw, ok = _run("zv_bls_fp2_batch", OP[op], [_fp2_bytes(a), _fp2_bytes(b)], 96, len(a))
    return [(int.from_bytes(raw[96 * i:96 * i + 48], "big"), int.from_bytes(raw[96 * i + 48:96 * i + 96], "big"))
            for i in range(len(a))], ok


def fp_from_be64(vals: list[int]) -> list[int]:
    n = len(vals)
    src = ctypes.create_string_buffer(b"".join(v.to_bytes(64, "big") for v in vals), 64 * n)
    out = ctypes.create_string_buffer(48 * n)
    lib().zv_bls_fp_from_be64_batch(src, ctypes.c_uint64(n), out)
    return [int.from_bytes(out.raw[48 * i:48 * i + 48], "big") for i in range(n)]


#: Operation codes of zv_bls_g1_batch / zv_bls_g2_batch.
PT = {"add": 0, "dbl": 1, "add_affine": 2, "neg": 3, "mul": 4, "in_group": 5, "in_group_plain": 6,
      "on_curve": 7, "psi": 8, "eq": 9}


def _pt_bytes(pt, ext: bool) -> bytes:
    """(x, y) with int (G1) or (c0, c1) (G2) coordinates; None is infinity (all zero)."""
    size = 192 if ext else 96
    if pt is None:
        return bytes(size)
    if ext:
        return b"".join(_be(c) for coord in pt for c in coord)
    return _be(pt[0]) + _be(pt[1])


def _pt_parse(raw: bytes, ext: bool):
    v = [int.from_bytes(raw[i:i + 48], "big") for i in range(0, len(raw), 48)]
    if not any(v):
        return None
    return ((v[0], v[1]), (v[2], v[3])) if ext else (v[0], v[1])


def point_batch(group: int, op: str, a: list, b: list | None = None, k: list[int] | None = None):
    """zv_bls_g{1,2}_batch: affine points (see _pt_bytes) in and out, plus the ok flags."""
    ext = group == 2
    n = len(a)
    b = b if b is not None else a
    k = k if k is not None else [0] * n
    size = 192 if ext else 96
    raw, ok = _run(f"zv_bls_g{group}_batch", PT[op],
                      [b"".join(_pt_bytes(p, ext) for p in a), b"".join(_pt_bytes(p, ext) for p in b),
                       b"".join(x.to_bytes(32, "big") for x in k)], size, n)
    return [_pt_parse(raw[size * i:size * (i + 1)], ext) for i in range(n)], ok



# ------------------------------------------------------------------ points outside the subgroups
def _f2_mul(a, b):
    return ((a[0] * b[0] - a[1] * b[1]) % P, (a[0] * b[1] + a[1] * b[0]) % P)


def fp2_sqrt(a):
    """A square root in Fp2 by the complex method (a root of the norm in Fp, then of
    (a0 ± α)/2), or None when a is not a square."""
    a0, a1 = a
    if a1 == 0:
        r = pow(a0, (P + 1) // 4, P)
        if r * r % P == a0:
            return (r, 0)
        r = pow(-a0 % P, (P + 1) // 4, P)
        return (0, r) if r * r % P == (-a0) % P else None
    alpha = pow((a0 * a0 + a1 * a1) % P, (P + 1) // 4, P)
    if alpha * alpha % P != (a0 * a0 + a1 * a1) % P:
        return None
    inv2 = pow(2, P - 2, P)
    for d in ((a0 + alpha) * inv2 % P, (a0 - alpha) * inv2 % P):
        x0 = pow(d, (P + 1) // 4, P)
        if x0 * x0 % P == d and x0:
            x1 = a1 * pow(2 * x0, P - 2, P) % P
            return (x0, x1)
    return None


def random_curve_point(rng, group: int):
    """A uniformly random x with y² = x³ + b solvable: a point of E1(Fp) or E2(Fp2), which is
    outside G1/G2 except with probability about 1/cofactor."""
    while True:
        if group == 1:
            x = rng.randrange(P)
            y = pow((x ** 3 + 4) % P, (P + 1) // 4, P)
            if y * y % P == (x ** 3 + 4) % P:
                return (x, y)
        else:
            x = (rng.randrange(P), rng.randrange(P))
            rhs = _f2_mul(_f2_mul(x, x), x)
            rhs = ((rhs[0] + 4) % P, (rhs[1] + 4) % P)
            y = fp2_sqrt(rhs)
            if y is not None:
                assert _f2_mul(y, y) == rhs
                return (x, y)


# ------------------------------------------------------------------ point decoding
#: blst's error numbers (bls12_381_serde.cuh).
ERR = {0: "OK", 1: "BAD_ENCODING", 2: "POINT_NOT_ON_CURVE", 3: "POINT_NOT_IN_GROUP", 6: "PK_IS_INFINITY"}
DEC_MODE = {"full": 0, "on_curve": 1, "key_validate": 2}


def decode_batch(group: int, encs: list[bytes], mode: str = "full"):
    """zv_bls_g{1,2}_decode_batch on encodings of exactly 48 / 96 bytes: (error names,
    affine points, re-encodings)."""
    size = 48 * group
    assert all(len(e) == size for e in encs)
    n = len(encs)
    src = ctypes.create_string_buffer(b"".join(encs), max(size * n, 1))
    out = ctypes.create_string_buffer(2 * size * n)
    enc = ctypes.create_string_buffer(size * n)
    err = ctypes.create_string_buffer(n)
    getattr(lib(), f"zv_bls_g{group}_decode_batch")(ctypes.c_uint32(DEC_MODE[mode]), src, ctypes.c_uint64(n),
                                                     out, enc, err)
    pt = 2 * size
    return ([ERR[e] for e in err.raw],
            [_pt_parse(out.raw[pt * i:pt * (i + 1)], group == 2) for i in range(n)],
            [enc.raw[size * i:size * (i + 1)] for i in range(n)])


def kernel_decode(group: int, enc: bytes, mode: str = "full") -> str:
    """The kernel's verdict on one encoding of any length: a wrong length is BAD_ENCODING
    (the verify entry point checks pk_len / sig_len before decoding)."""
    if len(enc) != 48 * group:
        return "BAD_ENCODING"
    return decode_batch(group, [enc], mode)[0][0]


def arkworks_decode(group: int, enc: bytes) -> bool:
    """arkworks' from_compressed_bytes (flags, x < p, on curve, subgroup) as a bool (but see
    arkworks_lenient_infinity)."""
    import py_arkworks_bls12381 as ark

    cls = ark.G1Point if group == 1 else ark.G2Point
    try:
        cls.from_compressed_bytes(bytes(enc))
    except (ValueError, TypeError):
        return False
    return True


def arkworks_lenient_infinity(group: int, enc: bytes) -> bool:
    """Whether enc is a non-canonical infinity encoding (flags C and I set, but the sign bit
    or a bit of x set too).  The ZCash format and the Ethereum deserialization vectors
    reject these ("infinity_with_true_b_flag", "with_b_flag_and_a_flag_true", "..._x_nonzero")
    and so does the kernel (BAD_ENCODING); py_arkworks_bls12381 0.5.0 decodes them as the
    identity.  Verdicts cannot differ through it: KeyValidate rejects an identity key, and
    an identity signature fails the pairing check for any key that passes KeyValidate."""
    return len(enc) == 48 * group and enc[0] & 0xC0 == 0xC0 and enc != compress(group, None)


def compress(group: int, pt) -> bytes:
    """ZCash compressed encoding of an affine point (None = infinity), in Python."""
    size = 48 * group
    if pt is None:
        return bytes([0xC0]) + bytes(size - 1)
    x, y = pt
    half = (P - 1) // 2
    if group == 1:
        xb, big = _be(x), y > half
    else:
        xb, big = _be(x[1]) + _be(x[0]), (y[1] > half) if y[1] else (y[0] > half)
    return bytes([xb[0] | 0x80 | (0x20 if big else 0)]) + xb[1:]


def _is_square_rhs(group: int, x) -> bool:
    if group == 1:
        return pow((x ** 3 + 4) % P, (P - 1) // 2, P) in (0, 1)
    rhs = _f2_mul(_f2_mul(x, x), x)
    rhs = ((rhs[0] + 4) % P, (rhs[1] + 4) % P)
    return pow((rhs[0] ** 2 + rhs[1] ** 2) % P, (P - 1) // 2, P) in (0, 1)


def _rand_x(rng, group: int):
    return rng.randrange(P) if group == 1 else (rng.randrange(P), rng.randrange(P))


#: Kinds of generated encodings and the error the kernel must give (None: depends).
KINDS = {
    "valid": "OK", "sign_flipped": "OK", "infinity": "OK", "no_c_flag": "BAD_ENCODING",
    "i_flag_on_point": "BAD_ENCODING", "infinity_with_sign": "BAD_ENCODING",
    "infinity_with_x": "BAD_ENCODING", "x_ge_p": "BAD_ENCODING", "x_c0_ge_p": "BAD_ENCODING",
    "off_curve": "POINT_NOT_ON_CURVE", "not_in_group": "POINT_NOT_IN_GROUP", "random_bytes": None,
}


def make_encoding(rng, group: int, kind: str) -> bytes:
    """One deliberately generated encoding of the given kind (see KINDS)."""
    import py_arkworks_bls12381 as ark

    size = 48 * group
    if kind in ("valid", "sign_flipped", "no_c_flag", "i_flag_on_point"):
        base = ark.G1Point() if group == 1 else ark.G2Point()
        enc = bytearray((base * ark.Scalar(rng.randrange(1, 2**255))).to_compressed_bytes())
        enc[0] ^= {"valid": 0, "sign_flipped": 0x20, "no_c_flag": 0x80, "i_flag_on_point": 0x40}[kind]
        return bytes(enc)
    if kind == "infinity":
        return compress(group, None)
    if kind == "infinity_with_sign":
        return bytes([0xE0]) + bytes(size - 1)
    if kind == "infinity_with_x":
        enc = bytearray(compress(group, None))
        enc[rng.randrange(size)] |= 1 << rng.randrange(8 if enc[0] != 0xC0 else 5)
        return bytes(enc)
    if kind in ("x_ge_p", "x_c0_ge_p"):
        big = rng.choice([P, P + 1, P + rng.randrange(2**64), rng.randrange(P, 2**381)])
        other = rng.randrange(P)
        if group == 1:
            xb = _be(big)
        else:  # x = c1 || c0: x_ge_p puts the large value in c1, x_c0_ge_p in c0
            xb = _be(big) + _be(other) if kind == "x_ge_p" else _be(other) + _be(big)
        return bytes([xb[0] | 0x80 | rng.choice([0, 0x20])]) + xb[1:]
    if kind == "off_curve":
        while True:
            x = _rand_x(rng, group)
            if not _is_square_rhs(group, x):
                enc = bytearray(compress(group, (x, x)))  # y is unused: only its sign bit
                enc[0] |= rng.choice([0, 0x20])
                return bytes(enc)
    if kind == "not_in_group":
        return compress(group, random_curve_point(rng, group))
    if kind == "random_bytes":
        return bytes(rng.getrandbits(8) for _ in range(size))
    raise ValueError(kind)


# ------------------------------------------------------------------ hash to G2
#: The POP ciphersuite's DST (draft-irtf-cfrg-bls-signature-05 §4.2.3).
POP_DST = b"BLS_SIG_BLS12381G2_XMD:SHA-256_SSWU_RO_POP_"


def _msgs_call(fn_name: str, msgs: list[bytes], dst: bytes, out_size: int) -> list[bytes]:
    n = len(msgs)
    offsets = [0]
    for m in msgs:
        offsets.append(offsets[-1] + len(m))
    blob = b"".join(msgs)
    src = ctypes.create_string_buffer(blob, max(len(blob), 1))
    offs = (ctypes.c_uint64 * (n + 1))(*offsets)
    d = ctypes.create_string_buffer(dst, max(len(dst), 1))
    out = ctypes.create_string_buffer(out_size * n)
    getattr(lib(), fn_name)(src, offs, d, ctypes.c_uint32(len(dst)), ctypes.c_uint64(n), out)
    return [out.raw[out_size * i:out_size * (i + 1)] for i in range(n)]


def expand_message_xmd(msgs: list[bytes], dst: bytes) -> list[bytes]:
    return _msgs_call("zv_bls_expand_message_xmd_batch", msgs, dst, 256)


def hash_to_field(msgs: list[bytes], dst: bytes):
    """[(u0, u1)] with u = (c0, c1) integers."""
    out = []
    for raw in _msgs_call("zv_bls_hash_to_field_batch", msgs, dst, 192):
        v = [int.from_bytes(raw[48 * i:48 * (i + 1)], "big") for i in range(4)]
        out.append(((v[0], v[1]), (v[2], v[3])))
    return out


def hash_to_g2(msgs: list[bytes], dst: bytes) -> list[bytes]:
    """Compressed hash_to_G2 points (96 bytes each) from the kernel."""
    return _msgs_call("zv_bls_hash_to_g2_batch", msgs, dst, 96)


def map_to_curve(us):
    n = len(us)
    src = ctypes.create_string_buffer(_fp2_bytes(us), max(96 * n, 1))
    out = ctypes.create_string_buffer(192 * n)
    ok = ctypes.create_string_buffer(n)
    lib().zv_bls_map_to_curve_g2_batch(src, ctypes.c_uint64(n), out, ok)
    return [_pt_parse(out.raw[192 * i:192 * (i + 1)], True) for i in range(n)]


def clear_cofactor(pts, plain: bool):
    n = len(pts)
    src = ctypes.create_string_buffer(b"".join(_pt_bytes(p, True) for p in pts), max(192 * n, 1))
    out = ctypes.create_string_buffer(192 * n)
    ok = ctypes.create_string_buffer(n)
    lib().zv_bls_clear_cofactor_batch(ctypes.c_uint32(int(plain)), src, ctypes.c_uint64(n), out, ok)
    return [_pt_parse(out.raw[192 * i:192 * (i + 1)], True) for i in range(n)]


def arkworks_hash_to_g2(msg: bytes, dst: bytes) -> bytes:
    import py_arkworks_bls12381 as ark

    return ark.G2Point.hash_to_curve(bytes(msg), dst).to_compressed_bytes()


# ------------------------------------------------------------------ the agreement run
CORRUPT_KINDS = [k for k in KINDS if k not in ("valid", "sign_flipped", "infinity")]
#: Per-kind columns beyond the common ones.
COLUMNS = (("arkworks lenient ∞", lambda k: f"{k.get('arkworks_lenient_infinity', 0):,}"),
           ("kernel errors", lambda k: ", ".join(f"{e[4:]} {v:,}" for e, v in sorted(k.items())
                                                 if e.startswith("err "))))


def prepare(args) -> None:
    lib()


def _hash_chunk(chunk: Chunk, tally: Tally) -> None:
    rng = random.Random(f"h2c-{chunk.seed}-{chunk.index}")
    msgs = [bytes(rng.getrandbits(8) for _ in range(rng.randrange(256))) for _ in range(chunk.counts["valid"])]
    t0 = time.perf_counter()
    got = hash_to_g2(msgs, POP_DST)
    t1 = time.perf_counter()
    want = [arkworks_hash_to_g2(m, POP_DST) for m in msgs]
    t2 = time.perf_counter()
    bad = [m for m, g, w in zip(msgs, got, want) if g != w]
    tally.count(chunk.set_id, "hash", items=len(msgs), disagreements=len(bad), kernel_s=t1 - t0, reference_s=t2 - t1)
    for m in bad:
        tally.example(chunk.set_id, "hash", {"msg": hexed(m)})


def _decode_chunk(chunk: Chunk, tally: Tally) -> None:
    group = 1 if chunk.set_id == "g1_decode" else 2
    rng = random.Random(f"dec-{chunk.seed}-{group}-{chunk.index}")
    corrupt = [k for k in CORRUPT_KINDS if group == 2 or k != "x_c0_ge_p"]  # x has one coordinate in G1
    kinds = [VALID_KINDS[1 + i % 3] for i in range(chunk.counts["valid"])]
    kinds += [corrupt[(chunk.index + i) % len(corrupt)] for i in range(chunk.counts["mutated"])]
    items = [(k, make_encoding(rng, group, k)) for k in kinds]
    t0 = time.perf_counter()
    errs, _, _ = decode_batch(group, [e for _, e in items]) if items else ([], None, None)
    kernel_s = (time.perf_counter() - t0) / max(1, len(items))
    for (kind, enc), err in zip(items, errs):
        t1 = time.perf_counter()
        ark_ok = arkworks_decode(group, enc)
        lenient = arkworks_lenient_infinity(group, enc)
        agree = (err == "BAD_ENCODING" and ark_ok) if lenient else ((err == "OK") == ark_ok)
        if KINDS[kind] is not None and err != KINDS[kind]:
            agree = False
        tally.count(chunk.set_id, kind, items=1, kernel_accepted=int(err == "OK"), accepted=int(ark_ok),
                    arkworks_lenient_infinity=int(lenient), disagreements=int(not agree), kernel_s=kernel_s,
                    reference_s=time.perf_counter() - t1, **{f"err {err}": 1})
        if not agree:
            tally.example(chunk.set_id, kind, {"enc": enc.hex(), "kernel": err, "arkworks": ark_ok})


def run_chunk(chunk: Chunk) -> Tally:
    tally = Tally()
    with CheckFailures(tally, chunk.set_id, lib()):
        (_hash_chunk if chunk.set_id == "hash_to_g2" else _decode_chunk)(chunk, tally)
    return tally


def notes(rows: list[dict]) -> list[str]:
    return ["For decoding, \"agree\" means the same accept/reject as arkworks and, for kinds with a determined "
            "cause, the kernel's error code naming it.  `arkworks lenient ∞`: encodings with the compression and "
            "infinity flags set plus a sign or x bit; the ZCash format and the Ethereum deserialization vectors "
            "reject them (the kernel: BAD_ENCODING) while py_arkworks_bls12381 decodes them as the identity.  These "
            "count as agreement only when the kernel says BAD_ENCODING; no verify verdict can depend on them "
            "(KeyValidate rejects the identity key; the identity signature fails the pairing check).  For "
            "hash_to_G2 a disagreement is a different compressed point."]

