#!/usr/bin/env python3
"""Cost of shadow verification: accelerated throughput with the shadow check off and on.

Two engines forced to the kernel-host backend (the GPU kernel sources built by g++, run on
the CPU; no fault injected), one with the shadow check off (rate, minimum and warm-up 0),
one at the default settings (rate 0.001, at least 1 item per batch, async).  Both first
verify ``--warmup`` items untimed, so the on-engine is past its warm-up (where it checks
every ``true`` verdict of the first 10,000 items) and the figure is the steady state.
Then ``--rounds`` interleaved rounds (the order alternates each round): each round verifies
``--batches`` batches of ``--items`` Ed25519 items (a third of them invalid) on each engine,
and a round of the on-engine ends only once its shadow queue is drained, so the check's
deferred CPU time is counted in it.  Items per second, median over rounds; the figure is
the median of the rounds' on / off ratios (each round's two runs side by side, so a slow
spell of the machine hits both), with the ratio of the medians beside it (target: at least
0.97, i.e. within 3 %).

Writes bench/results/shadow.json and bench/results/shadow.md (``--out`` changes the folder).
Usage: bench/shadow.py [--items 1024] [--batches 6] [--rounds 9] [--warmup 10240] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import nacl.signing

from app.core.batch import Batch
from app.core.schemes import SCHEMES
from app.engine.backends.kernel_host import KernelHostBackend
from app.engine.device import hostbuild
from app.engine.verify.engine import Engine, EngineConfig
from bench import provenance

OFF = {"shadow_rate": 0.0, "shadow_min_per_batch": 0, "shadow_warmup_items": 0}
DEFAULTS = EngineConfig()


def batch_of(n: int, seed: int) -> tuple[Batch, list[bool]]:
    """``n`` Ed25519 items (every third signature corrupted) as one batch, and the truth."""
    pks, msgs, sigs, truth = [], [], [], []
    for i in range(n):
        key = nacl.signing.SigningKey(bytes([seed % 256, i % 256, i // 256 % 256]) + bytes(29))
        msg = f"shadow bench {seed}/{i}".encode()
        sig = bytearray(key.sign(msg).signature)
        if i % 3 == 0:
            sig[7] ^= 1
        pks.append(bytes(key.verify_key))
        msgs.append(msg)
        sigs.append(bytes(sig))
        truth.append(i % 3 != 0)
    return Batch.from_items(SCHEMES["ed25519"], pks, msgs, sigs), truth


def engine(**shadow) -> Engine:
    eng = Engine(EngineConfig(backend="kernel-host", cpu_workers=1, **shadow), backends=[KernelHostBackend()])
    eng.start()
    if not eng.ready or eng.routes["ed25519"].selftest.get("kernel-host") is not True:
        raise SystemExit(f"kernel-host did not pass its ed25519 self-test: {eng.degraded()}")
    return eng


def one_round(eng: Engine, batches: list[tuple[Batch, list[bool]]]) -> float:
    """Items per second over ``batches``, the shadow queue drained before the clock stops."""
    t0 = time.perf_counter()
    for batch, truth in batches:
        res = eng.run(batch)
        if res.backend != "kernel-host" or res.verdicts.tolist() != truth:
            raise SystemExit(f"wrong answer from {res.backend}: the benchmark needs a healthy kernel-host")
    if not eng.shadow.drain(60):
        raise SystemExit("shadow queue not drained within 60 s")
    return sum(len(b) for b, _ in batches) / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--items", type=int, default=1024, help="items per batch")
    p.add_argument("--batches", type=int, default=6, help="batches per round and engine")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--warmup", type=int, default=10240, help="items verified untimed first, per engine")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = p.parse_args(argv)
    if hostbuild.compiler() is None:
        raise SystemExit("no C++ compiler: the kernel-host backend cannot be built")
    prov = provenance.collect()
    batches = [batch_of(args.items, seed) for seed in range(args.batches)]
    off, on = engine(**OFF), engine()
    try:
        for eng in (off, on):
            for i in range(-(-args.warmup // args.items)):
                eng.run(batches[i % len(batches)][0])
            eng.shadow.drain(120)
        rates: dict[str, list[float]] = {"off": [], "on": []}
        for r in range(args.rounds):
            order = [("off", off), ("on", on)] if r % 2 == 0 else [("on", on), ("off", off)]
            for name, eng in order:
                rates[name].append(one_round(eng, batches))
        counts = on.shadow.counts().get("ed25519", {}).get("kernel-host", {})
        dropped, mismatches = on.shadow.dropped, len(on.shadow.mismatches())
    finally:
        off.close()
        on.close()
    med = {k: statistics.median(v) for k, v in rates.items()}
    per_round = [a / b for a, b in zip(rates["on"], rates["off"], strict=True)]
    ratio = statistics.median(per_round)
    result = {"provenance": prov, "backend": "kernel-host", "scheme": "ed25519", "items": args.items,
              "batches": args.batches, "rounds": args.rounds, "warmup_items": args.warmup,
              "shadow": {"rate": DEFAULTS.shadow_rate, "min_per_batch": DEFAULTS.shadow_min_per_batch,
                         "warmup_items": DEFAULTS.shadow_warmup_items, "mode": DEFAULTS.shadow_mode},
              "items_per_second": rates, "median_items_per_second": med, "ratio_on_off": ratio,
              "ratio_of_medians": med["on"] / med["off"],
              "ratio_per_round": per_round, "within_3_percent": ratio >= 0.97,
              "checked_items": counts.get("checked", 0), "dropped_items": dropped, "mismatches": mismatches}
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    (out / "shadow.json").write_text(json.dumps(result, indent=1))
    md = [f"# Shadow verification cost: kernel-host Ed25519, shadow off vs on (default settings), "
          f"median of {args.rounds} interleaved rounds",
          "", provenance.markdown_line(prov), "",
          f"{args.batches} batches of {args.items} items per round and engine, a third invalid; no fault; "
          f"both engines past {args.warmup} warm-up items first (the on-engine's warm-up, which checks every true "
          f"verdict of its first {DEFAULTS.shadow_warmup_items} items, is not timed); an on-round ends once its "
          "shadow queue is drained.", "",
          "| shadow | items/s (median) | min | max |", "|---|---|---|---|"]
    for k in ("off", "on"):
        md.append(f"| {k} | {med[k]:,.0f} | {min(rates[k]):,.0f} | {max(rates[k]):,.0f} |")
    md += ["", f"**on / off = {ratio:.3f}**, the median of the rounds' ratios (target ≥ 0.97: "
           f"{'met' if ratio >= 0.97 else 'NOT met'}); per round {min(per_round):.3f} to {max(per_round):.3f}; "
           f"ratio of the medians {med['on'] / med['off']:.3f}.",
           f"The on-engine checked {result['checked_items']} items over the whole run (warm-up included), "
           f"dropped {dropped}, found {mismatches} mismatches."]
    (out / "shadow.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
