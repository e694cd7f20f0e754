"""Deadlines.  The read deadline of a body that arrives in pieces: an HTTP request body
(app/api/slowbody.py), a WebSocket message (app/api/ws_limits.py) and an ingest frame
(app/engine/ingest/base.py) are all cut by the same rule (docs/operations.md, "Load shedding").
"""

from __future__ import annotations


def read_deadline(start: float, last: float, received: int, timeout: float, min_rate: float) -> float:
    """When a body that began at ``start`` and last got bytes at ``last`` (seconds, one clock),
    ``received`` bytes so far, must have its next bytes: ``min(last + timeout, start + timeout
    + received / min_rate)`` — no gap longer than ``timeout`` and, after a grace of
    ``timeout``, at least ``min_rate`` bytes per second on average (``min_rate`` 0: no rate)."""
    deadline = last + timeout
    if min_rate > 0:
        deadline = min(deadline, start + timeout + received / min_rate)
    return deadline


#: The request header a client sends its deadline in: seconds from now, a decimal number
#: (docs/operations.md, "Load shedding").  The server waits to start a request while it can
#: still finish by then, and answers 503 OVERLOADED when it cannot; the Python client and
#: ``zapverify bench`` send it.
DEADLINE_HEADER = "x-zapverify-deadline"
