"""The BIP-340 kernel (app/engine/kernels/schemes/bip340.cu), host build, against libsecp256k1
through coincurve (app/engine/reference/reference.py verify_bip340): BIP-340's own
test-vectors.csv in place, our known answers, a generated sample of every mutation kind of
scripts/lib/agreement/bip340.py, malformed lengths and offsets, and the generated tagged-hash
midstate.  Every test also requires the kernel's ZV_CHECK bounds to hold.
"""

from __future__ import annotations

import ctypes
import hashlib
import random
import struct

import numpy as np
import pytest

from app.core.batch import Item
from app.engine.device import hostbuild
from app.engine.reference import kat, reference
from app.vectors import convert_all, from_json
from scripts.lib.agreement import Chunk, kernel_via_ops
from scripts.lib.agreement import bip340 as agreement
from tests.conftest import VECTORS, vectors_missing

pytestmark = pytest.mark.skipif(hostbuild.compiler() is None, reason="no C++ compiler for the host build")

P, N = agreement.P, agreement.N
CSV = VECTORS / "bip340" / "test-vectors.csv"


@pytest.fixture(autouse=True)
def _bounds_hold():
    yield
    assert hostbuild.verify_failures(hostbuild.load("bip340")) == 0, "a ZV_CHECK bound failed in the BIP-340 kernel"


def kernel_raw(pks: bytes, pk_len: int, sigs: bytes, sig_len: int, msgs: list[bytes],
               offsets: list[int] | None = None) -> list[int]:
    """zv_verify_bip340 called directly with any lengths and offsets (what ops never sends)."""
    lib = hostbuild.load("bip340")
    fn = lib.zv_verify_bip340
    fn.restype = None
    n = len(msgs) if offsets is None else len(offsets) - 1
    if offsets is None:
        offsets = [0]
        for m in msgs:
            offsets.append(offsets[-1] + len(m))
    pk_arr = np.frombuffer(pks + b"\0", dtype=np.uint8)
    sig_arr = np.frombuffer(sigs + b"\0", dtype=np.uint8)
    msg_arr = np.frombuffer(b"".join(msgs) + b"\0", dtype=np.uint8)
    off = np.array(offsets, dtype=np.uint64)
    out = np.full(n, 0xEE, dtype=np.uint8)
    p = ctypes.c_void_p
    fn(p(pk_arr.ctypes.data), ctypes.c_uint32(pk_len), p(sig_arr.ctypes.data), ctypes.c_uint32(sig_len),
       p(msg_arr.ctypes.data), p(off.ctypes.data), None, ctypes.c_uint32(0), ctypes.c_uint32(0),
       ctypes.c_uint64(n), p(out.ctypes.data))
    return out.tolist()


def ref(items: list[Item]) -> list[bool]:
    return [reference.verify_bip340(it.public_key, it.message, it.signature) for it in items]


def test_bip340_test_vectors_csv():
    if not CSV.is_file():
        vectors_missing("bip340/test-vectors.csv")
    cases = [from_json(d) for d in convert_all(VECTORS) if d["source"] == "bip340/test-vectors.csv"]
    assert len(cases) == 19  # the CSV's rows, all of them verification cases
    got = kernel_via_ops("bip340", [c.item for c in cases])
    assert got == [c.expected for c in cases]
    assert got == ref([c.item for c in cases])
    # The file's messages of 0, 1, 17 and 100 bytes are all there and valid.
    assert {len(c.item.message) for c in cases if c.expected} >= {0, 1, 17, 32, 100}


def test_known_answers_and_a_sample_of_every_mutation_kind():
    kas = kat.known_answers()["bip340"]
    assert kernel_via_ops("bip340", [ka.item for ka in kas]) == [ka.expected for ka in kas]
    tally = agreement.run_chunk(Chunk("bip340", 0, 7, {"valid": 40, "mutated": 3 * len(agreement.MUTATIONS)}))
    kinds = {kind for _, kind in tally.kinds}
    assert kinds == {"valid", "even-R", *agreement.MUTATIONS}
    assert tally.failures() == 0, tally.examples
    counts = {kind: c for (_, kind), c in tally.kinds.items()}
    assert counts["valid"]["kernel_accepted"] == 40 and counts["even-R"]["kernel_accepted"] == 3
    assert all(c["kernel_accepted"] == 0 for kind, c in counts.items() if kind in agreement.MUTATIONS)


def test_odd_r_passes_the_x_check_and_fails_only_on_parity():
    """The `odd-R` construction really gives x(R) = r with y(R) odd (so it tests the parity
    check): recomputed here with Python integers."""
    import coincurve

    rng = random.Random(5)
    secret = rng.randrange(1, N)
    pk, sig = agreement.nonce_signature(secret, b"msg", rng, odd=True)
    r, s = int.from_bytes(sig[:32], "big"), int.from_bytes(sig[32:], "big")
    e = int.from_bytes(kat.tagged_hash("BIP0340/challenge", sig[:32] + pk + b"msg"), "big") % N
    lifted = coincurve.PublicKey(b"\x02" + pk)
    R = coincurve.PublicKey.combine_keys([coincurve.PrivateKey(s.to_bytes(32, "big")).public_key,
                                          lifted.multiply(((N - e) % N).to_bytes(32, "big"))])
    full = R.format(compressed=False)
    assert int.from_bytes(full[1:33], "big") == r and full[64] & 1 == 1
    assert kernel_via_ops("bip340", [Item("bip340", pk, b"msg", sig)]) == [False]


def test_messages_across_sha256_block_boundaries():
    items = [it for size in (0, 1, 17, 55, 56, 63, 64, 65, 100, 119, 120, 128, 1000, 4096)
             for it in kat.sign_items("bip340", 1, seed=size, msg_len=size)]
    assert kernel_via_ops("bip340", items) == [True] * len(items)
    other = [Item("bip340", it.public_key, it.message + b"\x00", it.signature) for it in items]
    assert kernel_via_ops("bip340", other) == [False] * len(items)


def test_edge_scalars_and_coordinates():
    """r = p − 1 style bounds: r ≥ p, s ≥ n, s = n − 1, x ≥ p, x with no point, all 0xFF."""
    good = kat.sign_items("bip340", 1, seed=3, msg_len=32)[0]
    r, s = good.signature[:32], good.signature[32:]
    cases = [
        (good.public_key, r, s),
        (good.public_key, (P - 1).to_bytes(32, "big"), s),
        (good.public_key, P.to_bytes(32, "big"), s),
        (good.public_key, b"\xff" * 32, s),
        (good.public_key, r, (N - 1).to_bytes(32, "big")),
        (good.public_key, r, N.to_bytes(32, "big")),
        (good.public_key, r, b"\xff" * 32),
        (good.public_key, r, bytes(32)),
        (bytes(32), r, s),  # x = 0: 0^3 + 7 = 7 is not a square mod p
        ((P - 1).to_bytes(32, "big"), r, s),
        (P.to_bytes(32, "big"), r, s),
        (b"\xff" * 32, r, s),
        (bytes(32), bytes(32), bytes(32)),
    ]
    items = [Item("bip340", pk, good.message, rr + ss) for pk, rr, ss in cases]
    got = kernel_via_ops("bip340", items)
    assert got == ref(items)
    assert got[0] is True and not any(got[1:])


def test_wrong_lengths_and_decreasing_offsets_are_false_not_a_crash():
    good = kat.sign_items("bip340", 2, seed=4, msg_len=20)
    pks = b"".join(it.public_key for it in good)
    sigs = b"".join(it.signature for it in good)
    msgs = [it.message for it in good]
    assert kernel_raw(pks, 32, sigs, 64, msgs) == [1, 1]
    assert kernel_raw(pks + b"\0\0", 33, sigs, 64, msgs) == [0, 0]
    assert kernel_raw(pks[:62], 31, sigs, 64, msgs) == [0, 0]
    assert kernel_raw(pks, 32, sigs + b"\0\0", 65, msgs) == [0, 0]
    assert kernel_raw(pks, 32, sigs[:126], 63, msgs) == [0, 0]
    assert kernel_raw(pks, 32, sigs, 64, msgs, offsets=[0, 20, 0]) == [1, 0]  # item 1 would run backwards


def test_the_tagged_hash_midstate_is_generated_and_right():
    from tests.test_kernel_secp256k1 import gen

    mid = gen.tagged_midstate(b"BIP0340/challenge")
    words = ", ".join(f"0x{x:08X}u" for x in mid)
    assert f"ZV_BIP340_CHALLENGE_MIDSTATE[8] = {{{words}}};" in gen.OUT.read_text()
    # Finishing from the midstate gives hashlib's tagged hash (the generator asserts it too).
    data = bytes(range(100))
    padded = data + b"\x80" + bytes((55 - len(data)) % 64) + struct.pack(">Q", 8 * (64 + len(data)))
    h = mid
    for i in range(0, len(padded), 64):
        h = gen.sha256_compress(h, padded[i:i + 64])
    assert struct.pack(">8I", *h) == kat.tagged_hash("BIP0340/challenge", data)
    tag = hashlib.sha256(b"BIP0340/challenge").digest()
    assert kat.tagged_hash("BIP0340/challenge", data) == hashlib.sha256(tag + tag + data).digest()
