#!/usr/bin/env python3
"""Host-build hash kernels against hashlib, for information (the host build is for testing).

For each hash: messages of --msg-len bytes, --count of them, hashed (a) by the kernel of
hash.cu built with g++ and run on one host thread over the whole batch (one ctypes call),
and (b) by hashlib one message at a time in a Python loop (per-call overhead included,
as the engine would pay it).  Median of --runs runs; items per second.

Writes bench/results/kernel_host_hash.json and bench/results/kernel_host_hash.md (``--out``
changes the folder).
Usage: bench/kernel_host_hash.py [--count 20000] [--msg-len 64] [--runs 5] [--out DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np

from app.engine.device import hostbuild, hostlib, ops
from bench import provenance

REFERENCE = {"sha256": (hashlib.sha256, None), "sha512": (hashlib.sha512, None),
             "sha3-256": (hashlib.sha3_256, None), "shake128": (hashlib.shake_128, 32),
             "shake256": (hashlib.shake_256, 32)}


def median_seconds(fn, runs: int) -> float:
    fn()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--count", type=int, default=20000)
    p.add_argument("--msg-len", type=int, default=64)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = p.parse_args()
    prov = provenance.collect()
    dev = hostlib.device()
    rng = np.random.default_rng(0)
    data = rng.integers(0, 256, args.count * args.msg_len, dtype=np.uint8)
    offsets = np.arange(args.count + 1, dtype=np.uint64) * args.msg_len
    msgs = [data[i * args.msg_len:(i + 1) * args.msg_len].tobytes() for i in range(args.count)]
    rows = []
    for algo, (ref, out_len) in REFERENCE.items():
        def run_kernel(algo=algo, out_len=out_len):
            ops.hash_buffer(dev, algo, data, offsets, args.count, out_len)

        def run_hashlib(ref=ref, out_len=out_len):
            if out_len is None:
                return [ref(m).digest() for m in msgs]
            return [ref(m).digest(out_len) for m in msgs]

        kernel = median_seconds(run_kernel, args.runs)
        lib = median_seconds(run_hashlib, args.runs)
        rows.append({"hash": algo, "kernel_per_second": args.count / kernel, "hashlib_per_second": args.count / lib,
                     "ratio": lib / kernel})
    result = {"provenance": prov, "count": args.count, "msg_len": args.msg_len, "runs": args.runs,
              "compiler": hostbuild.compiler(),
              "cxxflags": " ".join(hostbuild.CXXFLAGS), "machine": platform.machine(),
              "python": platform.python_version(), "rows": rows}
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    (out / "kernel_host_hash.json").write_text(json.dumps(result, indent=1))
    md = [f"# Host-build hash kernels vs hashlib ({args.count} messages of {args.msg_len} B, median of {args.runs})",
          "", provenance.markdown_line(prov), "",
          f"{result['compiler']} {result['cxxflags']}; Python {result['python']} on {result['machine']}; "
          "one host thread each.", "", "| hash | kernel (host build) /s | hashlib loop /s | kernel / hashlib |",
          "|---|---|---|---|"]
    md += [f"| {r['hash']} | {r['kernel_per_second']:,.0f} | {r['hashlib_per_second']:,.0f} | {r['ratio']:.2f} |"
           for r in rows]
    (out / "kernel_host_hash.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
