"""Concurrency 4 against concurrency 1 on one default server (issue 48, "Done when" 1):
``zapverify bench --concurrency 4`` must get no error and at least 0.95× the verifies/s of
``--concurrency 1``, for Ed25519 ×4096, ML-DSA-65 ×4096, SLH-DSA-SHA2-128f ×1024 and
BLS12-381 ×1024.

One ``zapverify serve``-equivalent server (uvicorn, CPU backend, ``--cpu-workers`` workers,
receipts on in a temporary data directory, every admission setting at its default) on
loopback.  Per scheme the items are signed once (64 distinct, repeated), one warm-up run, then
``--rounds`` pairs of runs of ``--seconds`` each, concurrency 1 and 4 in turn (interleaved, so
a drift of the shared machine hits both); the ratio is of the medians.  Each run is the bench's
own :func:`zapverify.loadgen.run` (ZAP over HTTP, the CLI's default transport), which waits for
and counts the requests in flight at the end of its window and counts every refusal as an error.

Writes ``bench/results/concurrency.json`` and ``.md``.

    python bench/concurrency.py [--seconds 10] [--rounds 2] [--only ed25519,bls12-381]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import provenance  # noqa: E402
from bench.harness import free_port, start_server, stop_server  # noqa: E402
from zapverify import loadgen  # noqa: E402

#: (scheme, batch) of the issue's criterion.
CASES = (("ed25519", 4096), ("ml-dsa-65", 4096), ("slh-dsa-sha2-128f", 1024), ("bls12-381", 1024))
RATIO = 0.95


def wait_ready(url: str, proc, timeout: float = 300.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        try:
            if httpx.get(url + "/readyz", timeout=2, trust_env=False).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RuntimeError("the server did not become ready")


def one_run(url: str, scheme: str, batch: int, concurrency: int, seconds: float, items) -> dict:
    cfg = loadgen.BenchConfig(url=url, scheme=scheme, batch=batch, duration=seconds, concurrency=concurrency,
                              transport="zap", api_key="")
    r = asyncio.run(loadgen.run(cfg, items))
    return {"concurrency": concurrency, "verifies_per_s": r.verifies_per_s, "requests": r.requests,
            "errors": r.errors, "refused": r.refused, "mismatches": r.mismatches, "cut": r.cut,
            "in_flight_at_end": r.in_flight_at_end, "seconds": round(r.seconds, 2), "first_error": r.first_error,
            "latency_ms": {k: round(v, 1) for k, v in r.latency_ms.items()}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--cpu-workers", type=int, default=2)
    ap.add_argument("--only", default="", help="comma-separated scheme ids")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args()
    cases = [c for c in CASES if not args.only or c[0] in args.only.split(",")]
    prov = provenance.collect()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    rows = []
    with tempfile.TemporaryDirectory(prefix="zv-concurrency-") as data, open(Path(data) / "server.log", "wb") as log:
        proc = start_server(port, args.cpu_workers, log, {"ZAPVERIFY_DATA_DIR": data})
        try:
            wait_ready(url, proc)
            for scheme, batch in cases:
                items = loadgen.make_items(scheme, batch, 64)
                one_run(url, scheme, batch, 4, min(args.seconds, 5.0), items)  # warm-up: the cost model learns
                runs: dict[int, list[dict]] = {1: [], 4: []}
                for _ in range(args.rounds):
                    for c in (1, 4):
                        runs[c].append(one_run(url, scheme, batch, c, args.seconds, items))
                        print(f"[concurrency] {scheme} x{batch} c={c}: {runs[c][-1]['verifies_per_s']:,.0f}/s "
                              f"errors {runs[c][-1]['errors']}", flush=True)
                med = {c: statistics.median(r["verifies_per_s"] for r in runs[c]) for c in runs}
                errors = sum(r["errors"] + r["mismatches"] for c in runs for r in runs[c])
                ratio = med[4] / med[1] if med[1] else 0.0
                rows.append({"scheme": scheme, "batch": batch, "runs": runs, "median_per_s": med, "ratio": ratio,
                             "errors": errors, "pass": errors == 0 and ratio >= RATIO})
            admission = httpx.get(url + "/v1/status", timeout=10, trust_env=False).json().get("admission")
        finally:
            stop_server(proc)
    result = {"provenance": prov, "when": datetime.now(UTC).isoformat(timespec="seconds"), "host": platform.node(),
              "python": platform.python_version(), "seconds": args.seconds, "rounds": args.rounds,
              "cpu_workers": args.cpu_workers, "cases": rows, "admission": admission,
              "pass": bool(rows) and all(r["pass"] for r in rows)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "concurrency.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = ["# Concurrency 4 against concurrency 1 (bench/concurrency.py)", "", provenance.markdown_line(prov), "",
             f"{result['when']}, {result['host']}, Python {result['python']}. Written by `bench/concurrency.py`: one "
             f"server (CPU backend, {args.cpu_workers} workers, receipts on, admission at its defaults), "
             f"`zapverify bench` (ZAP over HTTP) at concurrency 1 and 4 in turn, {args.rounds} runs each of "
             f"{args.seconds:g} s, after a warm-up; requests in flight at a window's end waited for and counted. "
             "The machine is shared: compare the ratio, not the rates.", "",
             "| scheme | batch | c=1 verifies/s (median) | c=4 verifies/s (median) | c=4 / c=1 | errors | result |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['scheme']} | {r['batch']} | {r['median_per_s'][1]:,.0f} | {r['median_per_s'][4]:,.0f} | "
                     f"{r['ratio']:.2f} | {r['errors']} | {'pass' if r['pass'] else '**FAIL**'} |")
    lines += ["", f"Pass: every case 0 errors and c=4 / c=1 >= {RATIO}. Overall: "
              f"{'pass' if result['pass'] else '**FAIL**'}.", ""]
    if admission:
        lines.append(f"Admission at the end: admitted {admission['admitted_total']}, refused "
                     f"{admission['refused_total']} {admission['refused_by']}, queue peak {admission['queued_peak']}, "
                     f"deadline misses {admission['deadline_missed_total']}.")
        lines.append("")
    (args.out / "concurrency.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0 if result["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
