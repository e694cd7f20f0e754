"""Batch clients under load (issue 48, "Done when" 2 and 3; docs/operations.md, "Load
shedding"): a heavy client must not starve a small one, and inclusion proofs of a large
receipt must be cheap.  Each section runs against its own fresh server (uvicorn, CPU backend,
``--cpu-workers`` workers, receipts on in a temporary data directory, admission at its
defaults) on loopback.

1. ``fairness``: two API keys.  Key ``heavy`` sends BLS12-381 AggregateVerify requests of 7
   items × 2,048 keys (2,048 distinct messages; ``POST /v1/verify/bls-aggregate``, 2.3 MB of
   JSON, 28,679 pairings in admission's unit) on 3 connections for ``--seconds`` seconds, with
   a deadline of 100 s (``X-Zapverify-Deadline``: one such request takes about a minute here),
   waiting a 503's ``Retry-After`` as a well-behaved client does; key ``small`` sends a 4-item
   Ed25519 request every 0.2 s.  Pass: the small requests ≥ 95 % answered 200 with p99 ≤ 2.5 s;
   every heavy answer 200 or 503 with ``Retry-After``, none over 120 s.  The 2,048 keys and the
   aggregate signature are made once with arkworks and kept in ``.cache/`` (git-ignored).
2. ``proofs``: one ZAP request of 262,144 Ed25519 items (64 distinct, repeated) makes a
   262,144-item receipt; then 40 concurrent ``GET /v1/receipts/{id}/proof/{i}`` (random i,
   each proof checked offline) × 2 rounds while a 4-item Ed25519 request goes every 0.1 s.
   Pass: proof p50 ≤ 50 ms and max ≤ 1 s, the 4-item p99 ≤ 1 s, the server's RSS (process
   tree) grows ≤ 150 MiB from before the proofs to its peak during them.  The GETs are timed
   with aiohttp (``pip install -e '.[bench]'``): httpx, at 40 concurrent requests, spends
   over a millisecond of this 2-core host's CPU per request itself (a bare ASGI app under
   uvicorn: 40 concurrent GETs p50 ~36 ms through httpx, ~2 ms through aiohttp), which would
   time the client rather than the server.  The same rounds through httpx are interleaved
   with them and reported beside them.

Writes ``bench/results/overload.json`` and ``.md``.

    python bench/overload.py [--seconds 30] [--only fairness,proofs]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.core.deadline import DEADLINE_HEADER  # noqa: E402
from bench import provenance  # noqa: E402
from bench.attacks import RssSampler, tree_rss_mib  # noqa: E402
from bench.concurrency import wait_ready  # noqa: E402
from bench.harness import free_port, start_server, stop_server  # noqa: E402

CACHE = ROOT / ".cache" / "overload"
HEAVY_ITEMS, HEAVY_KEYS = 7, 2048
#: The heavy client's deadline, seconds: a batch client whose requests take a minute says so
#: (the default, 30 s, is shorter than one of its requests: each would be refused).
HEAVY_DEADLINE = 100.0


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def heavy_body() -> bytes:
    """The heavy client's JSON body: 7 AggregateVerify items, each of the same 2,048 keys and
    2,048 distinct messages, signed once (cached)."""
    path = CACHE / f"aggregate-{HEAVY_KEYS}.json"
    if not path.is_file():
        import py_arkworks_bls12381 as ark

        from app.engine.reference.reference import BLS_POP_DST

        rng = random.Random("overload/aggregate")
        r = 0x73EDA753299D7D483339D80809A1D80553BDA402FFFE5BFEFFFFFFFF00000001  # group order (RFC 9380 §8.8.1)
        sks = [ark.Scalar.from_be_bytes(rng.randrange(1, r).to_bytes(32, "big")) for _ in range(HEAVY_KEYS)]
        msgs = [rng.randbytes(32) for _ in range(HEAVY_KEYS)]
        pks = [bytes((ark.G1Point() * sk).to_compressed_bytes()) for sk in sks]
        sigs = [ark.G2Point.hash_to_curve(m, BLS_POP_DST) * sk for sk, m in zip(sks, msgs)]
        agg = sigs[0]
        for s in sigs[1:]:
            agg = agg + s
        CACHE.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"public_keys": [p.hex() for p in pks], "messages": [m.hex() for m in msgs],
                                    "signature": bytes(agg.to_compressed_bytes()).hex()}))
    one = json.loads(path.read_text())
    item = {"mode": "aggregate", **one}
    return json.dumps({"encoding": "hex", "items": [item] * HEAVY_ITEMS}).encode()


def small_body(n: int = 4) -> bytes:
    from app.engine.reference import kat

    return json.dumps({"encoding": "hex", "items": [
        {"scheme": "ed25519", "public_key": i.public_key.hex(), "message": i.message.hex(),
         "signature": i.signature.hex()} for i in kat.sign_items("ed25519", n, seed=11)]}).encode()


JSON_CT = {"content-type": "application/json"}


async def ticker(url: str, body: bytes, every: float, stop: asyncio.Event, headers: dict[str, str]) -> list[dict]:
    """A request every ``every`` seconds (each on its own task, so a slow answer does not
    delay the next send) until ``stop``; each answer's status and latency."""
    out: list[dict] = []
    tasks: set[asyncio.Task] = set()
    async with httpx.AsyncClient(timeout=60, trust_env=False, limits=httpx.Limits(max_connections=64)) as c:
        async def one() -> None:
            t = time.perf_counter()
            try:
                r = await c.post(url, content=body, headers={**JSON_CT, **headers})
                out.append({"status": r.status_code, "s": time.perf_counter() - t})
            except httpx.HTTPError as exc:
                out.append({"status": type(exc).__name__, "s": time.perf_counter() - t})

        while not stop.is_set():
            task = asyncio.create_task(one())
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            with_timeout = asyncio.ensure_future(stop.wait())
            await asyncio.wait({with_timeout}, timeout=every)
            with_timeout.cancel()
        if tasks:
            await asyncio.wait(set(tasks), timeout=70)
    return out


async def heavy_client(url: str, body: bytes, seconds: float, conns: int, key: str) -> list[dict]:
    out: list[dict] = []
    end = time.monotonic() + seconds

    async def conn() -> None:
        async with httpx.AsyncClient(timeout=180, trust_env=False) as c:
            while time.monotonic() < end:
                t = time.perf_counter()
                try:
                    r = await c.post(url, content=body, headers={**JSON_CT, "authorization": f"Bearer {key}",
                                                                 DEADLINE_HEADER: f"{HEAVY_DEADLINE:g}"})
                except httpx.HTTPError as exc:
                    out.append({"status": type(exc).__name__, "s": time.perf_counter() - t})
                    continue
                row = {"status": r.status_code, "s": time.perf_counter() - t,
                       "retry_after": r.headers.get("retry-after")}
                if r.status_code == 200:
                    row["valid"] = r.json().get("valid")
                out.append(row)
                if r.status_code == 503:
                    await asyncio.sleep(min(float(r.headers.get("retry-after") or 1),
                                            max(0.0, end - time.monotonic())))

    await asyncio.gather(*(conn() for _ in range(conns)))
    return out


def section_fairness(args) -> dict:
    heavy_key, small_key, ops_key = "heavy-" + "h" * 24, "small-" + "s" * 24, "ops-" + "o" * 24
    keys = [f"{hashlib.sha256(k.encode()).hexdigest()}:{scope}:{n}" for k, scope, n in (
        (heavy_key, "verify", "heavy"), (small_key, "verify", "small"), (ops_key, "admin", "ops"))]
    heavy, small = heavy_body(), small_body()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory(prefix="zv-overload-") as data, open(Path(data) / "server.log", "wb") as log:
        proc = start_server(port, args.cpu_workers, log, {"ZAPVERIFY_DATA_DIR": data,
                                                          "ZAPVERIFY_API_KEYS": json.dumps(keys)})
        try:
            wait_ready(url, proc)
            hdr = {"authorization": f"Bearer {small_key}"}
            for _ in range(3):  # warm-up: the small client's scheme gets measured
                httpx.post(url + "/v1/verify", content=small, headers={**JSON_CT, **hdr}, timeout=60, trust_env=False)

            async def both():
                stop = asyncio.Event()
                small_task = asyncio.create_task(ticker(url + "/v1/verify", small, 0.2, stop, hdr))
                heavy_rows = await heavy_client(url + "/v1/verify/bls-aggregate", heavy, args.seconds, 3, heavy_key)
                stop.set()
                return heavy_rows, await small_task

            with RssSampler(proc.pid) as sampler:
                t0 = time.monotonic()
                heavy_rows, small_rows = asyncio.run(both())
                elapsed = time.monotonic() - t0
            status = httpx.get(url + "/v1/status", timeout=10, trust_env=False,
                               headers={"authorization": f"Bearer {ops_key}"})
            admission = status.json().get("admission") if status.status_code == 200 else None
        finally:
            stop_server(proc)
    ok_small = [r["s"] for r in small_rows if r["status"] == 200]
    share = len(ok_small) / max(1, len(small_rows))
    heavy_statuses = Counter(str(r["status"]) for r in heavy_rows)
    heavy_bad = [r for r in heavy_rows if not (r["status"] == 200 or (r["status"] == 503 and r["retry_after"]))]
    heavy_max = max((r["s"] for r in heavy_rows), default=0.0)
    checks = {"small requests >= 95 % answered 200": share >= 0.95,
              "small p99 <= 2.5 s": bool(ok_small) and pct(ok_small, 0.99) <= 2.5,
              "every heavy answer 200 or 503 with Retry-After": not heavy_bad and bool(heavy_rows),
              "no heavy answer over 120 s": heavy_max <= 120.0,
              "the heavy requests answered 200 are all valid": all(r.get("valid") == HEAVY_ITEMS
                                                                    for r in heavy_rows if r["status"] == 200)}
    data = {"seconds": args.seconds, "elapsed": round(elapsed, 1), "heavy_body_bytes": len(heavy),
            "heavy": {"statuses": dict(heavy_statuses), "seconds": [round(r["s"], 2) for r in heavy_rows],
                      "retry_after": [r["retry_after"] for r in heavy_rows if r["status"] == 503]},
            "small": {"sent": len(small_rows), "statuses": dict(Counter(str(r["status"]) for r in small_rows)),
                      "ok_share": share,
                      "ms": {"p50": 1e3 * statistics.median(ok_small), "p99": 1e3 * pct(ok_small, 0.99),
                             "max": 1e3 * max(ok_small)} if ok_small else None},
            "rss_peak_mib": sampler.peak, "admission": admission}
    s = data["small"]["ms"]
    lines = [f"Heavy key: {HEAVY_ITEMS} AggregateVerify items × {HEAVY_KEYS} keys ({len(heavy):,} bytes of JSON) on "
             f"3 connections for {args.seconds:g} s, deadline {HEAVY_DEADLINE:g} s (all answers waited for: "
             f"{elapsed:.0f} s in all); answers "
             f"{dict(heavy_statuses)}, seconds each {data['heavy']['seconds']}, Retry-After of the 503s "
             f"{data['heavy']['retry_after']}.",
             f"Small key: 4 Ed25519 items every 0.2 s: {len(small_rows)} sent, answers "
             f"{data['small']['statuses']} ({100 * share:.1f} % 200)"
             + (f"; p50 {s['p50']:.0f} ms, p99 {s['p99']:.0f} ms, max {s['max']:.0f} ms." if s else "."),
             f"Server RSS peak (process tree) {sampler.peak:.0f} MiB."]
    if admission:
        lines.append(f"Admission at the end: admitted {admission['admitted_total']}, refused "
                     f"{admission['refused_total']} {admission['refused_by']}, queue peak {admission['queued_peak']}, "
                     f"deadline misses {admission['deadline_missed_total']}, cost model "
                     f"{admission['items_per_second']} units/s.")
    return {"name": "fairness", "checks": checks, "lines": lines, "data": data}


def section_proofs(args) -> dict:
    from app.engine.reference import kat
    from app.wire import zap
    from zapverify import verify_inclusion

    n = 262_144
    signed = kat.sign_items("ed25519", 64, seed=5)
    its = [signed[i % 64] for i in range(n)]
    frame = bytes(zap.encode_items("ed25519", [i.public_key for i in its], [i.message for i in its],
                                   [i.signature for i in its]))
    small = small_body()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    rng = random.Random(48)
    with tempfile.TemporaryDirectory(prefix="zv-overload-") as data, open(Path(data) / "server.log", "wb") as log:
        proc = start_server(port, args.cpu_workers, log, {"ZAPVERIFY_DATA_DIR": data})
        try:
            wait_ready(url, proc)
            r = httpx.post(url + "/v1/verify/zap", content=frame, timeout=600, trust_env=False,
                           headers={"content-type": zap.CONTENT_TYPE, "accept": zap.CONTENT_TYPE})
            if r.status_code != 200:
                raise RuntimeError(f"the {n}-item request answered {r.status_code}: {r.content[:200]!r}")
            rid = r.headers["x-zapverify-batch-id"]
            time.sleep(2.0)  # the answer is out; let the process settle before the baseline
            rss_before = tree_rss_mib(proc.pid)

            async def rounds():
                stop = asyncio.Event()
                bystander = asyncio.create_task(ticker(url + "/v1/verify", small, 0.1, stop, {}))
                got: dict[str, dict] = {name: {"rows": [], "floor": []} for name in PROOF_CLIENTS}
                server_cpu: list[float] = []  # the server's CPU seconds per proof GET, per round
                async with aiohttp_session() as light, httpx.AsyncClient(
                        timeout=60, trust_env=False, limits=httpx.Limits(max_connections=64)) as heavy:
                    getters = {"aiohttp": aiohttp_get(light), "httpx": httpx_get(heavy)}
                    for _ in range(2):
                        for name in PROOF_CLIENTS:  # the clients interleaved, round by round
                            get, rows, floor = getters[name], got[name]["rows"], got[name]["floor"]
                            # The HTTP floor of this host and client at this moment: the same
                            # concurrency on /healthz, before the round's proofs.
                            floor += await asyncio.gather(*(timed(get, f"{url}/healthz") for _ in range(40)))
                            idx = [rng.randrange(n) for _ in range(40)]
                            cpu0 = cpu_seconds(proc.pid)
                            answers = await asyncio.gather(*(timed(get, f"{url}/v1/receipts/{rid}/proof/{i}", True)
                                                             for i in idx))
                            server_cpu.append((cpu_seconds(proc.pid) - cpu0) / len(idx))
                            rows += [{"i": i, "s": t, "status": st, "body": b} for i, (t, st, b) in zip(idx, answers)]
                await asyncio.sleep(0.5)
                stop.set()
                for rows in (g["rows"] for g in got.values()):
                    for r in rows:  # checked offline after the timing, so the check is not timed
                        b = r.pop("body")
                        r["verified"] = r["status"] == 200 and verify_inclusion(
                            bytes.fromhex(b["merkle_root"]), bytes.fromhex(b["leaf_hash"]), r["i"], n,
                            [bytes.fromhex(h) for h in b["audit_path"]])
                return got, server_cpu, await bystander

            with RssSampler(proc.pid) as sampler:
                got, server_cpu, small_rows = asyncio.run(rounds())
        finally:
            stop_server(proc)
    seen = {name: {"proofs": len(g["rows"]), "proof_ms": ms_of([r["s"] for r in g["rows"]]),
                   "healthz_floor_ms": ms_of(g["floor"]),
                   "all_verified": all(r["status"] == 200 and r["verified"] for r in g["rows"])}
            for name, g in got.items()}
    lat = [r["s"] for r in got["aiohttp"]["rows"]]
    ok_small = [r["s"] for r in small_rows if r["status"] == 200]
    growth = sampler.peak - rss_before
    checks = {"every proof 200 and verified offline (both clients)": all(v["all_verified"] for v in seen.values()),
              "proof p50 <= 50 ms": statistics.median(lat) <= 0.050,
              "proof max <= 1 s": max(lat) <= 1.0,
              "4-item verify meanwhile: all 200, p99 <= 1 s": len(ok_small) == len(small_rows) and bool(ok_small)
              and pct(ok_small, 0.99) <= 1.0,
              "server RSS grows <= 150 MiB": growth <= 150.0}
    data = {"items": n, "frame_bytes": len(frame), "clients": seen,
            "server_cpu_ms_per_get": {"median": 1e3 * statistics.median(server_cpu), "max": 1e3 * max(server_cpu)},
            "small": {"sent": len(small_rows), "statuses": dict(Counter(str(r["status"]) for r in small_rows)),
                      "ms": {"p50": 1e3 * statistics.median(ok_small), "p99": 1e3 * pct(ok_small, 0.99)}
                      if ok_small else None},
            "rss_mib": {"before": rss_before, "peak": sampler.peak, "growth": growth}}
    s = data["small"]["ms"]
    lines = [f"One ZAP request of {n:,} Ed25519 items ({len(frame):,} bytes) made the receipt; then 40 concurrent "
             "proof GETs × 2 rounds per client, the clients interleaved round by round, each proof checked offline "
             "(a receipt this large gets its tree levels when written: app/engine/receipts/proof_cache.py). The "
             "checks are on aiohttp's timings: at 40 concurrent requests httpx itself spends over a millisecond of "
             "this host's CPU per request (its /healthz floor below), so its latencies measure the client more "
             "than the server; both are shown."]
    for name, v in seen.items():
        p, f = v["proof_ms"], v["healthz_floor_ms"]
        lines.append(f"{name}: proofs ({v['proofs']}) p50 {p['p50']:.1f} ms, p99 {p['p99']:.1f} ms, max "
                     f"{p['max']:.1f} ms; the HTTP floor of this host and client (40 concurrent GET /healthz before "
                     f"each round) p50 {f['p50']:.1f} ms, max {f['max']:.1f} ms.")
    c = data["server_cpu_ms_per_get"]
    lines += [f"The server's CPU time (its process, /proc) per proof GET over each round: median {c['median']:.2f} ms, "
              f"max {c['max']:.2f} ms (the 4-item verifies meanwhile included)."]
    lines += [f"4-item verify every 0.1 s meanwhile (httpx): {data['small']['statuses']}"
              + (f", p50 {s['p50']:.0f} ms, p99 {s['p99']:.0f} ms." if s else "."),
              f"Server RSS (process tree): {rss_before:.0f} MiB before the proofs, peak {sampler.peak:.0f} MiB "
              f"(+{growth:.0f} MiB)."]
    return {"name": "proofs", "checks": checks, "lines": lines, "data": data}


#: The clients the proofs section times, in the order each round runs them.
PROOF_CLIENTS = ("aiohttp", "httpx")


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds process ``pid`` has used (/proc/PID/stat), its threads
    included; the server's CPU workers are threads of it (processes for SLH-DSA and P-256 only)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ms_of(seconds: list[float]) -> dict[str, float]:
    return {"p50": 1e3 * statistics.median(seconds), "p99": 1e3 * pct(seconds, 0.99), "max": 1e3 * max(seconds)}


def aiohttp_session():
    """An aiohttp session of up to 64 connections: the light client the proof timings use
    (``pip install -e '.[bench]'``)."""
    try:
        import aiohttp
    except ImportError:
        raise SystemExit("bench/overload.py proofs: aiohttp is not installed: pip install -e '.[bench]'") from None
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64), timeout=aiohttp.ClientTimeout(total=60))


def aiohttp_get(session):
    async def get(url: str) -> tuple[int, bytes]:
        async with session.get(url) as r:
            return r.status, await r.read()
    return get


def httpx_get(client: httpx.AsyncClient):
    async def get(url: str) -> tuple[int, bytes]:
        r = await client.get(url)
        return r.status_code, r.content
    return get


async def timed(get, url: str, body: bool = False):
    """``get(url)`` timed: seconds, or (seconds, status, the JSON body) with ``body``."""
    t = time.perf_counter()
    status, content = await get(url)
    took = time.perf_counter() - t
    return (took, status, json.loads(content) if status == 200 else None) if body else took


SECTIONS = {"fairness": section_fairness, "proofs": section_proofs}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=30.0, help="the heavy client's sending time")
    ap.add_argument("--cpu-workers", type=int, default=2)
    ap.add_argument("--only", default="", help=f"comma-separated, of {', '.join(SECTIONS)}")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args()
    names = [n for n in (args.only.split(",") if args.only else SECTIONS) if n]
    prov = provenance.collect()
    sections = []
    for name in names:
        t0 = time.monotonic()
        res = SECTIONS[name](args)
        res["pass"] = all(res["checks"].values())
        res["seconds"] = round(time.monotonic() - t0, 1)
        print(f"[overload] {name}: {'pass' if res['pass'] else 'FAIL'}", *res["lines"], sep="\n  ", flush=True)
        sections.append(res)
    result = {"provenance": prov, "when": datetime.now(UTC).isoformat(timespec="seconds"), "host": platform.node(),
              "python": platform.python_version(), "cpu_workers": args.cpu_workers, "sections": sections,
              "pass": all(s["pass"] for s in sections)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "overload.json").write_text(json.dumps(result, indent=2) + "\n")
    out = ["# Batch clients under load (bench/overload.py)", "", provenance.markdown_line(prov), "",
           f"{result['when']}, {result['host']}, Python {result['python']}. Written by `bench/overload.py`; loopback, "
           f"each section on a fresh server (CPU backend, {args.cpu_workers} workers, receipts on, admission at its "
           "defaults). The machine is shared with other work: latencies are what a loaded host gives.", ""]
    for s in sections:
        out += [f"## {s['name']} ({s['seconds']:g} s)", ""] + [f"- {line}" for line in s["lines"]] + [""]
        out += ["| check | result |", "|---|---|"] + [f"| {k} | {'pass' if v else '**FAIL**'} |"
                                                     for k, v in s["checks"].items()] + [""]
    out.append(f"Overall: {'pass' if result['pass'] else '**FAIL**'}.")
    (args.out / "overload.md").write_text("\n".join(out) + "\n")
    return 0 if result["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
