"""What HTTP costs: the in-process engine rate against the rate through the API, in one run.

For Ed25519 batches of ``--batch`` items (default 4096) on the CPU backend, measures
items verified per second

- ``engine``: :meth:`Engine.run` on a columnar batch, in this process;
- ``zap``: ``POST /v1/verify/zap`` with the batch as one ZAP frame;
- ``json``: ``POST /v1/verify`` with the batch as JSON (base64 fields),

the last two against a real uvicorn process on loopback started by this script, with the
same number of CPU workers as the in-process engine.  Requests are sent one at a time, so
each rate is the batch size over the latency of one batch.  The three are measured in
interleaved rounds (the order rotates each round) and the median of each is reported, so
that load from elsewhere on the machine falls on all three alike.

Writes ``bench/results/http_overhead.json`` and ``.md`` (``--out`` changes the folder).
Targets (issue 23): zap/engine ≥ 0.9, json/engine ≥ 0.75.

    python bench/http_overhead.py [--batch 4096] [--rounds 5] [--reps 3] [--workers 0]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app import __version__
from app.core.batch import Batch
from app.core.schemes import SCHEMES
from app.engine.reference import kat
from app.engine.verify.engine import Engine, EngineConfig
from app.wire import zap
from bench import harness, provenance
from zapverify import Client, json_body

TARGETS = {"zap": 0.9, "json": 0.75}


def measure(fn, reps: int, batch: int) -> float:
    """Items per second over ``reps`` sequential calls of ``fn`` (each must verify ``batch`` valid items)."""
    t0 = time.perf_counter()
    for _ in range(reps):
        valid = fn()
        if valid != batch:
            raise RuntimeError(f"{valid} of {batch} items valid; every item was signed correctly")
    return batch * reps / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=3, help="calls per mode per round")
    ap.add_argument("--workers", type=int, default=0, help="CPU workers of both engines; 0 = every core")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args(argv)
    prov = provenance.collect()
    workers = args.workers or os.cpu_count() or 1

    items = kat.sign_items("ed25519", args.batch, seed=2024, msg_len=64)
    batch = Batch.from_items(SCHEMES["ed25519"], [i.public_key for i in items], [i.message for i in items],
                             [i.signature for i in items])
    frame = bytes(zap.encode_request(batch))
    body = json.dumps(json_body(items)).encode()

    # Ed25519 runs on the thread pool either way; "thread" keeps this process from starting
    # worker processes (used only by other schemes) that could outlive it.
    engine = Engine(EngineConfig(backend="cpu", cpu_workers=workers, cpu_parallelism="thread"))
    engine.start()
    load_before = os.getloadavg()
    try:
        with harness.serve(workers, ingest=False, data_prefix="zv-http-overhead-") as server, \
                Client(server.url, timeout=300) as client:
            modes = {
                "engine": lambda: engine.run(batch).valid,
                "zap": lambda: client.verify_frame(frame).valid,
                "json": lambda: client.verify_json_body(body).valid,
            }
            rates = harness.interleaved({m: lambda fn=fn: measure(fn, args.reps, args.batch)
                                         for m, fn in modes.items()}, args.rounds, warm=True)
    finally:
        engine.close()
    load_after = os.getloadavg()

    median = harness.medians(rates)
    ratios = {f"{m}/engine": median[m] / median["engine"] for m in ("zap", "json")}
    met = {f"{m}/engine": ratios[f"{m}/engine"] >= t for m, t in TARGETS.items()}
    result = {
        "benchmark": "http_overhead",
        "provenance": prov,
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "zapverify": __version__,
        "host": {"machine": platform.machine(), "system": platform.system(), "cpus": os.cpu_count(),
                 "python": platform.python_version(), "loadavg_before": load_before, "loadavg_after": load_after},
        "config": {"scheme": "ed25519", "batch": args.batch, "message_bytes": 64, "rounds": args.rounds,
                   "reps_per_round": args.reps, "cpu_workers": workers, "backend": "cpu",
                   "server": "uvicorn on 127.0.0.1, one process", "client": "httpx, one request at a time",
                   "frame_bytes": len(frame), "json_bytes": len(body)},
        "items_per_second": {m: {"median": median[m], "rounds": v} for m, v in rates.items()},
        "ratios": ratios,
        "targets": {f"{m}/engine": t for m, t in TARGETS.items()},
        "targets_met": met,
    }
    harness.write_results(args.out, "http_overhead", result, render_md(result))
    return 0


def render_md(r: dict) -> str:
    c, h, ips = r["config"], r["host"], r["items_per_second"]
    lines = [
        "# HTTP overhead: engine vs /v1/verify/zap vs /v1/verify",
        "",
        provenance.markdown_line(r["provenance"]),
        "",
        f"Written by `bench/http_overhead.py` on {r['when']} (zapverify {r['zapverify']}). "
        f"Ed25519, batches of {c['batch']} items ({c['message_bytes']}-byte messages), CPU backend with "
        f"{c['cpu_workers']} workers; {c['server']}; {c['client']}. Median of {c['rounds']} interleaved rounds "
        f"of {c['reps_per_round']} batches each.",
        "",
        f"Host: {h['system']} {h['machine']}, {h['cpus']} CPUs, Python {h['python']}; load average "
        f"{h['loadavg_before'][0]:.2f} before, {h['loadavg_after'][0]:.2f} after (the machine is shared, so "
        "absolute rates are noisy; the ratios are what this measures).",
        "",
        "| path | items/s (median) | per round | body bytes |",
        "|---|---:|---|---:|",
        f"| engine (in process) | {ips['engine']['median']:,.0f} | "
        f"{', '.join(f'{x:,.0f}' for x in ips['engine']['rounds'])} | – |",
        f"| POST /v1/verify/zap | {ips['zap']['median']:,.0f} | "
        f"{', '.join(f'{x:,.0f}' for x in ips['zap']['rounds'])} | {c['frame_bytes']:,} |",
        f"| POST /v1/verify (JSON) | {ips['json']['median']:,.0f} | "
        f"{', '.join(f'{x:,.0f}' for x in ips['json']['rounds'])} | {c['json_bytes']:,} |",
        "",
        "| ratio | measured | target | met |",
        "|---|---:|---:|---|",
    ]
    for k, v in r["ratios"].items():
        lines.append(f"| {k} | {v:.3f} | {r['targets'][k]:.2f} | {'yes' if r['targets_met'][k] else 'NO'} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
