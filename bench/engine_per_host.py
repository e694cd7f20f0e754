#!/usr/bin/env python3
"""One engine per HTTP worker, or one engine for the host? Measured through the JSON API.

Starts ``zapverify serve`` (CPU backend, Ed25519) in three shapes at once and measures each
in interleaved rounds with ``--clients`` concurrent clients posting ``--batch``-item JSON
requests (the order rotates each round; idle servers cost nothing):

- ``1 worker × all cores``: one HTTP worker whose engine uses every core (one engine per host);
- ``N workers × all cores``: N HTTP workers, each with its own engine on every core (the
  default when ``--workers`` is raised);
- ``N workers × cores/N``: N HTTP workers splitting the cores between their engines.

Reported per shape: items/s (median of rounds) and the resident memory of the whole server
(every process of its tree, after warm-up).  Writes bench/results/engine_per_host.json and .md.

    python bench/engine_per_host.py [--workers 2] [--clients 2] [--batch 4096] [--rounds 3] [--seconds 4]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.engine.reference import kat
from bench import provenance
from bench.harness import free_port, stop_server, wait_ready
from zapverify import Client, json_body

ZAPVERIFY = Path(sys.executable).with_name("zapverify")


def start(workers: int, cpu_workers: int, data: str, log):
    import subprocess

    port = free_port()
    env = dict(os.environ, ZAPVERIFY_BACKEND="cpu", ZAPVERIFY_CPU_WORKERS=str(cpu_workers), ZAPVERIFY_DATA_DIR=data,
               ZAPVERIFY_LOG_LEVEL="warning", ZAPVERIFY_MAX_ITEMS="1048576")
    proc = subprocess.Popen([str(ZAPVERIFY), "serve", "--host", "127.0.0.1", "--port", str(port), "--workers",
                             str(workers)], env=env, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    return proc, f"http://127.0.0.1:{port}"


def tree_rss_bytes(pid: int) -> int:
    """Resident memory of ``pid`` and every descendant (Linux /proc)."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo += children.get(p, [])
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


def load(url: str, body: bytes, batch: int, clients: int, seconds: float) -> float:
    """Items per second that ``clients`` concurrent clients get verified in ``seconds``."""
    done = [0] * clients
    stop = time.perf_counter() + seconds

    def run(k: int) -> None:
        with Client(url, timeout=300) as c:
            while time.perf_counter() < stop:
                if c.verify_json_body(body).valid != batch:
                    raise RuntimeError("a valid item was refused")
                done[k] += batch

    t0 = time.perf_counter()
    threads = [threading.Thread(target=run, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done) / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args(argv)
    prov = provenance.collect()
    cores, n = os.cpu_count() or 1, args.workers
    shapes = {f"1 worker × {cores} cores": (1, cores), f"{n} workers × {cores} cores": (n, cores),
              f"{n} workers × {max(1, cores // n)} cores": (n, max(1, cores // n))}
    items = kat.sign_items("ed25519", args.batch, seed=2024, msg_len=64)
    body = json.dumps(json_body(items)).encode()
    servers, rates, rss = {}, {s: [] for s in shapes}, {}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="zv-eph-") as tmp:
        log = tempfile.TemporaryFile()
        try:
            for i, (name, (w, cw)) in enumerate(shapes.items()):
                data = os.path.join(tmp, str(i))
                os.makedirs(data)
                servers[name] = start(w, cw, data, log)
            for name, (proc, url) in servers.items():
                with Client(url, timeout=300) as c:
                    wait_ready(c, proc)
                load(url, body, args.batch, args.clients, 0.5)  # warm every worker
                rss[name] = tree_rss_bytes(proc.pid)
            order = list(shapes)
            for r in range(args.rounds):
                for name in order[r % len(order):] + order[:r % len(order)]:
                    rates[name].append(load(servers[name][1], body, args.batch, args.clients, args.seconds))
                print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:,.0f}/s" for k, v in rates.items()), flush=True)
        finally:
            for proc, _ in servers.values():
                stop_server(proc)
    out = {"benchmark": "engine_per_host", "provenance": prov, "when": datetime.now(UTC).isoformat(timespec="seconds"),
           "host": {"machine": platform.machine(), "cpus": cores, "python": platform.python_version(),
                    "loadavg_before": load_before, "loadavg_after": os.getloadavg()},
           "config": {"scheme": "ed25519", "batch": args.batch, "clients": args.clients, "rounds": args.rounds,
                      "seconds_per_round": args.seconds, "body": "JSON, base64 fields"},
           "shapes": {k: {"http_workers": shapes[k][0], "cpu_workers_each": shapes[k][1],
                          "items_per_second": {"median": statistics.median(v), "rounds": v},
                          "rss_bytes": rss[k]} for k, v in rates.items()}}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "engine_per_host.json").write_text(json.dumps(out, indent=2) + "\n")
    h, c = out["host"], out["config"]
    lines = ["# One engine per host or per HTTP worker (JSON API, Ed25519)", "", provenance.markdown_line(prov), "",
             f"Written by `bench/engine_per_host.py` on {out['when']}: {c['clients']} concurrent clients posting "
             f"{c['batch']}-item JSON requests, median of {c['rounds']} interleaved rounds of "
             f"{c['seconds_per_round']} s. Host: {h['machine']}, {h['cpus']} CPUs shared with other jobs; load "
             f"average {h['loadavg_before'][0]:.2f} before, {h['loadavg_after'][0]:.2f} after.", "",
             "| shape | items/s (median) | per round | server RSS (MiB) |", "|---|---:|---|---:|"]
    for k, v in out["shapes"].items():
        ips = v["items_per_second"]
        lines.append(f"| {k} | {ips['median']:,.0f} | {', '.join(f'{x:,.0f}' for x in ips['rounds'])} | "
                     f"{v['rss_bytes'] / 2**20:,.0f} |")
    (args.out / "engine_per_host.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
