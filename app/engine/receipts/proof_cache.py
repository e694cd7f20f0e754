"""Inclusion proofs in O(log n) (issue 48): the tree levels of recently proved or written
large receipts, kept within a memory bound (docs/operations.md, "Load shedding").

Without them every ``GET /v1/receipts/{id}/proof/{index}`` read all of a receipt's leaf hashes
from the store and rebuilt its whole tree: about a second per proof of a 262,144-item receipt,
and 80 concurrent ones took 500 MiB.  With a receipt's :class:`ProofTree` kept, a proof is
an index lookup that the receipt is still stored, its leaf's 64-leaf block (63 hashes) and
the kept levels above: well under a millisecond of work.

- A receipt's tree is built once however many proofs of it arrive together (one build per
  receipt id, the others wait for it), with the CPU backend's native hasher where it is
  loaded.
- Receipts of at least ``warm_items`` items are built when they are written, on a background
  thread: the first proofs of a large receipt need not wait for its build.
- The trees kept hold at most ``max_bytes`` (least recently used first out); a tree larger
  than the bound is built for its request and not kept.
- A kept tree serves a proof only for a receipt the store still has (``exists``, an index
  lookup: reading the row of a large receipt from SQLite walks its leaves' overflow pages,
  5 ms for 262,144 items): a pruned receipt is not proved from memory.  The answer is good
  for :data:`CONFIRMED_SECONDS`: within it, :meth:`ProofCache.recent_proof` proves from the
  kept tree without the store, so the route answers on the event loop without a thread-pool
  hop (a hop cost a proof GET about as much CPU as the rest of it; bench/overload.py).  A
  receipt pruned meanwhile may so be proved from memory for up to that long after.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

import numpy as np

from app.engine.commit import merkle
from app.engine.commit.proofs import InclusionProof, ProofTree

log = logging.getLogger(__name__)

#: Seconds for which a store's answer that it has a receipt lets a kept tree prove it without
#: asking again (:meth:`ProofCache.recent_proof`).
CONFIRMED_SECONDS = 1.0


class Receipt(Protocol):
    """What of :class:`app.engine.receipts.store.Receipt` a proof needs (that module imports
    this one: named here by shape, not imported)."""

    @property
    def id(self) -> str: ...

    @property
    def count(self) -> int: ...

    @property
    def merkle_root(self) -> bytes: ...

    @property
    def verdict_bitmap(self) -> bytes: ...

    @property
    def leaves(self) -> bytes | None: ...

    def verdict(self, index: int) -> bool: ...

    def check_index(self, index: int) -> None: ...

    def leaf_array(self) -> np.ndarray: ...


def _native_hasher() -> merkle.LeafHasher | None:
    from app.engine.backends import native

    return native.leaf_hasher()


class ProofCache:
    """Kept :class:`ProofTree` s by receipt id (module doc).

    Args:
        max_bytes: memory the kept trees may hold (0: none kept, every proof builds its tree).
        warm_items: receipts of at least this many items get their tree when written.
        hasher: returns the leaf hasher to build with (None: hashlib).
    """

    def __init__(self, max_bytes: int = 64 << 20, warm_items: int = 65536,
                 hasher: Callable[[], merkle.LeafHasher | None] = _native_hasher):
        self.max_bytes, self.warm_items, self._hasher = max_bytes, warm_items, hasher
        self._trees: OrderedDict[str, tuple[Receipt, ProofTree]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._building: dict[str, threading.Lock] = {}
        #: When the store last said it has a kept receipt (time.monotonic()), by id.
        self._confirmed: dict[str, float] = {}
        self._warmer: ThreadPoolExecutor | None = None
        self.builds = self.hits = 0

    def proof(self, rid: str, index: int, *, exists: Callable[[], bool],
              load: Callable[[], Receipt | None]) -> InclusionProof | None:
        """The inclusion proof of item ``index`` of receipt ``rid``, or None when the store has
        no such receipt.  ``exists`` asks the store whether it still has it (a kept tree);
        ``load`` reads it with its leaves (a tree not kept).  Raises
        :class:`app.core.errors.LeafIndexOutOfRange` outside ``[0, count)``."""
        kept = self.vouch(rid, exists=exists, load=load)
        return None if kept is None else self.prove(kept, index)

    def vouch(self, rid: str, *, exists: Callable[[], bool],
              load: Callable[[], Receipt | None]) -> tuple[Receipt, ProofTree] | None:
        """Receipt ``rid`` and its tree (:meth:`prove` takes them), once the store said it has
        the receipt (``exists``, or ``load`` when its tree is not kept, which builds it and
        keeps it within the bound); the yes is remembered for :data:`CONFIRMED_SECONDS`
        (:meth:`recent_proof`).  None when the store has no such receipt."""
        kept = self._kept(rid)
        if kept is not None and not exists():
            self.forget(rid)
            return None
        if kept is None:
            kept = self._built(rid, load)
            if kept is None:
                return None
        with self._lock:
            self._confirmed[rid] = time.monotonic()
        return kept

    def recent_proof(self, rid: str, index: int) -> InclusionProof | None:
        """The proof of item ``index`` of receipt ``rid`` from its kept tree, without the store,
        where the store said within :data:`CONFIRMED_SECONDS` that it has the receipt; else
        None (then :meth:`proof`).  Raises :class:`app.core.errors.LeafIndexOutOfRange`
        outside ``[0, count)``."""
        with self._lock:
            fresh = time.monotonic() - self._confirmed.get(rid, -math.inf) <= CONFIRMED_SECONDS
        kept = self._kept(rid) if fresh else None
        return None if kept is None else self.prove(kept, index)

    @staticmethod
    def prove(kept: tuple[Receipt, ProofTree], index: int) -> InclusionProof:
        """The proof of item ``index`` from a receipt and its tree (:meth:`vouch`).  Raises
        :class:`app.core.errors.LeafIndexOutOfRange` outside ``[0, count)``."""
        receipt, tree = kept
        receipt.check_index(index)
        return InclusionProof(receipt.id, index, receipt.count, bytes(tree.leaves[index]), tree.audit_path(index),
                              receipt.merkle_root, receipt.verdict(index))

    def _kept(self, rid: str) -> tuple[Receipt, ProofTree] | None:
        with self._lock:
            kept = self._trees.get(rid)
            if kept is not None:
                self._trees.move_to_end(rid)
                self.hits += 1
            return kept

    def _built(self, rid: str, load: Callable[[], Receipt | None]) -> tuple[Receipt, ProofTree] | None:
        with self._lock:
            building = self._building.setdefault(rid, threading.Lock())
        with building:  # one build per receipt: the others wait for it, then find it kept
            with self._lock:
                kept = self._trees.get(rid)
            if kept is not None:
                return kept
            try:
                receipt = load()
                if receipt is None:
                    return None
                self.builds += 1
                kept = (receipt, ProofTree(receipt.leaf_array(), self._hasher()))
                self._keep(rid, kept)
                return kept
            finally:
                with self._lock:
                    self._building.pop(rid, None)

    @staticmethod
    def _size(kept: tuple[Receipt, ProofTree]) -> int:
        # The tree's leaves are a view of the receipt's: counted once.
        return kept[1].nbytes + len(kept[0].verdict_bitmap)

    def _keep(self, rid: str, kept: tuple[Receipt, ProofTree]) -> None:
        size = self._size(kept)
        if size > self.max_bytes:
            return
        with self._lock:
            old = self._trees.pop(rid, None)
            if old is not None:
                self._bytes -= self._size(old)
            self._trees[rid] = kept
            self._bytes += size
            while self._bytes > self.max_bytes:
                gone, out = self._trees.popitem(last=False)
                self._bytes -= self._size(out)
                self._confirmed.pop(gone, None)

    def written(self, receipts: Sequence[Receipt]) -> None:
        """Receipts just written: build the trees of the large ones in the background."""
        large = [r for r in receipts if r.count >= self.warm_items and r.leaves is not None]
        if not large or self.max_bytes <= 0:
            return
        with self._lock:
            if self._warmer is None:
                self._warmer = ThreadPoolExecutor(1, thread_name_prefix="zv-proof-warm")
            warmer = self._warmer
        for r in large:
            warmer.submit(self._warm, r)

    def _warm(self, receipt: Receipt) -> None:
        try:
            self._built(receipt.id, lambda: receipt)
        except Exception:  # a warm-up is an optimisation: a proof builds its tree itself
            log.exception("building the proof tree of receipt %s failed", receipt.id)

    def forget(self, rid: str) -> None:
        with self._lock:
            self._confirmed.pop(rid, None)
            kept = self._trees.pop(rid, None)
            if kept is not None:
                self._bytes -= self._size(kept)

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {"trees": len(self._trees), "bytes": self._bytes, "max_bytes": self.max_bytes,
                    "builds": self.builds, "hits": self.hits}

    def close(self) -> None:
        with self._lock:
            warmer, self._warmer = self._warmer, None
            self._trees.clear()
            self._bytes = 0
        if warmer is not None:
            warmer.shutdown(wait=True, cancel_futures=True)
