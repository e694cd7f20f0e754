"""Native CPU loops: verdict and leaf hash identical to the reference, item for item."""

import ctypes
import hashlib
import random
from collections import defaultdict

import numpy as np
import pytest

from app.core.batch import Batch, Item
from app.core.schemes import SCHEMES
from app.engine.backends import ed25519_cpu, native
from app.engine.commit import merkle
from app.engine.commit.step import CommitStep
from app.engine.reference import kat, reference
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
            want = ref(it.public_key, it.message, it.signature, b"", **scheme.verifier_options(b))
            assert verdicts[i] == want, (scheme_id, i, it)
            assert leaves[32 * i:32 * i + 32] == merkle.leaf_hash(scheme.code, want, it.public_key, it.message,
                                                                  it.signature)
        checked += len(group)
    return checked


@pytest.mark.parametrize("scheme_id", sorted(s.id for s in SCHEMES.values() if s.family in native.FAMILIES))
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


def test_bip340_messages_of_every_length_and_bad_encodings_match_reference():
    """BIP-340 verifies messages of any length; r ≥ p, s ≥ n and keys without lift_x are false."""
    p = 2**256 - 2**32 - 977  # SEC 2 §2.4.1
    n = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141
    items = [it for size in (0, 1, 17, 31, 32, 33, 64, 100, 1000, 5000)
             for it in kat.sign_items("bip340", 2, seed=size, msg_len=size)]
    base = items[5]
    items += [Item("bip340", base.public_key, base.message, p.to_bytes(32, "big") + base.signature[32:]),
              Item("bip340", base.public_key, base.message, base.signature[:32] + n.to_bytes(32, "big")),
              Item("bip340", p.to_bytes(32, "big"), base.message, base.signature),  # x ≥ p
              Item("bip340", (5).to_bytes(32, "big"), base.message, base.signature),  # 5^3 + 7 = 132: no root mod p
              Item("bip340", base.public_key, base.message + b"\x00", base.signature)]
    assert _check("bip340", items) == len(items)
    ref = reference.verifier(SCHEMES["bip340"])
    assert [ref(i.public_key, i.message, i.signature) for i in items[-5:]] == [False] * 5
    assert all(ref(i.public_key, i.message, i.signature) for i in items[:-5])


def test_wrong_key_length_is_false_with_leaf():
    scheme = SCHEMES["ed25519"]
    pks = np.zeros((2, 31), dtype=np.uint8)
    sigs = np.zeros((2, 64), dtype=np.uint8)
    msgs = np.frombuffer(b"abc", dtype=np.uint8)
    verdicts, leaves = LOOPS.run("ed25519", scheme.code, pks, sigs, msgs, np.array([0, 1, 3]))
    assert verdicts == b"\x00\x00"
    assert leaves[32:] == merkle.leaf_hash(scheme.code, False, bytes(31), b"bc", bytes(64))


def test_a_host_without_a_compiler_loads_the_prebuilt_library(tmp_path, monkeypatch):
    from app.engine.backends import native_bls, native_build, native_ml_dsa
    from app.engine.device import hostbuild

    path = native.prebuild(tmp_path)
    assert path == native.prebuilt_path(tmp_path) and path.is_file()
    bls = native.prebuilt_path(tmp_path, native_bls.SOURCE)  # blst's loop is prebuilt beside it
    assert bls.is_file()
    monkeypatch.setattr(hostbuild, "compiler", lambda: None)
    monkeypatch.setenv("ZAPVERIFY_NATIVE_DIR", str(tmp_path))
    assert native.library() == path
    own = native.prebuilt_path(tmp_path, ed25519_cpu.SOURCE)  # the Ed25519 verify is prebuilt beside it
    assert own.is_file() and ed25519_cpu.build() == own
    assert native_build.library(native_bls.SOURCE) == bls
    ml_dsa = native.prebuilt_path(tmp_path, native_ml_dsa.SOURCE)  # keyed by its .inc too
    assert native_ml_dsa.library() == native_build.prebuilt_path(tmp_path, native_ml_dsa.SOURCE, native_ml_dsa.EXTRA)
    assert native_ml_dsa.library().is_file() and ml_dsa != native_ml_dsa.library()
    monkeypatch.setenv("ZAPVERIFY_NATIVE_DIR", str(tmp_path / "absent"))
    with pytest.raises(hostbuild.HostBuildError):
        native.library()


def test_an_ml_dsa_library_that_does_not_load_costs_ml_dsa_alone(monkeypatch):
    """ML-DSA's own library missing (once: a packaged copy without its .inc) falls back for
    ML-DSA only; the other families keep their native loops."""
    from app.core.errors import KernelBuildError
    from app.engine.backends import native_ml_dsa

    def fail():
        raise KernelBuildError("no native_ml_dsa library")

    monkeypatch.setattr(native_ml_dsa, "load", fail)
    loops = native.NativeLoops(ctypes.CDLL(str(native.library())))
    assert "ml-dsa" not in loops.families and {"ed25519", "secp256k1", "bip340"} <= loops.families
    for scheme_id, native_loop in (("ed25519", True), ("ml-dsa-44", False)):
        scheme, signed = SCHEMES[scheme_id], kat.sign_items(scheme_id, 4, seed=3)
        b = Batch.from_items(scheme, [i.public_key for i in signed], [i.message for i in signed],
                             [i.signature for i in signed])
        if native_loop:
            assert loops.run(scheme.family, scheme.code, b.pks, b.sigs, b.msgs, b.offsets)[0] == b"\1" * 4
        else:
            with pytest.raises(ValueError, match="ml-dsa"):
                loops.run(scheme.family, scheme.code, b.pks, b.sigs, b.msgs, b.offsets)


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


def _leaves(n: int) -> np.ndarray:
    return np.frombuffer(b"".join(hashlib.sha256(i.to_bytes(4, "big")).digest() for i in range(n)),
                         dtype=np.uint8).reshape(n, 32)


@pytest.mark.parametrize("n", list(range(0, 40)) + [63, 64, 65, 1000, 4097])
def test_native_merkle_root_is_the_python_tree(n):
    leaves = _leaves(n)
    want = merkle.root([bytes(x) for x in leaves])  # a list: always the hashlib tree
    assert LOOPS.merkle_root(leaves) == want
    assert np.array_equal(leaves, _leaves(n))  # the caller's leaves are not overwritten


def test_merkle_root_uses_the_hasher_it_is_given_and_no_process_wide_switch(monkeypatch):
    calls = []
    monkeypatch.setattr(native.NativeLoops, "merkle_root",
                        lambda self, leaves: calls.append(len(leaves)) or b"native")
    assert native.loaded() is LOOPS  # loaded in this process, yet not used unless passed in
    assert merkle.root(_leaves(5)) == merkle.root([bytes(x) for x in _leaves(5)]) and calls == []
    assert merkle.root(_leaves(5), LOOPS) == b"native" and calls == [5]
    assert merkle.root([bytes(x) for x in _leaves(5)], LOOPS) != b"native"  # a list: hashlib
    # The engine's commit step asks for the hasher at each call (the CPU backend loads the loops
    # at warm-up, after the engine is built): the loaded loops where they hash with OpenSSL.
    step = CommitStep(native.leaf_hasher)
    assert step.root(_leaves(5)) == (b"native" if LOOPS.sha256 == "openssl" else merkle.root(_leaves(5)))
    monkeypatch.setattr(native, "_loops", None)  # not loaded: hashlib, never a build
    assert step.root(_leaves(5)) == merkle.root([bytes(x) for x in _leaves(5)])


def test_the_libsodium_fallback_hashes_the_same(monkeypatch):
    """A host whose hashlib has no loadable libcrypto hashes with libsodium: same leaves, same root."""
    monkeypatch.setattr(native, "_libcrypto", lambda: None)
    fallback = native.NativeLoops(ctypes.CDLL(str(native.library())))
    assert fallback.sha256 == "libsodium"
    items = kat.sign_items("secp256k1", 6, seed=3)
    b = Batch.from_items(SCHEMES["secp256k1"], [i.public_key for i in items], [i.message for i in items],
                         [i.signature for i in items])
    got = fallback.run("secp256k1", b.scheme.code, b.pks, b.sigs, b.msgs, b.offsets)
    assert got == LOOPS.run("secp256k1", b.scheme.code, b.pks, b.sigs, b.msgs, b.offsets)
    assert got[0] == b"\x01" * 6
    assert fallback.merkle_root(_leaves(77)) == merkle.root([bytes(x) for x in _leaves(77)])


def test_openssl_sha256_is_adopted_only_if_it_hashes_right():
    lib = ctypes.CDLL(str(native.library()))
    lib.zv_use_openssl_sha256.argtypes = [ctypes.c_void_p] * 3
    assert lib.zv_use_openssl_sha256(None, None, None) == 0
    crypto = native._libcrypto()
    if crypto is None:
        pytest.skip("no loadable libcrypto under hashlib here")
    addr = [ctypes.cast(getattr(crypto, f"SHA256_{n}"), ctypes.c_void_p).value for n in ("Init", "Update", "Final")]
    # SHA-224's functions share SHA-256's signatures but give another digest of "abc".
    sha224 = [ctypes.cast(getattr(crypto, f"SHA224_{n}"), ctypes.c_void_p).value for n in ("Init", "Update", "Final")]
    assert lib.zv_use_openssl_sha256(*sha224) == 0
    assert lib.zv_use_openssl_sha256(*addr) == 1
    assert LOOPS.sha256 == "openssl"


def test_leaves_of_items_verified_elsewhere_are_merkle_leaf_hashes():
    rng = random.Random(11)
    n, pk_len, sig_len = 9, 1312, 2420
    pks = np.frombuffer(rng.randbytes(n * pk_len), dtype=np.uint8).reshape(n, pk_len)
    sigs = np.frombuffer(rng.randbytes(n * sig_len), dtype=np.uint8).reshape(n, sig_len)
    lens = [0, 1, 55, 56, 64, 119, 200, 3, 1000]  # SHA-256 padding edges among them
    msgs = np.frombuffer(rng.randbytes(sum(lens)), dtype=np.uint8)
    off = np.cumsum([0] + lens)
    verdicts = bytes(rng.randrange(2) for _ in range(n))
    got = LOOPS.leaves(0x31, verdicts, pks, sigs, msgs, off)
    for i in range(n):
        want = merkle.leaf_hash(0x31, bool(verdicts[i]), pks[i].tobytes(), msgs[off[i]:off[i + 1]].tobytes(),
                                sigs[i].tobytes())
        assert got[32 * i:32 * i + 32] == want
    with pytest.raises(ValueError, match="verdicts"):
        LOOPS.leaves(0x31, verdicts[:-1], pks, sigs, msgs, off)


@pytest.mark.parametrize("scheme_id", ["ml-dsa-44", "bls12-381"])
def test_python_loop_chunks_hash_their_leaves_natively_to_the_same_values(scheme_id, monkeypatch):
    from app.engine.backends.cpu_worker import chunk_args, verify_range

    assert native.loaded() is LOOPS
    rng = random.Random(2)
    signed = kat.sign_items(scheme_id, 3, seed=4)
    items = signed + [kat.mutate(i, rng) for i in signed]
    items = [i for i in items if len(i.public_key) == SCHEMES[scheme_id].pk_len
             and len(i.signature) == SCHEMES[scheme_id].sig_len]
    b = Batch.from_items(SCHEMES[scheme_id], [i.public_key for i in items], [i.message for i in items],
                         [i.signature for i in items])
    calls = []
    real = native.NativeLoops.leaves
    monkeypatch.setattr(native.NativeLoops, "leaves", lambda self, *a: calls.append(a[0]) or real(self, *a))
    flags, leaves = verify_range(*chunk_args(b, 0, len(items), False, False))
    assert calls == ([b.scheme.code] if LOOPS.sha256 == "openssl" else [])  # hashed in C with OpenSSL only
    ref = reference.verifier(SCHEMES[scheme_id])
    for i, it in enumerate(items):
        ok = ref(it.public_key, it.message, it.signature)
        assert flags[i] == ok
        assert leaves[32 * i:32 * i + 32] == merkle.leaf_hash(b.scheme.code, ok, it.public_key, it.message,
                                                              it.signature)
    assert set(flags) == {0, 1}
    monkeypatch.setattr(native, "loaded", lambda: None)  # a process without them: hashlib
    assert verify_range(*chunk_args(b, 0, len(items), False, False)) == (flags, leaves)


def test_libcrypto_is_hashlibs_own_even_with_another_copy_loaded():
    import _hashlib

    psycopg = pytest.importorskip("psycopg")  # its binary wheel bundles another libcrypto
    assert psycopg
    crypto = native._libcrypto()
    if crypto is None:
        pytest.skip("no loadable libcrypto under hashlib here")
    assert crypto._name == _hashlib.__file__


def test_no_hashlib_extension_keeps_the_native_loops_on_libsodium(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "_hashlib", None)  # "import _hashlib" raises ImportError
    assert native._libcrypto() is None
    assert native.NativeLoops(ctypes.CDLL(str(native.library()))).sha256 == "libsodium"


def test_every_process_worker_has_the_native_loops():
    """Each spawned worker loads them in its initializer, not in a warm-up task one worker may
    take twice."""
    from app.engine.backends.cpu import CpuBackend

    backend = CpuBackend(workers=2, parallelism="process")
    try:
        ex = backend._executor(True)
        got: set[tuple[int, bool]] = set()
        for _ in range(20):  # waves of two tasks until both workers have answered
            got |= set(ex.map(_worker_state, [0.2, 0.2]))
            if len(got) >= 2:
                break
    finally:
        backend.close()
    assert len(got) == 2 and all(loaded for _, loaded in got)


def test_the_worker_initializer_loads_the_loops_and_libraries(monkeypatch):
    import os
    import signal

    from app.engine.backends import cpu_worker

    calls = []
    monkeypatch.setattr(native, "loops", lambda: calls.append("loops"))
    monkeypatch.setattr(cpu_worker.reference, "verifier", lambda s: calls.append(s.id))
    old = signal.getsignal(signal.SIGINT)
    try:
        cpu_worker.init_worker(os.getppid())  # "the server" is this process's parent: its watch stays quiet
    finally:
        signal.signal(signal.SIGINT, old)
    assert calls == ["loops", *SCHEMES]


def _worker_state(seconds: float) -> tuple[int, bool]:
    import os
    import time

    time.sleep(seconds)  # long enough that both workers take a task
    return os.getpid(), native.loaded() is not None
