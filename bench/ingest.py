"""What the socket path costs: the in-process engine rate against the rate through TCP ingest, in one run.

For Ed25519 on the CPU backend, measures items verified per second

- ``engine``: :meth:`Engine.run` on one columnar batch of ``--batch`` items (default 4096),
  in this process, one call at a time;
- ``tcp``: the same batch as one ZAP frame to the server's TCP ingest port, ``--in-flight``
  (default 2) frames pipelined on one connection;
- ``engine_small`` / ``tcp_small``: frames of ``--small`` items (default 16): the engine called
  once per frame, against TCP ingest with ``--small-in-flight`` (default 64) frames pipelined,
  which the server's verify worker joins into batches of up to 1024 items;

the TCP modes against a real uvicorn process on loopback started by this script (receipts
off, the same number of CPU workers as the in-process engine).  The modes are measured in
interleaved rounds (the order rotates each round) and the median of each is reported, so
load from elsewhere on the shared machine falls on all of them alike.  The client runs in
this process and shares the CPUs with the server.

Writes ``bench/results/ingest.json`` and ``.md`` (``--out`` changes the folder).

    python bench/ingest.py [--batch 4096] [--small 16] [--rounds 5] [--workers 0]
"""

from __future__ import annotations

import argparse
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
from zapverify import Client

MODES = ("engine", "tcp", "engine_small", "tcp_small")


def frame_of(items: list[kat.Item]) -> tuple[Batch, bytes]:
    batch = Batch.from_items(SCHEMES["ed25519"], [i.public_key for i in items], [i.message for i in items],
                             [i.signature for i in items])
    return batch, bytes(zap.encode_request(batch))


def timed(fn, reps: int, items: int) -> float:
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return reps * items / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--small", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=3, help="large frames (or engine calls) per mode per round")
    ap.add_argument("--in-flight", type=int, default=2)
    ap.add_argument("--small-in-flight", type=int, default=64)
    ap.add_argument("--workers", type=int, default=0, help="CPU workers of both engines; 0 = every core")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args(argv)
    prov = provenance.collect()
    workers = args.workers or os.cpu_count() or 1

    items = kat.sign_items("ed25519", args.batch, seed=2024, msg_len=64)
    batch, frame = frame_of(items)
    small_batch, small_frame = frame_of(items[:args.small])
    small_frames = max(1, args.reps * args.batch // args.small)  # as many items as the large modes

    engine = Engine(EngineConfig(backend="cpu", cpu_workers=workers, cpu_parallelism="thread"))
    engine.start()
    load_before = os.getloadavg()
    try:
        with harness.serve(workers, {"ZAPVERIFY_RECEIPTS": "false"}) as server:
            with Client(server.url, timeout=30) as client:
                assert client.status()["ingest"]["transports"]["tcp"]["port"] == server.ingest_port
            modes = {
                "engine": lambda: timed(lambda: engine.run(batch), args.reps, args.batch),
                "tcp": lambda: harness.send_frames(server, frame, args.reps, args.in_flight, [True] * args.batch),
                "engine_small": lambda: timed(lambda: engine.run(small_batch), small_frames, args.small),
                "tcp_small": lambda: harness.send_frames(server, small_frame, small_frames,
                                                         args.small_in_flight, [True] * args.small),
            }
            rates = harness.interleaved(modes, args.rounds, warm=True)
            with Client(server.url, timeout=30) as client:
                ingest = client.status()["ingest"]
    finally:
        engine.close()
    load_after = os.getloadavg()

    median = harness.medians(rates)
    tcp = ingest["transports"]["tcp"]
    result = {
        "benchmark": "ingest",
        "provenance": prov,
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "zapverify": __version__,
        "host": {"machine": platform.machine(), "system": platform.system(), "cpus": os.cpu_count(),
                 "python": platform.python_version(), "loadavg_before": load_before, "loadavg_after": load_after},
        "config": {"scheme": "ed25519", "batch": args.batch, "small": args.small, "message_bytes": 64,
                   "rounds": args.rounds, "reps_per_round": args.reps, "small_frames_per_round": small_frames,
                   "in_flight": args.in_flight, "small_in_flight": args.small_in_flight, "cpu_workers": workers,
                   "backend": "cpu", "server": "uvicorn on 127.0.0.1, one process, receipts off",
                   "client": "zapverify.ingest over TCP, in this process", "frame_bytes": len(frame),
                   "small_frame_bytes": len(small_frame), "coalesce": ingest["coalesce"]},
        "items_per_second": {m: {"median": median[m], "rounds": v} for m, v in rates.items()},
        "ratios": {"tcp/engine": median["tcp"] / median["engine"],
                   "tcp_small/engine_small": median["tcp_small"] / median["engine_small"],
                   "tcp_small/engine": median["tcp_small"] / median["engine"]},
        "server_counters": {k: tcp[k] for k in ("frames_received", "bytes_received", "frames_verified",
                                                "replies_sent", "dropped_total", "ring_high_water",
                                                "backpressure_total")},
    }
    harness.write_results(args.out, "ingest", result, render_md(result))
    return 0


def render_md(r: dict) -> str:
    c, h, ips, co = r["config"], r["host"], r["items_per_second"], r["config"]["coalesce"]
    rounds = lambda m: ", ".join(f"{x:,.0f}" for x in ips[m]["rounds"])  # noqa: E731
    lines = [
        "# TCP ingest vs the in-process engine",
        "",
        provenance.markdown_line(r["provenance"]),
        "",
        f"Written by `bench/ingest.py` on {r['when']} (zapverify {r['zapverify']}). Ed25519 "
        f"({c['message_bytes']}-byte messages), CPU backend with {c['cpu_workers']} workers; {c['server']}; "
        f"{c['client']}. Median of {c['rounds']} interleaved rounds.",
        "",
        f"Host: {h['system']} {h['machine']}, {h['cpus']} CPUs, Python {h['python']}; load average "
        f"{h['loadavg_before'][0]:.2f} before, {h['loadavg_after'][0]:.2f} after (the machine is shared and the "
        "client runs on the same CPUs as the server, so absolute rates are noisy; the ratios are what this "
        "measures).",
        "",
        "| path | frame | in flight | items/s (median) | per round |",
        "|---|---|---:|---:|---|",
        f"| engine (in process) | {c['batch']} items | 1 | {ips['engine']['median']:,.0f} | {rounds('engine')} |",
        f"| TCP ingest | {c['batch']} items, {c['frame_bytes']:,} B | {c['in_flight']} | "
        f"{ips['tcp']['median']:,.0f} | {rounds('tcp')} |",
        f"| engine (in process), one call per frame | {c['small']} items | 1 | "
        f"{ips['engine_small']['median']:,.0f} | {rounds('engine_small')} |",
        f"| TCP ingest, small frames joined by the worker | {c['small']} items, {c['small_frame_bytes']:,} B | "
        f"{c['small_in_flight']} | {ips['tcp_small']['median']:,.0f} | {rounds('tcp_small')} |",
        "",
        "| ratio | measured |",
        "|---|---:|",
        *(f"| {k} | {v:.3f} |" for k, v in r["ratios"].items()),
        "",
        f"Server side: {r['server_counters']['frames_verified']:,} frames verified, "
        f"{r['server_counters']['dropped_total']} dropped, ring high water {r['server_counters']['ring_high_water']}; "
        f"{co['joined_frames_total']:,} frames were verified in {co['batches_total']:,} batches "
        f"(joined up to {co['max_items']} items, waiting at most {co['wait_seconds'] * 1000:g} ms).",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
