"""The verify worker: takes frames out of the ring, verifies them, answers each one.

One worker thread loops over :meth:`app.engine.ingest.ring.Ring.take`, which hands it the frames
that are waiting (up to ``max_frames``), lingering up to ``linger`` seconds for more so
that small frames can share a batch.  For those frames it:

1. takes each buffer over from the receive thread (owner ``ingest`` → ``dispatch``) and
   decodes the frame in place (:func:`app.wire.zap.decode_request`: the columns are views
   of the pool buffer); a frame that breaks ZAP v1 is answered with an error frame;
2. groups the frames by batch key and joins consecutive frames of one group into batches
   of at most ``max_items`` items (:func:`app.engine.ingest.coalesce.join`, into a pool buffer);
   a frame of ``max_items`` or more goes alone and is verified where it lies;
3. verifies each batch on the path every transport shares
   (:func:`app.engine.pipeline.verify_parts`, owner ``backend``): verdicts and leaves split
   per frame, each with its own Merkle root;
4. hands the batch to its recorder thread (:func:`app.engine.pipeline.record`, owner
   ``store``) and goes on with the next batch: the recorder writes one receipt per frame
   (one transaction per batch, joined with other writers' by the store's group commit)
   before any of them is answered, lists each frame in the dashboard's recent batches with
   its transport as ``source``, and answers — a frame whose receipt cannot be written is
   answered ``STORE_UNAVAILABLE``, never with verdicts.  So the receipt write is off the
   verify path: batch k+1 verifies while batch k commits.  One recorder thread answers in
   the order the batches were verified; at most ``record_depth`` batches wait for it
   (then the worker waits: back-pressure, not an unbounded queue);
5. each reply goes to the frame's route; the route calls back once the reply is written,
   and only then is the frame's buffer released.

Every frame therefore ends in exactly one outcome of
:data:`app.engine.ingest.counters.OUTCOMES`, counted once.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

from app.core.errors import NotReady, Overloaded, PoolExhausted, StoreUnavailable, ZapVerifyError
from app.engine.ingest.coalesce import batch_key, join, joined_bytes
from app.engine.ingest.counters import TransportCounters
from app.engine.ingest.ring import Entry, Ring
from app.engine.memory.heap import land
from app.engine.memory.pool import UmaPool
from app.engine.pipeline import Part, Verified, record, verify_parts
from app.engine.receipts.store import ReceiptStore
from app.engine.verify.engine import Engine
from app.wire import zap

log = logging.getLogger("zapverify.ingest")


@dataclass
class _Job:
    entry: Entry
    request: zap.Request
    answered: bool = False


class VerifyWorker:
    """One verify thread over ``ring`` (see the module doc).

    Args:
        ring: where frames come from.
        engine: verifies the batches.
        counters: per transport name, where outcomes are counted.
        pool: the UMA pool joined batches land in (None: heap memory).
        store: receipts are written there; None when receipts are off.
        limits: the ZAP decoder's bounds.
        max_items: largest joined batch, items.
        max_frames: most frames taken from the ring at once.
        linger: how long to wait for more frames to join a batch, seconds.
        record_depth: most verified batches waiting for the recorder thread.
    """

    def __init__(self, ring: Ring, engine: Engine, counters: Mapping[str, TransportCounters], *,
                 pool: UmaPool | None = None, store: ReceiptStore | None = None,
                 limits: zap.Limits = zap.DEFAULT_LIMITS,
                 max_items: int = 1024, max_frames: int = 256, linger: float = 0.0005, name: str = "zv-verify",
                 record_depth: int = 4):
        self.ring, self.engine, self.counters, self.store, self.limits = ring, engine, counters, store, limits
        self.pool = pool
        self.max_items, self.max_frames, self.linger = max_items, max_frames, linger
        self.batches_total = 0
        self.joined_frames_total = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._recorder = ThreadPoolExecutor(1, thread_name_prefix=f"{name}-record")
        self._waiting = threading.BoundedSemaphore(record_depth)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the worker to finish (it does once the ring is closed and empty)."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        try:
            while True:
                entries = self.ring.take(self.max_frames, timeout=0.2, linger=self.linger)
                if not entries:
                    if self.ring.closed and not len(self.ring):
                        return
                    continue
                try:
                    self.process(entries)
                except Exception:  # a bug here must not stop ingest; every frame was answered below
                    log.exception("verify worker failed on %d frames", len(entries))
        finally:
            self._recorder.shutdown(wait=True)  # every verified batch recorded and answered

    # ------------------------------------------------------------------ one take of frames
    def process(self, entries: list[Entry]) -> None:
        """Verify and answer ``entries`` (owner ``ingest``); see the module doc."""
        groups: dict[tuple, list[_Job]] = {}
        for entry in entries:
            entry.buffer.hand_off("dispatch", expected="ingest")
            if not entry.route.alive:
                self._finish(entry, "disconnected", False)
                continue
            try:
                request = zap.decode_request(entry.frame, self.limits)
            except ZapVerifyError as exc:
                self._error(entry, exc, "malformed", zap.peek_request_id(entry.frame))
                continue
            if not self.engine.ready:
                self._error(entry, NotReady("the engine's self-test has not passed yet; retry later"),
                            "not_ready", request.request_id)
                continue
            # Its items and their work are charged now that they are known, as HTTP's are: a
            # frame that would wait past the time bound is refused before it is verified.
            ticket = getattr(entry.buffer, "ticket", None)
            if ticket is not None:
                try:
                    ticket.add_items({request.batch.scheme.id: len(request.batch)})
                except Overloaded as exc:
                    self._error(entry, exc, "overloaded", request.request_id)
                    continue
            groups.setdefault(batch_key(request.batch), []).append(_Job(entry, request))
        for jobs in groups.values():
            for chunk in self._chunks(jobs):
                try:
                    self._verify(chunk)
                except Exception as exc:  # answered, so that no frame waits forever or leaks its buffer
                    log.exception("verifying %d frames failed", len(chunk))
                    for job in chunk:
                        if not job.answered:
                            self._answer_error(job, ZapVerifyError(f"verification failed: {type(exc).__name__}"),
                                               "internal")

    def _chunks(self, jobs: list[_Job]) -> list[list[_Job]]:
        out: list[list[_Job]] = []
        items = 0
        for job in jobs:
            n = len(job.request.batch)
            if out and items + n <= self.max_items:
                out[-1].append(job)
                items += n
            else:
                out.append([job])
                items = n
        return out

    def _verify(self, chunk: list[_Job]) -> None:
        batches = [job.request.batch for job in chunk]
        joined = None
        if len(batches) == 1:
            batch = batches[0]
        else:
            try:
                joined = landed = land(self.pool, joined_bytes(batches), "dispatch", timeout=0)
            except PoolExhausted:  # no room to join them: verify each where it lies
                for job in chunk:
                    self._verify([job])
                return
            batch = join(batches, alloc=lambda n: landed.array)
            self.joined_frames_total += len(batches)
        for job in chunk:
            job.entry.buffer.hand_off("backend", expected="dispatch")
        if joined is not None:
            joined.hand_off("backend", expected="dispatch")

        parts = [Part(len(job.request.batch), job.entry.received, job.entry.transport) for job in chunk]
        try:
            pending = verify_parts(self.engine, batch, parts)
        except ZapVerifyError as exc:
            reason = "not_ready" if isinstance(exc, NotReady) else "malformed"
            for job in chunk:
                self._answer_error(job, exc, reason)
            return
        finally:
            if joined is not None:  # the receipts need only the leaves: the joined copy is done with
                joined.release()
        self.batches_total += 1
        for job in chunk:
            job.entry.buffer.hand_off("store", expected="backend")
        self._waiting.acquire()
        try:
            self._recorder.submit(self._record, chunk, pending)
        except BaseException:
            self._waiting.release()
            raise

    def _record(self, chunk: list[_Job], pending: Verified) -> None:
        """In the recorder thread: receipts, dashboard entries and replies of one batch."""
        try:
            recorded = record(self.engine, self.store, pending)
            for job, rec in zip(chunk, recorded):
                job.answered = True
                batch_id = uuid.UUID(rec.batch_id).bytes if job.request.want_batch_id else None
                job.entry.route.send(bytes(zap.encode_response(job.request.request_id, rec.verdicts, rec.root,
                                                               batch_id)),
                                     partial(self._finish, job.entry, "accepted"))
        except StoreUnavailable as exc:
            for job in chunk:
                self._answer_error(job, exc, "store_unavailable")
        except Exception as exc:  # answered, so that no frame waits forever or leaks its buffer
            log.exception("recording %d frames failed", len(chunk))
            for job in chunk:
                if not job.answered:
                    self._answer_error(job, ZapVerifyError(f"recording failed: {type(exc).__name__}"), "internal")
        finally:
            self._waiting.release()

    # ------------------------------------------------------------------ answers
    def _answer_error(self, job: _Job, exc: ZapVerifyError, reason: str) -> None:
        job.answered = True
        self._error(job.entry, exc, reason, job.request.request_id)

    def _error(self, entry: Entry, exc: ZapVerifyError, reason: str, request_id: int) -> None:
        entry.route.send(bytes(zap.error_frame(exc, request_id)), partial(self._finish, entry, reason))

    def _finish(self, entry: Entry, outcome: str, sent: bool) -> None:
        """The reply of ``entry`` was written (``sent``) or cannot be: release its buffer, count."""
        entry.buffer.release()
        counters = self.counters[entry.transport]
        counters.replied(sent, error=outcome != "accepted")
        counters.finished(outcome if sent else "disconnected")
