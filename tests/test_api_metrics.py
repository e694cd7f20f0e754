"""Prometheus metrics: names and labels, the HTTP middleware, error answers by code, the
exposition (checked by prometheus_client's parser, and promtool where installed),
multiprocess mode with each worker's process series, and a live ``zapverify serve
--workers 2``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from app import __version__
from app.api import metrics
from app.config import Settings
from app.core.errors import StoreUnavailable
from app.core.schemes import SCHEMES
from app.engine.commit import merkle
from app.engine.receipts.open import open_store
from app.engine.receipts.store import Receipt
from app.engine.reference import kat
from app.engine.runtime import Runtime
from app.main import create_app
from app.wire import zap
from tests import promtool
from tests.server import free_port

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
              value("zapverify_batch_items_sum", scheme="ed25519"),
              value("zapverify_batch_size_sum", scheme="ed25519"),  # the deprecated name, until 0.2.0
              value("zapverify_http_requests_total", method="POST", route="/v1/verify", status="200"))
    assert client.post("/v1/verify", json=body).status_code == 200
    after = (value("zapverify_signatures_total", **sig, result="valid"),
             value("zapverify_signatures_total", **sig, result="invalid"),
             value("zapverify_batch_duration_seconds_count", **sig),
             value("zapverify_batch_items_sum", scheme="ed25519"),
             value("zapverify_batch_size_sum", scheme="ed25519"),
             value("zapverify_http_requests_total", method="POST", route="/v1/verify", status="200"))
    assert [a - b for a, b in zip(after, before)] == [valid, len(kas) - valid, 1, len(kas), len(kas), 1]


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
            "zapverify_batch_items": "histogram", "zapverify_batch_size": "histogram",
            "zapverify_backend_available": "gauge",
            "zapverify_http_requests": "counter", "zapverify_http_request_duration_seconds": "histogram",
            "zapverify_http_requests_in_progress": "gauge", "zapverify_ingest_frames": "counter",
            "zapverify_pool_bytes": "gauge", "zapverify_http_errors": "counter", "zapverify_build_info": "gauge",
            "zapverify_ready": "gauge", "zapverify_receipt_store_write_duration_seconds": "histogram",
            "zapverify_websocket_connections": "gauge", "zapverify_websocket_requests_in_flight": "gauge",
            "zapverify_websocket_messages": "counter", "zapverify_websocket_errors": "counter",
            "zapverify_worker_processes": "gauge", "process_resident_memory_bytes": "gauge",
            "process_cpu_seconds": "counter"}
    for name, kind in want.items():
        assert families[name].type == kind, name
    avail = {s.labels["scheme"]: s.value for s in families["zapverify_backend_available"].samples
             if s.labels["backend"] == "cpu"}
    assert len(avail) == len(SCHEMES) and set(avail.values()) == {1.0}
    if shutil.which("promtool"):
        check = subprocess.run(["promtool", "check", "metrics"], input=r.text, capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr


def test_listener_records_frames_and_gauges_follow_the_pool():
    before = value("zapverify_ingest_frames_total", transport="tcp", outcome="bad_magic")
    metrics.LISTENER.frame("tcp", "bad_magic")
    assert value("zapverify_ingest_frames_total", transport="tcp", outcome="bad_magic") == before + 1
    pool = SimpleNamespace(stats=lambda: {"in_use_bytes": 300, "capacity_bytes": 1000})
    routes = {"ed25519": SimpleNamespace(selftest={"cpu": True, "cuda": False})}
    metrics.refresh_gauges(SimpleNamespace(engine=SimpleNamespace(routes=routes, ready=True, backends=()), pool=pool,
                                           store=None))
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
    metrics.refresh_gauges(SimpleNamespace(engine=SimpleNamespace(routes=routes, ready=True, backends=()), pool=pool,
                                           store=None))
    print("ready", flush=True)
    sys.stdin.read()
""")
COLLECT = textwrap.dedent("""
    from types import SimpleNamespace
    from app.api import metrics
    runtime = SimpleNamespace(engine=SimpleNamespace(routes={}, ready=True, backends=()), pool=None, store=None)
    print(metrics.exposition(runtime)[0].decode())
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
        # each worker's own process series, under the standard names (the collecting process is a worker too)
        assert both[("zapverify_worker_processes", ())] == 3
        assert both[("process_resident_memory_bytes", ())] > 0 and both[("process_cpu_seconds_total", ())] > 0
        assert both[("process_open_fds", ())] >= 3 * 3 and both[("process_max_fds", ())] > 0
        assert any(name == "python_info" for name, _ in both)
        assert both[("python_gc_collections_total", (("generation", "0"),))] > 0
        workers[1].kill()
        workers[1].wait()
        one = collect()
        assert one[("zapverify_signatures_total", valid)] == 14  # counters outlive their worker
        assert one[("zapverify_pool_bytes", (("state", "in_use"),))] == 100
        assert one[("zapverify_backend_available", (("backend", "cuda"), ("scheme", "ed25519")))] == 1
        assert not list(tmp_path.glob(f"gauge_live*_{workers[1].pid}.db"))
        assert one[("zapverify_worker_processes", ())] == 2  # the dead worker's memory is no longer added
        assert one[("process_resident_memory_bytes", ())] < both[("process_resident_memory_bytes", ())]
        assert one[("process_cpu_seconds_total", ())] >= both[("process_cpu_seconds_total", ())]  # counters stay
    finally:
        for w in workers:
            w.kill()
            w.wait()


def test_clear_multiprocess_dir_removes_values_of_an_earlier_run(tmp_path):
    (tmp_path / "counter_123.db").write_bytes(b"x")
    (tmp_path / "keep.txt").write_text("not ours")
    metrics.clear_multiprocess_dir(str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]


# ------------------------------------------------------------------ errors by code, build info, WebSocket, store
def test_error_answers_are_counted_by_route_and_code(client):
    def errors(route: str, code: str) -> float:
        return value("zapverify_http_errors_total", route=route, code=code)

    tpl = "/v1/receipts/{receipt_id}"
    r = client.get("/v1/receipts/01900000-0000-7000-8000-000000000000")
    code = r.json()["error"]["code"]
    before = errors(tpl, code)
    client.get("/v1/receipts/01900000-0000-7000-8000-000000000000")
    assert errors(tpl, code) == before + 1
    # a ZAP error frame: its code is read from the frame
    r = client.post("/v1/verify/zap", content=b"NOPE" * 8, headers={"content-type": zap.CONTENT_TYPE})
    assert r.status_code >= 400 and errors("/v1/verify/zap", zap.decode_error(r.content).name) >= 1
    # an answer of no route, and a refusal before routing (BodyLimit's 413)
    client.get("/no/such/path")
    assert errors("<unmatched>", "NOT_FOUND") >= 1
    r = client.post("/v1/verify", content=b"x" * 5000)
    assert errors("/v1/verify", r.json()["error"]["code"]) >= 1
    ok = value("zapverify_http_errors_total", route="/healthz", code="HTTP_200")
    assert client.get("/healthz").status_code == 200 and ok == 0  # successes are not errors


def test_error_code_reads_json_and_zap_bodies_and_bounds_the_label():
    assert metrics.error_code(429, "application/json", b'{"error": {"code": "RATE_LIMITED"}}') == "RATE_LIMITED"
    frame = bytes(zap.error_frame(zap_error := StoreUnavailable("down")))
    assert metrics.error_code(503, zap.CONTENT_TYPE, frame) == zap_error.code
    assert metrics.error_code(400, "text/plain; charset=utf-8", b"Invalid host header") == "HTTP_400"
    assert metrics.error_code(500, "application/json", b"{") == "HTTP_500"
    assert metrics.error_code(422, "application/json", b'{"error": {"code": "not a code"}}') == "HTTP_422"
    assert metrics.error_code(422, "application/json", b'{"error": {"code": "' + b"A" * 100 + b'"}}') == "HTTP_422"


def test_exposition_has_build_info_readiness_and_no_created_series(client):
    text = client.get("/metrics").text
    assert "_created" not in text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    (info,) = [s for s in families["zapverify_build_info"].samples if s.labels["version"] == __version__]
    assert info.value == 1 and info.labels["backends"] == "cpu" and info.labels["commit"] == metrics.COMMIT
    assert families["zapverify_ready"].samples[0].value == 1
    assert families["zapverify_worker_processes"].samples[0].value == 1
    assert families["process_resident_memory_bytes"].samples[0].value > 0  # the default collector


def test_websocket_connections_and_messages_are_exported(client):
    before = value("zapverify_websocket_messages_total")
    body = {**ed25519_body()[0], "request_id": 7}
    with client.websocket_connect("/v1/ws/verify") as ws:
        ws.send_json(body)
        assert ws.receive_json()["request_id"] == 7
        client.get("/metrics")
        assert value("zapverify_websocket_connections") >= 1
    assert value("zapverify_websocket_messages_total") == before + 1
    for _ in range(100):  # the connection's count drops once the server has seen the close
        client.get("/metrics")
        if value("zapverify_websocket_connections") == 0:
            break
        time.sleep(0.02)
    assert value("zapverify_websocket_connections") == 0


def _receipt() -> Receipt:
    leaves = np.arange(64, dtype=np.uint8).reshape(2, 32)
    return Receipt.build(verdicts=[True, False], leaves=leaves, merkle_root=merkle.root(leaves),
                         schemes=["ed25519"])


def test_receipt_store_writes_are_timed_by_outcome(client):
    before = value("zapverify_receipt_store_write_duration_seconds_count", outcome="ok")
    assert client.post("/v1/verify", json=ed25519_body()[0]).status_code == 200
    assert value("zapverify_receipt_store_write_duration_seconds_count", outcome="ok") == before + 1
    # a write that fails (a repeated id) is timed as an error; the listener is added once
    with open_store("sqlite:///:memory:") as store:
        store.add_listener(metrics.LISTENER)
        store.add_listener(metrics.LISTENER)
        receipt = _receipt()
        store.put(receipt)
        failed = value("zapverify_receipt_store_write_duration_seconds_count", outcome="error")
        with pytest.raises(StoreUnavailable):
            store.put(receipt)
        assert value("zapverify_receipt_store_write_duration_seconds_count", outcome="error") == failed + 1


def test_source_commit_is_read_from_the_checkout_without_git(tmp_path):
    from app import build

    sha = "0123456789abcdef0123456789abcdef01234567"
    assert build.source_commit(tmp_path) == "unknown"  # no .git: an image or an installed wheel
    git = tmp_path / ".git"
    (git / "refs" / "heads").mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "refs" / "heads" / "main").write_text(sha + "\n")
    assert build.source_commit(tmp_path) == sha
    (git / "refs" / "heads" / "main").unlink()
    (git / "packed-refs").write_text(f"# pack-refs with: peeled\n{sha} refs/heads/main\n")
    assert build.source_commit(tmp_path) == sha
    (git / "HEAD").write_text(sha[::-1] + "\n")  # detached
    assert build.source_commit(tmp_path) == sha[::-1]
    (git / "HEAD").write_text("garbage\n")
    assert build.source_commit(tmp_path) == "unknown"


# ------------------------------------------------------------------ a live server with two workers
def _samples(text: str) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory):
    """``zapverify serve --workers 2`` (multiprocess mode), after a few verify requests, once
    both workers have published their series; yields (url, exposition text)."""
    tmp = tmp_path_factory.mktemp("workers2")
    port = free_port()
    env = {**os.environ, "ZAPVERIFY_DATA_DIR": str(tmp / "data"), "ZAPVERIFY_BACKEND": "cpu",
           "ZAPVERIFY_UMA_POOL_BYTES": str(64 << 20), "ZAPVERIFY_LOG_LEVEL": "warning",
           "PROMETHEUS_MULTIPROC_DIR": str(tmp / "metrics"), "ZAPVERIFY_INGEST_TCP_PORT": "0",
           "ZAPVERIFY_INGEST_UDP_PORT": "0", "ZAPVERIFY_INGEST_QUIC_PORT": "0"}
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--workers", "2", "--port", str(port),
                             "--log-level", "warning"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, "zapverify serve --workers 2 exited at start"
            assert time.monotonic() < deadline, "zapverify serve --workers 2 not ready in 120 s"
            try:
                if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        # /readyz answered by one worker; every worker refreshes its series each second, and
        # zapverify_ready is the minimum over them.
        while True:
            got = _samples(httpx.get(url + "/metrics", timeout=10).text)
            if got.get(("zapverify_worker_processes", ())) == 2 and got.get(("zapverify_ready", ())) == 1:
                break
            assert time.monotonic() < deadline, "the two workers never both reported ready"
            time.sleep(0.2)
        body, kas = ed25519_body()
        for _ in range(6):  # new connections each: the kernel spreads them over the workers
            assert httpx.post(url + "/v1/verify", json=body, timeout=30).status_code == 200
        yield url, httpx.get(url + "/metrics", timeout=10).text, 6 * len(kas)
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def test_two_workers_export_process_series_build_info_and_every_workers_counters(two_workers):
    _, text, items = two_workers
    got = _samples(text)
    assert got[("zapverify_worker_processes", ())] == 2
    for name in ("process_resident_memory_bytes", "process_virtual_memory_bytes", "process_open_fds",
                 "process_max_fds", "process_start_time_seconds", "process_cpu_seconds_total"):
        assert got[(name, ())] > 0, name
    assert any(name == "python_info" for name, _ in got)
    (info,) = [v for (name, labels), v in got.items() if name == "zapverify_build_info"]
    assert info == 1
    labels = dict(next(labels for name, labels in got if name == "zapverify_build_info"))
    assert labels["version"] == __version__ and labels["backends"] == "cpu"
    assert got[("zapverify_ready", ())] == 1 and got[("zapverify_receipt_store_up", ())] == 1
    verified = sum(v for (name, _), v in got.items() if name == "zapverify_signatures_total")
    assert verified == items  # whichever worker verified them
    writes = sum(v for (name, labels), v in got.items()
                 if name == "zapverify_receipt_store_write_duration_seconds_count")
    assert writes == 6
    assert "_created" not in text


def test_two_workers_exposition_passes_promtool_check_metrics(two_workers):
    promtool.run("check", "metrics", stdin=two_workers[1])


def test_totals_counted_elsewhere_reach_a_counter_once_and_per_owner():
    from prometheus_client import CollectorRegistry, Counter

    reg = CollectorRegistry()
    c = Counter("zapverify_test_refusals", "test", ["reason"], registry=reg)
    totals = metrics._Totals()

    class Owner:  # an Admission or StoreHealth: plain running totals
        pass

    def value(reason):
        return reg.get_sample_value("zapverify_test_refusals_total", {"reason": reason})

    a = Owner()
    totals.add(a, [("items", 3), ("bytes", 0)], c.labels)
    totals.add(a, [("items", 3), ("bytes", 0)], c.labels)  # nothing new: nothing added
    assert value("items") == 3 and value("bytes") == 0  # a key's series exists from first sight
    totals.add(a, [("items", 5)], c.labels)
    assert value("items") == 5
    b = Owner()  # a new store/admission starts from zero: its 2 are all new
    totals.add(b, [("items", 2)], c.labels)
    assert value("items") == 7
    del a  # an object that may reuse a dead one's id is not mistaken for it
    for _ in range(50):
        o = Owner()
        totals.add(o, [("bytes", 1)], c.labels)
    assert value("bytes") == 50
