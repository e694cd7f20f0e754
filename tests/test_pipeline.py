"""The one verify-and-record path (app/engine/pipeline.py): every transport's batch is
verified, committed, receipted and listed for the dashboard the same way."""

from __future__ import annotations

import asyncio
import socket

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.core.batch import Batch
from app.core.errors import StoreUnavailable
from app.core.schemes import SCHEMES
from app.engine.commit import merkle
from app.engine.pipeline import Part, verify_and_record, verify_and_record_parts
from app.engine.receipts.open import open_store
from app.engine.reference import kat
from app.engine.runtime import Runtime
from app.engine.verify.engine import Engine, EngineConfig
from app.main import create_app
from zapverify.ingest import connect


def _batch(items) -> Batch:
    return Batch.from_items(SCHEMES[items[0].scheme], [i.public_key for i in items], [i.message for i in items],
                            [i.signature for i in items])


@pytest.fixture
def fresh():
    """An engine of its own for a test that asserts its stats: nothing another test verified is
    listed (its CPU backend passed the session engine's self-test, so it is marked ready)."""
    eng = Engine(EngineConfig(backend="cpu", cpu_workers=1, cpu_parallelism="thread"))
    eng.ready = True
    yield eng
    eng.close()


def _recent(engine) -> list[dict]:
    """The engine's recent batches, newest first."""
    return engine.stats.snapshot()["recent"]


def test_items_are_verified_committed_receipted_and_listed(fresh, tmp_path):
    engine = fresh
    kas = kat.known_answers()["ed25519"] + kat.known_answers()["secp256k1"]
    items = [ka.item for ka in kas]
    with open_store(f"sqlite:///{tmp_path / 'r.db'}") as store:
        rec = verify_and_record(engine, store, items, source="ws", started=0.0)
        assert rec.verdicts.tolist() == [ka.expected for ka in kas]
        assert rec.root == merkle.root(rec.leaves)
        receipt = store.get(rec.batch_id)
    assert receipt.source == "ws" and receipt.merkle_root == rec.root and receipt.count == len(items)
    assert receipt.verdicts().tolist() == rec.verdicts.tolist()
    (listed,) = _recent(engine)
    assert listed["batch_id"] == rec.batch_id and listed["source"] == "ws" and listed["valid"] == rec.valid
    assert listed["schemes"] == {"ed25519": len(kat.known_answers()["ed25519"]),
                                 "secp256k1": len(kat.known_answers()["secp256k1"])}
    assert listed["receipt"] == f"/v1/receipts/{rec.batch_id}"


def test_joined_parts_get_their_own_roots_receipts_and_sources(fresh, tmp_path):
    engine = fresh
    items = kat.sign_items("ed25519", 7, seed=21)
    items[4] = kat.Item("ed25519", items[4].public_key, items[4].message + b"!", items[4].signature)
    calls = []
    with open_store(f"sqlite:///{tmp_path / 'r.db'}") as store:
        recs = verify_and_record_parts(engine, store, _batch(items),
                                       [Part(2, 0.0, "tcp"), Part(4, 0.0, "udp"), Part(1, 0.0, "quic")],
                                       verified=lambda: calls.append(True))
        receipts = [store.get(r.batch_id) for r in recs]
    assert calls == [True]
    assert [r.verdicts.tolist() for r in recs] == [[True, True], [True, True, False, True], [True]]
    for rec, (lo, hi) in zip(recs, [(0, 2), (2, 6), (6, 7)]):
        # Each part's root is the root of its own items alone, as if it had been verified alone.
        alone = engine.run(_batch(items[lo:hi]))
        assert rec.root == alone.root and np.array_equal(rec.leaves, alone.leaves)
    assert [r.source for r in receipts] == ["tcp", "udp", "quic"]
    assert [(r["batch_id"], r["source"]) for r in reversed(_recent(engine))] == [
        (r.batch_id, source) for r, source in zip(recs, ["tcp", "udp", "quic"])]


def test_a_failed_receipt_write_answers_nothing_and_lists_nothing(fresh, tmp_path):
    engine = fresh
    class DownStore:
        def put_many(self, receipts):
            raise StoreUnavailable("database down")

    with pytest.raises(StoreUnavailable):
        verify_and_record(engine, DownStore(), kat.sign_items("ed25519", 2, seed=3), source="http", started=0.0)
    assert _recent(engine) == []


def test_parts_must_cover_the_work(engine):
    with pytest.raises(ValueError, match="parts cover 3 items"):
        verify_and_record_parts(engine, None, _batch(kat.sign_items("ed25519", 2, seed=3)), [Part(3, 0.0, "tcp")])


def _free_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_tcp_ingest_frame_shows_in_status_recent_batches_with_source_tcp(fresh, tmp_path):
    settings = Settings(data_dir=tmp_path, ingest_tcp_port=_free_tcp_port(), instance="pipeline-1")
    items = kat.sign_items("ed25519", 3, seed=44)
    with TestClient(create_app(settings, runtime=Runtime(fresh))) as client:
        port = client.app.state.runtime.ingest.ports["tcp"]

        async def send():
            async with connect("tcp", "127.0.0.1", port, timeout=10) as stream:
                return await asyncio.wait_for(stream.verify_batch(
                    "ed25519", [i.public_key for i in items], [i.message for i in items],
                    [i.signature for i in items]), 60)

        answer = asyncio.run(send())
        (entry,) = client.get("/v1/status").json()["stats"]["recent"]  # this engine's only batch
        receipt = client.get(entry["receipt"]).json()
    assert answer.verdicts.tolist() == [True] * 3
    assert entry["source"] == "tcp" and entry["count"] == 3 and entry["valid"] == 3
    assert receipt["source"] == "tcp" and receipt["merkle_root"] == answer.merkle_root.hex()
