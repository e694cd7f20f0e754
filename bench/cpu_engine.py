#!/usr/bin/env python3
"""CPU engine benchmark: raw single-thread library rate vs the engine on every core.

For every scheme, side by side and interleaved (``--runs`` rounds of: raw, 2-thread raw,
all-cores raw, the engine, the engine on the other pool kind), so a noisy neighbour hits
every configuration alike:
  raw      the reference library called in a plain loop on one thread (verifies/s);
  engine   Engine.run on a 4096-item batch with the CPU backend on all cores, on the
           pool kind its fixed policy names (app/engine/backends/cpu_policy.py: threads for
           the native loops, processes for the Python loop), and with the other kind
           forced, for comparison;
  ratio    engine / (cores × raw) per round: 1.0 means every core runs the library at full
           speed.  Reported as the median over rounds with the min–max spread.
  all-cores raw  the raw loop in `cores` separate processes at once, summed: what this
           machine gives when every core is busy (no GIL shared, no engine), against which
           `engine / all-cores raw` shows the engine's own cost apart from the machine's.

Writes bench/results/cpu_engine.json and bench/results/cpu_engine.md.
Usage: bench/cpu_engine.py [--batch 4096] [--schemes ed25519,secp256k1,...] [--runs 3] [--min-seconds 0.5]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.core.batch import Batch
from app.core.schemes import SCHEMES
from app.engine.backends.cpu import CpuBackend
from app.engine.reference import kat, reference
from app.engine.verify.engine import Engine, EngineConfig
from bench import provenance

DISTINCT = {"slh-dsa": 2}  # SLH-DSA "s" signing costs up to a second: sign few, tile them


def items_for(scheme_id: str, n: int) -> list[kat.Item]:
    distinct = min(n, DISTINCT.get(SCHEMES[scheme_id].family, 64))
    signed = kat.sign_items(scheme_id, distinct, seed=99, msg_len=64)
    return [signed[i % distinct] for i in range(n)]


def batch_for(scheme_id: str, items: list[kat.Item]) -> Batch:
    """The columnar batch of ``items`` (of :func:`items_for`)."""
    return Batch.from_items(SCHEMES[scheme_id], [i.public_key for i in items], [i.message for i in items],
                            [i.signature for i in items])


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


def _raw_in_worker(job: tuple[str, list, float]) -> float:
    return raw_rate(*job)


def all_cores_raw(pool, scheme_id: str, items: list[kat.Item], cores: int, min_seconds: float) -> float:
    """The raw loop in ``cores`` worker processes at once (``pool`` holds that many, warm),
    summed: the machine's own rate with every core busy."""
    jobs = [(scheme_id, items[:64], min_seconds)] * cores
    return sum(pool.map(_raw_in_worker, jobs))


def _warm_worker(scheme_ids: list[str]) -> int:
    for sid in scheme_ids:
        reference.verifier(SCHEMES[sid])
    return os.getpid()


def _raw_pool(cores: int, scheme_ids: list[str]) -> ProcessPoolExecutor:
    """``cores`` spawned workers with the schemes' libraries imported.  They find
    _raw_in_worker by importing this file by name, so its folder is on the path they start
    with (a spawned worker takes its parent's sys.path)."""
    here = str(Path(__file__).resolve().parent)
    sys.path.insert(0, here)
    try:
        pool = ProcessPoolExecutor(cores, mp_context=multiprocessing.get_context("spawn"))
        list(pool.map(_warm_worker, [scheme_ids] * cores))  # every worker started here
    finally:
        sys.path.remove(here)
    return pool


def engine_rate(engine: Engine, batch: Batch, repeats: int) -> float:
    engine.run(batch)  # warm: pools started, libraries imported in workers
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        res = engine.run(batch)
        times.append(time.perf_counter() - t0)
        assert res.valid == len(batch)
    return len(batch) / statistics.median(times)


def _spread(xs: list[float]) -> dict:
    return {"median": round(statistics.median(xs), 3), "min": round(min(xs), 3), "max": round(max(xs), 3),
            "runs": [round(x, 3) for x in xs]}


def _median(row: dict, key: str) -> str:
    return f"{row[key]['median']:.2f}" if key in row else "–"  # rows from before the column: blank


def _as_rounds(row: dict, meta: dict) -> dict:
    """A row of an older result file (one round, plain numbers) in this file's form, stamped
    with that file's time and load, so ``--update`` keeps it for what it is."""
    if "time" in row:
        return row
    out = {k: ({"median": v, "min": v, "max": v, "runs": [v]} if isinstance(v, float) else v)
           for k, v in row.items()}
    load = meta.get("load_average", [0.0])
    return {**out, "native_loop": False, "runs": 1, "time": meta["time"], "load_average": load[0]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=4096)
    p.add_argument("--schemes", default=",".join(SCHEMES))
    p.add_argument("--runs", type=int, default=3, help="interleaved rounds per scheme (median reported)")
    p.add_argument("--min-seconds", type=float, default=0.5)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    p.add_argument("--update", action="store_true",
                   help="replace only the measured schemes' rows of an existing cpu_engine.json, keep the rest")
    args = p.parse_args()
    prov = provenance.collect()
    cores = os.cpu_count() or 1
    engines = {kind: Engine(EngineConfig(backend="cpu", cpu_parallelism=kind))
               for kind in ("auto", "thread", "process")}
    load_start = os.getloadavg()
    auto = engines["auto"].cpu
    assert isinstance(auto, CpuBackend)
    for eng in engines.values():
        eng.cpu.warm_up()  # what a server's start-up does: native loops loaded, pools started
    prior: list[dict] = []
    if args.update and (args.out / "cpu_engine.json").is_file():
        old = json.loads((args.out / "cpu_engine.json").read_text())
        prior = [_as_rounds(r, old["meta"]) for r in old["rows"]]
    rows: list[dict] = []
    raw_pool = _raw_pool(cores, args.schemes.split(","))
    try:
        for scheme_id in args.schemes.split(","):
            scheme = SCHEMES[scheme_id]
            items = items_for(scheme_id, args.batch)
            batch = batch_for(scheme_id, items)
            repeats = 3 if raw_rate(scheme_id, items, 0.05) * cores > args.batch else 1
            picked = auto.pool_kind(scheme)  # the fixed policy's (app/engine/backends/cpu_policy.py)
            other = "thread" if picked == "process" else "process"
            for kind in ("auto", other):
                engine_rate(engines[kind], batch, 1)  # pools started, chunk size measured
            raws, gils, alls, rates = [], [], [], {"auto": [], other: []}
            for _ in range(args.runs):
                raws.append(raw_rate(scheme_id, items, args.min_seconds))
                gils.append(gil_speedup(scheme_id, items, args.min_seconds / 2))
                alls.append(all_cores_raw(raw_pool, scheme_id, items, cores, args.min_seconds))
                for kind in rates:
                    rates[kind].append(engine_rate(engines[kind], batch, repeats))
            rates[picked] = rates.pop("auto")
            load_row = os.getloadavg()
            ratios = {kind: [r / (cores * raw) for r, raw in zip(rs, raws)] for kind, rs in rates.items()}
            machine = [r / a for r, a in zip(rates[picked], alls)]
            best = "thread" if statistics.median(rates["thread"]) >= statistics.median(rates["process"]) else "process"
            row = {"scheme": scheme_id, "raw_per_second": _spread(raws), "two_thread_speedup": _spread(gils),
                   "native_loop": engines["thread"].cpu.native_family(scheme),
                   "releases_gil": reference.RELEASES_GIL[scheme.family], "pool": picked,
                   "engine_per_second": _spread(rates[picked]),
                   "thread_per_second": _spread(rates["thread"]), "process_per_second": _spread(rates["process"]),
                   "ratio": _spread(ratios[picked]), "best_ratio": _spread(ratios[best]), "runs": args.runs,
                   "all_cores_raw_per_second": _spread(alls),
                   "all_cores_speedup": _spread([a / r for a, r in zip(alls, raws)]),
                   "engine_over_all_cores_raw": _spread(machine),
                   "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "load_average": load_row[0],
                   "commit": prov["commit"]}
            rows.append(row)
            print(json.dumps({k: (v["median"] if isinstance(v, dict) else v) for k, v in row.items()}), flush=True)
            # Written as each row is measured: a run cut short keeps the rows it finished.
            meta = {"provenance": prov, "cores": cores, "batch": args.batch, "runs": args.runs,
                    "machine": platform.machine(),
                    "python": platform.python_version(), "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "load_average_start": load_start, "load_average": os.getloadavg()}
            write(args.out, meta, _merged(prior, rows))
    finally:
        raw_pool.shutdown()
        for eng in engines.values():
            eng.close()
    print(f"wrote {args.out / 'cpu_engine.md'}")
    return 0


def _merged(prior: list[dict], rows: list[dict]) -> list[dict]:
    """``prior`` rows (an ``--update``'s older file) with this run's rows in their place, in scheme order."""
    kept = {r["scheme"]: r for r in prior}
    kept.update({r["scheme"]: r for r in rows})
    return [kept[s] for s in SCHEMES if s in kept]


def _commit(row: dict) -> str:
    """The commit a row was measured at (rows kept by ``--update`` from before it was recorded: –)."""
    return f"`{row['commit'][:12]}`" if row.get("commit") else "–"


def write(out: Path, meta: dict, rows: list[dict]) -> None:
    """Write ``cpu_engine.json`` and ``cpu_engine.md`` in ``out`` from ``rows``."""
    cores = meta["cores"]
    out.mkdir(parents=True, exist_ok=True)
    (out / "cpu_engine.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    below = [r["scheme"] for r in rows if r["ratio"]["median"] < 0.9]
    lines = [
        "# CPU engine vs raw library loop",
        "",
        provenance.markdown_line(meta["provenance"]),
        "",
        f"Written by `bench/cpu_engine.py` at {meta['time']} on {cores} cores ({meta['machine']}, Python "
        f"{meta['python']}), batch {meta['batch']}, interleaved rounds per scheme (`runs`); `load` is the "
        "1-minute load average when the scheme's row was measured (rows may come from separate runs, "
        "`--update`; each row's rounds are interleaved among themselves).",
        "ratio = engine / (cores × raw) per round, median [min–max]; target ≥ 0.9. Rates are medians. "
        "`pool` is the kind the engine (`auto`) runs on, its fixed policy's (app/engine/backends/cpu_policy.py): "
        "threads for the native loops, processes for the Python loop; its column is the engine's rate, the other "
        "column the other kind forced.",
        "`native` marks schemes verified in the native chunk loop (app/engine/backends/native_loops.cpp); "
        "raw is always the Python loop over the reference library.",
        "",
        "`2-thread speedup` runs the raw loop on two threads against one: near 2 where the",
        "library releases the GIL, near 1 where it holds it (reference.RELEASES_GIL follows it).",
        f"`all-cores speedup` runs the raw loop in {cores} processes at once against one thread: what the "
        "machine itself gives with every core busy (below the core count where the cores are not wholly ours: "
        "a shared host, a lower all-core clock). `engine / all-cores` is the engine's rate over that, per round.",
        "",
        f"Below target: {', '.join(below) if below else 'none'}.",
        "",
        "| scheme | native | raw 1-thread /s | 2-thread speedup | engine /s | pool | threads /s | processes /s "
        "| ratio [min–max] | best ratio | all-cores speedup | engine / all-cores | runs | measured (UTC) | load "
        "| commit |",
        "|---|---|---:|---:|---:|---|---:|---:|---|---:|---:|---:|---:|---|---:|---|",
    ]
    for r in rows:
        q = r["ratio"]
        lines.append(f"| {r['scheme']} | {'yes' if r['native_loop'] else 'no'} | "
                     f"{r['raw_per_second']['median']:,.0f} | "
                     f"{r['two_thread_speedup']['median']:.2f} | {r['engine_per_second']['median']:,.0f} | "
                     f"{r['pool']} | {r['thread_per_second']['median']:,.0f} | "
                     f"{r['process_per_second']['median']:,.0f} | {q['median']:.2f} [{q['min']:.2f}–{q['max']:.2f}] | "
                     f"{r['best_ratio']['median']:.2f} | {_median(r, 'all_cores_speedup')} | "
                     f"{_median(r, 'engine_over_all_cores_raw')} | {r['runs']} | {r['time'][:16].replace('T', ' ')} | "
                     f"{r['load_average']:.1f} | {_commit(r)} |")
    if any(r["runs"] < 3 for r in rows):
        lines += ["", "Rows with 1 run come from an earlier result file (one round per configuration, before "
                  "this script interleaved rounds), kept by `--update` because there was no time to re-measure them."]
    (out / "cpu_engine.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
