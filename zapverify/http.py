"""Python client of the zapverify API.

:class:`Client` (blocking) and :class:`AsyncClient` (asyncio) speak three transports:

- ``verify(items)``: JSON ``POST /v1/verify``, items of mixed schemes;
- ``verify_bls_aggregate(items)``: JSON ``POST /v1/verify/bls-aggregate``, BLS12-381
  FastAggregateVerify / AggregateVerify items (:class:`AggregateItem`, docs/bls-aggregate.md);
- ``verify_batch(scheme, pks, msgs, sigs)``: one ZAP frame ``POST /v1/verify/zap``
  (docs/wire-format.md), one scheme, no text encoding on either side;
- streaming over ``WebSocket /v1/ws/verify``: many ZAP (or JSON) requests in flight on one
  connection — :meth:`Client.verify_stream` yields results in order,
  :meth:`AsyncClient.stream` hands out futures.

Every failure is an :mod:`app.core.errors` exception: :class:`~app.core.errors.RemoteError` when the
server answered with an error (its ``code``, ``wire_code``, ``status``, ``field``),
:class:`~app.core.errors.ConnectionFailed` when it could not be reached or went away, and the
request errors of :class:`~app.core.batch.Batch` for items that cannot make a frame.

Example::

    from zapverify import Client
    with Client("http://127.0.0.1:8000") as zv:
        r = zv.verify_batch("ed25519", pks, msgs, sigs)
        print(r.valid, r.verdicts, r.merkle_root.hex())

A server with API keys (docs/operations.md, "Access control") needs one: ``Client(url,
api_key="...")``, or the environment variable ``ZAPVERIFY_API_KEY`` (read when ``api_key`` is
not given; ``api_key=""`` sends none).  It is sent as ``Authorization: Bearer <key>`` on every
request and on the WebSocket handshake.

:func:`verify_inclusion` checks an inclusion proof from ``GET /v1/receipts/{id}/proof/{index}``
offline, the JSON as served: it needs only the proof's numbers and hashes, never the server.
:func:`leaf_hash` recomputes an item's leaf from what the user sent (scheme wire code,
verdict, public key, message, signature; the scheme as its id or its wire code), so a user
can show that *their* item got that verdict::

    from zapverify import leaf_hash, verify_inclusion
    p = zv.proof(batch_id, 0)
    verify_inclusion(**p)                                # -> True: the served leaf is in the tree
    leaf = leaf_hash("ed25519", True, pk, msg, sig)     # the user's own item...
    verify_inclusion(**{**p, "leaf_hash": leaf})         # -> True: ...with that verdict

An aggregate item's leaf is :func:`aggregate_leaf` (``item``, verdict), checked the same way.
"""

from __future__ import annotations

import asyncio
import base64
import email.utils
import itertools
import json
import math
import os
import random
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np

from app.core import commitment, schemes
from app.core.batch import AGGREGATE_MODES, AGGREGATE_VARIANTS, AggregateItem, Item
from app.core.commitment import aggregate_leaf, aggregate_leaf_hash
from app.core.deadline import DEADLINE_HEADER
from app.core.errors import ConnectionFailed, RemoteError, RequestError, WireError, by_wire_code
from app.wire import zap
from zapverify.proofs import verify_inclusion

__all__ = ["AggregateItem", "AsyncClient", "BatchRequest", "BatchVerdicts", "Client", "Retry", "VerifyResult",
           "VerifyStream",
           "aggregate_body", "aggregate_leaf", "aggregate_leaf_hash", "leaf_hash", "verify_inclusion"]

DEFAULT_URL = "http://127.0.0.1:8000"
WS_PATH = "/v1/ws/verify"
#: The environment variable a client reads its API key from when none is passed (the CLI too).
API_KEY_ENV = "ZAPVERIFY_API_KEY"
_ZAP_HEADERS = {"content-type": zap.CONTENT_TYPE, "accept": zap.CONTENT_TYPE}


# ------------------------------------------------------------------ typed results
@dataclass(frozen=True)
class VerifyResult:
    """The answer to a JSON verify request (``POST /v1/verify`` or a WebSocket text message).

    Attributes:
        batch_id: UUIDv7 of the batch.
        count / valid / invalid: item counts.
        verdicts: one bool per item, in input order.
        merkle_root: the 32-byte RFC 6962 root over every item (docs/architecture.md, "Merkle leaf and receipts").
        backends: scheme id -> backend that verified it.
        elapsed_ms / verify_ms / merkle_ms: server-side times, milliseconds.
        request_id: the WebSocket request id (None over HTTP).
    """

    batch_id: str
    count: int
    valid: int
    invalid: int
    verdicts: list[bool]
    merkle_root: bytes
    backends: dict[str, str]
    elapsed_ms: float
    verify_ms: float
    merkle_ms: float
    request_id: int | str | None = None

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> VerifyResult:
        return cls(batch_id=body["batch_id"], count=body["count"], valid=body["valid"], invalid=body["invalid"],
                   verdicts=list(body["verdicts"]), merkle_root=bytes.fromhex(body["merkle_root"]),
                   backends=dict(body["backends"]), elapsed_ms=body["elapsed_ms"], verify_ms=body["verify_ms"],
                   merkle_ms=body["merkle_ms"], request_id=body.get("request_id"))


@dataclass(frozen=True)
class BatchVerdicts:
    """The answer to a ZAP request frame.

    Attributes:
        request_id: the frame's ``request_id``, echoed.
        count / valid: item counts.
        verdicts: ``bool[count]`` in item order.
        merkle_root: the 32-byte RFC 6962 root of the batch (docs/architecture.md, "Merkle leaf and receipts").
        batch_id: the batch's UUIDv7 (its receipt id when receipts are on), or None from a
            server that did not send it.
    """

    request_id: int
    count: int
    valid: int
    verdicts: np.ndarray
    merkle_root: bytes
    batch_id: str | None = None

    @property
    def invalid(self) -> int:
        return self.count - self.valid

    @classmethod
    def from_frame(cls, frame: zap.Response, batch_id: str | None = None) -> BatchVerdicts:
        """From a decoded response frame; ``batch_id`` (e.g. from the HTTP header) is used
        where the frame carries none."""
        if frame.batch_id is not None:
            batch_id = str(uuid.UUID(bytes=frame.batch_id))
        return cls(frame.request_id, frame.count, frame.valid, frame.verdicts.astype(bool), frame.merkle_root,
                   batch_id)


@dataclass
class BatchRequest:
    """One scheme's items for a ZAP frame (what :meth:`Client.verify_stream` consumes).

    ``pks`` and ``sigs`` are byte strings of one length each, or ``uint8[N, len]`` arrays.
    """

    scheme: str
    pks: Sequence[bytes] | np.ndarray
    msgs: Sequence[bytes]
    sigs: Sequence[bytes] | np.ndarray
    ctx: bytes = b""
    prehashed: bool = False
    allow_high_s: bool = False
    low_s: bool = False

    def encode(self, request_id: int = 0) -> bytearray:
        """The request frame (see :func:`app.wire.zap.encode_items` for the errors)."""
        return zap.encode_items(self.scheme, self.pks, self.msgs, self.sigs, ctx=self.ctx,
                                prehashed=self.prehashed, allow_high_s=self.allow_high_s, low_s=self.low_s,
                                request_id=request_id, want_batch_id=True)


# ------------------------------------------------------------------ shared helpers
def _ws_url(base_url: str) -> str:
    url = httpx.URL(base_url)
    scheme = {"http": "ws", "https": "wss"}.get(url.scheme, url.scheme)
    return str(url.copy_with(scheme=scheme, path=url.path.rstrip("/") + WS_PATH))


def auth_headers(headers: Mapping[str, str] | None = None, api_key: str | None = None) -> dict[str, str]:
    """``headers`` plus ``Authorization: Bearer <key>``: the key is ``api_key``, or when that is
    None the environment's :data:`API_KEY_ENV`; none with an empty key, or when ``headers``
    already carry ``Authorization`` or ``X-API-Key``."""
    out = dict(headers or {})
    key = os.environ.get(API_KEY_ENV) if api_key is None else api_key
    if key and not any(name.lower() in ("authorization", "x-api-key") for name in out):
        out["Authorization"] = f"Bearer {key}"
    return out


def leaf_hash(scheme: int | str, verdict: bool, pk: bytes, msg: bytes, sig: bytes) -> bytes:
    """The 32-byte Merkle leaf hash of one item (docs/wire-format.md): ``scheme`` is the
    scheme's id (``"ed25519"``, as ``GET /v1/schemes`` lists them) or its wire code (``0x01``),
    ``sig`` the signature as verified (secp256k1 DER converted to compact r ‖ s).  Raises
    :class:`app.core.errors.UnknownScheme` for an id no scheme has."""
    code = schemes.get(scheme).code if isinstance(scheme, str) else scheme
    return commitment.leaf_hash(code, verdict, pk, msg, sig)


def json_body(items: Sequence[Item | Mapping[str, Any]], *, prehashed: bool | None = None,
              allow_high_s: bool | None = None, low_s: bool | None = None, signature_format: str = "raw") -> dict:
    """The JSON body of a verify request for ``items`` (base64 fields).

    ``items`` are :class:`app.core.batch.Item` or mappings with ``scheme``, ``public_key``,
    ``message``, ``signature`` (bytes) and optionally ``context``.  ``prehashed``,
    ``allow_high_s`` and ``low_s`` (the registry's options, :data:`app.core.schemes.OPTIONS`)
    apply to the request's items of the schemes that accept them (secp256k1, p256); None takes each from
    those items, which must then agree (else :class:`RequestError` naming the option).
    ``signature_format`` likewise applies to the schemes that accept it.
    """
    given = {"prehashed": prehashed, "allow_high_s": allow_high_s, "low_s": low_s}  # one per option of schemes.OPTIONS
    rows = []
    flags: dict[str, set[bool]] = {name: set() for name in schemes.OPTIONS}
    for i, it in enumerate(items):
        d = it.__dict__ if isinstance(it, Item) else dict(it)
        try:
            row = {"scheme": d["scheme"], "public_key": base64.b64encode(d["public_key"]).decode(),
                   "message": base64.b64encode(d["message"]).decode(),
                   "signature": base64.b64encode(d["signature"]).decode()}
        except (KeyError, TypeError) as exc:
            raise RequestError(f"item needs scheme, public_key, message, signature as bytes ({exc})",
                               field=f"items[{i}]") from None
        if d.get("context"):
            row["context"] = base64.b64encode(d["context"]).decode()
        # An unknown id is the server's to name (422 naming items[i].scheme).
        scheme = schemes.SCHEMES.get(d["scheme"]) if isinstance(d["scheme"], str) else None
        for name in scheme.options if scheme else ():
            flags[name].add(bool(d.get(name, False)))
        rows.append(row)
    body: dict[str, Any] = {"items": rows, "encoding": "base64", "signature_format": signature_format}
    for name, o in schemes.OPTIONS.items():
        value = given[name]
        if value is None:
            if len(flags[name]) > 1:
                raise RequestError(f"{'/'.join(schemes.accepting(o.bit))} items disagree on {name}; "
                                   f"pass {name}= explicitly", field=name)
            value = flags[name].pop() if flags[name] else False
        body[name] = value
    return body


def _byte_strings(value: Any, where: str) -> list[bytes]:
    """``value``, a sequence of byte strings, as a list; :class:`RequestError` naming ``where``
    for anything else (a bare ``bytes`` is a sequence of ints, the usual slip)."""
    if isinstance(value, (bytes, bytearray, memoryview, str)):
        raise RequestError(f"{where} must be a sequence of byte strings, got a bare {type(value).__name__} "
                           "(one message is a tuple of one: (msg,))", field=where)
    try:
        out = list(value)
    except TypeError:
        raise RequestError(f"{where} must be a sequence of byte strings, got {type(value).__name__}",
                           field=where) from None
    for j, part in enumerate(out):
        if not isinstance(part, (bytes, bytearray, memoryview)):
            raise RequestError(f"{where}[{j}] must be bytes, got {type(part).__name__}", field=f"{where}[{j}]")
    return [bytes(p) for p in out]


def aggregate_body(items: Sequence[AggregateItem]) -> dict:
    """The JSON body of ``POST /v1/verify/bls-aggregate`` for ``items`` (base64 fields).

    Raises :class:`RequestError` naming ``items[i].<field>`` for an item that is not an
    :class:`AggregateItem` of bytes: ``public_keys`` and ``messages`` are sequences of byte
    strings (``fast_aggregate``: ``messages`` holds its one message, ``(msg,)``), ``signature``
    is bytes, ``variant`` ``"ietf"`` or (``fast_aggregate`` only) ``"eth"``
    (``eth_fast_aggregate_verify``, docs/bls-aggregate.md)."""
    def b64(b: bytes) -> str:
        return base64.b64encode(b).decode()

    rows = []
    for i, it in enumerate(items):
        where = f"items[{i}]"
        if not isinstance(it, AggregateItem):
            raise RequestError(f"{where} must be an AggregateItem, got {type(it).__name__}", field=where)
        if it.mode not in AGGREGATE_MODES:
            raise RequestError(f"{where}.mode must be one of {', '.join(AGGREGATE_MODES)}, got {it.mode!r}",
                               field=f"{where}.mode")
        if not isinstance(it.signature, (bytes, bytearray, memoryview)):
            raise RequestError(f"{where}.signature must be bytes, got {type(it.signature).__name__}",
                               field=f"{where}.signature")
        _byte_strings(it.public_keys, f"{where}.public_keys")
        _byte_strings(it.messages, f"{where}.messages")
        row: dict[str, Any] = {"mode": it.mode, "public_keys": [b64(pk) for pk in it.public_keys],
                               "signature": b64(it.signature)}
        if it.variant not in AGGREGATE_VARIANTS or (it.variant != "ietf" and it.mode != "fast_aggregate"):
            raise RequestError(f"{where}.variant must be one of {', '.join(AGGREGATE_VARIANTS)} "
                               f"('eth' on fast_aggregate only), got {it.variant!r}", field=f"{where}.variant")
        if it.variant != "ietf":
            row["variant"] = it.variant  # sent only when not the default, so older servers see the same body
        if it.mode == "fast_aggregate":
            row["message"] = b64(it.messages[0]) if it.messages else ""
        else:
            row["messages"] = [b64(m) for m in it.messages]
        rows.append(row)
    return {"encoding": "base64", "items": rows}


def _handshake_failed(base_url: str, exc: Exception) -> ConnectionFailed:
    """The error of a WebSocket that could not be opened; a refusal by the server's access
    control is an HTTP 403 at the handshake, whatever its reason, so the message lists them."""
    response = getattr(exc, "response", None)  # websockets' InvalidStatus
    if getattr(response, "status_code", None) == 403:
        return ConnectionFailed(f"{_ws_url(base_url)}: the server refused the WebSocket (HTTP 403): it needs an API "
                                f"key with the verify scope (api_key= or ${API_KEY_ENV}), or the key given is unknown "
                                "or lacks that scope, or the rate limit or the Origin refused it")
    return ConnectionFailed(f"{_ws_url(base_url)}: {exc}")


def _remote_from_error_frame(frame: zap.ErrorFrame) -> RemoteError:
    cls = by_wire_code(frame.code)
    return RemoteError(frame.message, code=frame.name, status=cls.status if cls else 400, wire_code=frame.code)


def _remote_from_json(body: Any, status: int) -> RemoteError:
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict):
        return RemoteError(str(err.get("message", "")), code=str(err.get("code", "ERROR")), status=status,
                           field=err.get("field"))
    return RemoteError(f"HTTP {status}: {str(body)[:200]}", code="HTTP_ERROR", status=status)


def _zap_result(content: bytes, status: int, batch_id: str | None = None) -> BatchVerdicts:
    try:
        frame = zap.decode(content, zap.CLIENT_LIMITS)
    except WireError:
        if status < 400:
            raise  # a 2xx that is not a frame: the server broke the protocol
        # Not a frame: something in front of the ZAP endpoint answered (a proxy, a 404).
        try:
            body: Any = json.loads(content)
        except ValueError:
            body = content[:200]
        raise _remote_from_json(body, status) from None
    if isinstance(frame, zap.ErrorFrame):
        raise _remote_from_error_frame(frame)
    if not isinstance(frame, zap.Response):
        raise RemoteError("the server answered with a request frame", code="BAD_TYPE", status=status)
    return BatchVerdicts.from_frame(frame, batch_id)


def _json_result(response: httpx.Response) -> VerifyResult:
    try:
        body = response.json()
    except ValueError:
        raise RemoteError(f"HTTP {response.status_code}: not JSON", code="HTTP_ERROR", status=response.status_code,
                          retry_after=retry_after_of(response)) from None
    if response.status_code >= 400 or "error" in body:
        exc = _remote_from_json(body, response.status_code)
        exc.retry_after = retry_after_of(response)
        raise exc
    return VerifyResult.from_json(body)


def _zap_answer(response: httpx.Response) -> BatchVerdicts:
    try:
        return _zap_result(response.content, response.status_code, response.headers.get("x-zapverify-batch-id"))
    except RemoteError as exc:
        exc.retry_after = retry_after_of(response)
        raise


def retry_after_of(response: httpx.Response) -> float | None:
    """The seconds of a response's ``Retry-After`` header (RFC 9110 §10.2.3: delay-seconds or
    an HTTP-date), None when it has none or it cannot be read."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


@dataclass(frozen=True)
class Retry:
    """How :class:`Client` and :class:`AsyncClient` retry a verify request the server refused
    for load (503 with ``Retry-After``: ``OVERLOADED``, ``NOT_READY``) or lost to a
    connection reset (docs/operations.md, "Load shedding").

    The wait before retry ``n`` (0-based) is the server's ``Retry-After`` or, if longer, a
    random fraction in [0.5, 1] of ``min(cap, base · 2ⁿ)`` (capped exponential backoff with
    jitter, so refused clients do not come back together).  It retries at most ``attempts``
    times, while the waits add up to at most ``budget`` seconds and the next try would start
    before the request's deadline (``Client(deadline=...)``).  A retried verify request is
    verified again (a second receipt when receipts are on).

    Attributes:
        attempts: retries after the first try; 0 turns retrying off (or pass ``retry=None``).
        base / cap: seconds, the backoff's first step and its most.
        budget: seconds, the most one call spends waiting between tries.
    """

    attempts: int = 4
    base: float = 0.5
    cap: float = 30.0
    budget: float = 60.0

    def wait(self, n: int, retry_after: float | None, waited: float, left: float) -> float | None:
        """Seconds to wait before retry ``n`` (0-based), having waited ``waited`` seconds so
        far with ``left`` seconds to the deadline; None: give up."""
        if n >= self.attempts:
            return None
        pause = max(retry_after or 0.0, random.uniform(0.5, 1.0) * min(self.cap, self.base * 2 ** n))
        if waited + pause > self.budget or pause >= left:
            return None
        return pause


def _retryable(response: httpx.Response) -> bool:
    return response.status_code == 503 and "retry-after" in response.headers


class _Ids:
    """u32 request ids, never 0 (0 addresses a frame whose header could not be read)."""

    def __init__(self) -> None:
        self._next = itertools.count(1)

    def take(self, busy: Mapping[int, Any]) -> int:
        while True:
            rid = next(self._next) % (1 << 32)
            if rid and rid not in busy:
                return rid


def _reply(message: bytes | str) -> tuple[Any, BatchVerdicts | VerifyResult | RemoteError]:
    """(request_id, result or error) of one WebSocket reply."""
    if isinstance(message, (bytes, bytearray, memoryview)):
        frame = zap.decode(message, zap.CLIENT_LIMITS)
        if isinstance(frame, zap.ErrorFrame):
            return frame.request_id, _remote_from_error_frame(frame)
        if isinstance(frame, zap.Response):
            return frame.request_id, BatchVerdicts.from_frame(frame)
        raise RemoteError("the server sent a request frame", code="BAD_TYPE", status=400)
    body = json.loads(message)
    if "error" in body:
        return body.get("request_id"), _remote_from_json(body, 400)
    return body.get("request_id"), VerifyResult.from_json(body)


def _with_deadline(headers: dict[str, str], deadline: float | None) -> dict[str, str]:
    if deadline is not None:
        if not deadline > 0:
            raise ValueError(f"deadline must be a positive number of seconds, not {deadline!r}")
        headers[DEADLINE_HEADER] = f"{deadline:g}"
    return headers


class _Tries:
    """One call's retries under a :class:`Retry` (None: none) and its deadline (seconds)."""

    #: Connection failures a resent request may cure (the server restarted or closed an idle
    #: connection); a refused connection is not one (no server there).
    RESETS = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)

    def __init__(self, retry: Retry | None, deadline: float | None):
        self.retry, self.n, self.waited = retry, 0, 0.0
        self.end = None if deadline is None else time.monotonic() + deadline

    def _next(self, retry_after: float | None) -> float | None:
        if self.retry is None:
            return None
        left = math.inf if self.end is None else self.end - time.monotonic()
        pause = self.retry.wait(self.n, retry_after, self.waited, left)
        if pause is not None:
            self.n += 1
            self.waited += pause
        return pause

    def after(self, response: httpx.Response) -> float | None:
        """Seconds to wait before resending after ``response``; None: it is the answer."""
        return self._next(retry_after_of(response)) if _retryable(response) else None

    def after_reset(self, exc: httpx.TransportError) -> float | None:
        return self._next(None) if isinstance(exc, self.RESETS) else None


# ------------------------------------------------------------------ blocking client
class Client:
    """Blocking client (httpx for HTTP, websockets' sync client for the stream).

    Args:
        base_url: the service, e.g. ``http://127.0.0.1:8000``.
        timeout: seconds per HTTP request.
        headers: extra headers for every request.
        transport: an httpx transport (tests pass one that serves an app in process).
        api_key: the API key for a server with keys (docs/operations.md, "Access control"),
            sent as ``Authorization: Bearer``; None reads ``$ZAPVERIFY_API_KEY``, ``""`` sends
            none.  A refusal is a :class:`RemoteError` ``UNAUTHORIZED`` (401) or ``FORBIDDEN``
            (403: the key lacks the scope); a refused WebSocket handshake is an HTTP 403,
            :class:`ConnectionFailed`.
    """

    def __init__(self, base_url: str = DEFAULT_URL, *, timeout: float = 60.0,
                 headers: Mapping[str, str] | None = None, transport: httpx.BaseTransport | None = None,
                 api_key: str | None = None, retry: Retry | None = Retry(), deadline: float | None = None):
        self.base_url = base_url
        self.headers = _with_deadline(auth_headers(headers, api_key), deadline)
        self.retry, self.deadline = retry, deadline
        self._http = httpx.Client(base_url=base_url, timeout=timeout, headers=self.headers, transport=transport)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _post(self, path: str, **kw) -> httpx.Response:
        tries = _Tries(self.retry, self.deadline)
        while True:
            try:
                response = self._http.post(path, **kw)
            except httpx.TransportError as exc:
                pause = tries.after_reset(exc)
                if pause is None:
                    raise ConnectionFailed(f"{self.base_url}{path}: {exc}") from exc
            else:
                pause = tries.after(response)
                if pause is None:
                    return response
            time.sleep(pause)

    def verify(self, items: Sequence[Item | Mapping[str, Any]], *, prehashed: bool | None = None,
               allow_high_s: bool | None = None, low_s: bool | None = None,
               signature_format: str = "raw") -> VerifyResult:
        """Verify items of any schemes over JSON ``POST /v1/verify`` (see :func:`json_body`)."""
        body = json_body(items, prehashed=prehashed, allow_high_s=allow_high_s, low_s=low_s,
                         signature_format=signature_format)
        return _json_result(self._post("/v1/verify", json=body))

    def verify_bls_aggregate(self, items: Sequence[AggregateItem]) -> VerifyResult:
        """Verify BLS aggregate items over ``POST /v1/verify/bls-aggregate``; verdicts in input order."""
        return _json_result(self._post("/v1/verify/bls-aggregate", json=aggregate_body(items)))

    def verify_json_body(self, body: bytes) -> VerifyResult:
        """Post an already serialised JSON verify request (see :func:`json_body`)."""
        return _json_result(self._post("/v1/verify", content=body, headers={"content-type": "application/json"}))

    def verify_batch(self, scheme: str, pks: Sequence[bytes] | np.ndarray, msgs: Sequence[bytes],
                     sigs: Sequence[bytes] | np.ndarray, *, ctx: bytes = b"", prehashed: bool = False,
                     allow_high_s: bool = False, low_s: bool = False) -> BatchVerdicts:
        """Verify one scheme's items as one ZAP frame (``POST /v1/verify/zap``).

        Raises :class:`RemoteError` carrying the error frame's code, or the encoding errors
        of :func:`app.wire.zap.encode_items`.
        """
        frame = zap.encode_items(scheme, pks, msgs, sigs, ctx=ctx, prehashed=prehashed, allow_high_s=allow_high_s,
                                 low_s=low_s)
        return self.verify_frame(frame)

    def verify_frame(self, frame: bytes | bytearray | memoryview) -> BatchVerdicts:
        """Post an already encoded request frame."""
        return _zap_answer(self._post("/v1/verify/zap", content=bytes(frame), headers=_ZAP_HEADERS))

    def verify_stream(self, requests: Iterable[BatchRequest | bytes | bytearray], *,
                      max_in_flight: int = 32) -> Iterator[BatchVerdicts]:
        """Verify many frames over one WebSocket, ``max_in_flight`` at a time.

        Yields one :class:`BatchVerdicts` per request, in the order of ``requests``; an
        error reply raises :class:`RemoteError` when its turn comes.  Items of ``requests``
        are :class:`BatchRequest` or encoded frames (their ``request_id`` is overwritten and
        their batch-id flag set, so each :class:`BatchVerdicts` carries its ``batch_id``).
        """
        from websockets.exceptions import WebSocketException
        from websockets.sync.client import connect

        try:
            ws = connect(_ws_url(self.base_url), compression=None, max_size=None,
                         additional_headers=self.headers or None)
        except (OSError, WebSocketException) as exc:
            raise _handshake_failed(self.base_url, exc) from exc
        ids = _Ids()
        pending: dict[int, int] = {}  # request_id -> position in `requests`
        done: dict[int, BatchVerdicts | RemoteError] = {}
        source = iter(requests)
        sent = given = 0
        exhausted = False
        with ws:
            while True:
                while not exhausted and sent - given < max_in_flight:
                    req = next(source, None)
                    if req is None:
                        exhausted = True
                        break
                    rid = ids.take(pending)
                    ws.send(_with_id(req, rid))
                    pending[rid] = sent
                    sent += 1
                if given == sent:
                    return
                while given not in done:
                    try:
                        rid, result = _reply(ws.recv())
                    except (OSError, WebSocketException) as exc:
                        raise ConnectionFailed(f"stream closed with {len(pending)} replies pending: {exc}") from exc
                    if isinstance(result, VerifyResult):  # a JSON reply on a stream of ZAP frames
                        raise ConnectionFailed("the server answered a ZAP frame with JSON")
                    if rid in pending:
                        done[pending.pop(rid)] = result
                result = done.pop(given)
                given += 1
                if isinstance(result, RemoteError):
                    raise result
                yield result

    def ready(self) -> bool:
        """True when ``GET /readyz`` answers 200 (the engine passed its self-test)."""
        try:
            return self._http.get("/readyz").status_code == 200
        except httpx.TransportError:
            return False

    def status(self) -> dict:
        """``GET /v1/status`` as a dict (needs the ``admin`` scope on a server with keys)."""
        return self._get_json("/v1/status")

    def _get_json(self, path: str, params: Mapping[str, Any] | None = None) -> dict:
        try:
            r = self._http.get(path, params=params)
        except httpx.TransportError as exc:
            raise ConnectionFailed(f"{self.base_url}{path}: {exc}") from exc
        if r.status_code != 200:
            raise _remote_from_json(r.json() if r.headers.get("content-type", "").startswith("application/json")
                                    else r.text, r.status_code)
        return r.json()

    def receipt(self, batch_id: str) -> dict:
        """``GET /v1/receipts/{batch_id}``: the receipt of a verified batch (``batch_id`` from a
        :class:`VerifyResult` or :class:`BatchVerdicts`).  Raises :class:`RemoteError`
        (``NOT_FOUND`` for an unknown id, or receipts off on the server)."""
        return self._get_json(f"/v1/receipts/{batch_id}")

    def receipts(self, *, after: str | None = None, limit: int = 100, order: str = "asc") -> dict:
        """``GET /v1/receipts``: one page, ``{"receipts": [...], "next_after": id or None}``;
        ``order="desc"`` is newest first; pass ``next_after`` back as ``after`` (with the same
        ``order``) for the next page."""
        return self._get_json("/v1/receipts", {"limit": limit, "order": order, **({"after": after} if after else {})})

    def proof(self, batch_id: str, index: int) -> dict:
        """``GET /v1/receipts/{batch_id}/proof/{index}``: the inclusion proof of item ``index``,
        to check with :func:`verify_inclusion`."""
        return self._get_json(f"/v1/receipts/{batch_id}/proof/{index}")


def _with_id(req: BatchRequest | bytes | bytearray | memoryview, request_id: int) -> bytes:
    if isinstance(req, BatchRequest):
        return bytes(req.encode(request_id))
    frame = bytearray(req)
    zap.read_header(frame, zap.CLIENT_LIMITS)
    frame[7] |= zap.FLAG_BATCH_ID  # the answer then carries the batch id
    frame[8:12] = request_id.to_bytes(4, "little")
    return bytes(frame)


# ------------------------------------------------------------------ asyncio client
class AsyncClient:
    """The asyncio twin of :class:`Client` (``httpx.AsyncClient``, websockets' asyncio client);
    ``api_key`` as there."""

    def __init__(self, base_url: str = DEFAULT_URL, *, timeout: float = 60.0,
                 headers: Mapping[str, str] | None = None, transport: httpx.AsyncBaseTransport | None = None,
                 api_key: str | None = None, retry: Retry | None = Retry(), deadline: float | None = None):
        self.base_url = base_url
        self.headers = _with_deadline(auth_headers(headers, api_key), deadline)
        self.retry, self.deadline = retry, deadline
        self._http = httpx.AsyncClient(base_url=base_url, timeout=timeout, headers=self.headers,
                                       transport=transport)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _post(self, path: str, **kw) -> httpx.Response:
        tries = _Tries(self.retry, self.deadline)
        while True:
            try:
                response = await self._http.post(path, **kw)
            except httpx.TransportError as exc:
                pause = tries.after_reset(exc)
                if pause is None:
                    raise ConnectionFailed(f"{self.base_url}{path}: {exc}") from exc
            else:
                pause = tries.after(response)
                if pause is None:
                    return response
            await asyncio.sleep(pause)

    async def verify(self, items: Sequence[Item | Mapping[str, Any]], *, prehashed: bool | None = None,
                     allow_high_s: bool | None = None, low_s: bool | None = None,
                     signature_format: str = "raw") -> VerifyResult:
        """See :meth:`Client.verify`."""
        body = json_body(items, prehashed=prehashed, allow_high_s=allow_high_s, low_s=low_s,
                         signature_format=signature_format)
        return _json_result(await self._post("/v1/verify", json=body))

    async def verify_bls_aggregate(self, items: Sequence[AggregateItem]) -> VerifyResult:
        """See :meth:`Client.verify_bls_aggregate`."""
        return _json_result(await self._post("/v1/verify/bls-aggregate", json=aggregate_body(items)))

    async def verify_json_body(self, body: bytes) -> VerifyResult:
        """Post an already serialised JSON verify request."""
        return _json_result(await self._post("/v1/verify", content=body,
                                             headers={"content-type": "application/json"}))

    async def verify_batch(self, scheme: str, pks: Sequence[bytes] | np.ndarray, msgs: Sequence[bytes],
                           sigs: Sequence[bytes] | np.ndarray, *, ctx: bytes = b"", prehashed: bool = False,
                           allow_high_s: bool = False, low_s: bool = False) -> BatchVerdicts:
        """See :meth:`Client.verify_batch`."""
        frame = zap.encode_items(scheme, pks, msgs, sigs, ctx=ctx, prehashed=prehashed, allow_high_s=allow_high_s,
                                 low_s=low_s)
        return await self.verify_frame(frame)

    async def verify_frame(self, frame: bytes | bytearray | memoryview) -> BatchVerdicts:
        """Post an already encoded request frame."""
        return _zap_answer(await self._post("/v1/verify/zap", content=bytes(frame), headers=_ZAP_HEADERS))

    @asynccontextmanager
    async def stream(self, *, max_in_flight: int = 32) -> AsyncIterator[VerifyStream]:
        """A :class:`VerifyStream` on ``WebSocket /v1/ws/verify``, closed on exit::

            async with client.stream(max_in_flight=64) as s:
                futures = [await s.submit(req) for req in requests]
                results = await asyncio.gather(*futures)
        """
        from websockets.asyncio.client import connect
        from websockets.exceptions import WebSocketException

        try:
            ws = await connect(_ws_url(self.base_url), compression=None, max_size=None,
                               additional_headers=self.headers or None)
        except (OSError, WebSocketException) as exc:
            raise _handshake_failed(self.base_url, exc) from exc
        s = VerifyStream(ws, max_in_flight)
        try:
            yield s
        finally:
            await s.aclose()


@dataclass
class VerifyStream:
    """Pipelined requests on one WebSocket; make it with :meth:`AsyncClient.stream`.

    ``submit*`` wait for a free slot (at most ``max_in_flight`` requests unanswered),
    send, and return a future of the reply; ``verify*`` also await it.  If the connection
    closes, every pending future fails with :class:`ConnectionFailed`.
    """

    ws: Any
    max_in_flight: int
    _slots: asyncio.Semaphore = field(init=False)
    _pending: dict[Any, asyncio.Future] = field(init=False, default_factory=dict)
    _ids: _Ids = field(init=False, default_factory=_Ids)
    _reader: asyncio.Task = field(init=False)

    def __post_init__(self) -> None:
        self._slots = asyncio.Semaphore(self.max_in_flight)
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        error: Exception = ConnectionFailed("the stream was closed")
        try:
            async for message in self.ws:
                try:
                    rid, result = _reply(message)
                except Exception as exc:  # a reply we cannot read cannot be matched to a request
                    error = ConnectionFailed(f"unreadable reply from the server: {exc}")
                    break
                fut = self._pending.pop(rid, None)
                if fut is None:
                    continue
                self._slots.release()
                if fut.done():
                    continue
                if isinstance(result, Exception):
                    fut.set_exception(result)
                else:
                    fut.set_result(result)
        except Exception as exc:
            error = ConnectionFailed(f"stream closed: {exc}")
        finally:
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(error)
            self._pending.clear()

    async def _send(self, message: bytes | str, rid: Any) -> asyncio.Future:
        if self._reader.done():
            raise ConnectionFailed("the stream is closed")
        fut = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        try:
            await self.ws.send(message)
        except Exception as exc:
            self._pending.pop(rid, None)
            self._slots.release()
            raise ConnectionFailed(f"send failed: {exc}") from exc
        return fut

    async def submit(self, request: BatchRequest | bytes | bytearray) -> asyncio.Future:
        """Send one ZAP request (a :class:`BatchRequest` or an encoded frame, whose
        ``request_id`` is overwritten); the future gives :class:`BatchVerdicts`."""
        await self._slots.acquire()
        rid = self._ids.take(self._pending)
        try:
            message = _with_id(request, rid)
        except Exception:
            self._slots.release()
            raise
        return await self._send(message, rid)

    async def submit_items(self, items: Sequence[Item | Mapping[str, Any]], **kw) -> asyncio.Future:
        """Send one JSON request (see :func:`json_body`); the future gives :class:`VerifyResult`."""
        body = json_body(items, **kw)
        await self._slots.acquire()
        rid = self._ids.take(self._pending)
        return await self._send(json.dumps({"request_id": rid, **body}), rid)

    async def verify_batch(self, scheme: str, pks, msgs, sigs, **kw) -> BatchVerdicts:
        """Submit one batch and await its :class:`BatchVerdicts`."""
        return await (await self.submit(BatchRequest(scheme, pks, msgs, sigs, **kw)))

    async def verify(self, items: Sequence[Item | Mapping[str, Any]], **kw) -> VerifyResult:
        """Submit JSON items and await the :class:`VerifyResult`."""
        return await (await self.submit_items(items, **kw))

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    async def aclose(self) -> None:
        await self.ws.close()
        try:
            await asyncio.wait_for(self._reader, timeout=5)
        except (TimeoutError, Exception):
            self._reader.cancel()
