"""Retention: deletes receipts past the configured age or count from a background thread."""

from __future__ import annotations

import logging
import threading
import time

from app.engine.receipts.store import ReceiptStore

log = logging.getLogger("zapverify.store")


class Pruner:
    """Applies the retention limits every ``interval_seconds`` from a daemon thread.

    Args:
        store: the store to prune.
        max_age_seconds / max_rows: the limits, 0 for none.  With both 0 the thread is
            not started.
        interval_seconds: time between runs; the first run is at start.

    ``pruned_total`` counts deleted receipts and ``runs_total`` completed runs.  A failing
    run is logged and retried at the next interval.
    """

    def __init__(self, store: ReceiptStore, *, max_age_seconds: float = 0, max_rows: int = 0,
                 interval_seconds: float = 60.0):
        self.store = store
        self.max_age_seconds = max_age_seconds
        self.max_rows = max_rows
        self.interval_seconds = max(interval_seconds, 0.01)
        self.pruned_total = 0
        self.runs_total = 0
        self.errors_total = 0
        self._stop = threading.Event()
        self._ran = threading.Condition()
        self._thread: threading.Thread | None = None

    @property
    def enabled(self) -> bool:
        return self.max_age_seconds > 0 or self.max_rows > 0

    def run_once(self) -> int:
        """Prune now, in the calling thread; returns how many receipts were deleted."""
        n = self.store.prune(max_age_seconds=self.max_age_seconds, max_rows=self.max_rows)
        with self._ran:
            self.pruned_total += n
            self.runs_total += 1
            self._ran.notify_all()
        if n:
            log.info("retention: pruned %d receipts", n)
        return n

    def start(self) -> None:
        if not self.enabled or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._loop, name="zapverify-pruner", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception as exc:  # the store may be down for a while; try again later
                self.errors_total += 1
                log.warning("retention: prune failed: %s", exc)
            self._stop.wait(self.interval_seconds)

    def wait_for_runs(self, runs: int, timeout: float) -> bool:
        """Block until at least ``runs`` runs completed or ``timeout`` seconds passed."""
        deadline = time.monotonic() + timeout
        with self._ran:
            while self.runs_total < runs:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._ran.wait(left)
        return True

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the thread (waits for a run in progress to finish, up to ``timeout`` s)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
