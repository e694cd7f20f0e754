"""Fairness between clients of one process (docs/operations.md, "Load shedding"): the order
queued requests are started in and the time a new request is estimated to finish in.

Work is counted in one unit everywhere: estimated seconds of this process's verify work
(:class:`app.engine.admission.ServiceRates` turns items, pairings and proof reads into it).

**Order** is start-time fair queueing (Goyal, Vin and Cheng, "Start-time Fair Queueing",
SIGCOMM 1996), an equivalent of deficit round robin that needs no quantum: a request of
client ``c`` with work ``w`` gets the start tag ``S = max(V, F_c)`` and finish tag ``F_c =
S + w``, where ``V`` is the start tag of the request started last; queued requests start in
order of ``S``.  A client that sent 54 s of work has ``F_c`` 54 s ahead, so every other
client's requests tagged before it start first: served in proportion to work, not to
requests.

**Estimated completion** is that of processor sharing (what fair queueing approximates):
while client ``c``'s backlog ``B_c`` (its work in flight and queued) plus the new request's
``w`` drains, every other client ``k`` is served at most as much, ``min(B_k, B_c + w)``, so
the new request is done after ``B_c + w + Σ_k min(B_k, B_c + w)`` seconds.  A small request
of an idle client next to a heavy one is thus estimated at about twice its own work, not the
heavy client's backlog.

Not thread-safe: :class:`app.engine.admission.Admission` calls it under its lock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping


class FairShare:
    """Per-client tags and backlogs (module doc).

    Args:
        max_clients: clients remembered (the oldest idle ones are forgotten first: a client
            with no backlog and a finish tag behind ``V`` loses nothing by being forgotten).
    """

    def __init__(self, max_clients: int = 4096):
        self.max_clients = max_clients
        #: Virtual time: the start tag of the request started last.
        self.vtime = 0.0
        self._finish: dict[str, float] = {}
        self._backlog: dict[str, float] = {}

    def tag(self, client: str, work: float) -> float:
        """The start tag of a new request of ``client`` with ``work`` seconds; advances the
        client's finish tag."""
        start = max(self.vtime, self._finish.get(client, -math.inf))
        self._finish.pop(client, None)  # re-inserted last: the dict's order is recency
        self._finish[client] = start + max(0.0, work)
        if len(self._finish) > self.max_clients:
            self._forget()
        return start

    def started(self, start_tag: float) -> None:
        """A request with this start tag was started: ``V`` moves to it."""
        self.vtime = max(self.vtime, start_tag)

    def add(self, client: str, work: float) -> None:
        """``client``'s backlog grows (a request queued or admitted) or shrinks (negative:
        one released, or its estimate corrected)."""
        left = self._backlog.get(client, 0.0) + work
        if left <= 1e-12:
            self._backlog.pop(client, None)
        else:
            self._backlog[client] = left

    def backlog(self, client: str) -> float:
        return self._backlog.get(client, 0.0)

    def completion(self, client: str, work: float, *, included: bool = False,
                   done: Mapping[str, float] | None = None) -> float:
        """Seconds until a request of ``client`` with ``work`` seconds is estimated done under
        fair sharing (module doc); ``included``: its work is already in the client's backlog;
        ``done``: per client, the part of its backlog already worked off (its requests in
        flight, for the time they have run)."""
        done = done or {}
        mine = max(0.0, self.backlog(client) - done.get(client, 0.0)) + (0.0 if included else max(0.0, work))
        return mine + sum(min(max(0.0, b - done.get(c, 0.0)), mine) for c, b in self._backlog.items() if c != client)

    def clients(self) -> int:
        """Clients with work in flight or queued."""
        return len(self._backlog)

    def _forget(self) -> None:
        for c in list(self._finish):
            if len(self._finish) <= self.max_clients:
                break
            if c not in self._backlog and self._finish[c] <= self.vtime:
                del self._finish[c]
        while len(self._finish) > self.max_clients:  # all busy: forget the least recent
            del self._finish[next(iter(self._finish))]
