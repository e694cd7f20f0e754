"""The parent's side of a GPU check: a journal that survives a kill, and steps run in
processes of their own under a timeout.

A lent GPU is rare and a device call is cut at its limit, so nothing may be held back to the
end: every record a step prints is appended to the JSONL journal at once (flushed and
fsync'ed), and the Markdown report is rebuilt from the whole journal after each step.  A
step runs in its own process group, so a device fault (which poisons the CUDA context) or a
hang costs that step only: the parent kills the group when the step's time is up and goes on.

A step's process prints its records on stdout as lines ``@@gpu_check {json}``; anything else
it prints is passed through as log.  The parent adds one ``{"kind": "step", ...}`` record per
step when it ends (status ``ok``, ``failed``, ``timeout`` or ``crashed``), so the journal says
which steps completed even where a step printed nothing.
"""

from __future__ import annotations

import collections
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

#: The prefix of a record line on a step's stdout.
MARK = "@@gpu_check "
#: Step processes running now (the watchdog kills them when the run's cap is reached).
RUNNING: set[subprocess.Popen] = set()


def emit(record: dict) -> None:
    """Print one record for the parent (a step process's side of the protocol)."""
    sys.stdout.write(MARK + json.dumps(record, default=str) + "\n")
    sys.stdout.flush()


class Journal:
    """Records appended to ``<stem>.jsonl``; ``<stem>.md`` rebuilt by ``render(records)``
    after each :meth:`refresh`.  Both are complete files at every moment: the JSONL is
    appended line by line and fsync'ed, the Markdown written beside and renamed."""

    def __init__(self, stem: Path, render: Callable[[list[dict]], str]):
        self.jsonl, self.md = stem.with_suffix(".jsonl"), stem.with_suffix(".md")
        self.jsonl.parent.mkdir(parents=True, exist_ok=True)
        self.render = render
        self.records: list[dict] = []
        self._file = open(self.jsonl, "a", encoding="utf-8")  # noqa: SIM115 (held for the run)
        self._lock = threading.RLock()  # the watchdog may append while an append is under way

    def append(self, record: dict) -> None:
        record = {"t": round(time.time(), 3), **record}
        with self._lock:
            self._file.write(json.dumps(record, default=str) + "\n")
            self._file.flush()
            os.fsync(self._file.fileno())
            self.records.append(record)

    def refresh(self) -> None:
        """Rebuild the Markdown report from every record so far."""
        with self._lock:
            text = self.render(list(self.records))
        tmp = self.md.with_suffix(".md.tmp")
        tmp.write_text(text)
        os.replace(tmp, self.md)

    def close(self) -> None:
        self.refresh()
        self._file.close()


def run_step(name: str, cmd: list[str], timeout: float, journal: Journal, *, env: dict | None = None,
             echo: Callable[[str], None] = print) -> dict:
    """Run ``cmd`` (a step process) for at most ``timeout`` seconds, journalling each record
    it prints as it comes; return (and journal) the step's own record: ``status`` ``ok`` when
    it exited 0, ``failed`` for another exit status, ``timeout`` when it was killed at its
    limit, ``crashed`` when it died of a signal; ``seconds``; the last lines of its stderr."""
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    RUNNING.add(proc)
    try:
        return _follow(name, proc, timeout, journal, echo, t0)
    finally:
        RUNNING.discard(proc)


def _follow(name: str, proc: subprocess.Popen, timeout: float, journal: Journal, echo: Callable[[str], None],
            t0: float) -> dict:
    lines: queue.Queue[tuple[str, str | None]] = queue.Queue()
    tail: collections.deque[str] = collections.deque(maxlen=30)

    def read(stream, tag: str) -> None:
        for line in stream:
            lines.put((tag, line.rstrip("\n")))
        lines.put((tag, None))

    readers = [threading.Thread(target=read, args=(proc.stdout, "out"), daemon=True),
               threading.Thread(target=read, args=(proc.stderr, "err"), daemon=True)]
    for r in readers:
        r.start()
    def handle(tag: str, line: str) -> None:
        if tag == "out" and line.startswith(MARK):
            try:
                journal.append({"step": name, **json.loads(line[len(MARK):])})
            except json.JSONDecodeError:
                tail.append(f"unreadable record: {line[:200]}")
        else:
            tail.append(line)
            echo(f"  {name}: {line}")

    open_streams, status = 2, None
    while open_streams:
        left = timeout - (time.monotonic() - t0)
        try:
            tag, line = lines.get(timeout=max(0.01, left))
        except queue.Empty:
            kill_group(proc)
            status = "timeout"
            break
        if line is None:
            open_streams -= 1
        else:
            handle(tag, line)
    if status == "timeout":  # what it printed before it was killed is kept
        for r in readers:
            r.join(2)
        while True:
            try:
                tag, maybe = lines.get_nowait()
            except queue.Empty:
                break
            if maybe is not None:
                handle(tag, maybe)
    try:
        rc = proc.wait(timeout=max(1.0, timeout - (time.monotonic() - t0)))
    except subprocess.TimeoutExpired:
        kill_group(proc)
        rc, status = proc.wait(), "timeout"
    if status is None:
        status = "ok" if rc == 0 else ("crashed" if rc < 0 else "failed")
    record = {"kind": "step", "step": name, "status": status, "rc": rc,
              "seconds": round(time.monotonic() - t0, 2), "stderr_tail": list(tail)[-12:]}
    journal.append(record)
    journal.refresh()
    return record


def kill_running() -> None:
    """SIGKILL every step process running now (the watchdog's last act)."""
    for proc in list(RUNNING):
        kill_group(proc)


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL ``proc``'s process group (the step and anything it started)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
