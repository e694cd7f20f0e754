"""What the side-by-side benchmarks share: a server on loopback, frames through its TCP ingest,
a peer library's all-cores loop, interleaved rounds and the result pair they write.

- :func:`serve` starts a real uvicorn process (``app.main:create_app``, CPU backend) on
  127.0.0.1 with a fresh data directory and, unless told otherwise, a TCP ZAP ingest port,
  waits until ``/readyz`` answers, and stops it (whole process group) on the way out; when
  the body raises, the tail of the server's log goes to stderr first.
- :func:`send_frames` pipelines copies of one ZAP frame on one TCP ingest connection and
  checks every verdict of every reply.
- :class:`PeerLoop` runs a peer library's single verify in one process per core at once, each
  process an equal share of the items, every verdict checked in the process.
- :func:`interleaved` measures modes in rounds whose order rotates, so that load from
  elsewhere on a shared machine falls on every mode alike; :func:`medians` of the rounds.
- :func:`write_results` writes ``<name>.json`` and ``<name>.md`` into the results folder.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

#: Seconds a pipelined reply may take before a line says when it came (for the server's log).
SLOW_FRAME_SECONDS = 10.0


# ------------------------------------------------------------------ the server
def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listened on a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int, workers: int, log: IO[bytes], extra_env: dict[str, str] | None = None) -> subprocess.Popen:
    """uvicorn with the app on 127.0.0.1:``port``, CPU backend on ``workers`` workers, output to ``log``."""
    env = dict(os.environ, ZAPVERIFY_BACKEND="cpu", ZAPVERIFY_CPU_WORKERS=str(workers),
               ZAPVERIFY_LOG_LEVEL="warning", ZAPVERIFY_MAX_ITEMS="1048576", **(extra_env or {}))
    # Own session and own log: the server's worker processes must not hold our stdout open,
    # and stop_server can end the whole group.
    return subprocess.Popen([sys.executable, "-m", "uvicorn", "app.main:create_app", "--factory", "--host",
                             "127.0.0.1", "--port", str(port), "--log-level", "warning"], cwd=ROOT, env=env,
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)


def stop_server(proc: subprocess.Popen) -> None:
    """Terminate the server (kill after 30 s), then any worker process its group left behind."""
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def wait_ready(client: Any, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    """Poll ``client.ready()`` until true; RuntimeError when the server exits or ``timeout`` s pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        if client.ready():
            return
        time.sleep(0.2)
    raise RuntimeError("the server did not become ready")


@dataclass
class Server:
    """A started server: its HTTP ``port``, its TCP ingest port (None without ingest) and its log."""

    proc: subprocess.Popen
    port: int
    ingest_port: int | None
    log: IO[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_tail(self, chars: int) -> str:
        self.log.seek(0)
        return self.log.read()[-chars:].decode(errors="replace")


@contextmanager
def serve(workers: int, env: dict[str, str] | None = None, *, ingest: bool = True, log_path: Path | None = None,
          data_prefix: str = "zv-bench-", tail: int = 4000) -> Iterator[Server]:
    """A ready server for the body of the ``with``: ``workers`` CPU workers, a fresh data
    directory (``data_prefix``), a TCP ingest port when ``ingest``, ``env`` on top.  Its log
    goes to ``log_path`` (kept) or a temporary file; the last ``tail`` characters of it are
    written to stderr when the body (or the wait for readiness) raises."""
    from zapverify import Client

    port = free_port()
    ingest_port = free_port() if ingest else None
    log = open(log_path, "w+b") if log_path else tempfile.TemporaryFile()
    # A fresh data directory: the receipts go to a new SQLite file, as on a fresh install
    # (an old file keeps the page size it was created with).
    data = tempfile.TemporaryDirectory(prefix=data_prefix)
    full_env = {"ZAPVERIFY_DATA_DIR": data.name} | ({"ZAPVERIFY_INGEST_TCP_PORT": str(ingest_port)} if ingest else {})
    server = Server(start_server(port, workers, log, full_env | (env or {})), port, ingest_port, log)
    try:
        with Client(server.url, timeout=300) as client:
            wait_ready(client, server.proc)
        yield server
    except Exception:
        sys.stderr.write(server.log_tail(tail))
        raise
    finally:
        stop_server(server.proc)
        log.close()
        data.cleanup()


# ------------------------------------------------------------------ frames through TCP ingest
async def pipelined(port: int, frame: bytes, n_frames: int, in_flight: int, want: Sequence[bool]) -> float:
    """Items per second for ``n_frames`` copies of ``frame`` pipelined on one TCP ingest
    connection to 127.0.0.1:``port``, ``in_flight`` at most unanswered; RuntimeError when a
    reply's verdicts differ from ``want`` (one per item of the frame)."""
    from zapverify.ingest import connect

    expected = np.asarray(want, dtype=bool)
    async with connect("tcp", "127.0.0.1", port, max_in_flight=in_flight, timeout=120) as s:
        t0 = time.perf_counter()
        futures = [await s.submit(frame) for _ in range(n_frames)]
        for f in futures:
            r = await f
            if time.perf_counter() - t0 > SLOW_FRAME_SECONDS:  # a stall: when, for the server's log
                print(f"slow frame at {time.strftime('%H:%M:%S')}: {time.perf_counter() - t0:.1f} s", flush=True)
            if not np.array_equal(np.asarray(r.verdicts, dtype=bool), expected):
                raise RuntimeError("a served verdict differs from the expected one")
        return n_frames * len(expected) / (time.perf_counter() - t0)


def send_frames(server: Server, frame: bytes, n_frames: int, in_flight: int, want: Sequence[bool]) -> float:
    """:func:`pipelined` to ``server``'s TCP ingest port, from synchronous code (its own event loop)."""
    if server.ingest_port is None:
        raise ValueError("the server was started without TCP ingest")
    return asyncio.run(pipelined(server.ingest_port, frame, n_frames, in_flight, want))


# ------------------------------------------------------------------ a peer's all-cores loop
_VERIFY: Callable[..., bool] | None = None
_SETS: dict[str, tuple[list[tuple], list[bool]]] = {}


def _peer_init(verify: Callable[..., bool], prepare: Callable[..., tuple] | None,
               sets: dict[str, tuple[list[tuple], list[bool]]]) -> None:
    global _VERIFY
    _VERIFY = verify
    for name, (items, want) in sets.items():
        _SETS[name] = ([prepare(*it) for it in items] if prepare else items, want)


def _peer_share(job: tuple[str, int, int, float]) -> tuple[int, float, float]:
    """In a worker process: items ``lo``..``hi`` of set ``name`` (index mod its length), again
    until ``min_seconds`` have passed; (items verified, start, end)."""
    name, lo, hi, min_seconds = job
    items, want = _SETS[name]
    verify = _VERIFY
    assert verify is not None
    done, t0 = 0, time.perf_counter()
    while True:
        for i in range(lo, hi):
            k = i % len(items)
            if verify(*items[k]) != want[k]:
                raise RuntimeError(f"the peer's verdict on item {k} of set {name!r} is not the expected one")
        done += hi - lo
        t1 = time.perf_counter()
        if t1 - t0 >= min_seconds:
            return done, t0, t1


class PeerLoop:
    """A peer library's single verify in ``workers`` processes (spawned) at once.

    ``sets`` maps a name to (items, expected verdicts); an item is a tuple of bytes handed
    to ``prepare`` once in each process (default: used as is) and its result to ``verify``
    in the timed loop; both must be module-level functions (they are pickled)."""

    def __init__(self, workers: int, verify: Callable[..., bool], sets: dict[str, tuple[list[tuple], list[bool]]],
                 prepare: Callable[..., tuple] | None = None) -> None:
        self.workers = workers
        self.pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                        initializer=_peer_init, initargs=(verify, prepare, sets))

    def rate(self, name: str, items: int, min_seconds: float = 0.0) -> float:
        """Items per second of ``items`` verifies of set ``name`` shared equally by the
        processes (each going on until ``min_seconds``), summed over the span from the first
        start to the last end."""
        cuts = [i * items // self.workers for i in range(self.workers + 1)]
        parts = list(self.pool.map(_peer_share, [(name, lo, hi, min_seconds) for lo, hi in zip(cuts, cuts[1:])]))
        return sum(p[0] for p in parts) / (max(p[2] for p in parts) - min(p[1] for p in parts))

    def close(self) -> None:
        self.pool.shutdown(cancel_futures=True)

    def __enter__(self) -> PeerLoop:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ------------------------------------------------------------------ rounds
def interleaved(modes: dict[str, Callable[[], float]], rounds: int, label: str = "", unit: str = "{:,.0f}/s",
                warm: bool = False) -> dict[str, list[float]]:
    """Each of ``modes`` (name → a call returning one measurement) once per round, the order
    rotating by one each round; the measurements per mode.  A line per round is printed
    (``label``, each value formatted by ``unit``); with ``warm`` every mode runs once first,
    unmeasured (pools started, connections opened, libraries loaded)."""
    if warm:
        for fn in modes.values():
            fn()
    got: dict[str, list[float]] = {m: [] for m in modes}
    order = list(modes)
    for r in range(rounds):
        k = r % len(order)
        for m in order[k:] + order[:k]:
            got[m].append(modes[m]())
        print(f"{label}round {r + 1}/{rounds}: " + "  ".join(f"{m} {unit.format(got[m][-1])}" for m in modes),
              flush=True)
    return got


def medians(got: dict[str, list[float]]) -> dict[str, float]:
    return {m: statistics.median(v) for m, v in got.items()}


# ------------------------------------------------------------------ results
def write_results(out: Path, name: str, result: dict, md: str, indent: int = 2) -> None:
    """``out``/``name``.json (``result``) and ``out``/``name``.md (``md``), and ``md`` printed."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(result, indent=indent) + "\n")
    (out / f"{name}.md").write_text(md)
    print(md)
