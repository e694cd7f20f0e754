#!/usr/bin/env python3
"""BLS12-381 batch verification (random linear combination) against one CoreVerify per item.

On blst (the CPU backend's native loop, app/engine/backends/native_bls.py) where it loads,
else on arkworks (the Python loop); the report says which.

  speed      through the CPU backend (``CpuBackend(bls_batch=...)``, every core and one):
             256 items of distinct messages, all valid, with 1 % and with 50 % invalid (wrong
             message: decodes, fails only the pairing check, the costly case); the two
             modes run alternately, ``--rounds`` times each; medians of items/s.
  payoff     one thread, the loop itself: batches of 2 to 64 all-valid items by random
             linear combination (``min_batch`` 1) against one CoreVerify each: where RLC pays off.
  bisection  one thread, 64 items with k invalid (wrong message) at random positions, a fresh
             invalid-fraction estimate each time: time against one CoreVerify each, and the
             multi-pairings computed.
  agreement  ``--agreement N`` items at 0 %, 1 %, 10 % and 50 % invalid, every kind of
             :data:`app.engine.reference.kat.BLS_INVALID_KINDS`; batch verdicts must equal the
             single CoreVerify verdicts item by item.

Writes bench/results/bls_batch.json and bench/results/bls_batch.md (speed), and
bls_batch_agreement.{json,md} (agreement).
Usage: bench/bls_batch.py [--rounds 7] [--agreement 10000] [--skip-speed]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.core.batch import Batch  # noqa: E402
from app.core.schemes import SCHEMES  # noqa: E402
from app.engine.backends.cpu import CpuBackend  # noqa: E402
from app.engine.reference import kat  # noqa: E402
from bench import provenance  # noqa: E402

FRACTIONS = (0.0, 0.01, 0.10, 0.50)


def signed(n: int, seed: int) -> list[kat.Item]:
    """``n`` valid items of distinct messages, 32 per key."""
    out: list[kat.Item] = []
    for k in range(-(-n // 32)):
        out += kat.sign_items("bls12-381", min(32, n - len(out)), seed=seed * 1000 + k, msg_len=32)
    return out


def with_invalid(items: list[kat.Item], fraction: float, seed: int, kinds=kat.BLS_INVALID_KINDS):
    """A copy of ``items`` with round(fraction · n) of them made invalid, kinds in turn."""
    rng = random.Random(f"bls-batch/{seed}/{fraction}")
    out = list(items)
    for j, i in enumerate(rng.sample(range(len(items)), round(fraction * len(items)))):
        out[i] = kat.bls_invalid(items[i], kinds[j % len(kinds)], rng)
    return out


def run(backend: CpuBackend, items: list[kat.Item]) -> tuple[list[bool], float]:
    batch = Batch.from_items(SCHEMES["bls12-381"], [it.public_key for it in items], [it.message for it in items],
                             [it.signature for it in items])
    t0 = time.perf_counter()
    _r = backend.run(batch)
    verdicts, _ = _r.verdicts, _r.leaves
    return verdicts.tolist(), time.perf_counter() - t0


def speed(rounds: int, n: int, workers: int = 0) -> list[dict]:
    """Alternating rounds of the two modes on ``workers`` cores (0: every core)."""
    base = signed(n, seed=1)
    single, batched = CpuBackend(workers, bls_batch=False), CpuBackend(workers, bls_batch=True)
    cores = single.workers
    rows = []
    try:
        for label, fraction in (("all valid", 0.0), ("1 % invalid", 0.01), ("50 % invalid", 0.5)):
            items = with_invalid(base, fraction, seed=2, kinds=("message",))
            run(single, items), run(batched, items)  # warm the pools and the estimate
            t_single, t_batch = [], []
            for _ in range(rounds):
                want, ts = run(single, items)
                got, tb = run(batched, items)
                assert got == want, "batch verdicts differ from CoreVerify"
                t_single.append(ts)
                t_batch.append(tb)
            ratios = [s / b for s, b in zip(t_single, t_batch)]
            rows.append({"case": label, "cores": cores, "items": n, "invalid": sum(not v for v in want),
                         "single_per_s": n / statistics.median(t_single),
                         "batch_per_s": n / statistics.median(t_batch),
                         "ratio_median": statistics.median(ratios), "ratios": ratios})
    finally:
        single.close()
        batched.close()
    return rows


def _blst():
    from app.engine.backends import native_bls

    return native_bls.loops()


def _cols(items: list[kat.Item]):
    b = Batch.from_items(SCHEMES["bls12-381"], [it.public_key for it in items], [it.message for it in items],
                         [it.signature for it in items])
    return b.pks, b.sigs, b.msgs, b.offsets


def small(rounds: int, sizes=(2, 3, 4, 8, 16, 32, 64)) -> list[dict]:
    """One thread, blst's loop alone: batch vs one-by-one on all-valid batches of ``sizes``
    items, where the batch's fixed costs (the final exponentiation, the signatures' Miller
    loop, the scalars) weigh most; sets ``MIN_BATCH``."""
    loops = _blst()
    base = signed(max(sizes), seed=5)
    rows = []
    saved = loops.min_batch
    loops.min_batch = 1
    try:
        for n in sizes:
            cols = _cols(base[:n])
            ratios = []
            for _ in range(rounds):
                loops.invalid_fraction = 0.0
                t0 = time.perf_counter()
                want = loops.verify(*cols, rlc=False)
                t1 = time.perf_counter()
                got = loops.verify(*cols, rlc=True)
                t2 = time.perf_counter()
                assert got == want == b"\x01" * n
                ratios.append((t1 - t0) / (t2 - t1))
            rows.append({"items": n, "ratio_median": statistics.median(ratios), "ratios": ratios})
    finally:
        loops.min_batch = saved
    return rows


def bisection(rounds: int, n: int = 64, ks=(0, 1, 2, 4, 8, 16, 32)) -> list[dict]:
    """One thread, blst's loop alone: ``n`` items with ``k`` invalid (wrong message) at random
    positions, a fresh estimate per run; batch time over one-by-one time, multi-pairings."""
    loops = _blst()
    base = signed(n, seed=6)
    rows = []
    for k in ks:
        items = with_invalid(base, k / n, seed=7, kinds=("message",))
        cols = _cols(items)
        ratios, checks = [], []
        for _ in range(rounds):
            loops.invalid_fraction = 0.0
            t0 = time.perf_counter()
            want = loops.verify(*cols, rlc=False)
            t1 = time.perf_counter()
            before = loops.pairing_checks
            got = loops.verify(*cols, rlc=True)
            t2 = time.perf_counter()
            assert got == want
            checks.append(loops.pairing_checks - before)
            ratios.append((t2 - t1) / (t1 - t0))
        rows.append({"items": n, "invalid": k, "cost_vs_single": statistics.median(ratios),
                     "multi_pairings": statistics.median(checks), "ratios": ratios})
    return rows


def agreement(n: int) -> list[dict]:
    base = signed(n, seed=3)
    single, batched = CpuBackend(bls_batch=False), CpuBackend(bls_batch=True)
    rows = []
    try:
        for fraction in FRACTIONS:
            items = with_invalid(base, fraction, seed=4)
            want, ts = run(single, items)
            got, tb = run(batched, items)
            rows.append({"invalid_fraction": fraction, "items": n, "invalid": sum(not v for v in want),
                         "disagreements": sum(a != b for a, b in zip(got, want)),
                         "single_s": ts, "batch_s": tb})
    finally:
        single.close()
        batched.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--items", type=int, default=256)
    p.add_argument("--agreement", type=int, default=0, help="items per invalid fraction; 0 skips")
    p.add_argument("--skip-speed", action="store_true")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    prov = provenance.collect()
    meta = {"provenance": prov}
    status = 0
    if not args.skip_speed:
        engine = "blst (native_bls.py)" if _blst() is not None else "arkworks (the Python loop)"
        rows = speed(args.rounds, args.items) + speed(args.rounds, args.items, workers=1)
        tiny = small(args.rounds) if _blst() is not None else []
        bis = bisection(args.rounds) if _blst() is not None else []
        (args.out / "bls_batch.json").write_text(json.dumps({"meta": meta, "engine": engine, "rows": rows,
                                                             "small": tiny, "bisection": bis}, indent=2) + "\n")
        lines = ["# BLS12-381 batch verification vs one CoreVerify per item", "", provenance.markdown_line(prov), "",
                 f"Written by `bench/bls_batch.py` on {prov['machine']['cores']} cores (Python "
                 f"{prov['machine']['python']}), a shared and noisy machine; BLS12-381 on {engine}.",
                 f"CPU backend on every core and on one, {args.items} items of distinct messages (32 per key), "
                 "invalid ones with a wrong message (they decode and fail only the pairing check: the costly "
                 f"case); the two modes alternate, {args.rounds} rounds each, medians.", "",
                 "| case | cores | invalid | single items/s | batch items/s | speed-up (median of rounds) |",
                 "|---|---:|---:|---:|---:|---:|"]
        for r in rows:
            lines.append(f"| {r['case']} | {r['cores']} | {r['invalid']} | {r['single_per_s']:.0f} | "
                         f"{r['batch_per_s']:.0f} | {r['ratio_median']:.2f}× |")
        if tiny:
            lines += ["", "Where RLC pays off: all-valid batches of n items, one thread, blst's loop with "
                      "`min_batch` 1 against one CoreVerify each (medians); below `MIN_BATCH` the loop checks "
                      "one by one:", "", "| items | speed-up |", "|---:|---:|"]
            lines += [f"| {r['items']} | {r['ratio_median']:.2f}× |" for r in tiny]
        if bis:
            lines += ["", "Bisection: 64 items, k of them invalid (wrong message) at random positions, one thread, "
                      "a fresh invalid-fraction estimate each run (the first group is 16 items, then groups "
                      "sized by the fraction seen, single checks once more than a tenth failed: "
                      "native_bls.FALLBACK_FRACTION); batch time "
                      "over one-by-one time (below 1: the batch is faster) and multi-pairings computed (one "
                      "CoreVerify each: 64):", "", "| invalid k | batch / one by one | multi-pairings |",
                      "|---:|---:|---:|"]
            lines += [f"| {r['invalid']} | {r['cost_vs_single']:.2f} | {r['multi_pairings']:.0f} |" for r in bis]
        (args.out / "bls_batch.md").write_text("\n".join(lines) + "\n")
        print("\n".join(lines))
    if args.agreement:
        rows = agreement(args.agreement)
        (args.out / "bls_batch_agreement.json").write_text(
            json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
        lines = ["# BLS12-381 batch verdicts against single CoreVerify", "", provenance.markdown_line(prov), "",
                 f"Written by `bench/bls_batch.py --agreement {args.agreement}`. "
                 "Invalid items cycle through every kind of `app.engine.reference.kat.BLS_INVALID_KINDS`.", "",
                 "| invalid fraction | items | invalid | disagreements | single s | batch s |",
                 "|---:|---:|---:|---:|---:|---:|"]
        for r in rows:
            lines.append(f"| {r['invalid_fraction']:.0%} | {r['items']} | {r['invalid']} | {r['disagreements']} | "
                         f"{r['single_s']:.1f} | {r['batch_s']:.1f} |")
        (args.out / "bls_batch_agreement.md").write_text("\n".join(lines) + "\n")
        print("\n".join(lines))
        status = 1 if any(r["disagreements"] for r in rows) else 0
    return status


if __name__ == "__main__":
    sys.exit(main())
