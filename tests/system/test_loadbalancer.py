"""The compose deployment on loopback: keys required, spread, WebSocket, shared receipts,
metrics, body limit, no key in a log, the TLS example, a replica killed, readiness gating
rotation.  The last two change the cluster and run last."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
import time
import warnings
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.server import free_port
from tests.system.cluster import DEPLOY, Nginx, load_env_file, make_tls_files, nginx_scratch, render_nginx_conf
from tests.system.conftest import ARTIFACTS
from tests.system.requests_util import load_while, verify_body

INSTANCE = "X-Zapverify-Instance"


def post_verify(base: str, *schemes: str, client: httpx.Client | None = None,
                headers: dict[str, str] | None = None) -> httpx.Response:
    """POST a verify of ``schemes``' known answers, checking the verdicts of a 200.  The key
    comes in ``headers`` or with ``client``'s own headers."""
    body, want = verify_body(*schemes)
    r = (client or httpx).post(base + "/v1/verify", json=body, headers=headers, timeout=60)
    if r.status_code == 200:
        assert r.json()["verdicts"] == want
    return r


def test_nginx_asks_for_a_key_everywhere_but_health_and_the_page(cluster):
    """compose.yaml's replicas require API keys: through nginx, without a key (or with a
    wrong one) every path that holds data is 401 from the app, while the health checks, the
    scheme list and the dashboard page (which holds no data) stay open."""
    r = post_verify(cluster.url, headers=cluster.auth)
    assert r.status_code == 200, r.text
    receipt = f"/v1/receipts/{r.json()['batch_id']}"
    guarded = [("GET", "/metrics"), ("GET", "/v1/status"), ("GET", receipt), ("GET", receipt + "/proof/0"),
               ("POST", "/v1/verify")]
    for headers in ({}, {"Authorization": "Bearer zv_not-a-key"}, {"X-API-Key": cluster.api_key[:-1]}):
        for method, path in guarded:
            got = httpx.request(method, cluster.url + path, headers=headers, timeout=10,
                                json=verify_body()[0] if method == "POST" else None)
            assert got.status_code == 401, (method, path, headers, got.status_code, got.text[:200])
            # the app's refusal (its error body and challenge; nginx adds neither), not nginx's
            assert got.json()["error"]["code"] == "UNAUTHORIZED", got.text[:200]
            assert got.headers["WWW-Authenticate"].startswith("Bearer")
    for path in ("/healthz", "/readyz", "/v1/schemes", "/"):
        assert httpx.get(cluster.url + path, timeout=10).status_code == 200, path
    for method, path in guarded[:-1]:
        assert httpx.request(method, cluster.url + path, headers=cluster.auth, timeout=10).status_code == 200, path
    # the WebSocket feed too: refused before it is accepted (HTTP 403 to the client)
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    try:
        connect(cluster.url.replace("http://", "ws://") + "/v1/ws/stats", open_timeout=10).close()
        raise AssertionError("/v1/ws/stats opened without a key")
    except InvalidStatus as exc:
        assert exc.response.status_code == 403


def test_load_is_spread_over_both_replicas(cluster):
    def one(_):
        with httpx.Client(headers=cluster.auth) as c:
            r = post_verify(cluster.url, "ed25519", "secp256k1", client=c)
        assert r.status_code == 200, r.text
        return r.headers[INSTANCE]

    with ThreadPoolExecutor(6) as pool:
        seen = Counter(pool.map(one, range(60)))
    assert set(seen) == {"replica-a", "replica-b"}, seen
    assert min(seen.values()) >= 12, f"least_conn should spread 60 requests over both: {seen}"


def test_websocket_stats_feed_through_nginx(cluster):
    from websockets.sync.client import connect

    with connect(cluster.url.replace("http://", "ws://") + "/v1/ws/stats", open_timeout=10,
                 additional_headers=cluster.auth) as ws:
        first = json.loads(ws.recv(timeout=10))
        second = json.loads(ws.recv(timeout=10))
    assert first["instance"] in ("replica-a", "replica-b")
    assert second["instance"] == first["instance"]  # one connection, one replica
    assert second["time"] > first["time"]
    assert {"engine", "stats", "host", "limits"} <= set(first)
    assert first["engine"]["ready"] is True and first["receipts"] is True


def test_receipt_written_through_one_replica_is_read_through_the_other(cluster):
    a, b = cluster.replicas["a"], cluster.replicas["b"]
    r = post_verify(a.url, "ed25519", "bls12-381", headers=cluster.auth)
    assert r.status_code == 200 and r.headers[INSTANCE] == "replica-a"
    batch = r.json()
    got = httpx.get(f"{b.url}/v1/receipts/{batch['batch_id']}", headers=cluster.auth, timeout=10)
    assert got.status_code == 200 and got.headers[INSTANCE] == "replica-b"
    receipt = got.json()
    assert receipt["merkle_root"] == batch["merkle_root"] and receipt["count"] == batch["count"]
    proof = httpx.get(f"{b.url}/v1/receipts/{batch['batch_id']}/proof/1", headers=cluster.auth, timeout=10)
    assert proof.status_code == 200, proof.text
    # and through the balancer, whichever replica answers
    for _ in range(6):
        assert httpx.get(f"{cluster.url}/v1/receipts/{batch['batch_id']}", headers=cluster.auth,
                         timeout=10).status_code == 200


def _scrape(url: str, headers: dict[str, str]) -> dict[tuple, float]:
    text = httpx.get(url + "/metrics", headers=headers, timeout=10).text
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _signatures(samples: dict) -> float:
    return sum(v for (name, _), v in samples.items() if name == "zapverify_signatures_total")


def test_metrics_add_up_over_the_workers_of_a_replica(cluster):
    """Two uvicorn workers per replica (deploy/verifier.env): whichever worker answers the
    scrape, /metrics counts the signatures both verified."""
    a = cluster.replicas["a"]
    metrics_dir = Path(a.env["PROMETHEUS_MULTIPROC_DIR"])
    before = _signatures(_scrape(a.url, cluster.auth))

    def one(_):
        # a new connection each: any worker may take it
        with httpx.Client(headers={"Connection": "close", **cluster.auth}) as c:
            assert post_verify(a.url, "ed25519", client=c).status_code == 200

    sent = 0
    with ThreadPoolExecutor(4) as pool:
        while sent < 400:
            list(pool.map(one, range(20)))
            sent += 20
            pids = {p.name.rsplit("_", 1)[1] for p in metrics_dir.glob("counter_*.db")}
            if len(pids) >= 2 and sent >= 40:
                break
    assert len(pids) >= 2, f"every request went to one worker: {sorted(metrics_dir.iterdir())}"
    per_request = len(verify_body("ed25519")[1])
    for _ in range(6):  # several scrapes, answered by either worker, all see the same total
        assert _signatures(_scrape(a.url, cluster.auth)) == before + sent * per_request
    text = httpx.get(a.url + "/metrics", headers=cluster.auth, timeout=10).text
    (ARTIFACTS / "metrics-replica-a.txt").write_text(text)
    names = {f.name for f in text_string_to_metric_families(text)}
    assert {"zapverify_signatures", "zapverify_batch_duration_seconds", "zapverify_batch_items",
            "zapverify_backend_available", "zapverify_http_requests", "zapverify_http_request_duration_seconds",
            } <= names
    if shutil.which("promtool"):
        check = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr


def test_body_limit_of_nginx_matches_the_app(cluster):
    limit = int(load_env_file(DEPLOY / "verifier.env")["ZAPVERIFY_MAX_BODY_BYTES"])
    with socket.create_connection(("127.0.0.1", cluster.nginx_port), timeout=10) as s:
        s.sendall(f"POST /v1/verify HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {limit + 1}\r\n\r\n".encode())
        head = s.recv(4096).decode("latin-1")
    assert head.startswith("HTTP/1.1 413"), head
    # exactly the limit passes nginx and reaches the app, which reads it (and finds no JSON)
    r = httpx.post(cluster.url + "/v1/verify", content=b" " * limit,
                   headers={"content-type": "application/json", **cluster.auth}, timeout=60)
    assert r.status_code == 422 and INSTANCE in r.headers, r.text[:200]


def test_no_key_in_the_logs_of_nginx_or_the_replicas(cluster):
    """A key sent the deprecated way, ?access_token=<key>, still works, but nginx's access log
    (deploy/nginx.conf's map) and the replicas' (app/api/access_log.py) write no key."""
    marker = f"/v1/status?probe={time.monotonic_ns()}&access_token="
    r = httpx.get(cluster.url + marker + cluster.api_key, timeout=10)
    assert r.status_code == 200, r.text[:200]
    r = httpx.get(cluster.url + "/v1/status?access_token=" + cluster.api_key + "&access_token=x", timeout=10)
    assert r.status_code == 200, r.text[:200]
    log = cluster.artifacts / "nginx.log"
    deadline = time.monotonic() + 5
    while log.read_text().count("/v1/status?REDACTED") < 2 and time.monotonic() < deadline:
        time.sleep(0.1)  # written by nginx's workers as each request ends
    assert log.read_text().count("/v1/status?REDACTED") >= 2
    for path in [log, *(r.log for r in cluster.replicas.values())]:
        assert cluster.api_key not in path.read_text(), f"the API key is in {path}"


def test_tls_example_serves_the_deployment(cluster, tmp_path):
    """deploy/nginx-tls.conf in front of the same replicas, with a throwaway certificate:
    HTTPS with TLS 1.2 or 1.3 only, keys still required, the dashboard feed over wss://,
    plain HTTP on the TLS port refused, and the loopback health listener answering /healthz
    and nothing else."""
    import ssl

    from websockets.sync.client import connect

    ca, chain, key = make_tls_files(tmp_path)
    tls_port, health_port = free_port(), free_port()
    scratch = tmp_path / "nginx"
    nginx_scratch(scratch)
    conf = scratch / "nginx.conf"
    conf.write_text(render_nginx_conf(
        (DEPLOY / "nginx-tls.conf").read_text(), listen_port=tls_port,
        upstream_ports=[r.port for r in cluster.replicas.values()], scratch=scratch,
        replace={"health": f"listen 127.0.0.1:{health_port};", "certificate": f"ssl_certificate {chain};",
                 "certificate-key": f"ssl_certificate_key {key};"}))
    nginx = Nginx(conf, scratch, ARTIFACTS / "nginx-tls.log").start()
    try:
        url = f"https://127.0.0.1:{tls_port}"
        trust = ssl.create_default_context(cafile=str(ca))
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(url + "/healthz", verify=trust, timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"nginx with deploy/nginx-tls.conf does not answer; see {ARTIFACTS}/nginx-tls.log")
            time.sleep(0.1)
        with socket.create_connection(("127.0.0.1", tls_port), timeout=10) as raw, \
                trust.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            assert s.version() in ("TLSv1.2", "TLSv1.3"), s.version()
        old = ssl.create_default_context(cafile=str(ca))
        with warnings.catch_warnings():  # deprecated indeed: that is the point of refusing it
            warnings.simplefilter("ignore", DeprecationWarning)
            old.minimum_version = old.maximum_version = ssl.TLSVersion.TLSv1_1
        old.set_ciphers("ALL:@SECLEVEL=0")  # let this client offer 1.1 at all: the server must refuse it
        with socket.create_connection(("127.0.0.1", tls_port), timeout=10) as raw:
            with pytest.raises(ssl.SSLError) as refused:
                old.wrap_socket(raw, server_hostname="127.0.0.1").close()
        # the server's alert, not this client failing to offer 1.1 at all
        assert "NO_PROTOCOLS_AVAILABLE" not in str(refused.value).upper(), refused.value
        with httpx.Client(base_url=url, verify=trust, timeout=30) as c:
            assert c.get("/v1/status").status_code == 401
            status = c.get("/v1/status", headers=cluster.auth)
            assert status.status_code == 200 and status.json()["instance"] in ("replica-a", "replica-b")
            assert post_verify(url, client=c, headers=cluster.auth).status_code == 200
        with connect(f"wss://127.0.0.1:{tls_port}/v1/ws/stats", ssl=trust, open_timeout=10,
                     additional_headers=cluster.auth) as ws:
            assert json.loads(ws.recv(timeout=10))["instance"] in ("replica-a", "replica-b")
        # plain HTTP sent to the TLS port gets nginx's 400, never the app
        plain = httpx.get(f"http://127.0.0.1:{tls_port}/v1/status", headers=cluster.auth, timeout=10)
        assert plain.status_code == 400 and INSTANCE not in plain.headers
        health = f"http://127.0.0.1:{health_port}"
        assert httpx.get(health + "/healthz", timeout=10).status_code == 200
        assert httpx.get(health + "/v1/status", headers=cluster.auth, timeout=10).status_code == 404
    finally:
        nginx.stop()


def test_killing_a_replica_keeps_requests_succeeding(cluster):
    a, b = cluster.replicas["a"], cluster.replicas["b"]
    results, killed_at = load_while(b.kill, base=cluster.url, post=post_verify,
                                    kinds=("GET", "GET", "GET", "POST", "POST"), before=1.5, after=3.0,
                                    headers=cluster.auth)
    gets = [r for r in results if r[0] == "GET"]
    posts = [r for r in results if r[0] == "POST"]
    assert len(gets) > 30 and len(posts) > 10
    # nginx resends a GET the dead replica never answered, but once it has passed a
    # response's header on to the client it cannot take the response back: a GET whose
    # replica died between its header and its body ends as a cut response (seen in CI, 1
    # of 790).  Only a GET in flight when the replica died may fail, and only so.
    def in_flight(r) -> bool:
        return r[1] <= killed_at + 0.5 <= r[2] + 0.5

    failed_gets = [r for r in gets if r[3] != 200]
    assert len(failed_gets) <= 3 and all(in_flight(r) and (r[3], r[4]) == (0, "RemoteProtocolError")
                                         for r in failed_gets), (Counter(r[3] for r in gets), failed_gets)
    # nginx never resends a POST it may already have delivered to the dead replica: only
    # those in flight when it died (or sent on a connection it had just lost) may fail.
    failed = [r for r in posts if r[3] != 200]
    assert all(in_flight(r) and r[3] == 502 for r in failed), failed
    after = [r for r in results if r[1] > killed_at + 0.5]
    assert after and all(r[3] == 200 and r[4] == "replica-a" for r in after)
    for _ in range(10):
        r = post_verify(cluster.url, headers=cluster.auth)
        assert r.status_code == 200 and r.headers[INSTANCE] == "replica-a"
    assert a.proc.poll() is None


def test_readiness_gates_rotation(cluster):
    """A restarted replica takes no request before its self-test passed (it does not even
    accept connections), and rejoins the rotation once /readyz is 200."""
    b = cluster.replicas["b"]
    assert b.proc.poll() is not None, "runs after the kill test"
    b.start()
    starting = []
    ready_seen: list[list[int]] = []
    waiter = threading.Thread(target=lambda: ready_seen.append(b.wait_ready()))
    waiter.start()
    while waiter.is_alive():
        r = post_verify(cluster.url, headers=cluster.auth)
        assert r.status_code == 200, r.text
        starting.append(r.headers[INSTANCE])
        time.sleep(0.05)
    waiter.join()
    assert ready_seen == [[]], f"replica b answered before it was ready: {ready_seen}"
    assert starting and set(starting) == {"replica-a"}, Counter(starting)
    deadline = time.monotonic() + 30
    seen = Counter()
    while time.monotonic() < deadline and seen["replica-b"] < 3:
        with ThreadPoolExecutor(4) as pool:
            for r in pool.map(lambda _: post_verify(cluster.url, headers=cluster.auth), range(8)):
                assert r.status_code == 200
                seen[r.headers[INSTANCE]] += 1
        time.sleep(0.5)
    assert seen["replica-b"] >= 3, f"replica b never rejoined the rotation: {seen}"
