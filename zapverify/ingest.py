"""asyncio clients of the ingest ports: ZAP frames over raw TCP, UDP and QUIC.

Each is a stream of pipelined requests like :class:`zapverify.VerifyStream`:
``submit(request)`` waits for one of ``max_in_flight`` slots, sends the frame with a fresh
``request_id`` and returns a future of :class:`zapverify.BatchVerdicts` (or of a
:class:`app.core.errors.RemoteError` for an error frame); replies are matched by
``request_id`` (TCP, UDP) or by stream (QUIC).  Open one with :func:`connect`::

    async with connect("tcp", "127.0.0.1", 7100, max_in_flight=64) as s:
        futures = [await s.submit(frame) for frame in frames]
        results = await asyncio.gather(*futures)

UDP is not reliable: a request without a reply after ``retry_seconds`` is sent again (same
``request_id``), ``retries`` times, then fails with :class:`ConnectionFailed`.  QUIC uses
ALPN ``zap/1``; the server's certificate is not verified unless ``cafile`` is given (the
server makes a self-signed one; ``/v1/status`` shows its SHA-256 fingerprint).

A server with API keys configured takes TCP and QUIC frames only after a keyed handshake
(docs/wire-format.md section 8, "Ingest authentication"); pass ``api_key=`` (a key with the
``verify`` scope) and :func:`connect` answers the server's challenge before it returns.  A
refused key fails with :class:`RemoteError` (``UNAUTHORIZED`` or ``FORBIDDEN``): over TCP
every request of the stream (the server answers the handshake only when it refuses it, so
that requests can follow it at once), over QUIC :func:`connect` itself (it waits for the
server's acknowledgement).  UDP carries no key.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import ssl
from collections.abc import AsyncIterator, Callable
from typing import Any

from app.core.errors import ConnectionFailed, RemoteError, Unauthorized, by_wire_code
from app.wire import zap
from zapverify.http import BatchRequest, BatchVerdicts, VerifyResult, _Ids, _remote_from_error_frame, _reply, _with_id

__all__ = ["TRANSPORTS", "QuicStream", "TcpStream", "UdpStream", "connect"]

TRANSPORTS = ("tcp", "udp", "quic")
ALPN = "zap/1"


class _Pipelined:
    """Slots, ids and futures shared by the three streams."""

    def __init__(self, max_in_flight: int):
        self.max_in_flight = max_in_flight
        self._slots = asyncio.Semaphore(max_in_flight)
        self._pending: dict[int, asyncio.Future] = {}
        self._ids = _Ids()
        self._error: Exception | None = None

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def _resolve(self, key: int, result: BatchVerdicts | VerifyResult | Exception) -> None:
        fut = self._pending.pop(key, None)
        if fut is None:
            return
        self._slots.release()
        if not fut.done():
            if isinstance(result, Exception):
                fut.set_exception(result)
            else:
                fut.set_result(result)

    def _fail_all(self, error: Exception) -> None:
        self._error = error
        for key in list(self._pending):
            self._resolve(key, error)

    async def _prepare(self, request: BatchRequest | bytes | bytearray) -> tuple[int, bytes, asyncio.Future]:
        if self._error is not None:
            raise self._error
        await self._slots.acquire()
        if self._error is not None:  # the connection ended while we waited for a slot
            self._slots.release()
            raise self._error
        rid = self._ids.take(self._pending)
        try:
            frame = _with_id(request, rid)
        except Exception:
            self._slots.release()
            raise
        fut = asyncio.get_running_loop().create_future()
        return rid, frame, fut

    async def verify_batch(self, scheme: str, pks, msgs, sigs, **kw) -> BatchVerdicts:
        """Submit one batch and await its :class:`BatchVerdicts`."""
        return await (await self.submit(BatchRequest(scheme, pks, msgs, sigs, **kw)))

    async def submit(self, request: BatchRequest | bytes | bytearray) -> asyncio.Future:
        raise NotImplementedError

    async def aclose(self) -> None:
        raise NotImplementedError


# ------------------------------------------------------------------ the handshake
def _auth_frame(api_key: str, challenge_frame: bytes) -> bytes:
    """The auth frame answering ``challenge_frame`` with ``api_key``.  Raises :class:`RemoteError`
    when the server sent an error frame instead, :class:`app.core.errors.WireError` for a
    frame that is neither."""
    header = zap.read_header(challenge_frame, zap.CLIENT_LIMITS)
    if header.type == zap.TYPE_ERROR:
        raise _remote_from_error_frame(zap.decode_error(challenge_frame))
    challenge = zap.decode_auth(challenge_frame, zap.TYPE_CHALLENGE).value
    # The server holds only SHA-256 digests of its keys, so the digest is the HMAC key.
    return bytes(zap.encode_auth(zap.auth_mac(hashlib.sha256(api_key.encode()).digest(), challenge)))


def _unexpected_challenge() -> RemoteError:
    return RemoteError("the server requires an API key for ingest: connect with api_key=",
                       code=Unauthorized.code, status=Unauthorized.status, wire_code=Unauthorized.wire_code)


async def _tcp_handshake(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, api_key: str) -> None:
    head = await reader.readexactly(zap.HEADER_SIZE)
    size = zap.read_header(head, zap.CLIENT_LIMITS).size
    writer.write(_auth_frame(api_key, head + await reader.readexactly(size - zap.HEADER_SIZE)))
    await writer.drain()


# ------------------------------------------------------------------ TCP
class TcpStream(_Pipelined):
    """Frames back to back on one TCP connection; replies matched by ``request_id``."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, max_in_flight: int):
        super().__init__(max_in_flight)
        self.reader, self.writer = reader, writer
        self._task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        error: Exception = ConnectionFailed("the connection was closed")
        try:
            while True:
                head = await self.reader.readexactly(zap.HEADER_SIZE)
                header = zap.read_header(head, zap.CLIENT_LIMITS)
                frame = head + await self.reader.readexactly(header.size - zap.HEADER_SIZE)
                if header.type == zap.TYPE_CHALLENGE:  # connected without api_key to a server that wants one
                    error = _unexpected_challenge()
                    continue
                rid, result = _reply(frame)
                if rid == 0 and isinstance(result, RemoteError):
                    error = result  # about the connection, not a request: the server closes it
                    continue
                self._resolve(rid, result)
        except asyncio.IncompleteReadError:
            pass
        except Exception as exc:
            error = ConnectionFailed(f"TCP stream closed: {exc}")
        finally:
            self._fail_all(error)

    async def submit(self, request: BatchRequest | bytes | bytearray) -> asyncio.Future:
        """Send one request frame (its ``request_id`` is replaced); a future of its reply."""
        rid, frame, fut = await self._prepare(request)
        self._pending[rid] = fut
        try:
            self.writer.write(frame)
            await self.writer.drain()
        except (OSError, RuntimeError) as exc:
            self._resolve(rid, ConnectionFailed(f"send failed: {exc}"))
        return fut

    async def send_raw(self, data: bytes) -> None:
        """Write bytes as they are (tests: malformed frames)."""
        self.writer.write(data)
        await self.writer.drain()

    async def aclose(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()
            await self.writer.wait_closed()
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._task


# ------------------------------------------------------------------ UDP
class _UdpProtocol(asyncio.DatagramProtocol):
    def __init__(self, stream: UdpStream):
        self.stream = stream

    def datagram_received(self, data: bytes, addr) -> None:
        try:
            rid, result = _reply(data)
        except Exception:  # not a frame: not ours to answer
            return
        self.stream._resolve(rid, result)

    def error_received(self, exc: Exception) -> None:  # ICMP port unreachable and the like
        self.stream._last_error = exc


class UdpStream(_Pipelined):
    """One frame per datagram; replies matched by ``request_id``, lost ones sent again."""

    def __init__(self, max_in_flight: int, retry_seconds: float = 0.5, retries: int = 4):
        super().__init__(max_in_flight)
        self.retry_seconds, self.retries = retry_seconds, retries
        self.transport: asyncio.DatagramTransport | None = None
        self.resent = 0
        self._last_error: Exception | None = None

    async def _open(self, host: str, port: int) -> None:
        loop = asyncio.get_running_loop()
        self.transport, _ = await loop.create_datagram_endpoint(lambda: _UdpProtocol(self),
                                                                remote_addr=(host, port))

    async def submit(self, request: BatchRequest | bytes | bytearray) -> asyncio.Future:
        rid, frame, fut = await self._prepare(request)
        self._pending[rid] = fut
        if self.transport is None:
            raise ConnectionFailed("the UDP stream is not open")
        self.transport.sendto(frame)
        asyncio.get_running_loop().call_later(self.retry_seconds, self._retry, rid, frame, self.retries)
        return fut

    def _retry(self, rid: int, frame: bytes, left: int) -> None:
        fut, transport = self._pending.get(rid), self.transport
        if fut is None or fut.done() or transport is None or transport.is_closing():
            return
        if left == 0:
            why = f" ({self._last_error})" if self._last_error else ""
            self._resolve(rid, ConnectionFailed(f"no reply to request {rid} after {self.retries + 1} sends{why}"))
            return
        self.resent += 1
        transport.sendto(frame)
        asyncio.get_running_loop().call_later(self.retry_seconds, self._retry, rid, frame, left - 1)

    async def send_raw(self, data: bytes) -> None:
        if self.transport is None:
            raise ConnectionFailed("the UDP stream is not open")
        self.transport.sendto(data)

    async def aclose(self) -> None:
        if self.transport is not None:
            self.transport.close()
        self._fail_all(ConnectionFailed("the stream was closed"))


# ------------------------------------------------------------------ QUIC
def _quic_protocol_class():
    from aioquic.asyncio.protocol import QuicConnectionProtocol
    from aioquic.quic import events

    class _ClientProtocol(QuicConnectionProtocol):
        def __init__(self, *args: Any, **kw: Any) -> None:
            super().__init__(*args, **kw)
            self.owner: QuicStream | None = None
            self.buffers: dict[int, bytearray] = {}
            # The handshake: the server's challenge (its unidirectional stream), the stream of
            # our auth frame and what the server ended it with; why the connection ended.
            self.challenge: bytes | None = None
            self.auth_sid: int | None = None
            self.auth_reply: bytes | None = None
            self.terminated: Exception | None = None
            self.changed = asyncio.Event()

        def quic_event_received(self, event) -> None:
            if isinstance(event, events.StreamDataReceived) and (
                    event.stream_id & 0x3 == 0x3 or event.stream_id == self.auth_sid):
                buf = self.buffers.setdefault(event.stream_id, bytearray())
                buf += event.data
                if event.end_stream:
                    del self.buffers[event.stream_id]
                    if event.stream_id == self.auth_sid:
                        self.auth_reply = bytes(buf)
                    elif self.challenge is None:
                        self.challenge = bytes(buf)
                    self.changed.set()
                return
            if isinstance(event, events.ConnectionTerminated):
                self.terminated = _terminated(event)
                self.changed.set()
            owner = self.owner
            if owner is None:
                return
            if isinstance(event, events.StreamDataReceived):
                buf = self.buffers.setdefault(event.stream_id, bytearray())
                buf += event.data
                if event.end_stream:
                    del self.buffers[event.stream_id]
                    result: BatchVerdicts | VerifyResult | Exception
                    try:
                        _, result = _reply(bytes(buf))
                    except Exception as exc:
                        result = ConnectionFailed(f"unreadable reply on stream {event.stream_id}: {exc}")
                    owner._resolve(event.stream_id, result)
            elif isinstance(event, events.StreamReset):
                self.buffers.pop(event.stream_id, None)
                cls = by_wire_code(event.error_code)
                owner._resolve(event.stream_id, RemoteError(
                    f"the server dropped the stream (code 0x{event.error_code:04x})",
                    code=cls.code if cls else f"WIRE_0x{event.error_code:04x}",
                    status=cls.status if cls else 400, wire_code=event.error_code))
            elif isinstance(event, events.ConnectionTerminated):
                owner._fail_all(self.terminated or _terminated(event))

    return _ClientProtocol


def _terminated(event: Any) -> Exception:
    """Why a QUIC connection ended: the server's ZAP wire code when it closed it as the
    application (frame type None; e.g. ``UNAUTHORIZED`` 0x0020), else :class:`ConnectionFailed`."""
    cls = by_wire_code(event.error_code) if event.frame_type is None and event.error_code else None
    if cls is not None:
        return RemoteError(event.reason_phrase or cls.code, code=cls.code, status=cls.status,
                           wire_code=event.error_code)
    return ConnectionFailed(f"QUIC connection closed: {event.reason_phrase or event.error_code}")


async def _quic_handshake(protocol: Any, api_key: str) -> None:
    """Answer the server's challenge and wait for it to acknowledge (end our stream with no
    data); raises :class:`RemoteError` when it refuses."""
    async def until(ready: Callable[[], bool]) -> None:
        while not ready():
            if protocol.terminated is not None:
                raise protocol.terminated
            protocol.changed.clear()
            await protocol.changed.wait()

    await until(lambda: protocol.challenge is not None)
    auth = _auth_frame(api_key, protocol.challenge)
    quic = protocol._quic
    protocol.auth_sid = quic.get_next_available_stream_id()
    quic.send_stream_data(protocol.auth_sid, auth, end_stream=True)
    protocol.transmit()
    await until(lambda: protocol.auth_reply is not None)
    if protocol.auth_reply:  # the server answers only a refusal with a frame
        raise _remote_from_error_frame(zap.decode_error(protocol.auth_reply))


class QuicStream(_Pipelined):
    """One request per bidirectional QUIC stream; the reply comes back on it."""

    def __init__(self, protocol: Any, max_in_flight: int):
        super().__init__(max_in_flight)
        self.protocol = protocol
        protocol.owner = self

    async def submit(self, request: BatchRequest | bytes | bytearray) -> asyncio.Future:
        _, frame, fut = await self._prepare(request)
        return self._send(frame, fut)

    def _send(self, frame: bytes, fut: asyncio.Future) -> asyncio.Future:
        quic = self.protocol._quic
        sid = quic.get_next_available_stream_id()
        self._pending[sid] = fut
        quic.send_stream_data(sid, frame, end_stream=True)
        self.protocol.transmit()
        return fut

    async def send_raw(self, data: bytes) -> asyncio.Future:
        """Send bytes as one stream (tests: malformed frames); a future of what comes back."""
        await self._slots.acquire()
        if self._error is not None:
            self._slots.release()
            raise self._error
        return self._send(data, asyncio.get_running_loop().create_future())

    async def aclose(self) -> None:
        self.protocol.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.protocol.wait_closed(), 2)
        self._fail_all(ConnectionFailed("the stream was closed"))


# ------------------------------------------------------------------ connect
@contextlib.asynccontextmanager
async def connect(transport: str, host: str, port: int, *, max_in_flight: int = 64, timeout: float = 10.0,
                  cafile: str | None = None, retry_seconds: float = 0.5, retries: int = 4,
                  api_key: str | None = None) -> AsyncIterator[TcpStream | UdpStream | QuicStream]:
    """A pipelined stream to an ingest port, closed on exit.

    ``api_key`` (TCP, QUIC): a key with the ``verify`` scope, for a server with API keys
    configured; the handshake is done before this returns (see the module doc).

    Raises :class:`ConnectionFailed` when the port cannot be reached (TCP, QUIC) or, with
    ``api_key``, no challenge came within ``timeout`` seconds (a server without keys sends
    none); :class:`RemoteError` when a QUIC server refuses the key; ``ValueError`` for an
    unknown transport, or ``api_key`` with UDP.
    """
    if api_key is not None and transport == "udp":
        raise ValueError("UDP ingest carries no API key (docs/wire-format.md section 8)")
    if transport == "tcp":
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        except (TimeoutError, OSError) as exc:
            raise ConnectionFailed(f"tcp://{host}:{port}: {exc or 'timed out'}") from exc
        if api_key is not None:
            try:
                await asyncio.wait_for(_tcp_handshake(reader, writer, api_key), timeout)
            except BaseException as exc:
                writer.close()
                if isinstance(exc, TimeoutError):
                    raise ConnectionFailed(f"tcp://{host}:{port}: no auth challenge within {timeout:g} s (does the "
                                           "server have API keys configured?)") from exc
                if isinstance(exc, (OSError, asyncio.IncompleteReadError)):
                    raise ConnectionFailed(f"tcp://{host}:{port}: the connection ended during the handshake") from exc
                raise
        stream: Any = TcpStream(reader, writer, max_in_flight)
        try:
            yield stream
        finally:
            await stream.aclose()
    elif transport == "udp":
        stream = UdpStream(max_in_flight, retry_seconds, retries)
        await stream._open(host, port)
        try:
            yield stream
        finally:
            await stream.aclose()
    elif transport == "quic":
        from aioquic.asyncio.client import connect as quic_connect
        from aioquic.quic.configuration import QuicConfiguration

        config = QuicConfiguration(is_client=True, alpn_protocols=[ALPN])
        if cafile:
            config.load_verify_locations(cafile)
        else:
            config.verify_mode = ssl.CERT_NONE
        async with contextlib.AsyncExitStack() as stack:
            try:
                protocol = await asyncio.wait_for(
                    stack.enter_async_context(quic_connect(host, port, configuration=config,
                                                           create_protocol=_quic_protocol_class())), timeout)
            except (TimeoutError, OSError, ConnectionError) as exc:
                raise ConnectionFailed(f"quic://{host}:{port}: {exc or 'timed out'}") from exc
            if api_key is not None:
                try:
                    await asyncio.wait_for(_quic_handshake(protocol, api_key), timeout)
                except TimeoutError as exc:
                    raise ConnectionFailed(f"quic://{host}:{port}: no auth challenge or answer within {timeout:g} s "
                                           "(does the server have API keys configured?)") from exc
            stream = QuicStream(protocol, max_in_flight)
            try:
                yield stream
            finally:
                await stream.aclose()
    else:
        raise ValueError(f"transport must be one of {TRANSPORTS}")
