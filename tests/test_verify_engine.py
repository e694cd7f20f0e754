"""Engine: grouping, input order, Merkle root, self-test routing and CPU fallback."""

import numpy as np
import pytest

from app.core.batch import Batch
from app.core.errors import BackendUnavailable, EmptyBatch, RequestError
from app.core.result import Result
from app.core.schemes import SCHEMES
from app.engine.backends.base import READY, Backend, Capabilities
from app.engine.commit import merkle
from app.engine.reference import kat
from app.engine.verify.engine import Engine, EngineConfig
from app.engine.verify.status import engine_status


def mixed_items():
    items, expected = [], []
    for s in ("ed25519", "secp256k1", "bls12-381", "ml-dsa-65", "slh-dsa-shake-128f"):
        for ka in kat.known_answers()[s]:
            items.append(ka.item)
            expected.append(ka.expected)
    # Interleave so that input order differs from grouping order.
    order = list(range(0, len(items), 2)) + list(range(1, len(items), 2))
    return [items[i] for i in order], [expected[i] for i in order]


def test_mixed_request_verdicts_in_input_order_and_root(engine):
    items, expected = mixed_items()
    res = engine.run(items)
    assert res.verdicts.tolist() == expected
    leaves = [merkle.leaf_hash(SCHEMES[it.scheme].code, v, it.public_key, it.message, it.signature)
              for it, v in zip(items, expected)]
    assert res.root == merkle.root(leaves)
    assert set(res.backends) == {"ed25519", "secp256k1", "bls12-381", "ml-dsa-65", "slh-dsa-shake-128f"}
    assert set(res.backends.values()) == {"cpu"}


def test_malformed_items_are_false_and_do_not_fail_the_batch(engine):
    good = kat.known_answers()["ed25519"][0].item
    items = [good,
             kat.Item("ed25519", good.public_key[:31], good.message, good.signature),
             kat.Item("ed25519", good.public_key, good.message, good.signature + b"\0"),
             kat.Item("secp256k1", b"\x02" + bytes(32), b"m", bytes(64)),
             kat.Item("ml-dsa-44", bytes(1312), b"m", bytes(2420), bytes(300)),  # context > 255
             good]
    assert engine.run(items).verdicts.tolist() == [True, False, False, False, False, True]


def test_empty_request_is_a_named_error(engine):
    with pytest.raises(EmptyBatch) as e:
        engine.run([])
    assert e.value.field == "items"


def test_columnar_batch_verify_and_validation(engine):
    kas = kat.known_answers()["secp256k1"]
    items = [ka.item for ka in kas if not ka.item.prehashed and len(ka.item.public_key) == 33]
    batch = Batch.from_items(SCHEMES["secp256k1"], [i.public_key for i in items], [i.message for i in items],
                             [i.signature for i in items])
    res = engine.run(batch)
    assert res.leaves.shape == (len(items), 32) and res.root == merkle.root(res.leaves)
    batch.offsets = batch.offsets[::-1].copy()
    with pytest.raises(RequestError) as e:
        engine.run(batch)
    assert e.value.field == "offsets"


class MockBackend(Backend):
    """A stand-in accelerator: answers verdicts from a function, or raises."""

    def __init__(self, name, fn):
        self.name, self.fn, self.calls = name, fn, 0

    def capabilities(self):
        return Capabilities(schemes={"ed25519": READY})

    def run(self, batch, *, commit=False):
        self.calls += 1
        return Result.of(self.name, self.fn(batch))


def _cpu_truth(batch):
    from app.engine.backends.cpu import CpuBackend

    return CpuBackend(workers=1).run(batch).verdicts


def test_backend_that_fails_selftest_is_routed_to_cpu():
    liar = MockBackend("mock", lambda b: np.ones(len(b), dtype=bool))  # accepts everything
    eng = Engine(EngineConfig(cpu_workers=1), backends=[liar])
    eng.start()
    assert eng.routes["ed25519"].selftest == {"mock": False, "cpu": True}
    assert "verdicts" in eng.routes["ed25519"].failures["mock"]
    items = [ka.item for ka in kat.known_answers()["ed25519"]]
    calls = liar.calls
    res = eng.run(items)
    assert res.backends == {"ed25519": "cpu"} and liar.calls == calls
    assert res.verdicts.tolist() == [True, True, False, False]
    assert engine_status(eng)["schemes"]["ed25519"]["backend"] == "cpu"


def test_backend_error_mid_batch_falls_back_to_cpu_with_right_verdicts():
    state = {"fail": False}

    def fn(batch):
        if state["fail"]:
            raise RuntimeError("launch failed")
        return _cpu_truth(batch)

    flaky = MockBackend("mock", fn)
    eng = Engine(EngineConfig(cpu_workers=1), backends=[flaky])
    eng.start()
    items = [ka.item for ka in kat.known_answers()["ed25519"]]
    assert eng.run(items).backends == {"ed25519": "mock"}
    state["fail"] = True
    res = eng.run(items)
    assert res.backends == {"ed25519": "cpu"} and res.verdicts.tolist() == [True, True, False, False]
    assert "runtime" in eng.routes["ed25519"].failures["mock"]


def test_crossover_keeps_small_batches_on_cpu():
    good = MockBackend("mock", _cpu_truth)
    eng = Engine(EngineConfig(cpu_workers=1, crossover={"ed25519": 3}), backends=[good])
    eng.start()
    items = [ka.item for ka in kat.known_answers()["ed25519"]]
    assert eng.run(items[:2]).backends == {"ed25519": "cpu"}
    assert eng.run(items[:3]).backends == {"ed25519": "mock"}


def test_forcing_an_absent_backend_is_a_clear_error():
    with pytest.raises(BackendUnavailable) as e:
        Engine(EngineConfig(backend="cuda"))
    assert "cuda" in e.value.message


def test_stats_count_items_per_scheme(engine):
    before = engine.stats.snapshot()["schemes"].get("bls12-381", {}).get("items", 0)
    engine.run([ka.item for ka in kat.known_answers()["bls12-381"]])
    snap = engine.stats.snapshot()["schemes"]["bls12-381"]
    assert snap["items"] == before + 4 and snap["backends"]["cpu"] >= 4


def test_items_refused_before_any_backend_are_counted(engine):
    before = engine.stats.snapshot()["schemes"].get("ml-dsa-87", {}).get("items", 0)
    bad = kat.Item("ml-dsa-87", b"\x01" * 10, b"m", b"\x02" * 10)
    assert engine.run([bad, bad]).verdicts.tolist() == [False, False]
    snap = engine.stats.snapshot()["schemes"]["ml-dsa-87"]
    assert snap["items"] == before + 2 and snap["backends"]["precheck"] >= 2 and snap["invalid"] >= 2


def test_the_result_names_precheck_where_it_decided_items(engine):
    ka = kat.known_answers()["ed25519"][0]
    bad = kat.Item("ed25519", b"\x01" * 31, b"m", b"\x02" * 64)  # a key one byte short
    assert engine.run([bad]).backends == {"ed25519": "precheck"}
    both = engine.run([ka.item, bad, ka.item])
    assert sorted(both.backends["ed25519"].split("+")) == ["cpu", "precheck"]
    assert both.verdicts.tolist() == [ka.expected, False, ka.expected]
