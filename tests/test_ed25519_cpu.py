"""The CPU backend's own Ed25519 verify gives libsodium's verdict on every item, in every build,
with its bounds checks on; and the native loop serves it (libsodium where it is switched off)."""

import random

import pytest

from app.core.batch import Batch
from app.core.schemes import SCHEMES
from app.engine.backends import ed25519_cpu, native
from app.engine.commit import merkle
from app.engine.device import hostbuild
from app.engine.reference import kat, reference
from scripts.lib.agreement import Chunk
from scripts.lib.agreement import ed25519_cpu as suite

pytestmark = pytest.mark.skipif(hostbuild.compiler() is None, reason="no C++ compiler")


@pytest.mark.parametrize("variant", sorted(ed25519_cpu.VARIANTS))
def test_every_mutation_kind_and_vector_agrees_with_libsodium(variant):
    """A CI-sized chunk of the agreement suite (scripts/agreement --scheme ed25519-cpu runs the
    million): valid items, bit flips, every targeted mutation, mixed-order keys, every vector."""
    assert hostbuild.verify_checks()  # conftest turns the ZV_CHECK bounds checks on
    tally = suite.run_chunk(Chunk(variant, 0, 3, {"valid": 300, "mutated": 600, "mixed": 200}))
    kinds = {kind for (_, kind) in tally.kinds}
    assert {"valid", "mixed_order", "vectors", *suite.kernel_suite.m.MUTANT_KINDS} <= kinds
    assert sum(c["items"] for c in tally.kinds.values()) >= 1100
    assert tally.kinds[(variant, "mixed_order")]["accepted"] > 0  # a torsion part [k] kills passes
    assert tally.failures() == 0, {k: dict(c) for k, c in tally.kinds.items() if c["disagreements"]}
    assert ed25519_cpu.load(variant).bound_failures() == 0


def test_wrong_lengths_and_empty_messages():
    own = ed25519_cpu.load()
    good = kat.sign_items("ed25519", 2, seed=11, msg_len=0)
    items = [(it.public_key, it.message, it.signature) for it in good]
    items += [(good[0].public_key[:31], b"", good[0].signature), (good[0].public_key, b"", good[0].signature + b"\0"),
              (b"", b"", b""), (good[1].public_key, b"", good[1].signature)]
    assert own.verify_many(items) == [True, True, False, False, False, True]


def test_the_native_loop_serves_it_with_leaf_hashes():
    loops = native.loops()
    assert loops is not None and loops.ed25519 == "own"
    scheme = SCHEMES["ed25519"]
    items = kat.sign_items("ed25519", 70, seed=12, msg_len=33)  # more than one group of 64
    items[5] = kat.mutate(items[5], random.Random(1))
    b = Batch.from_items(scheme, [i.public_key for i in items], [i.message for i in items],
                         [i.signature for i in items])
    verdicts, leaves = loops.run("ed25519", scheme.code, b.pks, b.sigs, b.msgs, b.offsets)
    want = [reference.verify_ed25519(i.public_key, i.message, i.signature) for i in items]
    assert list(verdicts) == want and want.count(False) == 1
    for j, it in enumerate(items):
        assert leaves[32 * j:32 * j + 32] == merkle.leaf_hash(scheme.code, want[j], it.public_key, it.message,
                                                              it.signature)


def test_switched_off_the_native_loop_calls_libsodium(monkeypatch):
    import ctypes

    monkeypatch.setenv(ed25519_cpu.ENV_SWITCH, "0")
    assert native.NativeLoops(ctypes.CDLL(str(native.library()))).ed25519 == "libsodium"


def test_sha512_is_openssls_where_hashlib_has_it():
    own = ed25519_cpu.load()
    assert own.sha512 == ("openssl" if ed25519_cpu.libcrypto() is not None else "portable")
