"""Shadow verification (app/engine/verify/shadow.py; docs/architecture.md, "Shadow verification"):
accelerated verdicts re-checked on the CPU reference at run time, a scheme that disagrees
degraded at once, the mismatch on the batch's receipt, in the metrics and /v1/status; the
settings, the delayed ``invert`` fault, ``sync`` mode, the bounded queue and the admin
re-enable endpoint."""

from __future__ import annotations

import threading
import time

import nacl.signing
import numpy as np
import pytest
from prometheus_client import REGISTRY
from pydantic import ValidationError
from starlette.testclient import TestClient

from app.api import metrics
from app.api.security import required_scope
from app.config import Settings
from app.core.batch import Batch, Item
from app.core.errors import ConfigError, NotFound
from app.core.result import Result
from app.core.schemes import SCHEMES
from app.engine.backends.base import READY, Backend, Capabilities
from app.engine.backends.cpu import CpuBackend
from app.engine.configs import engine_config
from app.engine.device import hostbuild
from app.engine.pipeline import verify_and_record
from app.engine.receipts.sqlite import SqliteStore
from app.engine.runtime import Runtime
from app.engine.verify import faults
from app.engine.verify.engine import Engine, EngineConfig
from app.engine.verify.shadow import ShadowChecker, ShadowConfig, ShadowTicket
from app.main import create_app

ED = SCHEMES["ed25519"]


def ed_items(n: int, seed: int, bad_every: int = 3) -> tuple[list[Item], list[bool]]:
    """``n`` Ed25519 items, every ``bad_every``-th with a corrupted signature, and their truth."""
    items, truth = [], []
    for i in range(n):
        key = nacl.signing.SigningKey(bytes([seed % 256, i % 256, i // 256]) + bytes(29))
        msg = f"message {seed}/{i}".encode()
        sig = bytearray(key.sign(msg).signature)
        ok = i % bad_every != 0
        if not ok:
            sig[5] ^= 1
        items.append(Item("ed25519", bytes(key.verify_key), msg, bytes(sig)))
        truth.append(ok)
    return items, truth


def ed_batch(n: int, seed: int) -> tuple[Batch, list[bool]]:
    items, truth = ed_items(n, seed)
    return Batch.from_items(ED, [it.public_key for it in items], [it.message for it in items],
                            [it.signature for it in items]), truth


class Twin(Backend):
    """An accelerator stand-in answering with the CPU's verdicts, every one inverted while
    ``broken`` (a device gone silently wrong)."""

    name = "twin"

    def __init__(self):
        self.cpu, self.broken, self.calls = CpuBackend(workers=1), False, 0

    def capabilities(self):
        return Capabilities(schemes={"ed25519": READY})

    def run(self, batch, *, commit=False):
        self.calls += 1
        v = self.cpu.run(batch).verdicts
        return Result.of(self.name, ~v if self.broken else v)

    def close(self):
        self.cpu.close()


def twin_engine(**cfg) -> tuple[Engine, Twin]:
    twin = Twin()
    eng = Engine(EngineConfig(cpu_workers=1, **cfg), backends=[twin])
    eng.start()
    assert eng.ready and eng.degraded() == {}
    return eng, twin


def sample(name: str, **labels) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


# ------------------------------------------------------------------ settings
def test_settings_reach_the_engine_config(monkeypatch):
    s = Settings()
    assert (s.shadow_rate, s.shadow_min_per_batch, s.shadow_warmup_items, s.shadow_mode,
            s.shadow_queue_items) == (0.001, 1, 10000, "async", 4096)
    for k, v in {"RATE": "0.25", "MIN_PER_BATCH": "3", "WARMUP_ITEMS": "0", "MODE": "sync",
                 "QUEUE_ITEMS": "17"}.items():
        monkeypatch.setenv(f"ZAPVERIFY_SHADOW_{k}", v)
    cfg = engine_config(Settings()).shadow_config()
    assert cfg == ShadowConfig(rate=0.25, min_per_batch=3, warmup_items=0, mode="sync", queue_items=17)


@pytest.mark.parametrize("env,value", [("RATE", "1.5"), ("RATE", "-0.1"), ("RATE", "nan"), ("MIN_PER_BATCH", "-1"),
                                       ("WARMUP_ITEMS", "-5"), ("MODE", "later"), ("QUEUE_ITEMS", "0")])
def test_bad_settings_are_refused_naming_the_setting(monkeypatch, env, value):
    monkeypatch.setenv(f"ZAPVERIFY_SHADOW_{env}", value)
    with pytest.raises(ValidationError) as e:
        Settings()
    assert f"shadow_{env.lower()}" in str(e.value)


@pytest.mark.parametrize("kw,field", [({"shadow_rate": 2.0}, "shadow_rate"),
                                      ({"shadow_rate": float("nan")}, "shadow_rate"),
                                      ({"shadow_min_per_batch": -1}, "shadow_min_per_batch"),
                                      ({"shadow_warmup_items": -1}, "shadow_warmup_items"),
                                      ({"shadow_mode": "later"}, "shadow_mode"),
                                      ({"shadow_queue_items": 0}, "shadow_queue_items")])
def test_bad_engine_config_is_a_config_error_naming_the_field(kw, field):
    with pytest.raises(ConfigError) as e:
        Engine(EngineConfig(cpu_workers=1, **kw))
    assert e.value.field == field


# ------------------------------------------------------------------ sampling
def checker(**kw) -> ShadowChecker:
    return ShadowChecker(ShadowConfig(**kw), lambda *a: None)


def test_the_csprng_sample_covers_every_index_and_honours_the_minimum():
    c = checker(rate=0.0, min_per_batch=1, warmup_items=0)
    seen = set()
    for _ in range(400):
        idx = c.choose("twin", "ed25519", np.ones(8, dtype=bool))
        assert idx.size == 1
        seen.add(int(idx[0]))
    assert seen == set(range(8))
    c = checker(rate=0.0, min_per_batch=5, warmup_items=0)
    idx = c.choose("twin", "ed25519", np.ones(3, dtype=bool))
    assert idx.tolist() == [0, 1, 2]  # capped at the batch size


def test_the_rate_is_met_on_average_and_the_indices_are_distinct():
    c = checker(rate=0.05, min_per_batch=0, warmup_items=0)
    sizes = []
    for _ in range(200):
        idx = c.choose("twin", "ed25519", np.zeros(70, dtype=bool))  # 3.5 expected
        assert len(set(idx.tolist())) == idx.size and all(0 <= i < 70 for i in idx)
        sizes.append(idx.size)
    assert set(sizes) <= {3, 4} and 3.2 < np.mean(sizes) < 3.8


def test_warm_up_checks_every_true_verdict_of_the_first_items_per_backend_and_scheme():
    c = checker(rate=0.0, min_per_batch=0, warmup_items=10)
    v = np.array([True, False] * 4)
    assert c.choose("twin", "ed25519", v).tolist() == [0, 2, 4, 6]
    assert c.choose("twin", "ed25519", v).tolist() == [0]  # items 8, 9 are the last of the warm-up
    assert c.choose("twin", "ed25519", v).tolist() == []
    assert c.choose("twin", "secp256k1", v).tolist() == [0, 2, 4, 6]  # its own warm-up
    assert c.choose("other", "ed25519", v).tolist() == [0, 2, 4, 6]


def test_zero_everything_checks_nothing():
    eng, twin = twin_engine(shadow_rate=0.0, shadow_min_per_batch=0, shadow_warmup_items=0)
    twin.broken = True
    items, truth = ed_items(12, 1)
    res = eng.run(items)
    eng.shadow.drain()
    assert res.verdicts.tolist() == [not t for t in truth] and eng.degraded() == {} and eng.shadow.counts() == {}
    eng.close()


# ------------------------------------------------------------------ async: degrade, ticket, mixed requests
def test_a_mismatch_degrades_the_scheme_and_reaches_the_ticket_bound_before_or_after():
    eng, twin = twin_engine(shadow_warmup_items=0)
    items, truth = ed_items(20, 2)
    assert eng.run(items).verdicts.tolist() == truth
    twin.broken = True
    res = eng.run(items)
    assert res.backends == {"ed25519": "twin"} and res.verdicts.tolist() == [not t for t in truth]  # async: answered
    assert eng.shadow.drain()
    assert eng.degraded()["ed25519"]["twin"].startswith("shadow:")
    assert eng.routes["ed25519"].degraded_since["twin"] <= time.time()
    [(where, m)] = res.shadow.found  # min_per_batch 1, warm-up off: one item checked
    assert m.backend == "twin" and m.scheme == "ed25519" and m.accelerated != m.reference == truth[where]
    got = []
    res.shadow.bind(got.extend)  # bound after the mismatch was found
    assert got == [(where, m)]
    later = eng.run(items)
    assert later.backends == {"ed25519": "cpu"} and later.verdicts.tolist() == truth
    eng.close()


def test_ticket_delivers_once_whenever_bound():
    t = ShadowTicket()
    got: list = []
    t.bind(got.extend)
    t.report([(3, "m")])  # type: ignore[list-item]
    assert got == [(3, "m")]
    with pytest.raises(RuntimeError):
        t.bind(got.extend)


def test_mixed_request_mismatches_map_to_the_request_item_index(tmp_path):
    eng, twin = twin_engine(shadow_rate=1.0)  # every item checked
    twin.broken = True
    ed, ed_truth = ed_items(6, 3)
    secp = [i for i in _secp_items()][:3]
    items = [secp[0], ed[0], ed[1], secp[1], ed[2], ed[3], secp[2], ed[4], ed[5]]
    ed_at = [1, 2, 4, 5, 7, 8]
    with SqliteStore(tmp_path / "r.db") as store:
        rec = verify_and_record(eng, store, items, source="http", started=time.perf_counter())
        assert eng.shadow.drain()
        receipt = store.get(rec.batch_id)
        assert list(receipt.shadow_mismatches) == ed_at
        assert receipt.to_json()["shadow_mismatches"] == ed_at
        for i in ed_at:
            assert receipt.verdict(i) != ed_truth[ed_at.index(i)]
        assert {m.batch_id for m in eng.shadow.mismatches()} == {rec.batch_id}
        assert sorted(m.item for m in eng.shadow.mismatches()) == ed_at
    eng.close()


def _secp_items() -> list[Item]:
    from app.engine.reference import kat

    return [ka.item for ka in kat.known_answers()["secp256k1"] if not ka.item.prehashed]


def test_hybrid_device_part_is_shadow_checked():
    eng, twin = twin_engine(hybrid=True, hybrid_min=8, shadow_rate=1.0, shadow_mode="sync")
    eng.routes["ed25519"].rates.update({"twin": 1000.0, "cpu": 1000.0})
    twin.broken = True
    batch, truth = ed_batch(16, 4)
    k = eng.split_point(twin, ED, 16)  # before the batch refines the rates
    res = eng.run(batch)
    assert res.verdicts.tolist() == truth  # sync: the device's half re-run on the CPU
    found = sorted(w for w, _ in res.shadow.found)
    assert found == list(range(k))  # rate 1: the whole device part, nothing of the CPU's
    assert "shadow" in eng.degraded()["ed25519"]["twin"]
    eng.close()


# ------------------------------------------------------------------ sync mode
def test_sync_mode_never_returns_a_wrong_verdict():
    eng, twin = twin_engine(shadow_mode="sync", shadow_warmup_items=0)
    twin.broken = True  # wrong from the first batch on; one sampled item catches it
    calls = twin.calls  # the self-test's
    for seed in range(4):
        items, truth = ed_items(15, 10 + seed)
        res = eng.run(items)
        assert res.verdicts.tolist() == truth, seed
        assert res.backends == {"ed25519": "cpu"}
    assert twin.calls == calls + 1  # degraded by the first batch
    [m] = eng.shadow.mismatches()
    assert m.corrected
    eng.close()


def test_sync_mode_corrected_mismatches_are_not_put_on_the_receipt(tmp_path):
    eng, twin = twin_engine(shadow_mode="sync")
    twin.broken = True
    items, truth = ed_items(9, 5)
    with SqliteStore(tmp_path / "r.db") as store:
        rec = verify_and_record(eng, store, items, source="http", started=time.perf_counter())
        assert rec.verdicts.tolist() == truth
        receipt = store.get(rec.batch_id)
        assert receipt.shadow_mismatches == () and receipt.backends == {"ed25519": "cpu"}
        assert all(m.batch_id == rec.batch_id for m in eng.shadow.mismatches())  # but linked for inspection
    eng.close()


# ------------------------------------------------------------------ the bounded queue
def test_a_blocked_checker_drops_and_counts_samples_and_never_stalls_a_request(monkeypatch):
    release = threading.Event()
    started = threading.Event()
    eng, twin = twin_engine(shadow_queue_items=2, shadow_rate=1.0, shadow_warmup_items=0)
    real = eng.shadow._check_job

    def blocked(job):  # the worker stuck (a slow reference, a starved CPU)
        started.set()
        release.wait(30)
        real(job)

    monkeypatch.setattr(eng.shadow, "_check_job", blocked)
    eng.stats.add_listener(metrics.LISTENER)
    before = sample("zapverify_shadow_dropped_items_total")
    items, truth = ed_items(10, 6)
    t0 = time.perf_counter()
    assert eng.run(items).verdicts.tolist() == truth
    assert started.wait(10)  # the worker holds one item, blocked
    for _ in range(5):
        assert eng.run(items).verdicts.tolist() == truth
    assert time.perf_counter() - t0 < 20  # nothing waited for the blocked worker
    assert eng.shadow.pending() <= 2
    dropped = eng.shadow.dropped
    assert dropped >= 6 * 10 - 3  # at most 2 queued and 1 held
    assert sample("zapverify_shadow_dropped_items_total") - before == dropped
    assert eng.shadow.counts()["ed25519"]["twin"]["dropped"] == dropped
    release.set()
    assert eng.shadow.drain()
    assert eng.shadow.counts()["ed25519"]["twin"]["checked"] == 6 * 10 - dropped
    eng.stats.remove_listener(metrics.LISTENER)
    eng.close()


# ------------------------------------------------------------------ faults
@pytest.mark.parametrize("spec,fault", [("invert", faults.Fault("invert", 0)),
                                        ("invert@after=3", faults.Fault("invert", 3)),
                                        ("garbage@after=0", faults.Fault("garbage", 0)),
                                        ("raise@after=12", faults.Fault("raise", 12))])
def test_fault_specs_parse(spec, fault):
    assert faults.parse({"kernel-host:ed25519": spec}) == {"kernel-host": {"ed25519": fault}}


@pytest.mark.parametrize("spec", ["invert@after=", "invert@after=-1", "selftest@after=2", "invert@3", "flip",
                                  "invert@before=2"])
def test_bad_fault_specs_are_config_errors_naming_faults(spec):
    with pytest.raises(ConfigError) as e:
        faults.parse({"kernel-host:ed25519": spec})
    assert e.value.field == "faults"
    with pytest.raises(ValidationError):
        Settings(faults={"kernel-host:ed25519": spec})


def test_a_delayed_garbage_fault_is_caught_by_the_shape_check_after_its_delay():
    eng, twin = twin_engine(faults={"twin:ed25519": "garbage@after=2"})
    items, truth = ed_items(6, 7)
    for _ in range(2):
        assert eng.run(items).backends == {"ed25519": "twin"}
    res = eng.run(items)
    assert res.backends == {"ed25519": "cpu"} and res.verdicts.tolist() == truth
    assert eng.degraded()["ed25519"]["twin"].startswith("runtime")
    eng.close()


# ------------------------------------------------------------------ kernel-host, end to end
needs_gxx = pytest.mark.skipif(hostbuild.compiler() is None, reason="no C++ compiler")


@needs_gxx
def test_kernel_host_delayed_invert_is_caught_in_the_first_faulty_batch(tmp_path):
    """Default shadow settings; ``invert@after=3``: batches 1-3 right, the 4th inverted and
    caught, the 5th on the CPU and right; metrics, /v1/status, /readyz and the receipt say so."""
    from app.engine.backends.kernel_host import KernelHostBackend

    eng = Engine(EngineConfig(backend="kernel-host", cpu_workers=1, faults={"kernel-host:ed25519": "invert@after=3"}),
                 backends=[KernelHostBackend()])
    eng.start()
    assert eng.ready and eng.degraded() == {}
    labels = {"scheme": "ed25519", "backend": "kernel-host"}
    before = sample("zapverify_shadow_mismatches_total", **labels)
    checked_before = sample("zapverify_shadow_checked_items_total", **labels)
    with TestClient(create_app(Settings(data_dir=tmp_path), runtime=Runtime(eng))) as client:
        answers = []
        for n in range(5):
            items, truth = ed_items(12, 20 + n)
            body = {"items": [{"scheme": it.scheme, "public_key": it.public_key.hex(), "message": it.message.hex(),
                               "signature": it.signature.hex()} for it in items]}
            r = client.post("/v1/verify", json=body)
            assert r.status_code == 200, r.text
            answers.append((r.json(), truth))
            assert eng.shadow.drain()
        for n in range(3):
            got, truth = answers[n]
            assert got["verdicts"] == truth and got["backends"] == {"ed25519": "kernel-host"}, n
        faulty, truth = answers[3]
        assert faulty["verdicts"] == [not t for t in truth] and faulty["backends"] == {"ed25519": "kernel-host"}
        later, truth = answers[4]
        assert later["verdicts"] == truth and later["backends"] == {"ed25519": "cpu"}
        assert eng.degraded()["ed25519"]["kernel-host"].startswith("shadow:")

        receipt = client.get(f"/v1/receipts/{faulty['batch_id']}").json()
        wrong = receipt["shadow_mismatches"]
        assert wrong and all(faulty["verdicts"][i] != answers[3][1][i] for i in wrong)
        # warm-up: every (inverted) true verdict of the faulty batch was checked
        assert {i for i, v in enumerate(faulty["verdicts"]) if v} <= set(wrong)
        # The list is what a sample found, and the receipt says so (issue 53).
        assert receipt["shadow_mismatches_note"].startswith("a sample:") and "not checked" in receipt[
            "shadow_mismatches_note"]
        for ok in (answers[0][0], answers[4][0]):
            clean = client.get(f"/v1/receipts/{ok['batch_id']}").json()
            assert clean["shadow_mismatches"] == [] and clean["shadow_mismatches_note"] is None

        assert sample("zapverify_shadow_mismatches_total", **labels) - before == len(wrong)
        assert sample("zapverify_shadow_checked_items_total", **labels) - checked_before >= 3 * 8 + len(wrong)
        shadow = client.get("/v1/status").json()["engine"]["shadow"]
        assert shadow["mode"] == "async" and shadow["rate"] == 0.001
        state = shadow["schemes"]["ed25519"]["kernel-host"]
        assert state["mismatches"] == len(wrong) and state["checked"] >= 3 * 8 + len(wrong)
        assert state["degraded_since"].endswith("Z")
        assert {m["batch_id"] for m in shadow["mismatches"]} == {faulty["batch_id"]}
        ready = client.get("/readyz")
        assert ready.status_code == 200 and "shadow:" in ready.json()["degraded"]["ed25519"]["kernel-host"]

        # the backend still inverts: its self-test fails again, so re-enabling is refused
        r = client.post("/v1/admin/backends/kernel-host/schemes/ed25519/enable")
        assert r.status_code == 409 and r.json()["error"]["code"] == "SELFTEST_FAILED"
        assert r.json()["error"]["field"] == "backend"
        assert "ed25519" in client.get("/readyz").json()["degraded"]


# ------------------------------------------------------------------ admin re-enable
def test_admin_re_enable_runs_the_self_test_first():
    eng, twin = twin_engine(shadow_rate=1.0)
    twin.broken = True
    eng.run(ed_items(6, 8)[0])
    assert eng.shadow.drain() and "twin" in eng.degraded()["ed25519"]
    with TestClient(create_app(Settings(receipts=False), runtime=Runtime(eng))) as client:
        refused = client.post("/v1/admin/backends/twin/schemes/ed25519/enable")
        assert refused.status_code == 409 and "self-test" in refused.json()["error"]["message"]
        assert "twin" in client.get("/v1/status").json()["engine"]["degraded"]["ed25519"]
        twin.broken = False  # repaired
        ok = client.post("/v1/admin/backends/twin/schemes/ed25519/enable")
        assert ok.status_code == 200, ok.text
        assert ok.json()["enabled"] is True and ok.json()["was_degraded"].startswith("re-enable refused")
        assert eng.degraded() == {} and "twin" not in eng.routes["ed25519"].degraded_since
        items, truth = ed_items(6, 9)
        assert eng.run(items).backends == {"ed25519": "twin"}
        for path, field in [("/v1/admin/backends/gpu9/schemes/ed25519/enable", "backend"),
                            ("/v1/admin/backends/cpu/schemes/ed25519/enable", "backend"),
                            ("/v1/admin/backends/twin/schemes/nope/enable", "scheme"),
                            ("/v1/admin/backends/twin/schemes/secp256k1/enable", "scheme")]:
            r = client.post(path)
            assert r.status_code == 404 and r.json()["error"]["field"] == field, path
    with pytest.raises(NotFound):
        eng.enable("twin", "nope")
    eng.close()


def test_the_admin_endpoint_needs_the_admin_scope():
    assert required_scope("/v1/admin/backends/cuda/schemes/ed25519/enable") == "admin"
    import hashlib

    key = "k" * 40
    digest = hashlib.sha256(key.encode()).hexdigest()
    eng, _ = twin_engine()
    settings = Settings(receipts=False, api_keys=[f"{digest}:verify:v"])
    with TestClient(create_app(settings, runtime=Runtime(eng))) as client:
        assert client.post("/v1/admin/backends/twin/schemes/ed25519/enable").status_code == 401
        r = client.post("/v1/admin/backends/twin/schemes/ed25519/enable", headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 403
    eng.close()


def test_the_dashboard_and_its_feed_show_the_shadow_state():
    eng, twin = twin_engine(shadow_rate=1.0)
    twin.broken = True
    eng.run(ed_items(5, 11)[0])
    assert eng.shadow.drain()
    with TestClient(create_app(Settings(receipts=False), runtime=Runtime(eng))) as client:
        html = client.get("/").text
        for marker in ("shadow checked / wrong", 'id="shadow-note"', "shadowCell((shadow.schemes || {})[id])",
                       "degraded_since"):
            assert marker in html
        with client.websocket_connect("/v1/ws/stats") as ws:
            shadow = ws.receive_json()["engine"]["shadow"]
        state = shadow["schemes"]["ed25519"]["twin"]
        assert state["checked"] == 5 and state["mismatches"] == 5 and state["degraded_since"]
        assert len(shadow["mismatches"]) == 5 and shadow["mode"] == "async"
    eng.close()
