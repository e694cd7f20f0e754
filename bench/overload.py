"""Load shedding under overload (docs/operations.md, "Load shedding"): a server whose admission
bound is ``--bound`` requests' worth of items and bytes, driven by 4× as many clients.

Against a real ``uvicorn`` process on loopback (CPU backend, receipts off), each client sends
``POST /v1/verify`` with the same JSON batch of ``--batch`` Ed25519 items, again and again,
over its own connection.  A client that gets 503 waits the ``Retry-After`` it is given, as a
well-behaved client does, or ``--backoff`` seconds when that is set (``--backoff 0.05``: a
client that ignores the header and keeps the pressure on; written with ``--tag aggressive``).

1. **unloaded**: one client, ``--requests`` requests; the latency of each.
2. **loaded**: ``4 × --bound`` clients for ``--seconds`` seconds; every status code, whether
   each 503 carried ``Retry-After``, the latency of each 200.  The server's resident memory
   (``VmRSS``) is sampled every 50 ms throughout, and once more after the clients stop.
3. The unloaded run again, after the load, so that a drift of the machine shows.
4. **flood**: ``--flood`` clients (default 64, 64× the default bound) for ``--seconds`` / 2
   seconds: statuses and peak RSS only, to show memory does not follow the client count.

Pass: some 503s, each with ``Retry-After``; no other 5xx (flood included); p99 latency of
the accepted requests at most 2× the unloaded p99 (the smaller, i.e. stricter, of the two
unloaded runs); peak RSS under ``--rss-bound`` MiB in both loaded phases.
Writes ``bench/results/overload.json`` and ``.md``.

    python bench/overload.py [--batch 512] [--bound 1] [--seconds 20] [--requests 30] [--flood 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import provenance  # noqa: E402
from bench.harness import free_port, start_server, stop_server  # noqa: E402


def body(batch: int) -> bytes:
    from app.engine.reference import kat

    items = kat.sign_items("ed25519", batch, seed=11)
    return json.dumps({"encoding": "hex", "items": [
        {"scheme": "ed25519", "public_key": i.public_key.hex(), "message": i.message.hex(),
         "signature": i.signature.hex()} for i in items]}).encode()


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class RssSampler(threading.Thread):
    def __init__(self, pid: int, every: float = 0.05):
        super().__init__(daemon=True)
        self.pid, self.every, self.peak, self.stop = pid, every, 0.0, threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.peak = max(self.peak, rss_mib(self.pid))
            time.sleep(self.every)


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


async def unloaded(url: str, payload: bytes, n: int) -> list[float]:
    out = []
    async with httpx.AsyncClient(timeout=120) as c:
        for _ in range(n):
            t = time.perf_counter()
            r = await c.post(url, content=payload, headers={"content-type": "application/json"})
            if r.status_code != 200:
                raise RuntimeError(f"unloaded request answered {r.status_code}: {r.text[:200]}")
            out.append(time.perf_counter() - t)
    return out


async def loaded(url: str, payload: bytes, clients: int, seconds: float, backoff: float) -> dict:
    statuses: Counter[int] = Counter()
    latencies: list[float] = []
    retry_after_missing = 0
    errors: Counter[str] = Counter()
    end = time.monotonic() + seconds

    async def client() -> None:
        nonlocal retry_after_missing
        async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=1)) as c:
            while time.monotonic() < end:
                t = time.perf_counter()
                try:
                    r = await c.post(url, content=payload, headers={"content-type": "application/json"})
                except httpx.HTTPError as exc:  # a refused request's connection may be closed under it
                    errors[type(exc).__name__] += 1
                    await asyncio.sleep(backoff)
                    continue
                statuses[r.status_code] += 1
                if r.status_code == 200:
                    latencies.append(time.perf_counter() - t)
                elif r.status_code == 503:
                    retry_after_missing += "retry-after" not in r.headers
                    await asyncio.sleep(backoff or float(r.headers.get("retry-after", 1)))

    await asyncio.gather(*(client() for _ in range(clients)))
    return {"statuses": dict(statuses), "latencies": latencies, "retry_after_missing": retry_after_missing,
            "transport_errors": dict(errors)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--bound", type=int, default=1, help="admission bound, in requests of --batch items")
    ap.add_argument("--flood", type=int, default=64, help="clients of the flood phase")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--requests", type=int, default=30)
    ap.add_argument("--backoff", type=float, default=0.0, help="seconds after a 503; 0 = its Retry-After")
    ap.add_argument("--tag", default="", help="written as overload-<tag>.json/.md")
    ap.add_argument("--cpu-workers", type=int, default=2)
    ap.add_argument("--rss-bound", type=float, default=768.0, help="MiB")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args()
    prov = provenance.collect()

    payload = body(args.batch)
    clients = 4 * args.bound
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1/verify"
    env = {"ZAPVERIFY_RECEIPTS": "false", "ZAPVERIFY_UMA_POOL_BYTES": str(64 << 20),
           "ZAPVERIFY_ADMISSION_MAX_ITEMS": str(args.bound * args.batch),
           "ZAPVERIFY_ADMISSION_MAX_BYTES": str(args.bound * len(payload))}
    with open(args.out / "overload.log", "wb") as log:
        proc = start_server(port, args.cpu_workers, log, env)
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("server did not become ready")
                time.sleep(0.2)
            asyncio.run(unloaded(url, payload, 3))  # warm-up
            rss_idle = rss_mib(proc.pid)
            before = asyncio.run(unloaded(url, payload, args.requests))
            sampler = RssSampler(proc.pid)
            sampler.start()
            load = asyncio.run(loaded(url, payload, clients, args.seconds, args.backoff))
            time.sleep(1.0)
            rss_after = rss_mib(proc.pid)
            sampler.stop.set()
            sampler.join()
            after = asyncio.run(unloaded(url, payload, args.requests))
            flood_sampler = RssSampler(proc.pid)
            flood_sampler.start()
            flood = asyncio.run(loaded(url, payload, args.flood, args.seconds / 2, args.backoff))
            flood_sampler.stop.set()
            flood_sampler.join()
            admission = httpx.get(f"http://127.0.0.1:{port}/v1/status", timeout=10).json()["admission"]
        finally:
            stop_server(proc)
    (args.out / "overload.log").unlink(missing_ok=True)

    base_p99 = min(pct(before, 0.99), pct(after, 0.99))
    acc = load["latencies"]
    st = load["statuses"]
    fst = flood["statuses"]
    other_5xx = {k: v for d in (st, fst) for k, v in d.items() if k >= 500 and k != 503}
    checks = {
        "some 503": st.get(503, 0) > 0,
        "every 503 has Retry-After": load["retry_after_missing"] == 0 and flood["retry_after_missing"] == 0,
        "no other 5xx": not other_5xx,
        "accepted p99 <= 2x unloaded p99": bool(acc) and pct(acc, 0.99) <= 2 * base_p99,
        f"peak RSS < {args.rss_bound:g} MiB": max(sampler.peak, flood_sampler.peak) < args.rss_bound,
    }
    result = {
        "provenance": prov, "when": datetime.now(UTC).isoformat(timespec="seconds"), "host": platform.node(),
        "python": platform.python_version(), "batch": args.batch, "body_bytes": len(payload),
        "bound_requests": args.bound, "clients": clients, "seconds": args.seconds, "backoff": args.backoff,
        "cpu_workers": args.cpu_workers,
        "unloaded_before_ms": {"p50": 1e3 * statistics.median(before), "p99": 1e3 * pct(before, 0.99)},
        "unloaded_after_ms": {"p50": 1e3 * statistics.median(after), "p99": 1e3 * pct(after, 0.99)},
        "loaded": {"statuses": st, "retry_after_missing": load["retry_after_missing"],
                   "transport_errors": load["transport_errors"], "accepted": len(acc),
                   "accepted_ms": {"p50": 1e3 * statistics.median(acc), "p99": 1e3 * pct(acc, 0.99),
                                   "max": 1e3 * max(acc)} if acc else None},
        "flood": {"clients": args.flood, "seconds": args.seconds / 2, "statuses": fst,
                  "retry_after_missing": flood["retry_after_missing"], "transport_errors": flood["transport_errors"],
                  "peak_rss_mib": flood_sampler.peak},
        "rss_mib": {"idle": rss_idle, "peak": sampler.peak, "after": rss_after, "bound": args.rss_bound},
        "admission": admission, "checks": checks, "pass": all(checks.values()),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    name = f"overload-{args.tag}" if args.tag else "overload"
    (args.out / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    ms = lambda d: f"p50 {d['p50']:.1f} ms, p99 {d['p99']:.1f} ms"  # noqa: E731
    lines = [
        "# Overload: admission control under 4× the bound (bench/overload.py)", "", provenance.markdown_line(prov), "",
        f"{result['when']}, {result['host']}, Python {result['python']}. Written by `bench/overload.py`; "
        "loopback, CPU backend, receipts off.", "",
        f"- Batch: {args.batch} Ed25519 items as JSON ({len(payload)} bytes), `POST /v1/verify`.",
        f"- Admission bound: {args.bound} requests ({args.bound * args.batch} items, "
        f"{args.bound * len(payload)} bytes); {clients} clients for {args.seconds:g} s, each waiting "
        f"{f'{args.backoff:g} s' if args.backoff else 'the Retry-After'} after a 503; server CPU workers "
        f"{args.cpu_workers}.",
        f"- Unloaded ({args.requests} sequential requests): before {ms(result['unloaded_before_ms'])}; "
        f"after {ms(result['unloaded_after_ms'])}.",
        f"- Loaded: statuses {st}; 503 without Retry-After: {load['retry_after_missing']}; "
        f"transport errors {load['transport_errors'] or 'none'}.",
    ]
    if acc:
        a = result["loaded"]["accepted_ms"]
        lines.append(f"- Accepted under load ({len(acc)}): p50 {a['p50']:.1f} ms, p99 {a['p99']:.1f} ms, "
                     f"max {a['max']:.1f} ms; ratio p99 / unloaded p99 (the smaller of before and after) = "
                     f"{a['p99'] / (1e3 * base_p99):.2f}.")
    lines += [
        f"- Server RSS: idle {rss_idle:.0f} MiB, peak {sampler.peak:.0f} MiB, 1 s after the load "
        f"{rss_after:.0f} MiB (bound stated: {args.rss_bound:g} MiB).",
        f"- Flood: {args.flood} clients for {args.seconds / 2:g} s: statuses {fst}; transport errors "
        f"{flood['transport_errors'] or 'none'}; peak RSS {flood_sampler.peak:.0f} MiB.",
        f"- Admission counters at the end: admitted {admission['admitted_total']}, refused "
        f"{admission['refused_total']}, peak {admission['items_peak']} items / {admission['bytes_peak']} bytes.",
        "", "| check | result |", "|---|---|",
        *[f"| {k} | {'pass' if v else 'FAIL'} |" for k, v in checks.items()], "",
    ]
    (args.out / f"{name}.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0 if result["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
