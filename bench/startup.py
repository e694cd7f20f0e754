"""How fast the service becomes ready, and whether it keeps answering while it starts.

Each run starts ``zapverify serve`` (CPU backend, one worker) on a fresh data directory
and probes ``GET /healthz`` and ``GET /readyz`` every ``--interval`` seconds (default
0.05) from the moment the process is spawned.  Recorded per run: the time from spawn to
the first ``/readyz`` 200, and the slowest ``/healthz`` answer seen before then (a probe
that times out counts as its timeout).  Runs are repeated (``--runs``, default 5) and
the median and spread reported, since this 2-core machine is noisy.

Targets (issue 14): ready ≤ 3 s, slowest /healthz < 100 ms.
Writes ``bench/results/startup.json`` and ``.md`` (``--out`` changes the folder).

    python bench/startup.py [--runs 5] [--interval 0.05] [--timeout 60]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import provenance  # noqa: E402

ZAPVERIFY = Path(sys.executable).with_name("zapverify")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_start(interval: float, timeout: float) -> dict:
    """Spawn the server on a fresh data directory; probe until /readyz is 200."""
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="zv-startup-") as data:
        env = {**os.environ, "ZAPVERIFY_DATA_DIR": data, "ZAPVERIFY_BACKEND": "cpu"}
        t0 = time.perf_counter()
        proc = subprocess.Popen([str(ZAPVERIFY), "serve", "--host", "127.0.0.1", "--port", str(port)],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        health_max = 0.0
        health_answers = 0
        ready_at = None
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5.0) as client:
                while time.perf_counter() - t0 < timeout and proc.poll() is None:
                    tick = time.perf_counter()
                    try:
                        client.get("/healthz")
                        health_answers += 1
                        health_max = max(health_max, time.perf_counter() - tick)
                    except httpx.TimeoutException:
                        health_max = max(health_max, 5.0)
                    except httpx.TransportError:
                        pass  # not listening yet: no answer to time
                    try:
                        if client.get("/readyz").status_code == 200:
                            ready_at = time.perf_counter() - t0
                            break
                    except httpx.TransportError:
                        pass
                    time.sleep(max(0.0, interval - (time.perf_counter() - tick)))
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return {"ready_seconds": ready_at, "healthz_max_seconds": health_max, "healthz_answers": health_answers}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--interval", type=float, default=0.05)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args(argv)
    prov = provenance.collect()
    runs = [one_start(args.interval, args.timeout) for _ in range(args.runs)]
    ready = [r["ready_seconds"] for r in runs if r["ready_seconds"] is not None]
    health = [r["healthz_max_seconds"] for r in runs]
    summary = {
        "provenance": prov,
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": f"{platform.node()} ({os.cpu_count()} cores), load average {os.getloadavg()[0]:.1f} at the end",
        "interval_seconds": args.interval, "runs": runs,
        "ready_median_seconds": statistics.median(ready) if ready else None,
        "ready_max_seconds": max(ready) if ready else None,
        "healthz_max_median_seconds": statistics.median(health),
        "healthz_max_seconds": max(health),
        "failed_to_start": len(runs) - len(ready),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "startup.json").write_text(json.dumps(summary, indent=2) + "\n")
    fmt = (lambda v: "—" if v is None else f"{v * 1000:.0f} ms")  # noqa: E731
    lines = [
        "# Start-up: spawn → /readyz 200 (fresh data directory, CPU backend)",
        "",
        provenance.markdown_line(prov),
        "",
        f"Written by `bench/startup.py` on {summary['when']}; {summary['host']}; probes every "
        f"{args.interval * 1000:.0f} ms. Targets: ready ≤ 3 s, slowest /healthz < 100 ms.",
        "",
        "| run | ready after | slowest /healthz | /healthz answers |",
        "|---|---|---|---|",
        *(f"| {i + 1} | {fmt(r['ready_seconds'])} | {fmt(r['healthz_max_seconds'])} | {r['healthz_answers']} |"
          for i, r in enumerate(runs)),
        "",
        f"Median ready {fmt(summary['ready_median_seconds'])} (max {fmt(summary['ready_max_seconds'])}); "
        f"median of the slowest /healthz {fmt(summary['healthz_max_median_seconds'])} "
        f"(max {fmt(summary['healthz_max_seconds'])}); runs that never became ready: {summary['failed_to_start']}.",
    ]
    (args.out / "startup.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if summary["failed_to_start"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
