"""Admission control over HTTP: a bound on the verify work in flight in one process
(docs/operations.md, "Load shedding"); the counters are :mod:`app.engine.admission`.

Each verify request is admitted (or refused) when it arrives, before any of its body is
read; it is then charged its body bytes as they arrive (never the ``Content-Length`` it
declares: a slow client holds what it has sent, not the bound), and its items and their
estimated work as soon as they are known (a ZAP header's ``count``; a JSON body once parsed).
The bounds and what is refused are :mod:`app.engine.admission`'s: a new request while the
items or bytes in flight are at their bound or the work in flight would make it wait longer
than ``max_wait``; a charge past a bound or past one request's share.  Refusals are
:class:`app.core.errors.Overloaded` (503, ``Retry-After``) instead of queueing: a queued
request costs memory (about 8 MB per 4,096-item JSON batch) and time that the client would
rather spend on another replica.  A refusal mid-body is raised to whoever reads the body and
answered like a body over the size limit.  A request that finds nothing in flight is always
admitted, so a request larger than the bound (but within the request limits) is served when
the process is idle rather than never.

The charge is given back when the answer has been sent (or the client went away).  The
counters are guarded by a lock: the WebSocket tasks and the HTTP requests share them.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.service import error_response, is_zap
from app.core.errors import Overloaded
from app.engine.admission import Admission, Ticket

__all__ = ["ADMITTED_PATHS", "Admission", "AdmissionControl", "Ticket", "ticket_of"]

#: The routes whose requests are charged (POST): the verify work of the HTTP API.
ADMITTED_PATHS = ("/v1/verify", "/v1/verify/zap", "/v1/verify/bls-aggregate")


def ticket_of(scope: Scope) -> Ticket | None:
    """The admission ticket the middleware put on this request (None outside :data:`ADMITTED_PATHS`)."""
    return (scope.get("state") or {}).get("admission")


class AdmissionControl:
    """ASGI middleware: charge each verify request before its body is read; refuse beyond the
    bound with 503 ``OVERLOADED`` + ``Retry-After`` (a ZAP error frame for a ZAP body), sent
    at once.  The ticket is on ``request.state.admission`` for the route to charge items."""

    def __init__(self, app: ASGIApp, admission: Admission):
        self.app, self.admission = app, admission

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] not in ADMITTED_PATHS:
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        try:
            ticket = self.admission.admit(provisional=True)  # its items are known only once parsed
        except Overloaded as exc:
            zap_body = is_zap(headers.get(b"content-type", b"").decode("latin-1"))
            return await error_response(exc, zap_body=zap_body)(scope, receive, send)
        scope.setdefault("state", {})["admission"] = ticket

        async def charged() -> Message:
            msg = await receive()
            if msg["type"] == "http.request" and msg.get("body"):
                ticket.add(nbytes=len(msg["body"]))  # what has arrived, not what was declared
            return msg

        async def released_first(msg: Message) -> None:
            # Given back before the last bytes of the answer go out, so a client that sends its
            # next request as soon as it has this answer never finds its own charge in flight.
            if msg["type"] == "http.response.body" and not msg.get("more_body", False):
                ticket.release()
            await send(msg)

        try:
            await self.app(scope, charged, released_first)
        finally:
            ticket.release()
