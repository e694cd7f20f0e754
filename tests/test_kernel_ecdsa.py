"""What the P-256 and secp256k1 ECDSA kernels (app/engine/kernels/schemes/{p256,secp256k1}.cu,
host build) are tested for alike, against their reference (OpenSSL through ``cryptography``;
libsecp256k1 through coincurve): the Wycheproof files, the agreement suite's every variant and
mutation kind at CI size, malformed offsets, and the generated constant tables.  Only the curve
differs (tests/ecdsa_kernel.py); each curve's own tests are in tests/test_kernel_<scheme>.py.
Every test also checks that no ZV_CHECK bound failed in the kernel.
"""

from __future__ import annotations

import ctypes
import hashlib

import numpy as np
import pytest

from app.engine.device import hostbuild
from app.vectors import convert_all, from_json
from scripts.lib.agreement import Chunk
from tests.conftest import VECTORS, vectors_missing
from tests.ecdsa_kernel import CURVES, Curve, i2b, point_bytes

pytestmark = pytest.mark.skipif(hostbuild.compiler() is None, reason="no C++ compiler for the host build")


@pytest.fixture(params=sorted(CURVES))
def curve(request) -> Curve:
    c = CURVES[request.param]
    yield c
    # The documented bounds (ZV_CHECK) held in the kernel.
    assert hostbuild.verify_failures(hostbuild.load(c.scheme)) == 0, f"a ZV_CHECK bound failed in {c.scheme}"


WYCHEPROOF = [(scheme, name) for scheme, c in sorted(CURVES.items()) for name in sorted(c.wycheproof)]


@pytest.mark.parametrize(("scheme", "name"), WYCHEPROOF)
def test_wycheproof_file(scheme, name):
    curve = CURVES[scheme]
    path = VECTORS / "wycheproof" / "testvectors_v1" / name
    if not path.is_file():
        vectors_missing(str(path))
    # app.vectors reads DER into compact r ‖ s (non-DER: empty, invalid by length) and sets the
    # option the file's verdicts assume (secp256k1's allow_high_s for the plain and P1363 files).
    cases = [from_json(d) for d in convert_all(VECTORS) if d["source"] == f"wycheproof/{name}"]
    flag = curve.wycheproof[name]
    assert len(cases) > 200 and all(getattr(ka.item, curve.option) == flag for ka in cases)
    items = [(ka.item.public_key, ka.item.message, ka.item.signature) for ka in cases]
    want = curve.assert_agrees(items, flag=flag, names=[f"tcId {ka.id}" for ka in cases])
    assert want == [ka.expected for ka in cases], "the reference disagrees with the file's verdicts"
    assert hostbuild.verify_failures(hostbuild.load(scheme)) == 0


def test_agreement_script_sample(curve):
    """Every variant (key encoding × prehashed) and every mutation kind of the full agreement
    run (scripts/agreement --scheme <scheme>), at CI size."""
    agreement = curve.agreement
    kinds: dict[str, dict] = {}
    for chunk in range(len(agreement.VARIANTS)):
        counts = {"valid": 12, "mutated": 2 * len(agreement.MUTATIONS)}
        tally = agreement.run_chunk(Chunk(curve.scheme, chunk, 3, counts))
        assert tally.failures() == 0, tally.examples
        for (_, kind), c in tally.kinds.items():
            total = kinds.setdefault(kind, {"items": 0, "kernel_accepted": 0})
            total["items"] += c["items"]
            total["kernel_accepted"] += c["kernel_accepted"]
    assert set(kinds) == {"valid", *agreement.MUTATIONS}
    for kind in curve.all_accepted:
        assert kinds[kind]["kernel_accepted"] == kinds[kind]["items"], kind
    for kind in curve.none_accepted:
        assert kinds[kind]["kernel_accepted"] == 0, kind


def test_decreasing_offsets_are_invalid_not_a_crash(curve):
    lib = hostbuild.load(curve.scheme)
    gen = curve.gen
    d = 99
    r, s = curve.sign_digest(d, hashlib.sha256(b"m").digest())
    pk = np.frombuffer(point_bytes(gen.CURVE.mul(d, gen.G)) * 2, dtype=np.uint8)
    sig = np.frombuffer((i2b(r) + i2b(s)) * 2, dtype=np.uint8)
    msgs = np.frombuffer(b"m", dtype=np.uint8)
    offsets = np.array([0, 1, 0], dtype=np.uint64)  # item 1 would run backwards
    out = np.full(2, 7, dtype=np.uint8)
    p = ctypes.c_void_p
    entry = getattr(lib, f"zv_verify_{curve.scheme}")
    entry.restype = None
    entry(p(pk.ctypes.data), ctypes.c_uint32(33), p(sig.ctypes.data), ctypes.c_uint32(64), p(msgs.ctypes.data),
          p(offsets.ctypes.data), None, ctypes.c_uint32(0), ctypes.c_uint32(0), ctypes.c_uint64(2),
          p(out.ctypes.data))
    assert out.tolist() == [1, 0]


def test_tables_header_is_what_the_generator_writes(curve):
    assert curve.gen.OUT.read_text() == curve.gen.render(), f"run scripts/gen_{curve.scheme}_tables"
