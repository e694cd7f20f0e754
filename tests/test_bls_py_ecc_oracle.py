"""BLS12-381: the arkworks reference agrees with py_ecc, the slow pure-Python oracle."""

import random

import pytest

from app.engine.reference import kat, reference

py_ecc_bls = pytest.importorskip("py_ecc.bls")


def test_arkworks_agrees_with_py_ecc_on_valid_mutated_and_identity_items():
    rng = random.Random(5)
    items = kat.sign_items("bls12-381", 2, seed=11, msg_len=32)
    items += [kat.mutate(items[0], rng), kat.mutate(items[1], rng)]
    items.append(kat.Item("bls12-381", b"\xc0" + bytes(47), b"m", b"\xc0" + bytes(95)))
    pop = py_ecc_bls.G2ProofOfPossession
    for it in items:
        want = pop.Verify(it.public_key, it.message, it.signature)
        assert reference.verify_bls12_381(it.public_key, it.message, it.signature) is bool(want)
