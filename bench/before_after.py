#!/usr/bin/env python3
"""Before and after: a benchmark run on two commits side by side, interleaved, in one run.

Checks that a change costs nothing beyond noise: the working tree ("after") against a
commit ("before", checked out into a temporary git worktree) on the same machine at the same
time.  Each round runs ``bench/cpu_engine.py`` and ``bench/http_overhead.py`` (short settings)
in both trees, the order alternating round by round so that a noisy moment hits both alike;
each tree's own scripts run with that tree first on ``sys.path`` (the HTTP benchmark's server
too: it is started from the tree's directory).  Reported per metric: the median over rounds of
each side and the median of the per-round ratios after / before (1.0: no change).

Writes bench/results/before_after.json and bench/results/before_after.md.
Usage: bench/before_after.py --before REV [--rounds 3] [--schemes ed25519,secp256k1,ml-dsa-44]
                             [--batch 4096] [--out bench/results]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import provenance  # noqa: E402


def _run(tree: Path, script: str, args: list[str], out: Path) -> dict:
    """Run ``tree``'s ``bench/<script>.py`` with ``--out out``; its JSON result."""
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(tree))
    subprocess.run([sys.executable, str(tree / "bench" / f"{script}.py"), *args, "--out", str(out)], cwd=tree,
                   env=env, check=True, stdout=subprocess.DEVNULL, timeout=1800)
    return json.loads((out / f"{script}.json").read_text())


def _metrics(script: str, result: dict) -> dict[str, float]:
    """The rates a user relies on, items per second: the engine's per scheme (cpu_engine), and
    in-process, ZAP and JSON over HTTP (http_overhead)."""
    if script == "cpu_engine":
        return {f"cpu_engine {r['scheme']} engine": r["engine_per_second"]["median"] for r in result["rows"]}
    return {f"http_overhead {mode}": v["median"] for mode, v in result["items_per_second"].items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="the commit measured as 'before'")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--schemes", default="ed25519,secp256k1,ml-dsa-44")
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args(argv)
    prov = provenance.collect()
    before_sha = subprocess.run(["git", "rev-parse", args.before], cwd=ROOT, check=True, capture_output=True,
                                text=True).stdout.strip()
    jobs = {"cpu_engine": ["--batch", str(args.batch), "--schemes", args.schemes, "--runs", "1"],
            "http_overhead": ["--batch", str(args.batch), "--rounds", "1", "--reps", "3"]}
    samples: dict[str, dict[str, list[float]]] = {"before": {}, "after": {}}
    with tempfile.TemporaryDirectory(prefix="zv-before-") as tmp:
        old = Path(tmp) / "tree"
        subprocess.run(["git", "worktree", "add", "--detach", str(old), before_sha], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            trees = {"before": old, "after": ROOT}
            for r in range(args.rounds):
                for side in (("before", "after") if r % 2 == 0 else ("after", "before")):
                    for script, script_args in jobs.items():
                        res = _run(trees[side], script, script_args, Path(tmp) / f"{side}-{r}-{script}")
                        for name, value in _metrics(script, res).items():
                            samples[side].setdefault(name, []).append(value)
                print(f"round {r + 1}/{args.rounds} done", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, capture_output=True)
    rows = []
    for name in samples["after"]:
        b, a = samples["before"].get(name, []), samples["after"][name]
        ratios = [x / y for x, y in zip(a, b) if y]
        rows.append({"metric": name, "before": statistics.median(b) if b else None, "after": statistics.median(a),
                     "ratio": statistics.median(ratios) if ratios else None,
                     "ratio_min": min(ratios, default=None), "ratio_max": max(ratios, default=None),
                     "before_rounds": b, "after_rounds": a})
    result = {"benchmark": "before_after", "provenance": prov, "before": before_sha, "rounds": args.rounds,
              "schemes": args.schemes, "batch": args.batch, "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "before_after.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = ["# Before and after, side by side", "", provenance.markdown_line(prov), "",
             f"Before: commit `{before_sha[:12]}`; after: the measured commit above. {args.rounds} rounds, "
             f"the order alternating; batches of {args.batch} items; items per second, medians over rounds; "
             "ratio = median of the per-round after / before (1.0: no change).  Written by bench/before_after.py.",
             "", "| metric | before | after | after / before (min–max) |", "|---|---:|---:|---:|"]
    for row in rows:
        spread = f" ({row['ratio_min']:.3f}–{row['ratio_max']:.3f})" if row["ratio"] is not None else ""
        before = f"{row['before']:,.0f}" if row["before"] is not None else "–"
        ratio = f"{row['ratio']:.3f}" if row["ratio"] is not None else "–"
        lines.append(f"| {row['metric']} | {before} | {row['after']:,.0f} | {ratio}{spread} |")
    (args.out / "before_after.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
