"""BLS12-381 on blst (app/engine/backends/native_bls.py): CoreVerify chunks one by one and by
random linear combination, and aggregate items, against arkworks (the reference's library,
kept as the second opinion) and the external vectors.  The large generated runs are
``scripts/agreement --scheme bls12-381|bls12-381-rlc|bls12-381-aggregate --path blst``."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from app.core.batch import AggregateItem, Batch
from app.core.schemes import SCHEMES
from app.engine.backends import cpu_policy, native, native_bls
from app.engine.backends.cpu import CpuBackend
from app.engine.reference import bls_aggregate, kat, reference
from app.vectors import _ethereum_bls, _wycheproof
from scripts.lib.agreement import bls12_381 as single_suite
from scripts.lib.agreement.bls12_381_aggregate import labelled_aggregates

BLS = SCHEMES["bls12-381"]


@pytest.fixture(scope="module")
def blst() -> native_bls.BlsLoops:
    loops = native_bls.loops()
    if loops is None:
        pytest.skip("blst loops unavailable (no compiler or no blspy)")
    return loops


def _columns(items):
    b = Batch.from_items(BLS, [it.public_key for it in items], [it.message for it in items],
                         [it.signature for it in items])
    return b.pks, b.sigs, b.msgs, b.offsets


def _raw_columns(triples):
    """Columns of (pk, msg, sig) triples of any lengths, padded to the longest key and
    signature as a caller's bad lengths reach the loop (a wrong length verifies false)."""
    pk_len = max(len(pk) for pk, _, _ in triples)
    sig_len = max(len(sig) for _, _, sig in triples)
    pks = np.zeros((len(triples), pk_len), np.uint8)
    sigs = np.zeros((len(triples), sig_len), np.uint8)
    for i, (pk, _, sig) in enumerate(triples):
        pks[i, :len(pk)] = np.frombuffer(pk, np.uint8)
        sigs[i, :len(sig)] = np.frombuffer(sig, np.uint8)
    msgs = b"".join(m for _, m, _ in triples)
    offsets = np.cumsum([0] + [len(m) for _, m, _ in triples]).astype(np.uint64)
    return pks, sigs, np.frombuffer(msgs, np.uint8), offsets


def _arkworks(items):
    return [reference.verify_bls12_381(it.public_key, it.message, it.signature) for it in items]


def _both(blst, cols):
    return [list(blst.verify(*cols, rlc=rlc)) for rlc in (False, True)]


def test_ethereum_and_wycheproof_vectors_right_on_blst_one_by_one_and_batched(blst, vectors_root):
    records = [r for r in list(_wycheproof(vectors_root)) + list(_ethereum_bls(vectors_root))
               if r.get("scheme") == "bls12-381"]
    assert len(records) > 29  # the Ethereum verify cases and Wycheproof's POP verify file
    by_len: dict[tuple[int, int], list[dict]] = {}
    for r in records:  # one chunk per (key, signature) length, as a Batch holds one of each
        by_len.setdefault((len(bytes.fromhex(r["public_key"])), len(bytes.fromhex(r["signature"]))), []).append(r)
    for recs in by_len.values():
        triples = [tuple(bytes.fromhex(r[f]) for f in ("public_key", "message", "signature")) for r in recs]
        want = [int(r["expected"]) for r in recs]
        for got in _both(blst, _raw_columns(triples)):
            assert got == want, [r["id"] for r, g, w in zip(recs, got, want) if g != w]
        # the second opinion says the same
        assert [int(reference.verify_bls12_381(*t)) for t in triples] == want


def test_deserialization_vectors_decide_keys_and_signatures_as_specified_and_as_arkworks(blst, vectors_root):
    base = vectors_root / "ethereum-bls12-381-tests" / "bls_tests_json"
    cases = 0
    for folder, field, decode, second in (("deserialization_G1", "pubkey", blst.key_valid, reference.bls_public_key),
                                          ("deserialization_G2", "signature", blst.signature_valid,
                                           reference.bls_signature)):
        for path in sorted((base / folder).glob("*.json")):
            d = json.loads(path.read_text())
            data = bytes.fromhex(d["input"][field])
            # KeyValidate refuses the identity key, which deserializes (the vectors' output)
            want = bool(d["output"]) and not (field == "pubkey" and data == b"\xc0" + bytes(47))
            assert decode(data) is want, path.name
            assert (second(data) is not None) is want, path.name
            cases += 1
    assert cases > 20


@pytest.mark.parametrize("seed", [1, 2])
def test_every_mutation_kind_agrees_with_arkworks_one_by_one_and_batched(blst, seed):
    rng = random.Random(seed)
    valid = kat.sign_items("bls12-381", 24, seed=800 + seed)
    others = kat.sign_items("bls12-381", 24, seed=900 + seed)
    items = list(valid)
    for j, kind in enumerate(single_suite.MUTANT_KINDS):
        items.append(single_suite.mutant(valid[j % 24], kind, others[j % 24], rng))
    for j, kind in enumerate(kat.BLS_INVALID_KINDS):
        items.append(kat.bls_invalid(valid[(j + 5) % 24], kind, rng))
    rng.shuffle(items)
    want = [int(v) for v in _arkworks(items)]
    assert 0 < sum(want) < len(items)
    for got in _both(blst, _columns(items)):
        assert got == want


def test_every_bad_position_in_a_group_is_found_by_bisection(blst):
    valid = kat.sign_items("bls12-381", 40, seed=11)
    rng = random.Random(4)
    for bad in ([0], [39], [7, 8], [0, 13, 26, 39], list(range(0, 40, 3))):
        blst.invalid_fraction = 0.0  # a fresh estimate: the batch path, not the fallback
        items = list(valid)
        for i in bad:
            items[i] = kat.bls_invalid(valid[i], "message", rng)
        got = blst.verify(*_columns(items), rlc=True)
        assert [i for i, v in enumerate(got) if not v] == bad


def test_a_valid_batch_costs_a_multi_pairing_per_group_not_per_item(blst):
    items = kat.sign_items("bls12-381", 64, seed=12)
    blst.invalid_fraction = 0.0
    before = blst.pairing_checks
    assert set(blst.verify(*_columns(items), rlc=True)) == {1}
    # a first group of FIRST_GROUP items, then one group of the rest
    assert blst.pairing_checks - before == 2


def test_errors_that_cancel_in_a_plain_sum_are_caught(blst):
    # σ_0 + d and σ_1 − d: a plain sum (no random scalars) would pass both.
    import py_arkworks_bls12381 as ark

    items = kat.sign_items("bls12-381", 8, seed=13)
    d = ark.G2Point() * ark.Scalar(12345)
    s0 = ark.G2Point.from_compressed_bytes(items[0].signature) + d
    s1 = ark.G2Point.from_compressed_bytes(items[1].signature) - d
    from dataclasses import replace

    items[0] = replace(items[0], signature=bytes(s0.to_compressed_bytes()))
    items[1] = replace(items[1], signature=bytes(s1.to_compressed_bytes()))
    blst.invalid_fraction = 0.0
    assert list(blst.verify(*_columns(items), rlc=True)) == [0, 0] + [1] * 6


def test_aggregates_agree_with_arkworks_on_every_shape(blst):
    labelled = labelled_aggregates("blst-aggregates", 2)
    kinds = {k for k, _ in labelled}
    assert len(kinds) > 30
    for kind, item in labelled:
        assert blst.aggregate_item(item) == bls_aggregate.verify_item(item), kind


def test_aggregates_with_shared_messages_and_bad_lengths(blst):
    items = kat.sign_items("bls12-381", 3, seed=14, msg_len=16)
    pks = tuple(it.public_key for it in items)
    msgs = tuple(it.message for it in items)
    # a short key, a message list of another length, a two-message fast item: all false
    for item in (AggregateItem("aggregate", (pks[0][:47],) + pks[1:], msgs, items[0].signature),
                 AggregateItem("aggregate", pks, msgs[:2], items[0].signature),
                 AggregateItem("fast_aggregate", pks, msgs[:2], items[0].signature),
                 AggregateItem("aggregate", pks, msgs, items[0].signature, "eth")):
        assert blst.aggregate_item(item) is False
        assert bls_aggregate.verify_item(item) is False


@pytest.mark.parametrize("bls_batch_on", [False, True])
def test_cpu_backend_runs_bls_on_blst_with_the_python_loops_verdicts_and_leaves(blst, bls_batch_on):
    if native.loops() is None or native.loops().bls is None:
        pytest.skip("native loops unavailable")
    rng = random.Random(15)
    valid = kat.sign_items("bls12-381", 150, seed=16)
    items = [kat.bls_invalid(it, kat.BLS_INVALID_KINDS[i % 9], rng) if i % 5 == 0 else it
             for i, it in enumerate(valid)]
    batch = Batch.from_items(BLS, *[[getattr(it, f) for it in items] for f in ("public_key", "message", "signature")])
    fast = CpuBackend(workers=2, bls_batch=bls_batch_on)
    slow = CpuBackend(workers=2, use_native=False, bls_batch=False)
    try:
        assert fast.native_family(BLS) and fast.pool_kind(BLS) == "thread"
        a, b = fast.run(batch), slow.run(batch)
        assert a.verdicts.tolist() == b.verdicts.tolist() == _arkworks(items)
        assert np.array_equal(a.leaves, b.leaves)
        assert fast.chunk_items(BLS) >= cpu_policy.BLS_RLC_CHUNK  # full RLC groups in every chunk
    finally:
        fast.close()
        slow.close()


def test_cpu_backend_aggregates_on_blst_equal_arkworks_with_leaves():
    if native.loops() is None or native.loops().bls is None:
        pytest.skip("native loops unavailable")
    from app.core.batch import AggregateBatch

    items = [it for _, it in labelled_aggregates("blst-backend", 1)]
    fast, slow = CpuBackend(workers=2), CpuBackend(workers=2, use_native=False)
    try:
        a, b = fast.run(AggregateBatch(tuple(items))), slow.run(AggregateBatch(tuple(items)))
        assert a.verdicts.tolist() == b.verdicts.tolist()
        assert np.array_equal(a.leaves, b.leaves)
    finally:
        fast.close()
        slow.close()


def test_heavy_aggregates_run_on_the_process_pool_even_on_blst(monkeypatch):
    """A 2,048-key aggregate holds a pool thread for up to a second on blst: on the thread pool
    the native loops' chunks of another client's small batches queued behind it (small Ed25519
    requests' p99 7 s, bench/overload.py).  Heavy items go to processes, light ones stay on
    threads, and both give blst's (the reference's) verdicts."""
    if native.loops() is None or native.loops().bls is None:
        pytest.skip("native loops unavailable")
    from app.core.batch import AggregateBatch

    signed = kat.sign_items("bls12-381", 2, seed=18, msg_len=16)
    light = AggregateItem("aggregate", tuple(it.public_key for it in signed), tuple(it.message for it in signed),
                          signed[0].signature)
    heavy = AggregateItem("aggregate", (signed[0].public_key,) * CpuBackend.AGGREGATE_PROCESS_KEYS,
                          (signed[0].message,) * CpuBackend.AGGREGATE_PROCESS_KEYS, signed[0].signature)
    backend = CpuBackend(workers=2)
    kinds: list[bool] = []
    real = backend._executor
    monkeypatch.setattr(backend, "_executor", lambda processes: kinds.append(processes) or real(processes))
    try:
        for batch, want_processes in (((light, light), False), ((light, heavy), True)):
            got = backend.run(AggregateBatch(batch))
            assert kinds.pop() is want_processes
            assert got.verdicts.tolist() == [bls_aggregate.verify_item(it) for it in batch]
    finally:
        backend.close()


def test_after_bad_batches_a_probe_decides_between_groups_and_single_checks(blst):
    valid = kat.sign_items("bls12-381", 40, seed=17)
    rng = random.Random(8)
    half = [kat.bls_invalid(it, "message", rng) if i % 2 else it for i, it in enumerate(valid)]
    cols = _columns(valid)
    checks = []
    for _ in range(native_bls.PROBE_EVERY):  # the recent traffic was bad: one chunk in PROBE_EVERY probes
        blst.invalid_fraction = 0.9
        before = blst.pairing_checks
        assert blst.verify(*cols, rlc=True) == b"\x01" * 40
        checks.append(blst.pairing_checks - before)
    assert sorted(checks)[0] <= 3 and sorted(checks)[1:] == [40] * (native_bls.PROBE_EVERY - 1)
    checks = []
    for _ in range(native_bls.PROBE_EVERY):
        blst.invalid_fraction = 0.9
        before = blst.pairing_checks
        assert list(blst.verify(*_columns(half), rlc=True)) == [1 - i % 2 for i in range(40)]
        checks.append(blst.pairing_checks - before)
    assert sorted(checks) == [40] * (native_bls.PROBE_EVERY - 1) + [41]  # a failed probe costs one more


def test_the_shadow_checker_checks_bls_on_blst_with_the_references_verdicts(blst):
    from app.engine.verify import shadow

    assert native_bls.verifier(BLS) == blst.core_verify  # loaded: the CPU backend's rate
    assert native_bls.verifier(SCHEMES["ed25519"]) is reference.verifier(SCHEMES["ed25519"])
    assert shadow.native_bls.verifier is native_bls.verifier
    rng = random.Random(9)
    valid = kat.sign_items("bls12-381", 9, seed=18)
    items = valid + [kat.bls_invalid(it, kind, rng) for it, kind in zip(valid, kat.BLS_INVALID_KINDS)]
    assert [blst.core_verify(it.public_key, it.message, it.signature) for it in items] == _arkworks(items)
    assert blst.core_verify(valid[0].public_key[:47], valid[0].message, valid[0].signature) is False


def test_a_vanishing_invalid_fraction_still_sizes_groups_at_once(blst):
    # Long valid traffic halves the estimate chunk after chunk towards 0; the group size
    # (√(F / p), at most 64) must come at once, not after counting towards √(F / 1e-300).
    import time

    valid = kat.sign_items("bls12-381", 24, seed=19)
    for p in (1e-12, 1e-300, 5e-324):
        blst.invalid_fraction = p
        t0 = time.perf_counter()
        assert blst.verify(*_columns(valid), rlc=True) == b"\x01" * 24
        assert time.perf_counter() - t0 < 10
