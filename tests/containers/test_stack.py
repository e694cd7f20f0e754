"""compose.yaml running in Docker (scripts/container_test): every request goes through
nginx, as a user's would, with the API key scripts/compose_secrets made.  Secure defaults
(nginx published on loopback, keys required, the database password set), verify JSON and
ZAP, receipts shared by the replicas through PostgreSQL, /metrics, the dashboard in
Chromium, the images' hardening, the CUDA image without a GPU; then a replica killed and
the whole stack restarted (these change the stack and run last, in file order)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.containers.stack import wait_ready
from tests.system.conftest import ARTIFACTS
from tests.system.requests_util import SCHEMES, items, load_while
from tests.system.test_dashboard_browser import number
from tests.system.test_loadbalancer import INSTANCE, post_verify
from zapverify import Client

#: Every batch answered in these tests: (batch_id, merkle_root, count); the restart test
#: reads them all back.
WRITTEN: list[tuple[str, str, int]] = []


def remember(r: httpx.Response) -> httpx.Response:
    assert r.status_code == 200, r.text[:300]
    body = r.json()
    WRITTEN.append((body["batch_id"], body["merkle_root"], body["count"]))
    return r


def replicas(stack) -> dict[str, str]:
    """Hostname -> container id of each running verifier replica."""
    return {stack.inspect(c)["Config"]["Hostname"]: c for c in stack.containers("verifier")}


def test_compose_runs_two_healthy_replicas_unprivileged_on_a_read_only_root(stack):
    # nginx's first health check runs one interval (10 s) after it started
    for service, count in (("verifier", 2), ("nginx", 1), ("postgres", 1)):
        stack.wait_healthy(service, count, timeout=60)
    reps = replicas(stack)
    assert len(reps) == 2
    for cid in reps.values():
        info = stack.inspect(cid)
        assert info["HostConfig"]["ReadonlyRootfs"] is True
        assert stack.docker_run("exec", cid, "id", "-u").strip() == "10001"
        # even its own home refuses writes (the root filesystem is read-only); /tmp takes them
        out = stack.docker_run("exec", cid, "sh", "-c", "touch /var/lib/zapverify/x 2>&1; touch /tmp/x && echo tmp-ok")
        assert "Read-only file system" in out and "tmp-ok" in out, out


def test_secure_defaults_loopback_keys_and_a_database_password(stack):
    """What compose.yaml makes of a plain `up`: nginx published on the host's loopback
    only, the keys file mounted as a secret, every data path 401 without a key."""
    (nginx,) = stack.containers("nginx")
    bindings = stack.inspect(nginx)["HostConfig"]["PortBindings"]["8080/tcp"]
    assert [b["HostIp"] for b in bindings] == ["127.0.0.1"], bindings
    for cid in replicas(stack).values():
        env = dict(e.split("=", 1) for e in stack.inspect(cid)["Config"]["Env"])
        assert env["ZAPVERIFY_API_KEYS_FILE"] == "/run/secrets/zapverify_api_keys"
        assert ":zapverify@" not in env["ZAPVERIFY_DATABASE_URL"]  # the old default password
        keys = stack.docker_run("exec", cid, "cat", "/run/secrets/zapverify_api_keys")
        assert stack.api_key not in keys and ":verify+receipts+admin:admin" in keys  # a digest only
    for path in ("/metrics", "/v1/status", "/v1/receipts/00000000-0000-7000-8000-000000000000"):
        r = httpx.get(stack.url + path, timeout=10)
        assert r.status_code == 401 and r.json()["error"]["code"] == "UNAUTHORIZED", (path, r.status_code)
    assert httpx.get(stack.url + "/healthz", timeout=10).status_code == 200
    assert httpx.get(stack.url + "/v1/status", headers=stack.auth, timeout=10).status_code == 200


def test_verify_json_through_nginx_on_both_replicas(stack):
    def one(_):
        with httpx.Client(headers=stack.auth) as c:
            r = remember(post_verify(stack.url, *SCHEMES, client=c))  # post_verify checks the verdicts
        return stack.replica_of(r.headers[INSTANCE])

    with ThreadPoolExecutor(4) as pool:
        seen = Counter(pool.map(one, range(24)))
    assert set(seen) == set(replicas(stack)), seen


def test_verify_zap_through_nginx(stack):
    kas = items("ed25519")
    with Client(stack.url, headers=stack.auth) as c:
        for _ in range(4):
            res = c.verify_batch("ed25519", [bytes.fromhex(k["public_key"]) for k in kas],
                                 [bytes.fromhex(k["message"]) for k in kas],
                                 [bytes.fromhex(k["signature"]) for k in kas])
            assert res.verdicts.tolist() == [k["expected"] for k in kas]
            assert res.count == len(kas) and res.valid == sum(k["expected"] for k in kas)
    bad = httpx.post(stack.url + "/v1/verify/zap", content=b"ZIP\0" + bytes(60),
                     headers={"content-type": "application/x-zap", **stack.auth}, timeout=30)
    assert bad.status_code == 400 and INSTANCE in bad.headers  # the app's answer, through nginx


def test_receipt_written_by_one_replica_is_read_through_the_other(stack):
    r = remember(post_verify(stack.url, "ed25519", "bls12-381", headers=stack.auth))
    writer = stack.replica_of(r.headers[INSTANCE])
    batch = r.json()
    readers = Counter()
    for _ in range(20):  # new connections: least_conn alternates between idle replicas
        got = httpx.get(f"{stack.url}/v1/receipts/{batch['batch_id']}", headers={"Connection": "close", **stack.auth},
                        timeout=10)
        assert got.status_code == 200, got.text
        assert got.json()["merkle_root"] == batch["merkle_root"] and got.json()["count"] == batch["count"]
        readers[stack.replica_of(got.headers[INSTANCE])] += 1
        if set(readers) - {writer}:
            break
    assert set(readers) - {writer}, f"only the writer {writer} answered: {readers}"
    proof = httpx.get(f"{stack.url}/v1/receipts/{batch['batch_id']}/proof/1", headers=stack.auth, timeout=10)
    assert proof.status_code == 200, proof.text
    assert proof.json()["index"] == 1 and proof.json()["merkle_root"] == batch["merkle_root"]


def test_metrics_through_nginx(stack):
    text = httpx.get(stack.url + "/metrics", headers=stack.auth, timeout=10).text
    (ARTIFACTS / "metrics.txt").write_text(text)
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    assert {"zapverify_signatures", "zapverify_batch_duration_seconds", "zapverify_http_requests",
            "zapverify_backend_available"} <= set(fams)
    # whichever replica answered has verified the batches of the earlier tests
    assert sum(s.value for s in fams["zapverify_signatures"].samples if s.name == "zapverify_signatures_total") > 0


def test_dashboard_in_chromium_through_nginx(stack, page):
    page.goto(stack.url + "/#key=" + stack.api_key)
    page.wait_for_selector("#conn.ok", timeout=15000)  # the WebSocket feed through nginx is live
    shown = stack.replica_of(page.inner_text("#instance"))
    assert shown in replicas(stack)
    total0 = number(page.inner_text("#total-verified"))
    # The page follows the replica its WebSocket is on, so it must count at least what that
    # replica answered.  nginx's least_conn counts the WebSocket as that replica's
    # connection: one request at a time would all go to the other, so send several at once.
    def one(_):
        with httpx.Client(headers=stack.auth) as c:
            r = remember(post_verify(stack.url, "ed25519", "secp256k1", client=c))
        return r.json()["count"] if stack.replica_of(r.headers[INSTANCE]) == shown else 0

    to_shown = 0
    with ThreadPoolExecutor(4) as pool:
        for _ in range(5):
            to_shown += sum(pool.map(one, range(8)))
            if to_shown:
                break
    assert to_shown > 0, f"no request reached {shown}, the replica the page shows"
    deadline = time.monotonic() + 15
    while number(page.inner_text("#total-verified")) < total0 + to_shown and time.monotonic() < deadline:
        time.sleep(0.2)
    assert number(page.inner_text("#total-verified")) >= total0 + to_shown
    href = page.locator("#recent a").first.get_attribute("href")
    assert href.startswith("/v1/receipts/") and page.request.get(stack.url + href, headers=stack.auth).status == 200
    page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)


def test_cuda_image_without_a_gpu_serves_from_the_cpu_and_says_why(stack):
    assert stack.cuda_url, "scripts/container_test starts zapverify:cuda without a GPU"
    status = httpx.get(stack.cuda_url + "/v1/status", timeout=10).json()
    (ARTIFACTS / "cuda-nogpu-status.json").write_text(json.dumps(status, indent=1))
    assert status["engine"]["ready"] is True and status["engine"]["backends"] == ["cpu"]
    assert {s["backend"] for s in status["engine"]["schemes"].values()} == {"cpu"}
    cuda = status["host"]["probe"]["cuda"]
    assert cuda["available"] is False and any("GPU" in why for why in cuda["reasons"]), cuda
    # CuPy is in the image (from the wheels): the reason is the missing GPU, not a missing package
    assert not any("not importable" in why for why in cuda["reasons"]), cuda
    r = post_verify(stack.cuda_url, *SCHEMES)
    assert r.status_code == 200



#: Run inside zapverify:cuda: for each kernel the service loads and each GPU generation, the
#: file a start would load (prebuilt.find, as CupyDevice does), its size and kind.
_SHIPPED_KERNELS = """
import ctypes, json, sys
from pathlib import Path
from app.engine.device import prebuilt, registry
# The CUDA runtime's major version, which CupyDevice reads (cudaRuntimeGetVersion needs no GPU).
cudart = sorted(Path(sys.prefix).glob("lib/python3*/site-packages/nvidia/cu*/lib/libcudart.so*"))[-1]
version = ctypes.c_int()
assert ctypes.CDLL(str(cudart)).cudaRuntimeGetVersion(ctypes.byref(version)) == 0
major = version.value // 1000
out = {}
for source in registry.service_sources():
    for cc in ((8, 0), (8, 6), (9, 0), (10, 0)):
        p = prebuilt.find(source, major, cc=cc)
        out[f"{source.name} {cc[0]}.{cc[1]}"] = [str(p), p.stat().st_size, p.read_bytes()[:4].hex()] if p else None
print(json.dumps(out))
"""


_NATIVE_LOOPS = """
from app.engine.backends import native, native_ml_dsa
from app.engine.device import hostbuild
loops = native.loops()
print(hostbuild.compiler(), loops is not None, loops and loops.ed25519, loops and loops.bls is not None,
      native_ml_dsa.load().best_isa in native_ml_dsa.ISA_NAMES)
"""


def test_both_images_run_the_prebuilt_native_loops_without_a_compiler(stack):
    """Ed25519, secp256k1, BIP-340, BLS12-381 and ML-DSA run in the native chunk loops
    (docs/architecture.md, "CPU backend") from the libraries the build stage prebuilt (our own
    Ed25519 and ML-DSA verifies included): no compiler in the final stage."""
    for container in [*replicas(stack).values(), "zv-cuda-nogpu"]:
        out = stack.docker_run("exec", container, "python", "-c", _NATIVE_LOOPS).split()
        assert out == ["None", "True", "own", "True", "True"], (container, out)


def test_cuda_image_ships_compiled_kernels_for_every_gpu_generation(stack):
    """A GPU start compiles nothing: SASS for A100-class (8.x) and H100/H200 (9.0), PTX for
    newer, under the key of the sources the image carries (issue 14)."""
    proc = subprocess.run([*stack.docker, "exec", "zv-cuda-nogpu", "python", "-c", _SHIPPED_KERNELS],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = json.loads(proc.stdout)
    (ARTIFACTS / "cuda-shipped-kernels.json").write_text(json.dumps(found, indent=1))
    for what, hit in found.items():
        assert hit is not None, f"{what}: no shipped kernel"
        path, size, magic = hit
        assert path.startswith("/opt/zapverify/kernels/") and size > 1000, hit
        cc = what.split()[1]
        want = {"8.0": ".sm_80.cubin", "8.6": ".sm_80.cubin", "9.0": ".sm_90.cubin", "10.0": ".compute_90.ptx"}[cc]
        assert path.endswith(want) and (magic == "7f454c46") == want.endswith(".cubin"), hit

def test_killing_a_replica_keeps_the_service_answering(stack):
    reps = replicas(stack)
    victim, survivor = sorted(reps)
    # SIGKILL: the container dies as in a crash
    results, killed_at = load_while(lambda: stack.docker_run("kill", reps[victim]), base=stack.url,
                                    post=post_verify, kinds=("GET", "GET", "POST", "POST"), before=2.0, after=6.0,
                                    who=lambda instance: stack.replica_of(instance or "-"), headers=stack.auth)
    gets = [r for r in results if r[0] == "GET"]
    posts = [r for r in results if r[0] == "POST"]
    assert len(gets) > 10 and len(posts) > 5, Counter(r[0] for r in results)
    assert all(r[3] == 200 for r in gets), Counter((r[3], r[4]) for r in gets)
    # nginx resends no POST it may have delivered: only those in flight at the kill may fail
    failed = [r for r in posts if r[3] != 200]
    assert all(r[1] <= killed_at + 0.5 and r[3] == 502 for r in failed), failed
    after = [r for r in results if r[1] > killed_at + 0.5]
    assert after and all(r[3] == 200 and r[4] == survivor for r in after), Counter((r[3], r[4]) for r in after)


def test_restarting_the_stack_loses_no_receipt(stack):
    assert len(WRITTEN) > 30  # the batches of the tests above
    stack.run("down", "-t", "30")  # containers and network go; the PostgreSQL volume stays
    t0 = time.monotonic()
    stack.run("up", "-d", "--no-build")
    wait_ready(stack.url, 300)
    ready_s = time.monotonic() - t0
    if os.environ.get("ZAPVERIFY_STACK_TIMINGS"):
        with open(os.environ["ZAPVERIFY_STACK_TIMINGS"], "w") as f:
            json.dump({"restart_ready_s": ready_s}, f)
    assert len(replicas(stack)) == 2
    with httpx.Client(headers=stack.auth) as c:
        for batch_id, root, count in WRITTEN:
            got = c.get(f"{stack.url}/v1/receipts/{batch_id}", timeout=10)
            assert got.status_code == 200, (batch_id, got.text)
            assert (got.json()["merkle_root"], got.json()["count"]) == (root, count)
