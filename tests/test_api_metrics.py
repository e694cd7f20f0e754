"""Prometheus metrics: names and labels, the HTTP middleware, the exposition (checked by
prometheus_client's parser, and promtool where installed) and multiprocess mode."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from app.api import metrics
from app.config import Settings
from app.engine.reference import kat
from app.engine.runtime import Runtime
from app.main import create_app

ROOT = Path(__file__).resolve().parents[1]


def value(name: str, **labels) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.fixture(scope="module")
def client(engine, tmp_path_factory):
    settings = Settings(instance="metrics-1", data_dir=tmp_path_factory.mktemp("data"), max_body_bytes=4096)
    with TestClient(create_app(settings, runtime=Runtime(engine))) as c:
        yield c


def ed25519_body():
    kas = kat.known_answers()["ed25519"]
    return {"items": [{"scheme": "ed25519", "public_key": k.item.public_key.hex(), "message": k.item.message.hex(),
                       "signature": k.item.signature.hex()} for k in kas]}, kas


def test_a_verify_counts_signatures_batches_and_http(client):
    body, kas = ed25519_body()
    valid = sum(k.expected for k in kas)
    sig = dict(scheme="ed25519", backend="cpu")
    before = (value("zapverify_signatures_total", **sig, result="valid"),
              value("zapverify_signatures_total", **sig, result="invalid"),
              value("zapverify_batch_duration_seconds_count", **sig),
              value("zapverify_batch_size_sum", scheme="ed25519"),
              value("zapverify_http_requests_total", method="POST", route="/v1/verify", status="200"))
    assert client.post("/v1/verify", json=body).status_code == 200
    after = (value("zapverify_signatures_total", **sig, result="valid"),
             value("zapverify_signatures_total", **sig, result="invalid"),
             value("zapverify_batch_duration_seconds_count", **sig),
             value("zapverify_batch_size_sum", scheme="ed25519"),
             value("zapverify_http_requests_total", method="POST", route="/v1/verify", status="200"))
    assert [a - b for a, b in zip(after, before)] == [valid, len(kas) - valid, 1, len(kas), 1]


def test_http_metrics_use_route_templates_and_bounded_labels(client):
    tpl = "/v1/receipts/{receipt_id}"
    before = value("zapverify_http_requests_total", method="GET", route=tpl, status="404")
    for _ in range(3):
        assert client.get("/v1/receipts/01900000-0000-7000-8000-000000000000").status_code == 404
    assert value("zapverify_http_requests_total", method="GET", route=tpl, status="404") == before + 3
    client.get("/no/such/path")
    assert value("zapverify_http_requests_total", method="GET", route="<unmatched>", status="404") >= 1
    client.request("BREW", "/healthz")
    assert value("zapverify_http_requests_total", method="other", route="/healthz", status="405") >= 1
    # a body over the limit is refused by BodyLimit before routing, and still counted on its route
    before = value("zapverify_http_requests_total", method="POST", route="/v1/verify", status="413")
    assert client.post("/v1/verify", content=b"x" * 5000).status_code == 413
    assert value("zapverify_http_requests_total", method="POST", route="/v1/verify", status="413") == before + 1


def test_metrics_endpoint_exposes_every_family_in_valid_text_format(client):
    client.post("/v1/verify", json=ed25519_body()[0])
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    families = {f.name: f for f in text_string_to_metric_families(r.text)}
    want = {"zapverify_signatures": "counter", "zapverify_batch_duration_seconds": "histogram",
            "zapverify_batch_size": "histogram", "zapverify_backend_available": "gauge",
            "zapverify_http_requests": "counter", "zapverify_http_request_duration_seconds": "histogram",
            "zapverify_http_requests_in_progress": "gauge", "zapverify_ingest_frames": "counter",
            "zapverify_pool_bytes": "gauge"}
    for name, kind in want.items():
        assert families[name].type == kind, name
    avail = {s.labels["scheme"]: s.value for s in families["zapverify_backend_available"].samples
             if s.labels["backend"] == "cpu"}
    assert len(avail) == 18 and set(avail.values()) == {1.0}
    if shutil.which("promtool"):
        check = subprocess.run(["promtool", "check", "metrics"], input=r.text, capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr


def test_listener_records_frames_and_gauges_follow_the_pool():
    before = value("zapverify_ingest_frames_total", transport="tcp", outcome="bad_magic")
    metrics.LISTENER.frame("tcp", "bad_magic")
    assert value("zapverify_ingest_frames_total", transport="tcp", outcome="bad_magic") == before + 1
    pool = SimpleNamespace(stats=lambda: {"in_use_bytes": 300, "capacity_bytes": 1000})
    routes = {"ed25519": SimpleNamespace(selftest={"cpu": True, "cuda": False})}
    metrics.refresh_gauges(SimpleNamespace(engine=SimpleNamespace(routes=routes), pool=pool))
    assert value("zapverify_pool_bytes", state="in_use") == 300 and value("zapverify_pool_bytes", state="free") == 700
    assert value("zapverify_backend_available", backend="cuda", scheme="ed25519") == 0


WORKER = textwrap.dedent("""
    import sys
    from types import SimpleNamespace
    from app.api import metrics
    in_use, cuda_ok = int(sys.argv[1]), sys.argv[2] == "1"
    metrics.LISTENER.batch("ed25519", "cpu", 10, 7, 0.02)
    pool = SimpleNamespace(stats=lambda: {"in_use_bytes": in_use, "capacity_bytes": 1000})
    routes = {"ed25519": SimpleNamespace(selftest={"cpu": True, "cuda": cuda_ok})}
    metrics.refresh_gauges(SimpleNamespace(engine=SimpleNamespace(routes=routes), pool=pool))
    print("ready", flush=True)
    sys.stdin.read()
""")
COLLECT = textwrap.dedent("""
    from types import SimpleNamespace
    from app.api import metrics
    print(metrics.exposition(SimpleNamespace(engine=SimpleNamespace(routes={}), pool=None))[0].decode())
""")


def test_multiprocess_mode_adds_up_workers_and_forgets_dead_ones(tmp_path):
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    workers = [subprocess.Popen([sys.executable, "-c", WORKER, str(n), ok], cwd=ROOT, env=env, text=True,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE) for n, ok in ((100, "1"), (250, "0"))]
    try:
        for w in workers:
            assert w.stdout.readline().strip() == "ready"

        def collect() -> dict:
            out = subprocess.run([sys.executable, "-c", COLLECT], cwd=ROOT, env=env, text=True, capture_output=True,
                                 check=True).stdout
            return {(s.name, tuple(sorted(s.labels.items()))): s.value
                    for f in text_string_to_metric_families(out) for s in f.samples}

        both = collect()
        valid = (("backend", "cpu"), ("result", "valid"), ("scheme", "ed25519"))
        assert both[("zapverify_signatures_total", valid)] == 14  # 7 from each worker
        assert both[("zapverify_pool_bytes", (("state", "in_use"),))] == 350  # livesum
        assert both[("zapverify_backend_available", (("backend", "cuda"), ("scheme", "ed25519")))] == 0  # livemin
        workers[1].kill()
        workers[1].wait()
        one = collect()
        assert one[("zapverify_signatures_total", valid)] == 14  # counters outlive their worker
        assert one[("zapverify_pool_bytes", (("state", "in_use"),))] == 100
        assert one[("zapverify_backend_available", (("backend", "cuda"), ("scheme", "ed25519")))] == 1
        assert not list(tmp_path.glob(f"gauge_live*_{workers[1].pid}.db"))
    finally:
        for w in workers:
            w.kill()
            w.wait()


def test_clear_multiprocess_dir_removes_values_of_an_earlier_run(tmp_path):
    (tmp_path / "counter_123.db").write_bytes(b"x")
    (tmp_path / "keep.txt").write_text("not ours")
    metrics.clear_multiprocess_dir(str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]
