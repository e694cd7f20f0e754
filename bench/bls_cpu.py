#!/usr/bin/env python3
"""BLS12-381 on the CPU backend (blst, app/engine/backends/native_bls.py) against blst itself.

Two parts, each measured side by side in one run, in interleaved rounds whose order rotates,
medians reported (the machine is shared: the ratios are what this measures):

  serving     batches of ``--batch`` items (default 256, distinct messages, 32 per key) as
              ZAP frames to a real server's TCP ingest port on loopback, ``--in-flight``
              (default 2) frames pipelined, every verdict checked against arkworks' (the
              second opinion); against an all-cores loop of blst single verifies: blspy's
              ``PopSchemeMPL.verify`` on keys and signatures decoded from bytes
              (``G1Element.from_bytes``, ``G2Element.from_bytes``: their subgroup checks), in one
              process per core, each given an equal share of the same items at once.  Two
              item sets: all valid, and half invalid (``--invalid-kinds``: by default every
              kind of :data:`app.engine.reference.kat.BLS_INVALID_KINDS` in turn).
  aggregates  one core: FastAggregateVerify of ``--fast-keys`` (default 512) keys and
              AggregateVerify of ``--aggregate-messages`` (default 64) distinct messages,
              through ``CpuBackend(workers=1).run`` (verdict and leaf hash) against blspy on
              the same bytes (keys and signature decoded from bytes, then
              ``PopSchemeMPL.fast_aggregate_verify`` / ``aggregate_verify``).

Writes bench/results/bls_cpu.json and .md.  Targets (issue 49): serving all valid ≥ 1.6×,
half invalid ≥ 0.9× the blst loop; each aggregate ≥ 0.9× blst.

    python bench/bls_cpu.py [--rounds 5] [--frames 6] [--batch 256] [--skip-serving] [--skip-aggregates]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bls_batch import signed, with_invalid  # noqa: E402

from app.core.batch import AggregateBatch, AggregateItem, Batch  # noqa: E402
from app.core.schemes import SCHEMES  # noqa: E402
from app.engine.backends.cpu import CpuBackend  # noqa: E402
from app.engine.reference import kat, reference  # noqa: E402
from app.wire import zap  # noqa: E402
from bench import harness, provenance  # noqa: E402

TARGETS = {"serving all valid": 1.6, "serving half invalid": 0.9, "fast_aggregate": 0.9, "aggregate": 0.9}

# ------------------------------------------------------------------ the blst loop (worker processes)
def blst_single(pk: bytes, msg: bytes, sig: bytes) -> bool:
    """blspy's single verify on a key and signature decoded from bytes (their subgroup checks)."""
    import blspy

    try:
        return blspy.PopSchemeMPL.verify(blspy.G1Element.from_bytes(pk), msg, blspy.G2Element.from_bytes(sig))
    except (ValueError, RuntimeError):  # a key or signature that does not decode
        return False


def serving(args, workers: int) -> dict:
    base = signed(args.batch, seed=1)
    kinds = tuple(args.invalid_kinds) if args.invalid_kinds else kat.BLS_INVALID_KINDS
    sets = {"all valid": base, "half invalid": with_invalid(base, 0.5, seed=2, kinds=kinds)}
    want = {name: [reference.verify_bls12_381(it.public_key, it.message, it.signature) for it in items]
            for name, items in sets.items()}
    frames = {name: bytes(zap.encode_request(Batch.from_items(
        SCHEMES["bls12-381"], [it.public_key for it in items], [it.message for it in items],
        [it.signature for it in items]))) for name, items in sets.items()}
    raw = {name: ([(it.public_key, it.message, it.signature) for it in items], want[name])
           for name, items in sets.items()}
    n = args.frames * args.batch
    load_before = os.getloadavg()
    # No time bound on admission: two frames in flight never need refusing, and on a shared
    # machine a neighbour's load can stretch the measured cost past the 2 s default.
    with harness.PeerLoop(workers, blst_single, raw) as blst, \
            harness.serve(workers, {"ZAPVERIFY_ADMISSION_MAX_WAIT_SECONDS": "0"}, log_path=args.server_log,
                          data_prefix="zv-bls-cpu-") as server:
        modes = {}
        for name in sets:
            modes[f"zap {name}"] = (lambda nm=name: harness.send_frames(
                server, frames[nm], args.frames, args.in_flight, want[nm]))
            modes[f"blst loop {name}"] = (lambda nm=name: blst.rate(nm, n))
        # warm: pools started, connections opened once, estimates settled
        rates = harness.interleaved(modes, args.rounds, warm=True)
    rows = []
    for name in sets:
        z, b = rates[f"zap {name}"], rates[f"blst loop {name}"]
        ratios = [x / y for x, y in zip(z, b)]
        rows.append({"set": name, "invalid": sum(not v for v in want[name]), "zap_per_s": statistics.median(z),
                     "blst_loop_per_s": statistics.median(b), "ratio_median": statistics.median(ratios),
                     "zap_rounds": z, "blst_loop_rounds": b, "ratios": ratios,
                     "target": TARGETS[f"serving {name}"]})
    return {"rows": rows, "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
            "invalid_kinds": list(kinds)}


# ------------------------------------------------------------------ aggregates, one core
def aggregate_items(fast_keys: int, messages: int) -> dict[str, AggregateItem]:
    """A valid FastAggregateVerify item of ``fast_keys`` keys and a valid AggregateVerify item
    of ``messages`` distinct messages, signed with blspy (PopSchemeMPL)."""
    import blspy

    sks = [blspy.AugSchemeMPL.key_gen(i.to_bytes(4, "big") * 8) for i in range(max(fast_keys, messages))]
    m = b"one message for every signer"
    fsig = blspy.AugSchemeMPL.aggregate([blspy.PopSchemeMPL.sign(sk, m) for sk in sks[:fast_keys]])
    msgs = [f"message {i}".encode() for i in range(messages)]
    asig = blspy.AugSchemeMPL.aggregate([blspy.PopSchemeMPL.sign(sk, mi) for sk, mi in zip(sks, msgs)])
    return {"fast_aggregate": AggregateItem("fast_aggregate", tuple(bytes(sk.get_g1()) for sk in sks[:fast_keys]),
                                            (m,), bytes(fsig)),
            "aggregate": AggregateItem("aggregate", tuple(bytes(sk.get_g1()) for sk in sks[:messages]),
                                       tuple(msgs), bytes(asig))}


def blst_aggregate(item: AggregateItem) -> bool:
    import blspy

    pks = [blspy.G1Element.from_bytes(pk) for pk in item.public_keys]
    sig = blspy.G2Element.from_bytes(item.signature)
    if item.mode == "fast_aggregate":
        return blspy.PopSchemeMPL.fast_aggregate_verify(pks, item.messages[0], sig)
    return blspy.PopSchemeMPL.aggregate_verify(pks, list(item.messages), sig)


def aggregates(args) -> dict:
    items = aggregate_items(args.fast_keys, args.aggregate_messages)
    backend = CpuBackend(workers=1)
    reps = args.aggregate_reps
    rows = []
    try:
        for mode, item in items.items():
            batch = AggregateBatch((item,) * reps)

            def ours(b=batch) -> float:
                t0 = time.perf_counter()
                if not backend.run(b).verdicts.all():
                    raise RuntimeError("the backend refused a valid aggregate")
                return reps / (time.perf_counter() - t0)

            def theirs(it=item) -> float:
                t0 = time.perf_counter()
                for _ in range(reps):
                    if not blst_aggregate(it):
                        raise RuntimeError("blspy refused a valid aggregate")
                return reps / (time.perf_counter() - t0)

            got = harness.interleaved({"backend": ours, "blst": theirs}, args.rounds, f"{mode}: ", unit="{:.1f}/s",
                                      warm=True)
            a, b = got["backend"], got["blst"]
            ratios = [x / y for x, y in zip(a, b)]
            rows.append({"mode": mode, "keys": len(item.public_keys), "messages": len(set(item.messages)),
                         "backend_per_s": statistics.median(a), "blst_per_s": statistics.median(b),
                         "ratio_median": statistics.median(ratios), "ratios": ratios, "target": TARGETS[mode]})
            print(f"{mode}: backend {rows[-1]['backend_per_s']:.1f}/s blst {rows[-1]['blst_per_s']:.1f}/s "
                  f"ratio {rows[-1]['ratio_median']:.2f}", flush=True)
    finally:
        backend.close()
    return {"rows": rows, "reps": reps}


def render(result: dict) -> str:
    prov, cfg = result["provenance"], result["config"]
    lines = ["# BLS12-381 on the CPU backend (blst) against blst directly", "", provenance.markdown_line(prov), "",
             f"Written by `bench/bls_cpu.py` on {prov['machine']['cores']} cores (Python "
             f"{prov['machine']['python']}), a shared and noisy machine: modes in interleaved rounds "
             f"({cfg['rounds']}), medians; the ratios are what this measures."]
    s = result.get("serving")
    if s:
        lines += ["", "## Served through ZAP against an all-cores loop of blst single verifies", "",
                  f"{cfg['batch']}-item batches as ZAP frames to the server's TCP ingest port (uvicorn on "
                  f"loopback, CPU backend on {cfg['workers']} workers, receipts on), {cfg['in_flight']} in flight, "
                  f"{cfg['frames']} frames per round, every verdict checked against arkworks'; the loop: "
                  f"blspy `PopSchemeMPL.verify` on keys and signatures decoded from bytes, {cfg['workers']} "
                  f"processes, {cfg['frames'] * cfg['batch']} items per round shared equally.  Invalid kinds: "
                  f"{', '.join(s['invalid_kinds'])}.  Load average {s['loadavg_before'][0]:.2f} before, "
                  f"{s['loadavg_after'][0]:.2f} after.", "",
                  "| items | invalid | ZAP items/s | blst loop items/s | ratio (median of rounds) | target | met |",
                  "|---|---:|---:|---:|---:|---:|---|"]
        for r in s["rows"]:
            lines.append(f"| {r['set']} | {r['invalid']} | {r['zap_per_s']:,.0f} | {r['blst_loop_per_s']:,.0f} | "
                         f"{r['ratio_median']:.2f}× | {r['target']}× | "
                         f"{'yes' if r['ratio_median'] >= r['target'] else 'NO'} |")
    a = result.get("aggregates")
    if a:
        lines += ["", "## Aggregates, one core", "",
                  f"`CpuBackend(workers=1).run` on {a['reps']} copies of one valid item (verdict and leaf hash) "
                  "against blspy on the same bytes (keys and signature decoded from bytes, then "
                  "`PopSchemeMPL.fast_aggregate_verify` / `aggregate_verify`).", "",
                  "| mode | keys | distinct messages | backend items/s | blst items/s | ratio | target | met |",
                  "|---|---:|---:|---:|---:|---:|---:|---|"]
        for r in a["rows"]:
            lines.append(f"| {r['mode']} | {r['keys']} | {r['messages']} | {r['backend_per_s']:.1f} | "
                         f"{r['blst_per_s']:.1f} | {r['ratio_median']:.2f}× | {r['target']}× | "
                         f"{'yes' if r['ratio_median'] >= r['target'] else 'NO'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--frames", type=int, default=6, help="frames (and loop batches) per mode per round")
    ap.add_argument("--in-flight", type=int, default=2)
    ap.add_argument("--workers", type=int, default=0, help="server CPU workers and loop processes; 0 = every core")
    ap.add_argument("--invalid-kinds", nargs="*", choices=kat.BLS_INVALID_KINDS)
    ap.add_argument("--fast-keys", type=int, default=512)
    ap.add_argument("--aggregate-messages", type=int, default=64)
    ap.add_argument("--aggregate-reps", type=int, default=10, help="aggregate items per mode per round")
    ap.add_argument("--skip-serving", action="store_true")
    ap.add_argument("--skip-aggregates", action="store_true")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--server-log", type=Path, help="keep the server's log in this file")
    args = ap.parse_args(argv)
    workers = args.workers or os.cpu_count() or 1
    result: dict = {"benchmark": "bls_cpu", "provenance": provenance.collect(),
                    "config": {"rounds": args.rounds, "batch": args.batch, "frames": args.frames,
                               "in_flight": args.in_flight, "workers": workers}}
    if not args.skip_serving:
        result["serving"] = serving(args, workers)
    if not args.skip_aggregates:
        result["aggregates"] = aggregates(args)
    harness.write_results(args.out, "bls_cpu", result, render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
