"""Group commit: receipts written by concurrent callers share one transaction.

Every answered verdict must have its receipt on stable storage first
(docs/architecture.md, "Merkle leaf and receipts"), so each request waits for a commit.
Committed one by one, the requests would queue behind each other's fsync; joined, one
fsync (one SQLite transaction, one PostgreSQL COPY) serves every request that arrived
while the previous commit was running, and verification of later batches goes on
meanwhile in the other threads (the database call releases the GIL).

The classic leader/follower scheme, with no thread of its own: a caller that finds no
commit in progress becomes the leader and writes everything queued by then; the others
wait for the leader that takes their rows, and the first of them to find the writer free
leads the next group.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from app.core.errors import StoreUnavailable


@dataclass(eq=False)
class _Waiter:
    rows: list[tuple]
    done: bool = False
    error: BaseException | None = None


@dataclass(eq=False)
class GroupCommit:
    """Joins concurrent :meth:`write` calls into one call of ``insert``.

    ``insert(rows)`` must write all rows in one transaction or none, and raise on failure;
    its failure fails every caller of the group (all or none, as for one caller).
    ``gate()``, when given, is asked by each leader before it writes, and what it raises
    fails the group the same way: callers that queued behind a write that found the store
    down learn it at once instead of trying the store again (PostgreSQL stopped: each
    group waited out the pool's timeout in turn).
    """

    insert: Callable[[list[tuple]], None]
    gate: Callable[[], None] | None = None
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _queue: list[_Waiter] = field(default_factory=list)
    _writing: bool = False
    #: Transactions written and callers served (tests and the benchmark read them).
    groups: int = 0
    callers: int = 0

    def write(self, rows: list[tuple]) -> None:
        """Write ``rows`` (with whatever other callers queued); returns once they are
        committed.  Raises what ``insert`` raised for the group (a
        :class:`StoreUnavailable` as a new one of its own)."""
        me = _Waiter(rows)
        with self._cond:
            self._queue.append(me)
            while self._writing and not me.done:
                self._cond.wait()
            if not me.done:  # lead: take every row queued so far
                self._writing = True
                group, self._queue = self._queue, []
        if not me.done:
            error: BaseException | None = None
            try:
                if self.gate is not None:
                    self.gate()
                self.insert([row for w in group for row in w.rows])
            except BaseException as exc:  # handed to every caller of the group
                error = exc
            with self._cond:
                for w in group:
                    w.done, w.error = True, error
                self._writing = False
                self.groups += 1
                self.callers += len(group)
                self._cond.notify_all()
        if isinstance(me.error, StoreUnavailable):  # a fresh one per thread, the cause chained
            raise StoreUnavailable(str(me.error), reason=me.error.reason,
                                   retry_after=me.error.retry_after) from me.error
        if me.error is not None:
            raise me.error
