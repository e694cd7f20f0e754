"""Receipts: the durable record that a batch was verified (docs/architecture.md, "Merkle leaf and receipts").

A :class:`Receipt` holds what a batch was committed to: its id (a UUIDv7, so ids sort by
time), creation time, schemes, item count, valid count, the RFC 6962 Merkle root, the
verdict bitmap, every leaf hash (so an inclusion proof can be built later), the backends
that ran, the duration and the transport it came in on.  From a stored receipt
:meth:`Receipt.proof` builds the RFC 6962 §2.1.1 audit path of one item; anyone can check
it offline with :func:`app.engine.commit.merkle.verify_inclusion` (re-exported by
``zapverify``).

:class:`ReceiptStore` is the one interface; :func:`app.engine.receipts.open.open_store`
picks the implementation from a URL:

* ``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db`` or ``sqlite:///:memory:``
  — embedded SQLite (:mod:`app.engine.receipts.sqlite`), the default;
* ``postgresql://…`` (or ``postgres://…``) — PostgreSQL through psycopg 3 with a
  connection pool (:mod:`app.engine.receipts.postgres`), shared by replicas.  psycopg is
  imported only then, so the engine runs without it.

Both create or migrate their versioned schema when opened.
:class:`app.engine.receipts.pruner.Pruner` deletes receipts past the retention limits from a
background thread.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

import numpy as np

from app.core.errors import LeafIndexOutOfRange, ReceiptNotFound, RequestError, StoreSchemaTooNew, StoreUnavailable
from app.engine.commit import merkle
from app.engine.commit.proofs import InclusionProof
from app.engine.receipts.group_commit import GroupCommit
from app.engine.receipts.health import Fault, StoreHealth
from app.engine.receipts.ids import new_batch_id
from app.engine.receipts.proof_cache import ProofCache

log = logging.getLogger("zapverify.store")

#: Transports a batch can arrive on (the ``source`` of a receipt).
SOURCES = ("http", "ws", "tcp", "udp", "quic")

#: Most receipts one page of :meth:`ReceiptStore.page` returns.
MAX_PAGE = 1000

#: The orders of :meth:`ReceiptStore.page`: by id (creation time), oldest or newest first.
ORDERS = ("asc", "desc")

#: Rows deleted per statement while pruning, so a prune never holds the write lock long.
PRUNE_CHUNK = 500


# ------------------------------------------------------------------ receipt
@dataclass(frozen=True)
class Receipt:
    """The record of one verified batch.

    Attributes:
        id: UUIDv7 (RFC 9562 §5.7) in canonical lowercase form; ids sort by creation time.
        created_at: timezone-aware UTC time of creation (microsecond resolution).
        schemes: the scheme ids present in the batch, sorted.
        count: number of items, ≥ 1.
        valid: number of items whose verdict is true.
        merkle_root: 32-byte RFC 6962 root over the leaf hashes in item order.
        verdict_bitmap: ``ceil(count / 8)`` bytes; the verdict of item i is bit ``i % 8``
            (least significant first) of byte ``i // 8`` (numpy ``packbits(bitorder="little")``).
        leaves: ``count * 32`` bytes, the leaf hashes back to back; ``None`` when the receipt
            was loaded without them (listings).
        backends: scheme id → name of the backend that ran it (``"cuda"``, ``"cpu"``, or
            ``"cuda+cpu"`` when a batch was split).
        duration_seconds: wall time from receiving the batch to its root, seconds.
        source: the transport, one of :data:`SOURCES`.
        shadow_mismatches: sorted item indices whose verdict in this receipt a shadow check
            (app/engine/verify/shadow.py) found contradicted by the CPU reference, after it
            was answered: the accelerated backend's verdict was wrong, the right one is its
            opposite.  Empty when none (the usual case); may grow after the receipt is written.
        request_id: the id of the request that carried the batch (``X-Request-ID``, given by
            the client or made by the server: app/logs.py), or None (ingest, or written before
            receipts recorded it).

    Raises ``ValueError`` when the fields contradict each other (bitmap length, valid
    count, leaf bytes, unknown source).
    """

    id: str
    created_at: datetime
    schemes: tuple[str, ...]
    count: int
    valid: int
    merkle_root: bytes
    verdict_bitmap: bytes
    leaves: bytes | None
    backends: Mapping[str, str] = field(default_factory=dict)
    duration_seconds: float = 0.0
    source: str = "http"
    shadow_mismatches: tuple[int, ...] = ()
    request_id: str | None = None

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError("a receipt covers at least one item")
        if len(self.merkle_root) != 32:
            raise ValueError("merkle_root must be 32 bytes")
        if len(self.verdict_bitmap) != (self.count + 7) // 8:
            raise ValueError(f"verdict_bitmap must be {(self.count + 7) // 8} bytes for {self.count} items")
        if self.leaves is not None and len(self.leaves) != 32 * self.count:
            raise ValueError(f"leaves must be {32 * self.count} bytes for {self.count} items")
        if self.valid != int(np.count_nonzero(self.verdicts())):
            raise ValueError("valid does not match the verdict bitmap")
        if self.source not in SOURCES:
            raise ValueError(f"source must be one of {', '.join(SOURCES)}")
        if self.created_at.tzinfo is None:
            raise ValueError("created_at must be timezone-aware")
        if any(not 0 <= i < self.count for i in self.shadow_mismatches):
            raise ValueError(f"shadow_mismatches must be item indices in [0, {self.count})")

    @classmethod
    def build(cls, *, verdicts: np.ndarray | Sequence[bool], leaves: np.ndarray, merkle_root: bytes,
              schemes: Sequence[str], backends: Mapping[str, str] | None = None,
              duration_seconds: float = 0.0, source: str = "http", id: str | None = None,
              created_at: datetime | None = None, request_id: str | None = None) -> Receipt:
        """A receipt from an engine result.

        Args:
            verdicts: ``bool[N]`` in item order.
            leaves: ``uint8[N, 32]`` leaf hashes (``Committed.leaves`` of :mod:`app.engine.verify.verdicts`).
            merkle_root: the 32-byte root of ``leaves``.
            schemes: scheme ids of the items (repeats are fine).
            id: the batch id; a new UUIDv7 when omitted.
            created_at: defaults to now (UTC).
            request_id: the carrying request's id (see the class doc).
        """
        v = np.asarray(verdicts, dtype=bool).reshape(-1)
        lv = np.ascontiguousarray(leaves, dtype=np.uint8)
        if lv.shape != (v.size, 32):
            raise ValueError(f"leaves must be uint8[{v.size}, 32], got {lv.shape}")
        return cls(id=id or new_batch_id(), created_at=created_at or datetime.now(UTC),
                   schemes=tuple(sorted(set(schemes))), count=int(v.size),
                   valid=int(np.count_nonzero(v)), merkle_root=bytes(merkle_root),
                   verdict_bitmap=np.packbits(v, bitorder="little").tobytes(), leaves=lv.tobytes(),
                   backends=dict(backends or {}), duration_seconds=float(duration_seconds),
                   source=source, request_id=request_id)

    def verdicts(self) -> np.ndarray:
        """``bool[count]`` verdicts unpacked from the bitmap."""
        bits = np.unpackbits(np.frombuffer(self.verdict_bitmap, np.uint8), bitorder="little")
        return bits[:self.count].astype(bool)

    def verdict(self, index: int) -> bool:
        return bool(self.verdict_bitmap[index >> 3] >> (index & 7) & 1)

    def leaf(self, index: int) -> bytes:
        if self.leaves is None:
            raise ValueError("receipt loaded without its leaf hashes")
        return self.leaves[32 * index:32 * index + 32]

    def leaf_array(self) -> np.ndarray:
        """``uint8[count, 32]`` view of the leaf hashes."""
        if self.leaves is None:
            raise ValueError("receipt loaded without its leaf hashes")
        return np.frombuffer(self.leaves, np.uint8).reshape(self.count, 32)

    def proof(self, index: int) -> InclusionProof:
        """The inclusion proof of item ``index`` (RFC 6962 §2.1.1 audit path).

        Raises :class:`app.core.errors.LeafIndexOutOfRange` outside ``[0, count)``.
        """
        self.check_index(index)
        path = merkle.audit_path(self.leaf_array(), index)
        return InclusionProof(self.id, index, self.count, self.leaf(index), path, self.merkle_root,
                              self.verdict(index))

    def check_index(self, index: int) -> None:
        """Raise :class:`app.core.errors.LeafIndexOutOfRange` outside ``[0, count)``."""
        if not 0 <= index < self.count:
            raise LeafIndexOutOfRange(f"index {index} outside [0, {self.count}) of receipt {self.id}",
                                      field="index")

    def to_json(self) -> dict:
        """JSON form (without leaf hashes): root and bitmap as lowercase hex; with
        ``shadow_mismatches_note`` (:data:`SHADOW_SAMPLE_NOTE`) where a shadow check listed
        items, null otherwise."""
        return {"id": self.id, "created_at": self.created_at.isoformat().replace("+00:00", "Z"),
                "schemes": list(self.schemes), "count": self.count, "valid": self.valid,
                "merkle_root": self.merkle_root.hex(), "verdict_bitmap": self.verdict_bitmap.hex(),
                "backends": dict(self.backends), "duration_seconds": self.duration_seconds,
                "source": self.source, "shadow_mismatches": list(self.shadow_mismatches),
                "shadow_mismatches_note": SHADOW_SAMPLE_NOTE if self.shadow_mismatches else None,
                "request_id": self.request_id}


#: What a receipt with ``shadow_mismatches`` says of them: a shadow check re-verifies a sample
#: of a batch's items, so the list is what that sample found, not every wrong verdict of the
#: batch (an inverting device once showed 33 of 64 items, the ones sampled, with no word of it).
SHADOW_SAMPLE_NOTE = ("a sample: the shadow check re-verified some of this batch's items on the CPU and found "
                      "these verdicts wrong (the right one is the opposite); items it did not sample were not "
                      "checked and may be wrong too, so re-verify the whole batch")


#: Column order of the ``receipts`` table that both stores read and write.
COLUMNS = ("id", "created_us", "schemes", "item_count", "valid_count", "merkle_root",
           "verdict_bitmap", "leaves", "backends", "duration_seconds", "source", "request_id")


def receipt_row(r: Receipt) -> tuple:
    """``r`` as a row in :data:`COLUMNS` order (id as text, times in µs, JSON backends)."""
    return (r.id, to_micros(r.created_at), ",".join(r.schemes), r.count, r.valid, r.merkle_root,
            r.verdict_bitmap, r.leaves, json.dumps(dict(r.backends), sort_keys=True),
            r.duration_seconds, r.source, r.request_id)


#: The table of shadow mismatches, one row per (receipt, item index), written after the
#: receipt (app/engine/verify/shadow.py finds them after the answer); both stores.
SHADOW_TABLE = "shadow_mismatches"


def receipt_from_row(row: Sequence, shadow_mismatches: Sequence[int] = ()) -> Receipt:
    """The inverse of :func:`receipt_row`; ``leaves`` may be ``None`` (not selected);
    ``shadow_mismatches``: the item indices of the receipt's rows in :data:`SHADOW_TABLE`."""
    (rid, created_us, schemes, count, valid, root, bitmap, leaves, backends, duration,
     source, request_id) = row
    return Receipt(id=str(rid), created_at=from_micros(created_us),
                   schemes=tuple(s for s in schemes.split(",") if s), count=int(count),
                   valid=int(valid), merkle_root=bytes(root), verdict_bitmap=bytes(bitmap),
                   leaves=None if leaves is None else bytes(leaves), backends=json.loads(backends),
                   duration_seconds=float(duration), source=source, request_id=request_id,
                   shadow_mismatches=tuple(sorted({int(i) for i in shadow_mismatches})))


def canonical_id(value: str, field: str = "id") -> str:
    """``value`` as a canonical lowercase UUID string; raises :class:`RequestError` naming
    ``field`` when it is not a UUID."""
    try:
        return str(uuid.UUID(value))
    except (ValueError, TypeError, AttributeError):
        raise RequestError(f"{field} must be a UUID such as 01890a5d-ac96-774b-bcce-b302099a8057",
                           field=field) from None


def to_micros(t: datetime) -> int:
    """Microseconds since the Unix epoch (how both stores keep times)."""
    return (t - _EPOCH) // _MICRO


def from_micros(us: int) -> datetime:
    return _EPOCH + int(us) * _MICRO


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICRO = datetime.resolution  # one microsecond


# ------------------------------------------------------------------ interface
class StoreListener(Protocol):
    """What :meth:`ReceiptStore.add_listener` accepts (app/api/metrics.py times writes with it;
    the engine never imports a metrics library).  Called on the writing thread after each
    write, so it must be quick and must not raise."""

    def store_write(self, receipts: int, seconds: float, ok: bool) -> None: ...


class ReceiptStore(ABC):
    """Where receipts live.  Thread-safe; every method may raise
    :class:`app.core.errors.StoreUnavailable` when the database cannot be reached or written.

    Attributes:
        kind: ``"sqlite"`` or ``"postgresql"``.
        url: the URL the store was opened with, password removed.
        health: whether the store can be written now (:class:`StoreHealth`): a write that
            fails for a fault of the store marks it down, writes are then refused at once
            (``StoreUnavailable`` with ``retry_after`` and ``reason``) until a probe finds
            it recovered; ``/readyz`` and ``zapverify_receipt_store_up`` show it.
    """

    kind: str
    url: str
    #: Rows deleted per statement while pruning (see :data:`PRUNE_CHUNK`).
    prune_chunk: int = PRUNE_CHUNK
    #: Seconds between two probes of a store that is down, and the ``Retry-After`` its refusals carry.
    probe_interval: float = 1.0

    def __init__(self) -> None:
        self.health = StoreHealth(self._probe, self._classify, probe_interval=self.probe_interval,
                                  retry_after=self.probe_interval, name=f"{self.kind} receipt store")
        #: Joins concurrent writers' receipts into one transaction (group_commit.py); each
        #: group asks the health gate first.
        self.group_commit = GroupCommit(self._insert, gate=self.health.gate)
        self._listeners: list[StoreListener] = []
        #: The tree levels that make inclusion proofs O(log n) (proof_cache.py); its bound is
        #: the settings' (app/main.py sets ``proofs.max_bytes``).
        self.proofs = ProofCache()

    def add_listener(self, listener: StoreListener) -> None:
        """Tell ``listener`` of every write from now on (once, however often added)."""
        if listener not in self._listeners:
            self._listeners = [*self._listeners, listener]

    @abstractmethod
    def _classify(self, exc: BaseException) -> Fault | None:
        """The store fault ``exc`` (an exception of the database driver) shows, or ``None``
        when it is the request's doing (a repeated id) or the store was closed."""

    @abstractmethod
    def _probe(self, down_reason: str | None) -> None:
        """Raise the driver's exception unless the store can serve; bounded in time (about
        a second).  ``down_reason``: why it is down (:data:`app.engine.receipts.health.REASONS`),
        ``None`` while up."""

    def _failure(self, exc: BaseException, what: str) -> StoreUnavailable:
        """The error to raise for driver exception ``exc`` during ``what`` ("read", "write");
        a store fault marks :attr:`health` down (its message names the reason)."""
        fault = self._classify(exc)
        if fault is None:  # the driver's words stay in the log (they may name the database)
            log.warning("%s receipt store %s failed: %s", self.kind, what, exc)
            return StoreUnavailable(f"the receipt store failed a {what}")
        self.health.failed(fault)
        return self.health.error(fault)

    def put(self, receipt: Receipt) -> None:
        """Write ``receipt`` durably: when this returns, the commit is on stable storage.

        Raises :class:`StoreUnavailable` on any failure, a repeated id included.
        """
        self.put_many([receipt])

    def put_many(self, receipts: Sequence[Receipt]) -> None:
        """Write ``receipts`` durably, all or none, in one transaction (one fsync for a whole
        coalesced batch of frames), joined with those of other threads writing at the same
        time (group commit: :class:`GroupCommit`); returns once they are committed.

        Raises :class:`StoreUnavailable` on any failure, a repeated id included (a joined
        group is written or failed as one).
        """
        if any(r.leaves is None for r in receipts):
            raise StoreUnavailable("a receipt is written with its leaf hashes")
        # Down: refused at once (no connect timeout per request), unless a probe is due and succeeds.
        self.health.gate()
        t0, ok = time.perf_counter(), False
        try:
            self.group_commit.write([receipt_row(r) for r in receipts])
            ok = True
            self.proofs.written(receipts)
        finally:
            for listener in self._listeners:
                try:
                    listener.store_write(len(receipts), time.perf_counter() - t0, ok)
                except Exception:  # an observer must never fail a write
                    log.exception("store listener %r failed", listener)

    @abstractmethod
    def _insert(self, rows: list[tuple]) -> None:
        """Insert ``rows`` (:func:`receipt_row` tuples) in one committed transaction;
        raises :class:`StoreUnavailable` on any failure."""

    def add_shadow_mismatches(self, receipt_id: str, indices: Sequence[int]) -> int:
        """Record that a shadow check found the verdicts of items ``indices`` of receipt
        ``receipt_id`` wrong (durably, at once); an index already recorded is kept once.
        Returns how many were new.

        Raises ``ValueError`` for an index outside the
        receipt, :class:`app.core.errors.ReceiptNotFound` for no such receipt (pruned, or
        never written), :class:`StoreUnavailable` when the database cannot be written.
        """
        receipt = self.get(receipt_id, leaves=False)
        if receipt is None:
            raise ReceiptNotFound(f"no receipt {receipt_id}", field="receipt_id")
        bad = [i for i in indices if not 0 <= int(i) < receipt.count]
        if bad:
            raise ValueError(f"item indices {bad} outside [0, {receipt.count}) of receipt {receipt_id}")
        new = sorted({int(i) for i in indices} - set(receipt.shadow_mismatches))
        if new:
            self._insert_shadow(receipt_id, new, to_micros(datetime.now(UTC)))
        return len(new)

    @abstractmethod
    def _insert_shadow(self, receipt_id: str, indices: list[int], found_us: int) -> None:
        """Insert rows (receipt_id, item_index, found_us) into :data:`SHADOW_TABLE` in one
        committed transaction, ignoring ones already there; raises :class:`StoreUnavailable`."""

    @abstractmethod
    def exists(self, receipt_id: str) -> bool:
        """Whether the receipt with this canonical id is stored (an index lookup: none of its
        row is read; the proof cache asks it before it proves a kept receipt)."""

    @abstractmethod
    def get(self, receipt_id: str, *, leaves: bool = True) -> Receipt | None:
        """The receipt with this canonical id, or ``None``.  ``leaves=False`` skips the leaf
        hashes (``Receipt.leaves`` is then ``None``)."""

    @abstractmethod
    def page(self, after: str | None = None, limit: int = 100, *, order: str = "asc") -> list[Receipt]:
        """Keyset paging: up to ``limit`` (1…:data:`MAX_PAGE`) receipts, loaded without leaf
        hashes, in id order (creation order): ``order`` ``"asc"``, oldest first, or ``"desc"``,
        newest first (:data:`ORDERS`).  ``after``: the id of the last receipt of the previous
        page (it need not exist any more): the page starts past it in that order (ids greater
        than it ascending, smaller descending); ``None`` starts at the oldest or the newest."""

    @abstractmethod
    def delete_older_than(self, cutoff: datetime) -> int:
        """Delete receipts created before ``cutoff``; returns how many."""

    @abstractmethod
    def delete_beyond_newest(self, keep: int) -> int:
        """Delete all but the ``keep`` newest receipts (by id); returns how many."""

    @abstractmethod
    def count(self) -> int:
        """Number of receipts stored."""

    @abstractmethod
    def schema_version(self) -> int:
        """The schema version the database is at."""

    @abstractmethod
    def ping(self) -> None:
        """Raise :class:`StoreUnavailable` unless the database answers (for readiness)."""

    @abstractmethod
    def close(self) -> None:
        """Release connections; the store cannot be used afterwards."""

    def prune(self, *, max_age_seconds: float = 0, max_rows: int = 0, now: datetime | None = None) -> int:
        """Apply the retention limits (0 = no limit); returns how many receipts were deleted."""
        deleted = 0
        if max_age_seconds > 0:
            cutoff = (now or datetime.now(UTC)).timestamp() - max_age_seconds
            deleted += self.delete_older_than(datetime.fromtimestamp(cutoff, UTC))
        if max_rows > 0:
            deleted += self.delete_beyond_newest(max_rows)
        return deleted

    def __enter__(self) -> ReceiptStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def check_schema_version(found: int, latest: int, where: str) -> None:
    """Raise :class:`StoreSchemaTooNew` when a database was migrated past this build."""
    if found > latest:
        raise StoreSchemaTooNew(f"{where} is at schema version {found}; this zapverify knows up to "
                                f"{latest}: upgrade zapverify", field="database_url")


def check_order(order: str) -> bool:
    """True for ``"asc"``, False for ``"desc"``; raises :class:`RequestError` naming ``order`` else."""
    if order not in ORDERS:
        raise RequestError(f"order must be one of {', '.join(ORDERS)}", field="order")
    return order == "asc"


def check_limit(limit: int) -> int:
    if not 1 <= limit <= MAX_PAGE:
        raise RequestError(f"limit must be between 1 and {MAX_PAGE}", field="limit")
    return limit
