#!/usr/bin/env python3
"""Process chunks: through shared memory or the pipe, 100 ms or 20 ms of work each.

For each scheme, interleaved rounds of: the raw loop in every core's own process (the
machine's all-core rate, as in bench/cpu_engine.py), then the CPU backend on processes in
three configurations, in rotating order:

  shared     the default: chunks handed over in shared memory
             (app/engine/backends/shared_columns.py), ``CHUNK_SECONDS`` (100 ms) of work each;
  pipe       chunks pickled through the pipe (``shared_memory=False``), same chunks;
  shared-20ms  shared memory, chunks of 20 ms of work (the rule before 100 ms), fixed from
             the default's measured per-item cost.

Reported per configuration: items/s (median [min–max] over rounds), its rate over the
default's in the same round, over the all-core raw rate, and the server process's CPU time
per batch (every thread of it: what it takes from the cores the workers verify on).

Writes bench/results/process_handoff.json and .md.
Usage: bench/process_handoff.py [--schemes ml-dsa-44,ml-dsa-87] [--batch 4096] [--runs 5] [--batches 2]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cpu_engine import _raw_pool, _spread, all_cores_raw, items_for  # noqa: E402

from app.engine.backends.cpu import CpuBackend  # noqa: E402
from app.engine.backends.shared_columns import shared_size  # noqa: E402
from app.engine.verify.batch import Batch  # noqa: E402
from app.engine.verify.schemes import SCHEMES  # noqa: E402

KINDS = ("shared", "pipe", "shared-20ms")


def measure(backend: CpuBackend, batch: Batch, batches: int) -> tuple[float, float]:
    """(items/s, server CPU seconds per batch) over ``batches`` batches in a row."""
    cpu0, t0 = time.process_time(), time.perf_counter()
    for _ in range(batches):
        verdicts, _ = backend.verify_with_leaves(batch)
        assert verdicts.all()
    wall = time.perf_counter() - t0
    return batches * len(batch) / wall, (time.process_time() - cpu0) / batches


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--schemes", default="ml-dsa-44,ml-dsa-65,ml-dsa-87")
    p.add_argument("--batch", type=int, default=4096)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--batches", type=int, default=2, help="batches per measurement")
    p.add_argument("--min-seconds", type=float, default=0.5, help="per all-cores raw measurement")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = p.parse_args()
    cores = os.cpu_count() or 1
    schemes = args.schemes.split(",")
    backends = {kind: CpuBackend(parallelism="process", shared_memory=kind != "pipe") for kind in KINDS}
    rows = []
    raw_pool = _raw_pool(cores, schemes)
    try:
        for backend in backends.values():
            backend.warm_up()
        for scheme_id in schemes:
            items = items_for(scheme_id, args.batch)
            batch = Batch.from_items(SCHEMES[scheme_id], [i.public_key for i in items],
                                     [i.message for i in items], [i.signature for i in items])
            for backend in backends.values():  # per-item cost measured, chunk size settled, segment made
                measure(backend, batch, 2)
            scheme = SCHEMES[scheme_id]
            backends["shared-20ms"].chunk = max(1, round(0.02 / backends["shared"].item_seconds[scheme_id]))
            chunks = {k: b.chunk_items(scheme) for k, b in backends.items()}
            rate: dict[str, list[float]] = {k: [] for k in KINDS}
            cpu: dict[str, list[float]] = {k: [] for k in KINDS}
            alls = []
            for r in range(args.runs):
                alls.append(all_cores_raw(raw_pool, scheme_id, items, cores, args.min_seconds))
                for kind in KINDS[r % 3:] + KINDS[:r % 3]:
                    per_s, cpu_s = measure(backends[kind], batch, args.batches)
                    rate[kind].append(per_s)
                    cpu[kind].append(cpu_s)
            row = {"scheme": scheme_id, "batch": args.batch, "batch_mib": round(shared_size(batch) / 2**20, 1),
                   "runs": args.runs, "all_cores_raw_per_second": _spread(alls),
                   "configs": {k: {"chunk_items": chunks[k], "per_second": _spread(rate[k]),
                                   "over_default": _spread([x / d for x, d in zip(rate[k], rate["shared"])]),
                                   "over_all_cores_raw": _spread([x / a for x, a in zip(rate[k], alls)]),
                                   "server_cpu_ms_per_batch": _spread([c * 1e3 for c in cpu[k]])}
                               for k in KINDS},
                   "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "load_average": os.getloadavg()[0]}
            rows.append(row)
            print(json.dumps({k: {c: v["per_second"]["median"] for c, v in row["configs"].items()} if k == "configs"
                              else (v["median"] if isinstance(v, dict) else v) for k, v in row.items()}), flush=True)
            write(args.out, {"cores": cores, "machine": platform.machine(), "python": platform.python_version(),
                             "batches_per_measurement": args.batches}, rows)
    finally:
        raw_pool.shutdown()
        for backend in backends.values():
            backend.close()
    print(f"wrote {args.out / 'process_handoff.md'}")
    return 0


def write(out: Path, meta: dict, rows: list[dict]) -> None:
    """Write ``process_handoff.json`` and ``.md`` in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "process_handoff.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")

    def cell(r: dict, key: str, fmt: str) -> str:
        s = r[key]
        return f"{s['median']:{fmt}} [{s['min']:{fmt}}–{s['max']:{fmt}}]"

    lines = [
        "# Process chunks: shared memory or the pipe, 100 ms or 20 ms each",
        "",
        f"Written by `bench/process_handoff.py` on {meta['cores']} cores ({meta['machine']}, Python "
        f"{meta['python']}). The CPU backend on worker processes: `shared` is the default (chunks handed over "
        "in shared memory, app/engine/backends/shared_columns.py, about 100 ms of work each, smaller at the "
        "batch's end), `pipe` the same chunks pickled through the pipe, `shared-20ms` shared memory with 20 ms "
        f"chunks (the rule before). Interleaved rounds ({meta['batches_per_measurement']} batches per "
        "measurement, the order rotating), median [min–max] over rounds. `/ default` is the configuration's "
        "rate over `shared`'s in the same round. `server CPU` is the CPU time of the server's process (all "
        "its threads) per batch: what it takes from the cores the workers verify on. `all-cores raw` is the "
        "raw library loop in one process per core at once (bench/cpu_engine.py).",
        "",
        "| scheme | batch | MiB | config | chunk items | items /s | / default | / all-cores raw "
        "| server CPU ms/batch | runs | measured (UTC) | load |",
        "|---|---:|---:|---|---:|---:|---|---|---|---:|---|---:|",
    ]
    for r in rows:
        for name, c in r["configs"].items():
            lines.append(
                f"| {r['scheme']} | {r['batch']} | {r['batch_mib']} | {name} | {c['chunk_items']} | "
                f"{c['per_second']['median']:,.0f} | {cell(c, 'over_default', '.3f')} | "
                f"{cell(c, 'over_all_cores_raw', '.2f')} | {cell(c, 'server_cpu_ms_per_batch', '.0f')} | "
                f"{r['runs']} | {r['time'][:16].replace('T', ' ')} | {r['load_average']:.1f} |")
    (out / "process_handoff.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
