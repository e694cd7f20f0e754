"""The crossover of BLS12-381 aggregate requests (issue 40): counted in pairings (keys + 1 per
item), configured under ``bls12-381-aggregates``, else measured at start apart from plain
bls12-381 batches, else bls12-381's crossover; a backend that does not declare aggregates
never gets them."""

from __future__ import annotations

import numpy as np
import pytest

from app.core.batch import AggregateBatch, AggregateItem
from app.core.result import Result
from app.engine.backends.base import READY, Backend, Capabilities
from app.engine.backends.cpu import CpuBackend
from app.engine.reference import bls_aggregate, kat
from app.engine.verify import calibrate
from app.engine.verify.engine import Engine, EngineConfig
from app.engine.verify.status import engine_status


class AggregateMock(Backend):
    """A stand-in accelerator for bls12-381 that verifies as the CPU does and declares
    aggregates (or not); counts its aggregate runs."""

    def __init__(self, name: str = "mock", aggregates: bool = True):
        self.name, self.aggregates, self.aggregate_runs = name, aggregates, 0
        self.cpu = CpuBackend(workers=1)

    def capabilities(self):
        return Capabilities(schemes={"bls12-381": READY}, aggregates=self.aggregates, calibrate_at_start=True)

    def run(self, work, *, commit=False):
        if isinstance(work, AggregateBatch):
            self.aggregate_runs += 1
            return Result.of(self.name, np.array([bls_aggregate.verify_item(it) for it in work.items], dtype=bool))
        return Result.of(self.name, self.cpu.run(work).verdicts)


def _items(pairs: int) -> list[AggregateItem]:
    """Valid single-signer FastAggregateVerify items worth ``pairs`` pairings (2 each)."""
    base = [ka.item for ka in kat.known_answers()["bls12-381"] if ka.expected]
    return [AggregateItem("fast_aggregate", (it.public_key,), (it.message,), it.signature)
            for it in (base[i % len(base)] for i in range(pairs // 2))]


def _fake_measure(costs: dict[tuple[str, str], tuple[float, float]]):
    """calibrate.measure answering from ``costs[(backend, "batch" | "aggregates")]``; checks
    that the aggregate measurement gets valid aggregate batches counted in pairings."""
    def measure(backend, tiled, budget, max_items=1 << 16, units=len):
        sample = tiled(64)
        kind = "aggregates" if isinstance(sample, AggregateBatch) else "batch"
        if kind == "aggregates":
            assert units is calibrate.pairings and units(sample) == 64
            assert all(bls_aggregate.verify_item(it) for it in sample.items)
        cost = costs[(backend.name, kind)]
        if isinstance(cost, Exception):
            raise cost
        return cost
    return measure


def test_aggregate_tiler_makes_valid_items_of_the_asked_pairings():
    tiled = calibrate.aggregate_tiler([ka.item for ka in kat.known_answers()["bls12-381"] if ka.expected])
    for n in (1, 2, 7, 64):
        work = tiled(n)
        assert calibrate.pairings(work) == 2 * -(-n // 2)
        assert {it.mode for it in work.items} == ({"fast_aggregate"} if n <= 2 else {"fast_aggregate", "aggregate"})
        assert all(bls_aggregate.verify_item(it) for it in work.items)
    with pytest.raises(ValueError):
        calibrate.aggregate_tiler([ka.item for ka in kat.known_answers()["ed25519"]])


def test_measure_counts_units_of_the_batch():
    """A backend costing 1 ms + 0.1 ms per pairing: measure recovers both in pairings."""
    import time

    class Clocked(AggregateMock):
        def run(self, work, *, commit=False):
            time.sleep(1e-3 + 1e-4 * calibrate.pairings(work))
            return Result.of(self.name, np.ones(len(work), dtype=bool))

    tiled = calibrate.aggregate_tiler([ka.item for ka in kat.known_answers()["bls12-381"] if ka.expected])
    fixed, per = calibrate.measure(Clocked(), tiled, 0.4, units=calibrate.pairings)
    assert 0.7e-4 < per < 1.6e-4 and fixed < 3e-3


def test_configured_aggregate_crossover_is_used_and_a_forced_backend_takes_every_request():
    mock = AggregateMock()
    eng = Engine(EngineConfig(cpu_workers=1, calibrate=False, crossover={"bls12-381": 1, "bls12-381-aggregates": 10}),
                 backends=[mock])
    eng.start()
    assert eng.aggregate_crossover(mock) == 10
    assert set(eng.run(_items(8)).backends.values()) == {"cpu"}
    res = eng.run(_items(10))
    assert set(res.backends.values()) == {"mock"} and res.verdicts.all()
    assert engine_status(eng)["bls12-381-aggregates"]["crossover"]["configured"] == 10
    forced = Engine(EngineConfig(cpu_workers=1, backend="mock", crossover={"bls12-381-aggregates": 1000}),
                    backends=[AggregateMock()])
    forced.start()
    assert set(forced.run(_items(2)).backends.values()) == {"mock"}


def test_measured_aggregate_crossover_is_its_own(monkeypatch):
    """bls12-381 batches cross over at 1 item, aggregates (fixed cost 50 ms on the device,
    0.9 ms a pairing less than the CPU) at 56 pairings: each is routed by its own."""
    monkeypatch.setattr(calibrate, "measure", _fake_measure({
        ("mock", "batch"): (0.0, 1e-5), ("cpu", "batch"): (0.0, 1e-3),
        ("mock", "aggregates"): (0.05, 1e-4), ("cpu", "aggregates"): (0.0, 1e-3)}))
    mock = AggregateMock()
    eng = Engine(EngineConfig(cpu_workers=1), backends=[mock])
    eng.start()
    assert eng.routes["bls12-381"].crossover["mock"] == 1
    assert eng.aggregate_route.crossover["mock"] == 56 and eng.aggregate_crossover(mock) == 56
    assert eng.aggregate_route.rates == {"mock": 1e4, "cpu": 1e3}
    assert set(eng.run(_items(54)).backends.values()) == {"cpu"}
    assert set(eng.run(_items(56)).backends.values()) == {"mock"}
    status = engine_status(eng)["bls12-381-aggregates"]
    assert status["crossover"] == {"mock": 56} and status["backend"] == "mock"


def test_aggregates_never_faster_stay_on_the_cpu(monkeypatch):
    monkeypatch.setattr(calibrate, "measure", _fake_measure({
        ("mock", "batch"): (0.0, 1e-5), ("cpu", "batch"): (0.0, 1e-3),
        ("mock", "aggregates"): (0.0, 2e-3), ("cpu", "aggregates"): (0.0, 1e-3)}))
    mock = AggregateMock()
    eng = Engine(EngineConfig(cpu_workers=1), backends=[mock])
    eng.start()
    assert eng.aggregate_route.crossover["mock"] is None and eng.aggregate_crossover(mock) == calibrate.NEVER
    assert set(eng.run(_items(4000)).backends.values()) == {"cpu"} and mock.aggregate_runs == 0
    assert engine_status(eng)["bls12-381-aggregates"]["crossover"] == {"mock": None}


def test_a_failed_aggregate_measurement_falls_back_to_bls12_381s_crossover(monkeypatch):
    monkeypatch.setattr(calibrate, "measure", _fake_measure({
        ("mock", "batch"): (0.006, 1e-4), ("cpu", "batch"): (0.0, 1e-3),
        ("mock", "aggregates"): RuntimeError("device lost"), ("cpu", "aggregates"): (0.0, 1e-3)}))
    mock = AggregateMock()
    eng = Engine(EngineConfig(cpu_workers=1), backends=[mock])
    eng.start()
    assert eng.routes["bls12-381"].crossover["mock"] == 7 and "mock" not in eng.aggregate_route.crossover
    assert eng.aggregate_crossover(mock) == 7
    assert set(eng.run(_items(6)).backends.values()) == {"cpu"}
    assert set(eng.run(_items(8)).backends.values()) == {"mock"}


def test_a_backend_without_aggregates_is_not_calibrated_for_them_nor_given_any(monkeypatch):
    monkeypatch.setattr(calibrate, "measure", _fake_measure({
        ("plain", "batch"): (0.0, 1e-5), ("cpu", "batch"): (0.0, 1e-3)}))  # no aggregate entry: a KeyError
    plain = AggregateMock("plain", aggregates=False)
    eng = Engine(EngineConfig(cpu_workers=1), backends=[plain])
    eng.start()
    assert eng.aggregate_route.crossover == {}
    assert set(eng.run(_items(4000)).backends.values()) == {"cpu"} and plain.aggregate_runs == 0
