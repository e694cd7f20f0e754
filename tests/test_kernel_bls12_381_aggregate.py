"""bls12_381_aggregate.cu through the host build (issue 40): FastAggregateVerify (both variants),
AggregateVerify and batch CoreVerify by random linear combination, against the CPU reference
(arkworks: app/engine/reference/bls_aggregate.py, reference.verify_bls12_381) and py_ecc.

The generator reproduces the shapes of Ethereum's ``fast_aggregate_verify``,
``aggregate_verify`` and ``batch_verify`` test directories (valid sets, an extra or missing
key, a tampered signature, the identity key, no keys with and without the infinity
signature) and adds one bad member at every position, keys that cancel (P and −P), duplicate
keys and identity keys and signatures.  Every run also requires the kernels' bound checks
(ZV_CHECK, on under the test suite) to have failed 0 times.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import py_arkworks_bls12381 as ark
import pytest

from app.core.batch import G2_INFINITY, AggregateItem, Batch
from app.core.schemes import SCHEMES
from app.engine.backends.kernel_host import KernelHostBackend
from app.engine.device import hostbuild, ops
from app.engine.device.hostlib import HostDevice
from app.engine.device.registry import BLS_AGGREGATE, VERIFY_KERNELS
from app.engine.reference import bls_aggregate, kat
from app.engine.reference.reference import bls_hash, verify_bls12_381
from scripts.lib.agreement.bls12_381_aggregate import IDENTITY_PK, Signers, labelled_aggregates

pytestmark = pytest.mark.skipif(hostbuild.compiler() is None, reason="no C++ compiler")

BLS = SCHEMES["bls12-381"]


@pytest.fixture(scope="module")
def dev():
    d = HostDevice()
    yield d
    lib = hostbuild.load(BLS_AGGREGATE.name, BLS_AGGREGATE.directory)
    assert hostbuild.verify_failures(lib) == (0 if hostbuild.verify_checks() else None)


def generated_aggregates(seed: int, sets: int) -> list[AggregateItem]:
    """``sets`` rounds of every shape named in the module doc, both variants of fast items
    (the agreement suite's generator: scripts/lib/agreement/bls12_381_aggregate.py)."""
    return [it for _, it in labelled_aggregates(seed, sets)]


def test_aggregates_agree_with_the_reference(dev):
    items = generated_aggregates(40, 6)
    got = ops.verify_aggregates(dev, items)
    want = np.array([bls_aggregate.verify_item(it) for it in items])
    bad = [(i, items[i], got[i], want[i]) for i in np.flatnonzero(got != want)]
    assert not bad, bad[:3]
    assert 0.1 < want.mean() < 0.6  # both verdicts well represented
    # The variants differ exactly on no keys + the infinity signature.
    assert any(it.variant == "eth" and not it.public_keys and v for it, v in zip(items, got))


@pytest.mark.parametrize("seed", range(5))
def test_key_sum_rounds_are_a_tree_with_no_conflict_in_a_round(seed):
    """The host side of the parallel key sum: integers summed by the rounds' (dst, src) pairs
    end with each range's sum in its first row, no row is both written and read in one
    round, and an n-key range takes ceil(log2 n) rounds (one when n ≤ 2)."""
    rng = random.Random(seed)
    ranges, at = [], 0
    for _ in range(rng.randrange(1, 12)):
        at += rng.randrange(0, 3)  # gaps: keys of other items between
        n = rng.choice([0, 1, 2, 3, 5, 8, 64, 65, rng.randrange(1, 300)])
        ranges.append((at, at + n))
        at += n
    values = [rng.randrange(1 << 40) for _ in range(at)]
    sums = [None] * at
    rounds = ops.key_sum_rounds(ranges)
    none = 2**64 - 1
    for k, (dst, src) in enumerate(rounds):
        written, read = set(dst.tolist()), {x for x in src.tolist() if x != none}
        assert not written & read and len(written) == len(dst)
        for d, f in zip(dst.tolist(), src.tolist()):
            if k == 0:
                sums[d] = values[d] + (values[f] if f != none else 0)
            else:
                assert f != none
                sums[d] += sums[f]
    for lo, hi in ranges:
        if hi > lo:
            assert sums[lo] == sum(values[lo:hi])
    longest = max(hi - lo for lo, hi in ranges)
    assert len(rounds) == (0 if longest == 0 else max(1, (longest - 1).bit_length()))


def test_wide_fast_aggregates_sum_their_keys_as_a_tree(dev):
    """FastAggregateVerify of 2..70 keys, with duplicate keys and keys that cancel placed so
    they meet in the tree's first and later rounds (P + P doubles, P + (−P) is the identity),
    the identity key at the last (unpaired) position, and a wrong key deep in the tree; every
    verdict equal to the CPU reference's, both variants."""
    s = Signers("wide-fast")
    m = s.rng.randbytes(32)
    sks = [s.key() for _ in range(70)]
    pks = [s.pk(k) for k in sks]
    items: list[AggregateItem] = []
    for n in (2, 3, 7, 8, 9, 33, 64, 70):
        items.append(AggregateItem("fast_aggregate", tuple(pks[:n]), (m,), s.sig([(k, m) for k in sks[:n]])))
    # duplicates meeting at round 0 (positions 0, 1) and at round 3 (positions 0, 8)
    for j in (1, 8):
        keys = pks[:16]
        keys = keys[:j] + [pks[0]] + keys[j + 1:]
        signers = sks[:16]
        signers = signers[:j] + [sks[0]] + signers[j + 1:]
        items.append(AggregateItem("fast_aggregate", tuple(keys), (m,), s.sig([(k, m) for k in signers])))
    # P and −P meeting at round 0 and at round 2; the rest of the set signs
    for j in (1, 4):
        keys = pks[:9]
        keys = keys[:j] + [s.neg_pk(sks[0])] + keys[j + 1:]
        rest = [k for i, k in enumerate(sks[:9]) if i not in (0, j)]
        items.append(AggregateItem("fast_aggregate", tuple(keys), (m,), s.sig([(k, m) for k in rest])))
    # every key cancelled: 4 keys P, −P, Q, −Q sum to the identity -> false
    items.append(AggregateItem("fast_aggregate", (pks[0], s.neg_pk(sks[0]), pks[1], s.neg_pk(sks[1])), (m,),
                               G2_INFINITY))
    # the identity key at the last position (a key without a partner in round 0)
    items.append(AggregateItem("fast_aggregate", tuple(pks[:8]) + (IDENTITY_PK,), (m,),
                               s.sig([(k, m) for k in sks[:8]])))
    # a wrong key deep in the tree
    items.append(AggregateItem("fast_aggregate", tuple(pks[:40]) + (s.pk(s.key()),) + tuple(pks[41:64]), (m,),
                               s.sig([(k, m) for k in sks[:64]])))
    items += [AggregateItem(it.mode, it.public_keys, it.messages, it.signature, "eth") for it in items]
    got = ops.verify_aggregates(dev, items)
    want = np.array([bls_aggregate.verify_item(it) for it in items])
    assert got.tolist() == want.tolist()
    assert want.sum() == 2 * (8 + 2 + 2)  # the valid sets, duplicates and cancelled pairs verify


def test_py_ecc_oracle_on_the_shapes():
    """The rules the kernels follow, as py_ecc states them (its FastAggregateVerify,
    AggregateVerify), on a few items of each shape: what the reference above is held to."""
    pop = pytest.importorskip("py_ecc.bls").G2ProofOfPossession
    items = generated_aggregates(41, 1)[::5]
    dev = HostDevice()
    got = ops.verify_aggregates(dev, items)
    for it, v in zip(items, got):
        if it.mode == "fast_aggregate":
            want = pop.FastAggregateVerify(list(it.public_keys), it.messages[0], it.signature)
            if it.variant == "eth" and not it.public_keys and it.signature == G2_INFINITY:
                want = True
        else:
            want = it.variant == "ietf" and pop.AggregateVerify(list(it.public_keys), list(it.messages), it.signature)
        assert bool(v) == bool(want), it


def test_malformed_items_are_false(dev):
    s = Signers(3)
    sk = s.key()
    pk, m = s.pk(sk), b"m"
    sig = s.sig([(sk, m)])
    items = [AggregateItem("fast_aggregate", (pk[:47],), (m,), sig),
             AggregateItem("fast_aggregate", (pk,), (m,), sig[:95]),
             AggregateItem("fast_aggregate", (pk,), (m, m), sig), AggregateItem("fast_aggregate", (pk,), (), sig),
             AggregateItem("bogus", (pk,), (m,), sig), AggregateItem("fast_aggregate", (pk,), (m,), sig, "bogus"),
             AggregateItem("fast_aggregate", (pk,), (m,), sig)]
    assert ops.verify_aggregates(dev, items).tolist() == [False] * 6 + [True]
    assert ops.verify_aggregates(dev, []).shape == (0,)


# ------------------------------------------------------------------ batch CoreVerify by RLC
def _batch(items) -> Batch:
    return Batch.from_items(BLS, [it.public_key for it in items], [it.message for it in items],
                            [it.signature for it in items])


@pytest.fixture(scope="module")
def signed():
    return kat.sign_items("bls12-381", 96, seed=40)


def test_rlc_equals_single_verify_with_one_bad_item_at_every_position(dev, signed):
    kernel = VERIFY_KERNELS["bls12-381"]
    rng = random.Random(4)
    items = signed[:12]
    for j in range(len(items)):
        kind = kat.BLS_INVALID_KINDS[j % len(kat.BLS_INVALID_KINDS)]
        case = items[:j] + [kat.bls_invalid(items[j], kind, rng)] + items[j + 1:]
        got, report = ops.verify_bls_rlc(dev, kernel, _batch(case), group=4)
        want = [verify_bls12_381(it.public_key, it.message, it.signature) for it in case]
        assert got.tolist() == want, (j, kind)
        assert report.groups == 3 and report.failed_groups <= 1


def test_rlc_mixed_batch_and_signatures_that_cancel(dev, signed):
    kernel = VERIFY_KERNELS["bls12-381"]
    rng = random.Random(5)
    items = list(signed)
    for j in rng.sample(range(len(items)), 20):
        items[j] = kat.bls_invalid(items[j], rng.choice(kat.BLS_INVALID_KINDS), rng)
    # Two signatures whose errors cancel in an unweighted sum: σ_0 + D and σ_1 − D.
    d = bls_hash(b"offset") * ark.Scalar(7)
    s0 = ark.G2Point.from_compressed_bytes(items[0].signature) if verify_bls12_381(
        items[0].public_key, items[0].message, items[0].signature) else None
    if s0 is not None and verify_bls12_381(items[1].public_key, items[1].message, items[1].signature):
        s1 = ark.G2Point.from_compressed_bytes(items[1].signature)
        from dataclasses import replace
        items[0] = replace(items[0], signature=bytes((s0 + d).to_compressed_bytes()))
        items[1] = replace(items[1], signature=bytes((s1 - d).to_compressed_bytes()))
    got, _ = ops.verify_bls_rlc(dev, kernel, _batch(items), group=16)
    want = [verify_bls12_381(it.public_key, it.message, it.signature) for it in items]
    assert got.tolist() == want


def test_rlc_needs_under_0_6_of_the_pairing_work_of_single_verifies():
    """256 valid items: the Fp products spent in Miller loops and final exponentiations
    (ZV_OP_BLS_PAIRING_FP_MUL, host build with ZV_COUNT_OPS), RLC against one single verify
    per item; and the same verdicts."""
    items = kat.sign_items("bls12-381", 256, seed=41)
    batch = _batch(items)
    names = hostbuild.op_names()
    work, loops, pairs, finals = (names.index(n) for n in ("ZV_OP_BLS_PAIRING_FP_MUL", "ZV_OP_BLS_MILLER_LOOP",
                                                          "ZV_OP_BLS_MILLER_PAIR", "ZV_OP_BLS_FINAL_EXP"))

    class Counted(HostDevice):
        def function(self, source, entry):
            lib = hostbuild.load_code(source.path.read_text(), f"{source.name}_counted", [source.directory],
                                      defines=["ZV_COUNT_OPS"])
            fn = getattr(lib, entry)
            fn.restype = None
            self.lib = lib
            return fn

    def counted(run):
        d = Counted()
        d.function(VERIFY_KERNELS["bls12-381"].source, "zv_verify_bls12_381")
        single = d.lib
        d.function(BLS_AGGREGATE, "zv_bls_agg_final")
        agg = d.lib
        before = [hostbuild.op_counts(single)[0], hostbuild.op_counts(agg)[0]]
        v = run(d)
        after = [hostbuild.op_counts(single)[0], hostbuild.op_counts(agg)[0]]
        return v, [sum(a[k] - b[k] for a, b in zip(after, before)) for k in range(len(names))]

    v_single, c_single = counted(lambda d: ops.verify_batch(d, VERIFY_KERNELS["bls12-381"], batch))
    v_rlc, c_rlc = counted(lambda d: ops.verify_bls_rlc(d, VERIFY_KERNELS["bls12-381"], batch)[0])
    assert v_single.all() and v_rlc.tolist() == v_single.tolist()
    assert c_single[finals] == 256 and c_single[pairs] == 512
    assert c_rlc[finals] == 4 and c_rlc[pairs] == 256 + 4 and c_rlc[loops] == 256 + 4
    ratio = c_rlc[work] / c_single[work]
    print(f"RLC / single pairing work for 256 items: {ratio:.3f} (total Fp products "
          f"{c_rlc[names.index('ZV_OP_BLS_FP_MUL')] / c_single[names.index('ZV_OP_BLS_FP_MUL')]:.3f})")
    assert ratio <= 0.6


def test_ethereum_verify_vectors_through_the_rlc_batch(dev, vectors_root: Path):
    import json
    folder = vectors_root / "ethereum-bls12-381-tests" / "bls_tests_json" / "verify"
    if not folder.is_dir():
        pytest.skip(f"{folder} absent")
    cases = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
    h = [bytes.fromhex(c["input"][k][2:]) for c in cases for k in ("pubkey", "message", "signature")]
    pks, msgs, sigs = h[0::3], h[1::3], h[2::3]
    ok = [i for i in range(len(cases)) if len(pks[i]) == 48 and len(sigs[i]) == 96]
    batch = Batch.from_items(BLS, [pks[i] for i in ok], [msgs[i] for i in ok], [sigs[i] for i in ok])
    got, _ = ops.verify_bls_rlc(dev, VERIFY_KERNELS["bls12-381"], batch, group=8)
    assert got.tolist() == [bool(cases[i]["output"]) for i in ok]


def test_aggregate_vectors_where_handed(dev, vectors_root: Path):
    """Wycheproof's bls_sig_g2_aggregate_verify_test.json and Ethereum's fast_aggregate_verify /
    aggregate_verify folders, read in place where ../shared/vectors has them."""
    import json
    eth = vectors_root / "ethereum-bls12-381-tests" / "bls_tests_json"
    wyche = vectors_root / "wycheproof" / "testvectors_v1" / "bls_sig_g2_aggregate_verify_test.json"
    items, want = [], []
    for mode, handler in (("fast_aggregate", "fast_aggregate_verify"), ("aggregate", "aggregate_verify")):
        for p in sorted((eth / handler).glob("*.json")):
            i = json.loads(p.read_text())["input"]
            ms = [i["message"]] if mode == "fast_aggregate" else i["messages"]
            items.append(AggregateItem(mode, tuple(bytes.fromhex(k[2:]) for k in i["pubkeys"]),
                                       tuple(bytes.fromhex(m[2:]) for m in ms), bytes.fromhex(i["signature"][2:])))
            want.append(bool(json.loads(p.read_text())["output"]))
    if wyche.is_file():
        for g in json.loads(wyche.read_text())["testGroups"]:
            for t in g["tests"]:
                items.append(AggregateItem("aggregate", tuple(bytes.fromhex(k) for k in t["pubkeys"]),
                                           tuple(bytes.fromhex(m) for m in t["messages"]), bytes.fromhex(t["sig"])))
                want.append(t["result"] == "valid")
    if not items:
        pytest.skip("no aggregate vectors in ../shared/vectors (SOURCES.md: not handed)")
    assert ops.verify_aggregates(dev, items).tolist() == want


# ------------------------------------------------------------------ the backend and the engine
def test_kernel_host_backend_declares_and_serves_aggregates():
    from app.engine.verify.engine import Engine, EngineConfig

    backend = KernelHostBackend()
    assert backend.capabilities().aggregates
    eng = Engine(EngineConfig(backend="kernel-host"), backends=[backend])
    items = generated_aggregates(42, 1)[:12]
    res = eng.run(items)
    assert res.verdicts.tolist() == [bls_aggregate.verify_item(it) for it in items]
    assert set(res.backends.values()) == {"kernel-host"}
    batch = _batch(kat.sign_items("bls12-381", 6, seed=43))
    out = backend.run(batch, commit=True)
    assert out.verdicts.all() and out.root is not None and backend.last_rlc is not None
