#!/usr/bin/env python3
"""CPU engine benchmark: raw single-thread library rate vs the engine on every core.

For every scheme, side by side in one run:
  raw      the reference library called in a plain loop on one thread (verifies/s);
  engine   Engine.verify on a 4096-item batch with the CPU backend on all cores, with the
           pool kind the registry picks (threads where the library releases the GIL,
           processes elsewhere), and with the other kind for comparison;
  ratio    engine / (cores × raw): 1.0 means every core runs the library at full speed.

Writes bench/results/cpu_engine.json and bench/results/cpu_engine.md.
Usage: bench/cpu_engine.py [--batch 4096] [--schemes ed25519,secp256k1,...] [--min-seconds 1.0]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.engine.backends.cpu import CpuBackend
from app.engine.verify import kat, reference
from app.engine.verify.batch import Batch
from app.engine.verify.engine import Engine, EngineConfig
from app.engine.verify.schemes import SCHEMES

DISTINCT = {"slh-dsa": 2}  # SLH-DSA "s" signing costs up to a second: sign few, tile them


def items_for(scheme_id: str, n: int) -> list[kat.Item]:
    distinct = min(n, DISTINCT.get(SCHEMES[scheme_id].family, 64))
    signed = kat.sign_items(scheme_id, distinct, seed=99, msg_len=64)
    return [signed[i % distinct] for i in range(n)]


def raw_rate(scheme_id: str, items: list[kat.Item], min_seconds: float) -> float:
    fn = reference.verifier(SCHEMES[scheme_id])
    done, t0 = 0, time.perf_counter()
    while True:
        for it in items[:64]:
            assert fn(it.public_key, it.message, it.signature, it.context)
        done += min(64, len(items))
        elapsed = time.perf_counter() - t0
        if elapsed >= min_seconds:
            return done / elapsed


def gil_speedup(scheme_id: str, items: list[kat.Item], min_seconds: float) -> float:
    """Rate of the raw loop on two threads over its rate on one: about 2 where the library
    releases the GIL during the call, about 1 where it holds it."""
    from concurrent.futures import ThreadPoolExecutor

    one = raw_rate(scheme_id, items, min_seconds)
    with ThreadPoolExecutor(2) as ex:
        two = sum(ex.map(lambda _: raw_rate(scheme_id, items, min_seconds), range(2)))
    return two / one


def engine_rate(engine: Engine, batch: Batch, repeats: int) -> float:
    engine.verify(batch)  # warm: pools started, libraries imported in workers
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        res = engine.verify(batch)
        times.append(time.perf_counter() - t0)
        assert res.valid == len(batch)
    return len(batch) / statistics.median(times)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=4096)
    p.add_argument("--schemes", default=",".join(SCHEMES))
    p.add_argument("--min-seconds", type=float, default=1.0)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = p.parse_args()
    cores = os.cpu_count() or 1
    engines = {kind: Engine(EngineConfig(backend="cpu", cpu_parallelism=kind)) for kind in ("thread", "process")}
    rows = []
    try:
        for scheme_id in args.schemes.split(","):
            scheme = SCHEMES[scheme_id]
            items = items_for(scheme_id, args.batch)
            batch = Batch.from_items(scheme, [i.public_key for i in items], [i.message for i in items],
                                     [i.signature for i in items])
            raw = raw_rate(scheme_id, items, args.min_seconds)
            gil = gil_speedup(scheme_id, items, args.min_seconds)
            repeats = 3 if raw * cores > args.batch else 1
            rates = {kind: engine_rate(eng, batch, repeats) for kind, eng in engines.items()}
            picked = "process" if CpuBackend(parallelism="auto").uses_processes(scheme) else "thread"
            row = {"scheme": scheme_id, "raw_per_second": round(raw, 1), "two_thread_speedup": round(gil, 2),
                   "releases_gil": reference.RELEASES_GIL[scheme.family],
                   "engine_per_second": round(rates[picked], 1), "pool": picked,
                   "thread_per_second": round(rates["thread"], 1), "process_per_second": round(rates["process"], 1),
                   "ratio": round(rates[picked] / (cores * raw), 3),
                   "best_ratio": round(max(rates.values()) / (cores * raw), 3)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        for eng in engines.values():
            eng.close()
    meta = {"cores": cores, "batch": args.batch, "machine": platform.machine(), "python": platform.python_version(),
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "load_average": os.getloadavg()}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cpu_engine.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    lines = [
        "# CPU engine vs raw library loop",
        "",
        f"Written by `bench/cpu_engine.py` at {meta['time']} on {cores} cores ({meta['machine']}, Python "
        f"{meta['python']}), batch {args.batch}, load average at the end {meta['load_average'][0]:.2f}.",
        "ratio = engine / (cores × raw); target ≥ 0.9. `pool` is what the registry picks "
        "(threads where the library releases the GIL).",
        "",
        "`2-thread speedup` runs the raw loop on two threads against one: near 2 where the",
        "library releases the GIL, near 1 where it holds it (reference.RELEASES_GIL follows it).",
        "",
        "| scheme | raw 1-thread /s | 2-thread speedup | engine /s | pool | threads /s | processes /s | ratio "
        "| best ratio |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['scheme']} | {r['raw_per_second']:,.0f} | {r['two_thread_speedup']:.2f} | "
                     f"{r['engine_per_second']:,.0f} | {r['pool']} | "
                     f"{r['thread_per_second']:,.0f} | {r['process_per_second']:,.0f} | {r['ratio']:.2f} | "
                     f"{r['best_ratio']:.2f} |")
    (args.out / "cpu_engine.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out / 'cpu_engine.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
