"""Admission control over HTTP: deadlines and a fair queue in front of the verify work of one
process (docs/operations.md, "Load shedding"); the counters, the queue and the cost model are
:mod:`app.engine.admission`.

Each verify request waits for admission when it arrives, before any of its body is read: a
queued request holds no memory here, its body stays in the client's socket (TCP
back-pressure).  Its deadline is the client's ``X-Zapverify-Deadline`` header (seconds), else
the server's default, at most the server's maximum; its client, for fairness, the name of the
API key it came with, else its peer address.  It is refused with 503 ``OVERLOADED`` and a
``Retry-After`` computed from the queue (a ZAP error frame for a ZAP body) only when it cannot
finish within its deadline, the queue is full, or it is still queued at its deadline.  Once
admitted it is charged its body bytes as they arrive (never the ``Content-Length`` it
declares) and its work as soon as its items are known (a ZAP header's ``count``; a JSON body
once parsed); a refusal mid-body is raised to whoever reads the body and answered like a body
over the size limit.

``GET /v1/receipts/{id}/proof/{index}`` is charged too (:func:`proof_ticket`): a proof read
is work like a verify item, admitted at once and counted in the same unit.

The charge is given back when the answer has been sent (or the client went away).
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.security import KEY_STATE
from app.api.service import error_response, is_zap
from app.core.errors import ZapVerifyError
from app.engine.admission import DEADLINE_HEADER, Admission, Ticket

__all__ = ["ADMITTED_PATHS", "Admission", "AdmissionControl", "Ticket", "client_of", "ticket_of"]

#: The routes whose requests are queued and charged (POST): the verify work of the HTTP API.
ADMITTED_PATHS = ("/v1/verify", "/v1/verify/zap", "/v1/verify/bls-aggregate")


def ticket_of(scope: Scope) -> Ticket | None:
    """The admission ticket the middleware put on this request (None outside :data:`ADMITTED_PATHS`)."""
    return (scope.get("state") or {}).get("admission")


def client_of(scope: Scope) -> str:
    """Who a request is from, for the fair queue: ``key:<name>`` of its API key, else
    ``peer:<address>`` (the host, not the port: one machine's connections are one client)."""
    name = (scope.get("state") or {}).get(KEY_STATE)
    if name is not None:
        return f"key:{name}"
    peer = scope.get("client")
    return f"peer:{peer[0]}" if peer else "peer:?"


class AdmissionControl:
    """ASGI middleware: queue each verify request before its body is read; refuse it with 503
    ``OVERLOADED`` + ``Retry-After`` when it cannot be served within its deadline.  The
    ticket is on ``request.state.admission`` for the route to charge its work."""

    def __init__(self, app: ASGIApp, admission: Admission):
        self.app, self.admission = app, admission

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] not in ADMITTED_PATHS:
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        try:
            deadline = self.admission.deadline_seconds(headers.get(DEADLINE_HEADER.encode()))
            ticket = await self.admission.enter(client_of(scope), deadline)
        except ZapVerifyError as exc:
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


def proof_ticket(admission: Admission, scope: Scope) -> Ticket:
    """A proof read's charge (admitted at once, never queued: it costs about a millisecond);
    raises :class:`app.core.errors.Overloaded` when the process is at a bound."""
    return admission.admit(client=client_of(scope))
