"""Shadow verification: accelerated verdicts re-checked on the CPU reference at run time
(docs/architecture.md, "Shadow verification"; settings in docs/operations.md, "Shadow verification").

Start-up known answers prove a kernel right once; a device can go wrong afterwards (marginal
parts, bad memory, a driver update).  So a sample of every batch an accelerated backend (any
backend but ``cpu``) verified is verified again, item by item, by the CPU reference
(:func:`app.engine.reference.reference.verifier`; for BLS12-381, blst's CoreVerify at the CPU
backend's rate where its loop is loaded, :func:`app.engine.backends.native_bls.verifier`, with
the same verdicts; not through the CPU backend's worker pool, so the check never takes the
fallback's workers):

* per batch of ``n`` items, ``max(min_per_batch, rate · n)`` distinct items (``rate · n``
  rounded up or down at random, so its mean is exactly ``rate · n``), chosen by a CSPRNG
  (:class:`secrets.SystemRandom`) so an input cannot steer around the sample;
* while a (backend, scheme) is within its first ``warmup_items`` items, also every item of
  those whose accelerated verdict is ``True`` (a wrong ``True`` is the error that matters).

``async`` mode (default): the sampled items are copied (a batch's columns may be pool memory
that is reused once it is answered) onto a bounded queue of ``queue_items`` items, which one
daemon thread drains; a sample that finds the queue full is dropped and counted, never waited
for.  ``sync`` mode: the sampled items are checked before the engine returns, and the engine
re-runs a batch with a mismatch on the CPU (no wrong verdict is ever answered).

A mismatch calls the engine's ``on_mismatch(backend, scheme_id, mismatch)``, which degrades
the scheme on that backend, and is logged, counted, kept (the last :data:`KEPT_MISMATCHES`)
and reported to the batch's :class:`ShadowTicket`, through which the pipeline records it on
the batch's receipt.

This module imports no web framework and no receipt store.
"""

from __future__ import annotations

import logging
import math
import queue
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

import numpy as np

from app.core.batch import Batch
from app.core.errors import ConfigError
from app.engine.backends import native_bls

log = logging.getLogger("zapverify.shadow")

#: Mismatches kept for inspection (/v1/status), newest last.
KEPT_MISMATCHES = 100

MODES = ("async", "sync")


@dataclass(frozen=True)
class ShadowConfig:
    """The shadow checker's settings (``ZAPVERIFY_SHADOW_*``).

    Attributes:
        rate: fraction of each accelerated batch's items checked, 0..1 (0 with
            ``min_per_batch`` 0 and ``warmup_items`` 0 turns the check off).
        min_per_batch: items checked per accelerated batch at least (capped at its size).
        warmup_items: per (backend, scheme), the first this many items are in warm-up: every
            one of them with a ``True`` verdict is checked.
        mode: ``async`` (checked off the request's path) or ``sync`` (before it is answered).
        queue_items: most sampled items waiting for the async worker; more are dropped.
    """

    rate: float = 0.001
    min_per_batch: int = 1
    warmup_items: int = 10000
    mode: Literal["async", "sync"] = "async"
    queue_items: int = 4096

    def validate(self) -> ShadowConfig:
        """This configuration; raises :class:`ConfigError` naming the setting that is out of range."""
        if not (isinstance(self.rate, int | float) and 0.0 <= self.rate <= 1.0 and not math.isnan(self.rate)):
            raise ConfigError(f"shadow rate {self.rate!r} is not a fraction in [0, 1]", field="shadow_rate")
        if not isinstance(self.min_per_batch, int) or self.min_per_batch < 0:
            raise ConfigError(f"shadow min_per_batch {self.min_per_batch!r} is not an integer >= 0",
                              field="shadow_min_per_batch")
        if not isinstance(self.warmup_items, int) or self.warmup_items < 0:
            raise ConfigError(f"shadow warmup_items {self.warmup_items!r} is not an integer >= 0",
                              field="shadow_warmup_items")
        if self.mode not in MODES:
            raise ConfigError(f"shadow mode {self.mode!r} is not one of {', '.join(MODES)}", field="shadow_mode")
        if not isinstance(self.queue_items, int) or self.queue_items < 1:
            raise ConfigError(f"shadow queue_items {self.queue_items!r} is not an integer >= 1",
                              field="shadow_queue_items")
        return self

    @property
    def enabled(self) -> bool:
        """Whether any item is ever checked."""
        return self.rate > 0 or self.min_per_batch > 0 or self.warmup_items > 0


@dataclass
class Mismatch:
    """One item whose accelerated verdict the CPU reference contradicted.

    Attributes:
        time: when it was found, seconds since the epoch.
        scheme / backend: the scheme and the accelerated backend that gave ``accelerated``.
        index: the item's position in the batch the backend verified.
        batch_items: that batch's size.
        accelerated / reference: the backend's verdict and the CPU reference's.
        corrected: the answer did not carry the wrong verdict (``sync`` mode re-ran the batch
            on the CPU before it was answered).
        batch_id / item: the receipt (batch id) and item index in it that answered the
            verdict, once the pipeline bound the batch (None until then, or without a pipeline).
    """

    time: float
    scheme: str
    backend: str
    index: int
    batch_items: int
    accelerated: bool
    reference: bool
    corrected: bool = False
    batch_id: str | None = None
    item: int | None = None

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["time"] = iso(self.time)
        return out


def iso(t: float) -> str:
    """``t`` (seconds since the epoch) as an RFC 3339 UTC time."""
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


#: What a ticket hands its sink: (index in the work the engine was given, the mismatch).
Found = tuple[int, Mismatch]


class ShadowTicket:
    """The shadow checks of one engine call (:meth:`Engine.run`):
    mismatches reported at any time (inline in ``sync`` mode, later from the worker in
    ``async`` mode) reach the sink given to :meth:`bind` exactly once, whether they were found
    before or after it was bound.  Indices are positions in the work the engine was given
    (the request's items for a mixed list)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: list[Found] = []
        self._sink: Callable[[list[Found]], None] | None = None
        self.found: list[Found] = []  # every mismatch reported, for the caller and tests

    def report(self, found: Sequence[Found]) -> None:
        """Mismatches of this call's items; passed on to the sink (or held until one is bound)."""
        if not found:
            return
        with self._lock:
            self.found.extend(found)
            sink = self._sink
            if sink is None:
                self._held.extend(found)
                return
        self._deliver(sink, list(found))

    def bind(self, sink: Callable[[list[Found]], None]) -> None:
        """Send every mismatch of this call, held and future, to ``sink`` (called on the
        reporting thread; its errors are logged, never raised).  Bind once."""
        with self._lock:
            if self._sink is not None:
                raise RuntimeError("a shadow ticket is bound once")
            self._sink, held, self._held = sink, self._held, []
        if held:
            self._deliver(sink, held)

    @staticmethod
    def _deliver(sink: Callable[[list[Found]], None], found: list[Found]) -> None:
        try:
            sink(found)
        except Exception:  # a receipt store that is down must not kill the checker
            log.exception("recording %d shadow mismatch(es) failed", len(found))


class ShadowListener(Protocol):
    """Where the checker counts (the engine's :class:`app.engine.stats.Stats`)."""

    def record_shadow(self, scheme: str, backend: str, checked: int, mismatches: int, dropped: int) -> None: ...


@dataclass
class _Counts:
    checked: int = 0
    mismatches: int = 0
    dropped: int = 0


@dataclass(eq=False)
class _Job:
    """One sampled item, copied out of its batch (async mode)."""

    backend: str
    scheme: Any  # app.core.schemes.Scheme
    index: int
    batch_items: int
    pk: bytes
    msg: bytes
    sig: bytes
    ctx: bytes
    options: dict[str, bool]  # the reference verifier's options (Scheme.verifier_options)
    got: bool
    ticket: ShadowTicket | None
    where: int  # the item's index in the ticket's work


_STOP = object()


@dataclass
class ShadowChecker:
    """Samples accelerated batches and checks them on the CPU reference (see the module doc).

    Args:
        config: a :class:`ShadowConfig` (validated here).
        on_mismatch: ``(backend, scheme_id, mismatch)``, called once per mismatch on the
            thread that found it (the engine degrades the scheme there).
        listener: counts checked, mismatched and dropped items (the engine's stats), or None.
    """

    config: ShadowConfig
    on_mismatch: Callable[[str, str, Mismatch], None]
    listener: ShadowListener | None = None
    _rng: secrets.SystemRandom = field(default_factory=secrets.SystemRandom)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _seen: dict[tuple[str, str], int] = field(default_factory=dict)
    _counts: dict[tuple[str, str], _Counts] = field(default_factory=dict)
    _dropped: int = 0
    _mismatches: deque[Mismatch] = field(default_factory=lambda: deque(maxlen=KEPT_MISMATCHES))
    _queue: queue.Queue | None = None
    _worker: threading.Thread | None = None

    def __post_init__(self) -> None:
        self.config.validate()
        if self.config.mode == "async":
            self._queue = queue.Queue(maxsize=self.config.queue_items)

    # ------------------------------------------------------------------ sampling
    def choose(self, backend: str, scheme_id: str, verdicts: np.ndarray) -> np.ndarray:
        """Sorted distinct indices (``int64[k]``) of a batch with these accelerated
        ``verdicts`` (``bool[n]``) to check: the random sample, plus the ``True`` verdicts
        that fall in the (backend, scheme)'s warm-up.  Counts the batch's items as seen."""
        cfg, n = self.config, int(verdicts.shape[0])
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        expected = cfg.rate * n
        k = int(expected) + (1 if self._rng.random() < expected - int(expected) else 0)
        k = min(n, max(cfg.min_per_batch, k))
        picked = np.fromiter(self._rng.sample(range(n), k), dtype=np.int64, count=k)
        with self._lock:
            seen = self._seen.get((backend, scheme_id), 0)
            self._seen[(backend, scheme_id)] = seen + n
        warm = max(0, min(n, cfg.warmup_items - seen))
        if warm:
            picked = np.union1d(picked, np.flatnonzero(verdicts[:warm]))
        return np.unique(picked)

    # ------------------------------------------------------------------ checking
    def check(self, backend: str, batch: Batch, verdicts: np.ndarray, ticket: ShadowTicket | None,
              where: np.ndarray | None = None) -> list[Mismatch]:
        """Shadow-check ``batch`` as ``backend`` verified it (``verdicts``: ``bool[len(batch)]``).

        ``where`` maps the batch's item i to ``where[i]``, its index in the ticket's work
        (None: the same index).  ``sync`` mode: checks the sample now and returns its
        mismatches (the caller re-runs the batch on the CPU and reports them to the ticket,
        corrected).  ``async`` mode: queues the sample and returns ``[]`` at once (a full
        queue drops the rest, counted); mismatches reach the ticket from the worker."""
        cfg = self.config
        if not cfg.enabled:
            return []
        idx = self.choose(backend, batch.scheme.id, verdicts)
        if idx.size == 0:
            return []
        if cfg.mode == "sync":
            verify = native_bls.verifier(batch.scheme)
            found = []
            for i in idx.tolist():
                got = bool(verdicts[i])
                want = self._reference(verify, bytes(batch.pks[i]), bytes(batch.message(i)), bytes(batch.sigs[i]),
                                       batch.ctx, batch.scheme.verifier_options(batch))
                if want is None:
                    continue
                if got != want:
                    m = Mismatch(time.time(), batch.scheme.id, backend, i, len(batch), got, want, corrected=True)
                    found.append(m)
                    self._mismatched(m)
            self._count(backend, batch.scheme.id, checked=int(idx.size), mismatches=len(found))
            return found
        self._enqueue(backend, batch, verdicts, idx, ticket, where)
        return []

    def _enqueue(self, backend: str, batch: Batch, verdicts: np.ndarray, idx: np.ndarray,
                 ticket: ShadowTicket | None, where: np.ndarray | None) -> None:
        assert self._queue is not None
        self._ensure_worker()
        for pos, i in enumerate(idx.tolist()):
            # Copied now: the batch's columns may be pool memory reused once it is answered.
            job = _Job(backend, batch.scheme, i, len(batch), bytes(batch.pks[i]), bytes(batch.message(i)),
                       bytes(batch.sigs[i]), batch.ctx, batch.scheme.verifier_options(batch), bool(verdicts[i]),
                       ticket, i if where is None else int(where[i]))
            try:
                self._queue.put_nowait(job)
            except queue.Full:
                self._drop(backend, batch.scheme.id, int(idx.size) - pos)
                return

    def _drop(self, backend: str, scheme_id: str, n: int) -> None:
        with self._lock:
            self._dropped += n
            self._counts.setdefault((backend, scheme_id), _Counts()).dropped += n
        log.debug("shadow queue full: %d sampled %s item(s) of %s dropped", n, scheme_id, backend)
        if self.listener is not None:
            self.listener.record_shadow(scheme_id, backend, 0, 0, n)

    def _ensure_worker(self) -> None:
        with self._lock:
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._work, name="zv-shadow", daemon=True)
                self._worker.start()

    def _work(self) -> None:
        assert self._queue is not None
        while True:
            job = self._queue.get()
            try:
                if job is _STOP:
                    return
                self._check_job(job)
            except Exception:  # one bad sample must not stop the checker
                log.exception("shadow check failed")
            finally:
                self._queue.task_done()

    def _check_job(self, job: _Job) -> None:
        want = self._reference(native_bls.verifier(job.scheme), job.pk, job.msg, job.sig, job.ctx, job.options)
        if want is None:
            return
        if want == job.got:
            self._count(job.backend, job.scheme.id, checked=1, mismatches=0)
            return
        m = Mismatch(time.time(), job.scheme.id, job.backend, job.index, job.batch_items, job.got, want)
        self._count(job.backend, job.scheme.id, checked=1, mismatches=1)
        self._mismatched(m)
        if job.ticket is not None:
            job.ticket.report([(job.where, m)])

    @staticmethod
    def _reference(verify: Callable[..., bool], pk: bytes, msg: bytes, sig: bytes, ctx: bytes,
                   options: dict[str, bool]) -> bool | None:
        """The reference verdict, or None (logged) where the reference itself raised: a
        reference that cannot answer proves nothing about the accelerator."""
        try:
            return bool(verify(pk, msg, sig, ctx, **options))
        except Exception:
            log.exception("CPU reference raised during a shadow check; item not counted")
            return None

    def _count(self, backend: str, scheme_id: str, *, checked: int, mismatches: int) -> None:
        with self._lock:
            c = self._counts.setdefault((backend, scheme_id), _Counts())
            c.checked += checked
            c.mismatches += mismatches
        if self.listener is not None:
            self.listener.record_shadow(scheme_id, backend, checked, mismatches, 0)

    def _mismatched(self, m: Mismatch) -> None:
        log.error("shadow check: %s on %s gave %s for item %d of a %d-item batch, the CPU reference %s; "
                  "%s degraded to the CPU", m.scheme, m.backend, m.accelerated, m.index, m.batch_items,
                  m.reference, m.scheme)
        with self._lock:
            self._mismatches.append(m)
        self.on_mismatch(m.backend, m.scheme, m)

    # ------------------------------------------------------------------ reading
    def drain(self, timeout: float = 10.0) -> bool:
        """Wait until every queued sample was checked (tests, benchmarks); False on timeout."""
        if self._queue is None:
            return True
        deadline = time.monotonic() + timeout
        with self._queue.all_tasks_done:
            while self._queue.unfinished_tasks:
                left = deadline - time.monotonic()
                if left <= 0 or not self._queue.all_tasks_done.wait(left):
                    return self._queue.unfinished_tasks == 0
        return True

    def pending(self) -> int:
        """Sampled items waiting for the async worker."""
        return 0 if self._queue is None else self._queue.qsize()

    def mismatches(self) -> list[Mismatch]:
        """The last :data:`KEPT_MISMATCHES` mismatches, oldest first."""
        with self._lock:
            return list(self._mismatches)

    def counts(self) -> dict[str, dict[str, dict[str, int]]]:
        """``{scheme: {backend: {"checked", "mismatches", "dropped"}}}`` since start."""
        with self._lock:
            out: dict[str, dict[str, dict[str, int]]] = {}
            for (backend, scheme_id), c in self._counts.items():
                out.setdefault(scheme_id, {})[backend] = asdict(c)
            return out

    @property
    def dropped(self) -> int:
        """Sampled items dropped because the queue was full, since start."""
        with self._lock:
            return self._dropped

    def close(self) -> None:
        """Stop the worker once the samples queued before it are checked (it is a daemon:
        the process does not wait for it)."""
        if self._queue is not None and self._worker is not None and self._worker.is_alive():
            try:
                self._queue.put_nowait(_STOP)
            except queue.Full:
                pass  # a daemon thread; it dies with the process
