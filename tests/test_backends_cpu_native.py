"""Native CPU loops: verdict and leaf hash identical to the reference, item for item."""

import hashlib
import random
from collections import defaultdict

import numpy as np
import pytest

from app.engine.backends import native
from app.engine.commit import merkle
from app.engine.verify import kat, reference
from app.engine.verify.batch import Batch, Item
from app.engine.verify.schemes import SCHEMES
from app.vectors import convert_all, from_json

LOOPS = native.loops()
pytestmark = pytest.mark.skipif(LOOPS is None, reason="no C++ compiler for the native loops")


def _items(scheme_id: str) -> list[Item]:
    rng = random.Random(7)
    signed = kat.sign_items(scheme_id, 24, seed=5)
    if scheme_id == "secp256k1":
        signed += kat.sign_items(scheme_id, 8, seed=6, compressed=False)
    items = signed + [kat.mutate(i, rng) for i in signed]
    items += [ka.item for ka in kat.known_answers().get(scheme_id, [])]
    items += [from_json(r).item for r in convert_all() if r["scheme"] == scheme_id]
    return items


def _check(scheme_id: str, items: list[Item], prehashed: bool = False, allow_high_s: bool = False) -> int:
    """Run ``items`` through the native loop grouped by key length; returns how many were checked."""
    scheme = SCHEMES[scheme_id]
    ref = reference.verifier(scheme)
    groups = defaultdict(list)
    for it in items:
        if len(it.signature) == scheme.sig_len and len(it.public_key) in scheme.pk_lens:
            groups[len(it.public_key)].append(it)
    checked = 0
    for group in groups.values():
        b = Batch.from_items(scheme, [i.public_key for i in group], [i.message for i in group],
                             [i.signature for i in group], prehashed=prehashed, allow_high_s=allow_high_s)
        verdicts, leaves = LOOPS.run(scheme.family, scheme.code, b.pks, b.sigs, b.msgs, b.offsets,
                                     prehashed, allow_high_s)
        for i, it in enumerate(group):
            want = ref(it.public_key, it.message, it.signature, b"", prehashed, allow_high_s)
            assert verdicts[i] == want, (scheme_id, i, it)
            assert leaves[32 * i:32 * i + 32] == merkle.leaf_hash(scheme.code, want, it.public_key, it.message,
                                                                  it.signature)
        checked += len(group)
    return checked


@pytest.mark.parametrize("scheme_id", ["ed25519", "secp256k1"])
def test_native_matches_reference_on_every_item(scheme_id):
    items = _items(scheme_id)
    assert _check(scheme_id, items) == len([i for i in items if len(i.signature) == SCHEMES[scheme_id].sig_len
                                            and len(i.public_key) in SCHEMES[scheme_id].pk_lens])
    # Both verdicts occur, so agreement is not vacuous.
    ref = reference.verifier(SCHEMES[scheme_id])
    assert {ref(i.public_key, i.message, i.signature) for i in items} == {True, False}


@pytest.mark.parametrize("prehashed,allow_high_s", [(True, False), (False, True), (True, True)])
def test_secp256k1_options_match_reference(prehashed, allow_high_s):
    n = 0x_FFFFFFFF_FFFFFFFF_FFFFFFFF_FFFFFFFE_BAAEDCE6_AF48A03B_BFD25E8C_D0364141  # SEC 2 §2.4.1
    items = kat.sign_items("secp256k1", 12, seed=9)
    high = [Item(i.scheme, i.public_key, i.message,
                 i.signature[:32] + (n - int.from_bytes(i.signature[32:], "big")).to_bytes(32, "big"))
            for i in items]
    # Prehashed: 32-byte digests (valid only if signed over that digest), and wrong lengths.
    digests = [Item(i.scheme, i.public_key, hashlib.sha256(i.message).digest(), i.signature) for i in items]
    short = [Item(i.scheme, i.public_key, i.message[:31], i.signature) for i in items[:3]]
    signed_digests = kat.sign_items("secp256k1", 6, seed=10, prehashed=True)
    every = items + high + digests + short + signed_digests
    assert _check("secp256k1", every, prehashed, allow_high_s) == len(every)


def test_wrong_key_length_is_false_with_leaf():
    scheme = SCHEMES["ed25519"]
    pks = np.zeros((2, 31), dtype=np.uint8)
    sigs = np.zeros((2, 64), dtype=np.uint8)
    msgs = np.frombuffer(b"abc", dtype=np.uint8)
    verdicts, leaves = LOOPS.run("ed25519", scheme.code, pks, sigs, msgs, np.array([0, 1, 3]))
    assert verdicts == b"\x00\x00"
    assert leaves[32:] == merkle.leaf_hash(scheme.code, False, bytes(31), b"bc", bytes(64))


def test_a_host_without_a_compiler_loads_the_prebuilt_library(tmp_path, monkeypatch):
    from app.engine.kernels import hostbuild

    path = native.prebuild(tmp_path)
    assert path == native.prebuilt_path(tmp_path) and path.is_file()
    monkeypatch.setattr(hostbuild, "compiler", lambda: None)
    monkeypatch.setenv("ZAPVERIFY_NATIVE_DIR", str(tmp_path))
    assert native._library() == path
    monkeypatch.setenv("ZAPVERIFY_NATIVE_DIR", str(tmp_path / "absent"))
    with pytest.raises(hostbuild.HostBuildError):
        native._library()


def test_offsets_outside_the_messages_are_clamped_like_a_python_slice():
    """Columns overwritten under the backend (a caller's bug) give verdicts, never a crash."""
    scheme = SCHEMES["ed25519"]
    pks, sigs = np.zeros((3, 32), dtype=np.uint8), np.zeros((3, 64), dtype=np.uint8)
    msgs = np.frombuffer(b"abcdef", dtype=np.uint8)
    verdicts, leaves = LOOPS.run("ed25519", scheme.code, pks, sigs, msgs, np.array([4, 2, 1 << 40, 1 << 62]))
    assert verdicts == b"\x00\x00\x00"
    for i, m in enumerate([b"abcdef"[4:2], b"abcdef"[2:1 << 40], b"abcdef"[1 << 40:1 << 62]]):
        assert leaves[32 * i:32 * i + 32] == merkle.leaf_hash(scheme.code, False, bytes(32), m, bytes(64))
    _, leaves = LOOPS.run("ed25519", scheme.code, pks[:1], sigs[:1], msgs, np.array([3, 1 << 40]))
    assert leaves[:32] == merkle.leaf_hash(scheme.code, False, bytes(32), b"def", bytes(64))
