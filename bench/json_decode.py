#!/usr/bin/env python3
"""JSON request decoding into columns: items per second on one core (issue 23 target ≥ 150 k/s
for Ed25519 items).

For one Ed25519 request of ``--batch`` items (64-byte messages) as a JSON body, in base64 (what
the client sends) and in hex, measures on one thread, in interleaved rounds (median reported):

- ``columns``: the validated request (``VerifyRequest``) decoded into one columnar Batch by
  ``schemas.to_work`` — the decoding this benchmark targets;
- ``route``: what ``POST /v1/verify`` runs on the body: ``json.loads`` (Starlette's
  ``Request.json``), pydantic validation, then ``to_work``;
- ``validate_json``: pydantic's own JSON parser (``model_validate_json``) then ``to_work``,
  what a route reading the raw body could use;
- ``items``: the per-item path this replaced (``json.loads``, validation, ``to_items``, then
  grouping into a Batch with ``grouping.batch_of``), for comparison.

Writes bench/results/json_decode.json and .md (``--out`` changes the folder).

    python bench/json_decode.py [--batch 4096] [--rounds 5]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.api.schemas import VerifyRequest, to_items, to_work
from app.core.batch import Batch
from app.engine.reference import kat
from app.engine.verify.grouping import batch_of, group_items
from bench import provenance

TARGET = 150_000
LIMITS = {"max_items": 1 << 20, "max_message_bytes": 1 << 20}


def body_of(items: list, encoding: str) -> bytes:
    enc = (lambda b: b.hex()) if encoding == "hex" else (lambda b: base64.b64encode(b).decode())
    return json.dumps({"encoding": encoding, "items": [
        {"scheme": i.scheme, "public_key": enc(i.public_key), "message": enc(i.message), "signature": enc(i.signature)}
        for i in items]}).encode()


def _items_path(body: bytes) -> Batch:
    items = to_items(VerifyRequest.model_validate(json.loads(body)), **LIMITS)
    (key, idx), = group_items(items).items()
    return batch_of(key, [items[i] for i in idx])


def modes_for(body: bytes) -> dict:
    req = VerifyRequest.model_validate(json.loads(body))
    return {
        "columns": lambda: to_work(req, **LIMITS),
        "route": lambda: to_work(VerifyRequest.model_validate(json.loads(body)), **LIMITS),
        "validate_json": lambda: to_work(VerifyRequest.model_validate_json(body), **LIMITS),
        "items": lambda: _items_path(body),
    }


def rate(fn, n: int, min_seconds: float) -> float:
    done, t0 = 0, time.perf_counter()
    while True:
        out = fn()
        assert isinstance(out, Batch) and len(out) == n
        done += n
        elapsed = time.perf_counter() - t0
        if elapsed >= min_seconds:
            return done / elapsed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--min-seconds", type=float, default=0.3)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args(argv)
    prov = provenance.collect()
    items = kat.sign_items("ed25519", args.batch, seed=2024, msg_len=64)
    load_before = os.getloadavg()
    results = {}
    for encoding in ("base64", "hex"):
        body = body_of(items, encoding)
        modes = modes_for(body)
        rates: dict[str, list[float]] = {m: [] for m in modes}
        order = list(modes)
        for r in range(args.rounds):
            for m in order[r % len(order):] + order[:r % len(order)]:
                rates[m].append(rate(modes[m], args.batch, args.min_seconds))
        results[encoding] = {"body_bytes": len(body),
                             "items_per_second": {m: {"median": statistics.median(v), "rounds": v}
                                                  for m, v in rates.items()}}
        print(encoding, {m: round(statistics.median(v)) for m, v in rates.items()}, flush=True)
    out = {"benchmark": "json_decode", "provenance": prov, "when": datetime.now(UTC).isoformat(timespec="seconds"),
           "host": {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version(),
                    "loadavg_before": load_before, "loadavg_after": os.getloadavg()},
           "config": {"scheme": "ed25519", "batch": args.batch, "message_bytes": 64, "rounds": args.rounds,
                      "threads": 1}, "target_columns_per_second": TARGET, "results": results}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "json_decode.json").write_text(json.dumps(out, indent=2) + "\n")
    (args.out / "json_decode.md").write_text(render_md(out))
    print(render_md(out))
    return 0


def render_md(r: dict) -> str:
    h, c = r["host"], r["config"]
    lines = [
        "# JSON request decoding into columns (one core)",
        "",
        provenance.markdown_line(r["provenance"]),
        "",
        f"Written by `bench/json_decode.py` on {r['when']}. Ed25519, one request of {c['batch']} items "
        f"({c['message_bytes']}-byte messages), one thread; median of {c['rounds']} interleaved rounds. "
        f"Host: {h['machine']}, {h['cpus']} CPUs shared with other jobs, Python {h['python']}; load average "
        f"{h['loadavg_before'][0]:.2f} before, {h['loadavg_after'][0]:.2f} after.",
        "",
        "`columns` is the validated request decoded into one Batch (`schemas.to_work`); `route` adds "
        "`json.loads` and pydantic validation, as `POST /v1/verify` runs it; `validate_json` parses with "
        "pydantic's own JSON parser instead; `items` is the per-item path it replaced. "
        f"Target: columns ≥ {r['target_columns_per_second']:,} items/s per core.",
        "",
        "| encoding | body bytes | columns /s | route /s | validate_json /s | items (before) /s | columns target met |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for enc, res in r["results"].items():
        ips = {m: v["median"] for m, v in res["items_per_second"].items()}
        lines.append(f"| {enc} | {res['body_bytes']:,} | {ips['columns']:,.0f} | {ips['route']:,.0f} | "
                     f"{ips['validate_json']:,.0f} | {ips['items']:,.0f} | "
                     f"{'yes' if ips['columns'] >= r['target_columns_per_second'] else 'NO'} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
