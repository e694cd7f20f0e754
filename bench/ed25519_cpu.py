#!/usr/bin/env python3
"""Ed25519 on the CPU: our own verify against libsodium and ed25519-dalek, per core and served.

Two parts, each measured in interleaved rounds (the order rotates every round) and reported
as medians, so that load from elsewhere on the shared machine falls on every path alike:

- ``per_core``: microseconds per verify on one thread (its CPU time, ``time.thread_time``, so
  that time the shared machine gives to others does not count), over the same ``--items``
  valid items (64-byte messages, a key each), every verdict checked:
    own        app/engine/backends/ed25519_cpu.cpp's chunk entry point (the CPU backend's path),
               in the build the backend loads and in the portable build;
    own_each   the same code one item per call (its own inversion, no sharing);
    libsodium  crypto_sign_ed25519_verify_detached (PyNaCl's libsodium), one call per item
               from a C loop over the same columns;
    dalek      ed25519-dalek ``verify_strict`` through solders' ``Signature.verify`` in a
               Python loop (objects built beforehand), where solders is installed.
  Cycles per verify are the microseconds times the CPU's clock as /proc/cpuinfo gives it (the
  "model name" GHz where it names one, else "cpu MHz", which a virtual machine reports as its
  nominal clock): an estimate, the clock under load varies.
- ``served``: items per second through the server's TCP ZAP ingest (a uvicorn started here,
  CPU backend on every core, receipts off), batches of ``--batch`` items, ``--in-flight`` frames
  pipelined, every verdict of every reply checked (admission's wait bound off: the two frames in
  flight are the offered load, and a busy shared host's measured rates would shed them);
  against an all-cores loop of dalek ``verify_strict`` (one process per core, the same items,
  summed), for all-valid batches and for half-invalid ones (every other item with one bit
  flipped).  With ``--libsodium`` a second server with ``ZAPVERIFY_ED25519_CPU=0``
  (libsodium's verify in the native loop) runs too.

Writes ``bench/results/ed25519_cpu.json`` and ``.md`` (``--out`` changes the folder).

    python bench/ed25519_cpu.py [--items 1024] [--batch 4096] [--rounds 5] [--libsodium]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import platform
import random
import re
import sys
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app import __version__
from app.core.batch import Batch
from app.core.schemes import SCHEMES
from app.engine.backends import ed25519_cpu, native_build
from app.engine.reference import kat
from app.wire import zap
from bench import harness, provenance

try:
    from solders.pubkey import Pubkey
    from solders.signature import Signature
except ImportError:  # dalek's rows are left out, and the report says so
    Pubkey = Signature = None


def items_for(n: int, seed: int, half_invalid: bool = False) -> tuple[list[kat.Item], list[bool]]:
    """``n`` signed items (64-byte messages) and their verdicts; with ``half_invalid`` every
    other item has one bit of its key, message or signature flipped (invalid)."""
    items = kat.sign_items("ed25519", n, seed=seed, msg_len=64)
    if not half_invalid:
        return items, [True] * n
    rng = random.Random(seed)
    items = [kat.mutate(it, rng) if i % 2 else it for i, it in enumerate(items)]
    return items, [i % 2 == 0 for i in range(n)]


def columns(items: list[kat.Item]) -> tuple[Batch, tuple, tuple]:
    b = Batch.from_items(SCHEMES["ed25519"], [i.public_key for i in items], [i.message for i in items],
                         [i.signature for i in items])
    _, alive, cols = native_build.columns(b.pks, b.sigs, b.msgs, b.offsets)
    return b, alive, cols


def dalek_objects(items: list[kat.Item]) -> list:
    return [(Signature.from_bytes(it.signature), Pubkey.from_bytes(it.public_key), it.message) for it in items]


def dalek_loop(objs: list) -> list[bool]:
    return [sig.verify(pk, msg) for sig, pk, msg in objs]


# ------------------------------------------------------------------ per core
def per_core(n: int, rounds: int) -> dict:
    import nacl._sodium

    items, want = items_for(n, seed=50)
    _, alive, cols = columns(items)
    own = ed25519_cpu.load()
    portable = ed25519_cpu.load("ed25519-cpu-portable")
    if own is None or portable is None:
        raise RuntimeError("the own Ed25519 verify does not build here (see the log)")
    sodium = ctypes.cast(ctypes.CDLL(nacl._sodium.__file__).crypto_sign_ed25519_verify_detached, ctypes.c_void_p).value
    paths = {
        "own": lambda: own.verify_columns(cols).tolist(),
        "own_portable": lambda: portable.verify_columns(cols).tolist(),
        "own_each": lambda: own.verify_each(own.verify_address, cols).tolist(),
        "libsodium": lambda: own.verify_each(sodium, cols).tolist(),
    }
    if Signature is not None:
        objs = dalek_objects(items)
        paths["dalek"] = lambda: dalek_loop(objs)
    def timed(p: str) -> float:
        t0 = time.thread_time()
        got = paths[p]()
        per_verify = (time.thread_time() - t0) / n * 1e6
        if [bool(v) for v in got] != want:
            raise RuntimeError(f"{p}: wrong verdicts")
        return per_verify

    us = harness.interleaved({p: lambda p=p: timed(p) for p in paths}, rounds, "per core, ", unit="{:.1f} µs")
    med = harness.medians(us)
    ghz = nominal_ghz()
    return {"items": n, "rounds": rounds, "sha512": own.sha512, "path": own.path, "portable_path": portable.path,
            "nominal_ghz": ghz,
            "us_per_verify": {p: {"median": med[p], "rounds": v} for p, v in us.items()},
            "cycles_per_verify": {p: round(med[p] * ghz * 1e3) for p in med} if ghz else None,
            "speedup_over_libsodium": {p: med["libsodium"] / med[p] for p in med},
            "speedup_over_dalek": {p: med["dalek"] / med[p] for p in med} if "dalek" in med else None}


def nominal_ghz() -> float | None:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    if m := re.search(r"@ ([0-9.]+)GHz", text):
        return float(m.group(1))
    m = re.search(r"cpu MHz\s*:\s*([0-9.]+)", text)
    return round(float(m.group(1)) / 1000, 3) if m else None


# ------------------------------------------------------------------ served
def dalek_prepare(pk: bytes, msg: bytes, sig: bytes) -> tuple:
    """In a worker process, before timing: dalek's objects for one item."""
    return Signature.from_bytes(sig), Pubkey.from_bytes(pk), msg


def dalek_verify(sig, pk, msg: bytes) -> bool:
    return sig.verify(pk, msg)


def served(batch: int, rounds: int, reps: int, in_flight: int, with_libsodium: bool) -> dict:
    cores = os.cpu_count() or 1
    sets = {}
    for name, half in (("valid", False), ("half_invalid", True)):
        items, want = items_for(batch, seed=60 + half, half_invalid=half)
        b = Batch.from_items(SCHEMES["ed25519"], [i.public_key for i in items], [i.message for i in items],
                             [i.signature for i in items])
        sets[name] = (items, np.array(want, dtype=np.uint8), bytes(zap.encode_request(b)))
    servers = {"zap": {}} | ({"zap_libsodium": {ed25519_cpu.ENV_SWITCH: "0"}} if with_libsodium else {})
    with ExitStack() as stack:
        started = {}
        for name, env in servers.items():
            # two frames in flight are the load; the wait bound would shed on a busy host
            started[name] = stack.enter_context(harness.serve(cores, {"ZAPVERIFY_RECEIPTS": "false",
                                                               "ZAPVERIFY_ADMISSION_MAX_WAIT_SECONDS": "0", **env},
                                                       tail=3000))
        modes = {}
        for set_name, (_, want, frame) in sets.items():
            for name in servers:
                modes[f"{name}/{set_name}"] = (lambda sv=started[name], f=frame, w=want:
                                               harness.send_frames(sv, f, reps, in_flight, w))
        if Signature is not None:
            # dalek's objects built in each process beforehand; every process over all the items reps times
            dalek = stack.enter_context(harness.PeerLoop(cores, dalek_verify, {
                set_name: ([(i.public_key, i.message, i.signature) for i in items], [bool(v) for v in want])
                for set_name, (items, want, _) in sets.items()}, prepare=dalek_prepare))
            for set_name in sets:
                modes[f"dalek/{set_name}"] = lambda s=set_name: dalek.rate(s, cores * reps * batch)
        rates = harness.interleaved(modes, rounds, "served, ", warm=True)
    med = harness.medians(rates)
    ratios = {}
    for set_name in sets:
        if f"dalek/{set_name}" in med:
            for name in servers:
                ratios[f"{name}/{set_name} ÷ dalek all cores"] = med[f"{name}/{set_name}"] / med[f"dalek/{set_name}"]
    return {"batch": batch, "in_flight": in_flight, "reps_per_round": reps, "rounds": rounds, "cores": cores,
            "items_per_second": {m: {"median": med[m], "rounds": v} for m, v in rates.items()}, "ratios": ratios}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--items", type=int, default=1024, help="items of the per-core part")
    ap.add_argument("--batch", type=int, default=4096, help="items per served batch")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=3, help="served frames (or dalek passes) per mode per round")
    ap.add_argument("--in-flight", type=int, default=2)
    ap.add_argument("--libsodium", action="store_true", help="also serve through a server on libsodium's verify")
    ap.add_argument("--skip-served", action="store_true")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args(argv)
    prov = provenance.collect()
    load_before = os.getloadavg()
    result = {"benchmark": "ed25519_cpu", "provenance": prov, "when": datetime.now(UTC).isoformat(timespec="seconds"),
              "zapverify": __version__, "solders": _solders_version(),
              "host": {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version(),
                       "cpu": _cpu_model(), "loadavg_before": load_before},
              "per_core": per_core(args.items, args.rounds)}
    if not args.skip_served:
        result["served"] = served(args.batch, args.rounds, args.reps, args.in_flight, args.libsodium)
    result["host"]["loadavg_after"] = os.getloadavg()
    harness.write_results(args.out, "ed25519_cpu", result, render_md(result))
    return 0


def _solders_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("solders")
    except Exception:
        return None


def _cpu_model() -> str:
    info = Path("/proc/cpuinfo")
    m = re.search(r"model name\s*:\s*(.*)", info.read_text()) if info.exists() else None
    return m.group(1).strip() if m else platform.processor()


def render_md(r: dict) -> str:
    pc, h = r["per_core"], r["host"]
    names = {"own": "own, chunk entry (the backend's path)", "own_portable": "own, portable build, chunk entry",
             "own_each": "own, one item per call", "libsodium": "libsodium crypto_sign_ed25519_verify_detached",
             "dalek": "ed25519-dalek verify_strict (solders, Python loop)"}
    lines = ["# Ed25519 on the CPU: own verify vs libsodium and ed25519-dalek", "",
             provenance.markdown_line(r["provenance"]), "",
             f"Written by `bench/ed25519_cpu.py` on {r['when']} (zapverify {r['zapverify']}, solders "
             f"{r['solders'] or 'not installed: no dalek rows'}). Host: {h['cpu']}, {h['cpus']} CPUs, Python "
             f"{h['python']}; load average {h['loadavg_before'][0]:.2f} before, {h['loadavg_after'][0]:.2f} after "
             "(a shared machine: the ratios, measured interleaved, are what this reports; absolute rates are noisy).",
             "", f"## Per core ({pc['items']} valid items, 64-byte messages, median of {pc['rounds']} interleaved "
             f"rounds, every verdict checked)", "",
             f"Own code: path `{pc['path']}` (portable build: `{pc['portable_path']}`), SHA-512 `{pc['sha512']}`. "
             + (f"Cycles = µs × the {pc['nominal_ghz']} GHz /proc/cpuinfo gives (an estimate)."
                if pc["nominal_ghz"] else ""), "",
             "| path | µs / verify | cycles / verify | × libsodium | × dalek |", "|---|---:|---:|---:|---:|"]
    for p, v in pc["us_per_verify"].items():
        cyc = f"{pc['cycles_per_verify'][p]:,}" if pc["cycles_per_verify"] else "–"
        dal = f"{pc['speedup_over_dalek'][p]:.2f}" if pc["speedup_over_dalek"] else "–"
        lines.append(f"| {names[p]} | {v['median']:.1f} | {cyc} | {pc['speedup_over_libsodium'][p]:.2f} | {dal} |")
    if "served" in r:
        s = r["served"]
        lines += ["", f"## Served through ZAP (TCP ingest, batches of {s['batch']}, {s['in_flight']} in flight, "
                      f"CPU backend on {s['cores']} cores, every verdict checked; median of {s['rounds']} interleaved "
                      f"rounds of {s['reps_per_round']} frames)", "",
                  "| mode | items/s (median) | per round |", "|---|---:|---|"]
        for m, v in s["items_per_second"].items():
            lines.append(f"| {m} | {v['median']:,.0f} | {', '.join(f'{x:,.0f}' for x in v['rounds'])} |")
        lines += ["", "| ratio | measured |", "|---|---:|", *(f"| {k} | {v:.2f} |" for k, v in s["ratios"].items())]
        lines += ["", "`zap` serves our own verify; `zap_libsodium` (where run) the same server on libsodium's "
                      "(`ZAPVERIFY_ED25519_CPU=0`); `dalek` is one process per core each looping over the same "
                      "items with solders' `Signature.verify`, summed."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
