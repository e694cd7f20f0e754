#!/usr/bin/env python3
"""Process batches: how they reach the workers (shared memory or the pipe).

For each scheme, interleaved rounds of: the raw loop in every core's own process (the
machine's all-core rate, as in bench/cpu_engine.py), then the CPU backend on processes in
two configurations, each first in turn:

  default  the batch copied into shared memory, each worker claiming ranges of it until
           none is left (app/engine/backends/shared_columns.py);
  pipe     chunks of ``CHUNK_SECONDS`` (100 ms) of single-core work, cut by
           ``chunk_bounds`` (app/engine/backends/cpu.py), through the process pool's pipe
           (``shared_memory=False``: where there is no room in /dev/shm).

Reported per configuration: items/s (median [min–max] over rounds), its rate over the
default's in the same round, over the all-core raw rate, and the server process's CPU time
per batch (every thread of it: what it takes from the cores the workers verify on), and
how busy the pool's workers were (their run time over wall time × workers).

Writes bench/results/process_chunks.json and .md.
Usage: bench/process_chunks.py [--schemes ml-dsa-44,slh-dsa-sha2-128f] [--batches-of 512,4096] [--runs 9] [--batches 2]
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

from cpu_engine import _raw_pool, _spread, all_cores_raw, batch_for, items_for  # noqa: E402

from app.core.batch import Batch  # noqa: E402
from app.core.schemes import SCHEMES  # noqa: E402
from app.engine.backends.cpu import CpuBackend, chunk_bounds  # noqa: E402
from bench import provenance  # noqa: E402

CONFIGS = ("default", "pipe")


def _run_ns(pids: list[int]) -> int:
    """Nanoseconds the processes ``pids`` have run on a CPU (Linux ``/proc/PID/schedstat``)."""
    return sum(int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) for pid in pids)


def measure(backend: CpuBackend, batch: Batch, batches: int) -> tuple[float, float, float]:
    """(items/s, server CPU seconds per batch, worker busy fraction) over ``batches`` batches
    in a row.  Busy is the pool's workers' run time over wall time × workers: what is left
    is time a worker waited (for its next chunk or claim, or for the batch's last one)."""
    # The backend's own workers (started at warm-up; a benchmark may read its private parts).
    pids = list(backend._procs._processes) if backend._procs is not None else []  # type: ignore[attr-defined]
    run0, cpu0, t0 = _run_ns(pids), time.process_time(), time.perf_counter()
    for _ in range(batches):
        _r = backend.run(batch)
        verdicts, _ = _r.verdicts, _r.leaves
        assert verdicts.all()
    wall = time.perf_counter() - t0
    busy = (_run_ns(pids) - run0) / 1e9 / (wall * len(pids)) if pids else float("nan")
    return batches * len(batch) / wall, (time.process_time() - cpu0) / batches, busy


def measure_row(backends: dict[str, CpuBackend], raw_pool, scheme_id: str, n: int, cores: int,
                args: argparse.Namespace) -> dict:
    """One scheme at one batch size: every configuration in interleaved rounds."""
    scheme = SCHEMES[scheme_id]
    items = items_for(scheme_id, n)
    batch = batch_for(scheme_id, items)
    for backend in backends.values():  # per-item cost measured, chunk size settled
        measure(backend, batch, 2)
    full = backends["pipe"].chunk_items(scheme)
    rate: dict[str, list[float]] = {k: [] for k in CONFIGS}
    cpu: dict[str, list[float]] = {k: [] for k in CONFIGS}
    busy: dict[str, list[float]] = {k: [] for k in CONFIGS}
    alls = []
    for r in range(args.runs):
        alls.append(all_cores_raw(raw_pool, scheme_id, items, cores, args.min_seconds))
        for name in CONFIGS[r % len(CONFIGS):] + CONFIGS[:r % len(CONFIGS)]:  # each first in turn
            per_s, cpu_s, busy_f = measure(backends[name], batch, args.batches)
            rate[name].append(per_s)
            cpu[name].append(cpu_s)
            busy[name].append(busy_f)
    return {"scheme": scheme_id, "batch": n, "runs": args.runs, "all_cores_raw_per_second": _spread(alls),
            "pipe_chunk_items": full, "pipe_chunks": len(chunk_bounds(n, full, backends["pipe"].workers)),
            "configs": {k: {"per_second": _spread(rate[k]),
                            "over_default": _spread([x / d for x, d in zip(rate[k], rate["default"])]),
                            "over_all_cores_raw": _spread([x / a for x, a in zip(rate[k], alls)]),
                            "server_cpu_ms_per_batch": _spread([c * 1e3 for c in cpu[k]]),
                            "worker_busy": _spread(busy[k])}
                        for k in CONFIGS},
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "load_average": os.getloadavg()[0]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--schemes", default="ml-dsa-44,ml-dsa-65,ml-dsa-87,slh-dsa-sha2-128f")
    p.add_argument("--batches-of", default="512,4096", help="batch sizes, comma-separated")
    p.add_argument("--runs", type=int, default=9)
    p.add_argument("--batches", type=int, default=2, help="batches per measurement")
    p.add_argument("--min-seconds", type=float, default=0.5, help="per all-cores raw measurement")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = p.parse_args()
    prov = provenance.collect()
    cores = os.cpu_count() or 1
    schemes = args.schemes.split(",")
    backends = {name: CpuBackend(parallelism="process", shared_memory=name != "pipe") for name in CONFIGS}
    rows = []
    raw_pool = _raw_pool(cores, schemes)
    try:
        for backend in backends.values():
            backend.warm_up()
        for scheme_id in schemes:
            for size in (int(x) for x in args.batches_of.split(",")):
                rows.append(measure_row(backends, raw_pool, scheme_id, size, cores, args))
                medians = {k: v["per_second"]["median"] for k, v in rows[-1]["configs"].items()}
                print(json.dumps({"scheme": scheme_id, "batch": size, **medians}), flush=True)
                write(args.out, {"provenance": prov, "cores": cores, "machine": platform.machine(),
                                 "python": platform.python_version(), "batches_per_measurement": args.batches}, rows)
    finally:
        raw_pool.shutdown()
        for backend in backends.values():
            backend.close()
    print(f"wrote {args.out / 'process_chunks.md'}")
    return 0


def write(out: Path, meta: dict, rows: list[dict]) -> None:
    """Write ``process_chunks.json`` and ``.md`` in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "process_chunks.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")

    def cell(c: dict, key: str, fmt: str) -> str:
        s = c[key]
        return f"{s['median']:{fmt}} [{s['min']:{fmt}}–{s['max']:{fmt}}]"

    lines = [
        "# Process batches: shared memory or the pipe",
        "",
        provenance.markdown_line(meta["provenance"]),
        "",
        f"Written by `bench/process_chunks.py` on {meta['cores']} cores ({meta['machine']}, Python "
        f"{meta['python']}). The CPU backend on worker processes: `default` copies the batch into shared "
        "memory and each worker claims ranges of it until none is left (app/engine/backends/shared_columns.py), "
        "`pipe` sends chunks of about 100 ms of single-core work through the process pool's pipe (where "
        "/dev/shm has no room), cut by app/engine/backends/cpu.py's `chunk_bounds` (an equal share per worker "
        "for a batch of one round, the last round cut in two per worker for larger ones): `pipe chunks` is "
        "how many one batch makes, of `pipe chunk items` at most. Interleaved rounds "
        f"({meta['batches_per_measurement']} batches per measurement, each configuration first in turn), median "
        "[min–max] over rounds. `/ default` is the configuration's rate over the default's in the same round. "
        "`server CPU` is the CPU time of the server's process (all its threads) per batch: what it takes from "
        "the cores the workers verify on. `workers busy` is the time the pool's worker processes ran on a CPU "
        "(/proc/PID/schedstat) over wall time × workers; the rest they waited for work or for the batch's end. "
        "`all-cores raw` is the raw library loop in one process per core at "
        "once (bench/cpu_engine.py).",
        "",
        "| scheme | batch | pipe chunk items | pipe chunks | config | items /s | / default | / all-cores raw "
        "| server CPU ms/batch | workers busy | runs | measured (UTC) | load |",
        "|---|---:|---:|---:|---|---:|---|---|---|---|---:|---|---:|",
    ]
    for r in rows:
        for name, c in r["configs"].items():
            lines.append(
                f"| {r['scheme']} | {r['batch']} | {r['pipe_chunk_items']} | {r['pipe_chunks']} | {name} | "
                f"{c['per_second']['median']:,.0f} | "
                f"{cell(c, 'over_default', '.3f')} | {cell(c, 'over_all_cores_raw', '.2f')} | "
                f"{cell(c, 'server_cpu_ms_per_batch', '.0f')} | {cell(c, 'worker_busy', '.3f')} | {r['runs']} | "
                f"{r['time'][:16].replace('T', ' ')} | {r['load_average']:.1f} |")
    (out / "process_chunks.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
