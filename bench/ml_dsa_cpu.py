"""ML-DSA on the CPU: our own verify (app/engine/backends/native_ml_dsa.py) against OpenSSL, the
reference (through ``cryptography``), per core and served.

Two measurements, each in interleaved rounds (the order rotates each round; medians
reported), so that load from elsewhere on the shared machine falls on every mode alike:

- ``per_core``: µs of CPU time per verify on one thread (``time.thread_time``: the thread's
  own CPU time, so waiting for a core on the shared machine does not count), per parameter
  set ML-DSA-44/65/87, for each code path of ours this CPU runs (one chunk call of
  ``--items`` items, the GIL released) and for OpenSSL (one ``reference.verifier`` call per
  item, as the CPU backend's Python loop calls it).
- ``served``: ML-DSA-65 frames of ``--batch`` items (default 1024) sent to a real uvicorn
  server (CPU backend, every core; receipts off, as bench/ingest.py) through its TCP ZAP
  ingest, ``--in-flight`` (default 2) frames pipelined, every verdict of every reply checked
  against the expected one; against the OpenSSL loop in one process per core at once, summed
  (bench/cpu_engine.py's "all-cores raw"), every verdict checked too.  Once with every item
  valid, once with every second item mutated (kat.mutate: one bit of key, message or
  signature).  Targets (issue 50): served / OpenSSL all cores ≥ 1.3 (valid) and ≥ 0.9
  (half invalid).

Writes ``bench/results/ml_dsa_cpu.json`` and ``.md`` (``--out`` changes the folder).

    python bench/ml_dsa_cpu.py [--rounds 5] [--batch 1024] [--in-flight 2] [--workers 0]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from http_overhead import _free_port, start_server, stop_server, wait_ready

from app import __version__
from app.core.batch import Batch, Item
from app.core.schemes import SCHEMES
from app.engine.backends import native_ml_dsa
from app.engine.reference import kat, reference
from app.wire import zap
from bench import provenance
from zapverify import Client
from zapverify.ingest import connect

SETS = ("ml-dsa-44", "ml-dsa-65", "ml-dsa-87")
SERVED_SET = "ml-dsa-65"
TARGETS = {"valid": 1.3, "half_invalid": 0.9}


# ------------------------------------------------------------------ per core
def _columns(items: list[Item]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    n = len(items)
    pks = np.frombuffer(b"".join(i.public_key for i in items), np.uint8).reshape(n, -1)
    sigs = np.frombuffer(b"".join(i.signature for i in items), np.uint8).reshape(n, -1)
    msgs = np.frombuffer(b"".join(i.message for i in items) + b"\0", np.uint8)
    offsets = np.zeros(n + 1, np.uint64)
    offsets[1:] = np.cumsum([len(i.message) for i in items])
    return pks, sigs, msgs, offsets


def ours_us(verifier, level: int, cols, n: int, isa: int, min_seconds: float) -> float:
    """CPU µs per verify of our code on path ``isa``, chunk calls of ``n`` items on this thread."""
    done, t0 = 0, time.thread_time()
    while True:
        assert verifier.verdicts(level, *cols, b"", isa).all()
        done += n
        if time.thread_time() - t0 >= min_seconds:
            return 1e6 * (time.thread_time() - t0) / done


def openssl_us(scheme_id: str, items: list[Item], min_seconds: float) -> float:
    """CPU µs per verify of OpenSSL, one reference call per item on this thread."""
    fn = reference.verifier(SCHEMES[scheme_id])
    done, t0 = 0, time.thread_time()
    while True:
        for it in items:
            assert fn(it.public_key, it.message, it.signature, it.context)
        done += len(items)
        if time.thread_time() - t0 >= min_seconds:
            return 1e6 * (time.thread_time() - t0) / done


def interleaved(modes: dict, rounds: int, label: str = "") -> dict[str, list[float]]:
    """Each of ``modes`` (name → a call returning one measurement) once per round, the order
    rotating by one each round; the measurements per mode, a line printed per round."""
    got: dict[str, list[float]] = {m: [] for m in modes}
    order = list(modes)
    for r in range(rounds):
        k = r % len(order)
        for m in order[k:] + order[:k]:
            got[m].append(modes[m]())
        print(f"{label} round {r + 1}/{rounds}: " + "  ".join(f"{m} {got[m][-1]:,.1f}" for m in modes), flush=True)
    return got


def per_core_set(verifier, sid: str, rounds: int, n: int, min_seconds: float) -> dict:
    """One parameter set's row: every path of ours and OpenSSL, interleaved rounds."""
    items = kat.sign_items(sid, n, seed=50)
    cols, level = _columns(items), native_ml_dsa.LEVELS[sid]
    modes = {f"ours_{p}": (lambda isa=isa: ours_us(verifier, level, cols, n, isa, min_seconds))
             for isa, p in native_ml_dsa.ISA_NAMES.items() if isa <= verifier.best_isa}
    modes["openssl"] = lambda: openssl_us(sid, items, min_seconds)
    got = interleaved(modes, rounds, f"{sid} µs per verify:")
    med = {m: statistics.median(v) for m, v in got.items()}
    return {"us_per_verify": {m: {"median": round(med[m], 2), "rounds": [round(x, 2) for x in v]}
                              for m, v in got.items()},
            "openssl_over_ours": {m: round(med["openssl"] / med[m], 3) for m in med if m != "openssl"}}


def per_core(rounds: int, n: int, min_seconds: float) -> dict:
    verifier = native_ml_dsa.load()
    paths = [native_ml_dsa.ISA_NAMES[i] for i in range(verifier.best_isa, -1, -1)]
    return {"paths": paths, "items_per_call": n,
            "sets": {sid: per_core_set(verifier, sid, rounds, n, min_seconds) for sid in SETS}}


# ------------------------------------------------------------------ served
def _openssl_loop(job: tuple[str, list[Item], list[bool], float]) -> float:
    """In a worker process: OpenSSL over ``items`` in a loop for ``min_seconds``, every verdict
    checked against ``want``; items per second."""
    sid, items, want, min_seconds = job
    fn = reference.verifier(SCHEMES[sid])
    done, t0 = 0, time.perf_counter()
    while True:
        for it, ok in zip(items, want):
            if fn(it.public_key, it.message, it.signature, it.context) != ok:
                raise RuntimeError("OpenSSL gave a verdict other than the expected one")
        done += len(items)
        elapsed = time.perf_counter() - t0
        if elapsed >= min_seconds:
            return done / elapsed


def _warm(sid: str) -> int:
    reference.verifier(SCHEMES[sid])
    return os.getpid()


async def pipelined(port: int, frame: bytes, want: np.ndarray, n_frames: int, in_flight: int) -> float:
    """Items per second for ``n_frames`` copies of ``frame`` pipelined on one TCP connection,
    every reply's verdicts checked against ``want``."""
    async with connect("tcp", "127.0.0.1", port, max_in_flight=in_flight, timeout=120) as s:
        t0 = time.perf_counter()
        futures = [await s.submit(frame) for _ in range(n_frames)]
        for f in futures:
            r = await f
            if not np.array_equal(np.asarray(r.verdicts, dtype=bool), want):
                raise RuntimeError("the server's verdicts differ from the expected ones")
        return n_frames * len(want) / (time.perf_counter() - t0)


def served(rounds: int, batch_items: int, in_flight: int, frames: int, workers: int, min_seconds: float) -> dict:
    valid = kat.sign_items(SERVED_SET, batch_items, seed=65, msg_len=64)
    rng = random.Random(50)
    half = [kat.mutate(it, rng) if i % 2 else it for i, it in enumerate(valid)]
    want_half = reference.verifier(SCHEMES[SERVED_SET])
    sets = {"valid": (valid, [True] * len(valid)),
            "half_invalid": (half, [want_half(i.public_key, i.message, i.signature) for i in half])}
    assert sets["half_invalid"][1] == [i % 2 == 0 for i in range(batch_items)]
    frames_of = {}
    for name, (items, _) in sets.items():
        b = Batch.from_items(SCHEMES[SERVED_SET], [i.public_key for i in items], [i.message for i in items],
                             [i.signature for i in items])
        frames_of[name] = bytes(zap.encode_request(b))
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
    list(pool.map(_warm, [SERVED_SET] * workers))
    port, ingest_port = _free_port(), _free_port()
    log = tempfile.TemporaryFile()
    data = tempfile.TemporaryDirectory()
    proc = start_server(port, workers, log, {"ZAPVERIFY_INGEST_TCP_PORT": str(ingest_port),
                                             "ZAPVERIFY_RECEIPTS": "false", "ZAPVERIFY_DATA_DIR": data.name})
    modes = {}
    for name, (items, want) in sets.items():
        w = np.array(want, dtype=bool)
        modes[f"zap_{name}"] = (lambda f=frames_of[name], w=w:
                                asyncio.run(pipelined(ingest_port, f, w, frames, in_flight)))
        modes[f"openssl_all_cores_{name}"] = (lambda items=items, want=want: sum(pool.map(
            _openssl_loop, [(SERVED_SET, items[:128], want[:128], min_seconds)] * workers)))
    try:
        with Client(f"http://127.0.0.1:{port}", timeout=300) as client:
            wait_ready(client, proc)
        for fn in modes.values():  # warm: pools started, libraries loaded, connections opened once
            fn()
        got = interleaved(modes, rounds, "served items/s:")
    except Exception:
        log.seek(0)
        sys.stderr.write(log.read()[-4000:].decode(errors="replace"))
        raise
    finally:
        stop_server(proc)
        pool.shutdown()
        data.cleanup()
    med = {m: statistics.median(v) for m, v in got.items()}
    ratios = {name: med[f"zap_{name}"] / med[f"openssl_all_cores_{name}"] for name in sets}
    return {"scheme": SERVED_SET, "batch": batch_items, "in_flight": in_flight, "frames_per_round": frames,
            "message_bytes": 64, "frame_bytes": len(frames_of["valid"]), "cpu_workers": workers,
            "items_per_second": {m: {"median": round(med[m], 1), "rounds": [round(x, 1) for x in v]}
                                 for m, v in got.items()},
            "ratios": {k: round(v, 3) for k, v in ratios.items()},
            "targets": TARGETS, "targets_met": {k: ratios[k] >= t for k, t in TARGETS.items()}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--items", type=int, default=64, help="items per chunk call (per-core part)")
    ap.add_argument("--min-seconds", type=float, default=0.5, help="per mode per round")
    ap.add_argument("--batch", type=int, default=1024, help="items per served frame")
    ap.add_argument("--in-flight", type=int, default=2)
    ap.add_argument("--frames", type=int, default=8, help="frames per served mode per round")
    ap.add_argument("--workers", type=int, default=0, help="server CPU workers and OpenSSL processes; 0 = every core")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args(argv)
    prov = provenance.collect()
    workers = args.workers or os.cpu_count() or 1
    load_before = os.getloadavg()
    result = {
        "benchmark": "ml_dsa_cpu", "provenance": prov, "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "zapverify": __version__, "command": " ".join(["bench/ml_dsa_cpu.py", *(argv or sys.argv[1:])]),
        "rounds": args.rounds, "min_seconds": args.min_seconds,
        "per_core": per_core(args.rounds, args.items, args.min_seconds),
        "served": served(args.rounds, args.batch, args.in_flight, args.frames, workers, args.min_seconds),
    }
    result["host"] = {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version(),
                      "loadavg_before": load_before, "loadavg_after": os.getloadavg()}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ml_dsa_cpu.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / "ml_dsa_cpu.md").write_text(render_md(result))
    print(render_md(result))
    return 0


def render_md(r: dict) -> str:
    pc, sv, h = r["per_core"], r["served"], r["host"]
    paths = [f"ours_{p}" for p in pc["paths"]]
    lines = [
        "# ML-DSA on the CPU: our verify (native_ml_dsa) vs OpenSSL",
        "",
        provenance.markdown_line(r["provenance"]),
        "",
        f"Written by `{r['command']}` on {r['when']} (zapverify {r['zapverify']}). Medians of {r['rounds']} "
        f"interleaved rounds. Host: {h['machine']}, {h['cpus']} CPUs, Python {h['python']}; load average "
        f"{h['loadavg_before'][0]:.2f} before, {h['loadavg_after'][0]:.2f} after (the machine is shared: the "
        "ratios are what this measures).",
        "",
        "## Per core",
        "",
        f"CPU µs per verify on one thread (its own CPU time): ours in chunk calls of {pc['items_per_call']} items "
        "(each code path this "
        "CPU runs), OpenSSL 3 (`cryptography`) one reference call per item. `× OpenSSL` is OpenSSL's time over "
        "ours.",
        "",
        "| set | " + " | ".join(paths) + " | OpenSSL | " + " | ".join(f"{p} × OpenSSL" for p in paths) + " |",
        "|---|" + "---:|" * (2 * len(paths) + 1),
    ]
    for sid, row in pc["sets"].items():
        us = row["us_per_verify"]
        lines.append(f"| {sid} | " + " | ".join(f"{us[p]['median']:.1f}" for p in paths)
                     + f" | {us['openssl']['median']:.1f} | "
                     + " | ".join(f"{row['openssl_over_ours'][p]:.2f}" for p in paths) + " |")
    ips = sv["items_per_second"]
    lines += [
        "",
        "## Served through ZAP",
        "",
        f"{sv['scheme']}, frames of {sv['batch']} items ({sv['message_bytes']}-byte messages, "
        f"{sv['frame_bytes']:,} B) to a uvicorn server on loopback (CPU backend, {sv['cpu_workers']} workers, "
        f"receipts off) through its TCP ZAP ingest, {sv['in_flight']} frames in flight, {sv['frames_per_round']} "
        "frames per round, every verdict checked; against the OpenSSL loop in "
        f"{sv['cpu_workers']} processes at once, summed, every verdict checked. The client shares the CPUs "
        "with the server.",
        "",
        "| items | served items/s | OpenSSL all cores items/s | served / OpenSSL | target | met |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for name in ("valid", "half_invalid"):
        lines.append(f"| {name.replace('_', ' ')} | {ips[f'zap_{name}']['median']:,.0f} | "
                     f"{ips[f'openssl_all_cores_{name}']['median']:,.0f} | {sv['ratios'][name]:.2f} | "
                     f"{sv['targets'][name]:.1f} | {'yes' if sv['targets_met'][name] else 'NO'} |")
    lines += ["", "Per round (items/s): " + "; ".join(
        f"{m}: {', '.join(f'{x:,.0f}' for x in v['rounds'])}" for m, v in ips.items())]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
