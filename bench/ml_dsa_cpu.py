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
import os
import platform
import random
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app import __version__
from app.core.batch import Batch, Item
from app.core.schemes import SCHEMES
from app.engine.backends import native_ml_dsa
from app.engine.reference import kat, reference
from app.wire import zap
from bench import harness, provenance

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


def per_core_set(verifier, sid: str, rounds: int, n: int, min_seconds: float) -> dict:
    """One parameter set's row: every path of ours and OpenSSL, interleaved rounds."""
    items = kat.sign_items(sid, n, seed=50)
    cols, level = _columns(items), native_ml_dsa.LEVELS[sid]
    modes = {f"ours_{p}": (lambda isa=isa: ours_us(verifier, level, cols, n, isa, min_seconds))
             for isa, p in native_ml_dsa.ISA_NAMES.items() if isa <= verifier.best_isa}
    modes["openssl"] = lambda: openssl_us(sid, items, min_seconds)
    got = harness.interleaved(modes, rounds, f"{sid} µs per verify: ", unit="{:,.1f}")
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
_OPENSSL: dict[str, object] = {}


def openssl_verify(pk: bytes, msg: bytes, sig: bytes, ctx: bytes) -> bool:
    """In a worker process: OpenSSL's verify of one served-set item (the verifier made once)."""
    fn = _OPENSSL.get(SERVED_SET) or _OPENSSL.setdefault(SERVED_SET, reference.verifier(SCHEMES[SERVED_SET]))
    return fn(pk, msg, sig, ctx)  # type: ignore[operator]


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
    # the OpenSSL loop: each process over the first 128 items again and again for min_seconds
    peer_sets = {name: ([(i.public_key, i.message, i.signature, i.context) for i in items[:128]], want[:128])
                 for name, (items, want) in sets.items()}
    with harness.PeerLoop(workers, openssl_verify, peer_sets) as peer, \
            harness.serve(workers, {"ZAPVERIFY_RECEIPTS": "false"}) as server:
        modes = {}
        for name, (_, want) in sets.items():
            modes[f"zap_{name}"] = (lambda f=frames_of[name], w=want:
                                    harness.send_frames(server, f, frames, in_flight, w))
            modes[f"openssl_all_cores_{name}"] = (lambda nm=name, k=len(peer_sets[name][0]):
                                                  peer.rate(nm, k * workers, min_seconds))
        got = harness.interleaved(modes, rounds, "served items/s: ", unit="{:,.1f}", warm=True)
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
    harness.write_results(args.out, "ml_dsa_cpu", result, render_md(result), indent=1)
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
