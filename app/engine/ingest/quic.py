"""ZAP over QUIC (RFC 9000) with aioquic: ALPN ``zap/1``, one frame per bidirectional stream.

A client opens a bidirectional stream, writes one request frame and ends the stream (FIN);
the server answers on the same stream with one frame (response or error) and ends it.
Many streams run at once on one connection (at most 128 unanswered: aioquic's stream
limit, raised as streams finish, is the per-connection flow control).

The listener runs an asyncio loop in its own thread, with aioquic's ``QuicServer`` reading
our own non-blocking UDP socket (so that reading can be paused).  Stream data arrives
decrypted in chunks; the first 16 bytes are kept apart and the magic is checked as soon
as 4 are in, then the header; only then is a pool buffer taken, into which the rest of the
stream is copied.  The buffer and the frame's admission charge grow with the bytes
received, not with what the header declares (:class:`app.engine.ingest.base.FrameLanding`).
A stream whose frame fails a check is
*dropped*: STOP_SENDING and RESET_STREAM with the ZAP wire code of the failure as the
application error code (``BAD_MAGIC`` 0x0001, ``BAD_SIZE`` 0x0005 for a stream that ends
early, ``FRAME_TOO_LARGE`` 0x0011 for one over the limit or longer than ``size``, ...), and
counted.  When the pool has no room the stream is answered ``POOL_EXHAUSTED`` at once, and
over the admission bound ``OVERLOADED`` (with STOP_SENDING carrying that code).

Deadlines (docs/operations.md, "Load shedding"): a stream whose first byte has arrived must
get a byte at least every ``frame_timeout`` seconds and, after that grace, average
``frame_min_rate`` bytes per second until its frame is whole, counted while the listener
reads its socket.  A stream past its deadline is answered ``BODY_TIMEOUT`` (an error frame,
then the stream ends, and STOP_SENDING 0x0023), its memory and charge go back and it counts
as ``body_timeout``; the connection goes on.  A connection with no stream in progress is
left to QUIC's idle timeout.

Authentication (docs/wire-format.md section 8, "Ingest authentication"): with API keys
configured the server opens a unidirectional stream once the TLS handshake is done and
sends a challenge frame on it; the client's first bidirectional stream must carry its auth
frame, which the server acknowledges by ending that stream with no data.  Anything else
(another stream first, a MAC that matches no key, a key without the ``verify`` scope, no
handshake within the deadline) closes the connection with the ``UNAUTHORIZED`` (0x0020) or
``FORBIDDEN`` (0x0021) wire code as the application error code, counted ``unauthorized``;
no frame of the connection is landed or verified before.  With a rate limit, each frame then
takes a token of its key (``RATE_LIMITED`` beyond, as a refusal above).

A full ring: the finished frame waits in the listener and the listener stops reading its
socket until the ring has room (the peers' congestion control then slows them down).

The TLS certificate is configured, or self-signed at start (:mod:`app.engine.ingest.tls`).
At shutdown new streams are reset (code 0x0100, ``NOT_READY``), the replies due are sent,
the listener waits up to ``linger`` seconds for the peers to acknowledge them, then closes
every connection with NO_ERROR.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from collections import deque
from functools import partial

from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.asyncio.server import QuicServer
from aioquic.quic import events
from aioquic.quic.configuration import QuicConfiguration

from app.core.errors import (
    BadMagic,
    BadSize,
    BodyTimeout,
    BufferTooLarge,
    FrameTooLarge,
    NotReady,
    Overloaded,
    PoolExhausted,
    RateLimited,
    Unauthorized,
    WireError,
    ZapVerifyError,
)
from app.engine.ingest import tls
from app.engine.ingest.base import FrameLanding, Listener, ListenerContext, datagram_socket
from app.engine.ingest.ring import Entry
from app.wire import zap

log = logging.getLogger("zapverify.ingest.quic")

ALPN = "zap/1"


def _is_client_bidi(stream_id: int) -> bool:
    return stream_id & 0x3 == 0  # RFC 9000 section 2.1: client-initiated, bidirectional


class _SocketTransport(asyncio.DatagramTransport):
    """A datagram transport over a socket we own, with :meth:`pause_reading` (asyncio's own
    datagram transport has none)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, protocol: asyncio.DatagramProtocol):
        super().__init__()
        self._loop, self._sock, self._protocol = loop, sock, protocol
        self._reading = False
        self._closed = False
        self.resume_reading()

    def _ready(self) -> None:
        for _ in range(64):
            try:
                data, addr = self._sock.recvfrom(65536)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            self._protocol.datagram_received(data, addr)
            if not self._reading:
                return

    def pause_reading(self) -> None:
        if self._reading:
            self._loop.remove_reader(self._sock.fileno())
            self._reading = False

    def resume_reading(self) -> None:
        if not self._reading and not self._closed:
            self._loop.add_reader(self._sock.fileno(), self._ready)
            self._reading = True

    def is_reading(self) -> bool:
        return self._reading

    def sendto(self, data, addr=None) -> None:
        try:
            self._sock.sendto(data, addr)
        except OSError:  # a full socket buffer loses the datagram; QUIC loss recovery resends it
            pass

    def get_extra_info(self, name, default=None):
        return {"socket": self._sock, "sockname": self._sock.getsockname()}.get(name, default)

    def is_closing(self) -> bool:
        return self._closed

    def close(self) -> None:
        if not self._closed:
            self.pause_reading()
            self._closed = True

    def abort(self) -> None:
        self.close()


class _Stream:
    __slots__ = ("head", "frame", "header", "dropped", "t_start", "t_last", "t_bytes")

    def __init__(self) -> None:
        self.head = bytearray()
        self.frame: FrameLanding | None = None
        self.header: zap.Header | None = None
        self.dropped = False
        # The read clock while its frame arrives (the listener's clock, which stops while it
        # does not read); t_start None: not timed (nothing yet, or handed on).
        self.t_start: float | None = None
        self.t_last = 0.0
        self.t_bytes = 0


class _Protocol(QuicConnectionProtocol):
    """One QUIC connection; its events go to the listener."""

    def __init__(self, *args, listener: QuicListener, **kw):
        super().__init__(*args, **kw)
        self.listener = listener
        self.streams: dict[int, _Stream] = {}
        self.alive = True
        self.in_flight = 0  # frames accepted or parked whose reply is not handed to QUIC yet
        # The handshake (keys configured): the challenge, the stream carrying the answer, by when.
        auth = listener.ctx.auth
        self.authed = auth is None
        self.denied = False
        self.challenge = auth.challenge() if auth is not None else b""
        self.auth_deadline = listener._now() + auth.timeout if auth is not None else 0.0
        self.auth_sid: int | None = None
        self.auth_buf = bytearray()
        self.key_name: str | None = None
        listener._protocols.add(self)
        listener.ctx.counters.connection(+1)

    def quic_event_received(self, event: events.QuicEvent) -> None:
        try:
            self._dispatch(event)
        except Exception:  # a bug must cost one connection, not the listener
            log.exception("QUIC ingest: connection failed")
            self.listener._on_terminated(self)
            self.close()

    def _dispatch(self, event: events.QuicEvent) -> None:
        if isinstance(event, events.StreamDataReceived):
            self.listener._on_data(self, event)
        elif isinstance(event, events.HandshakeCompleted):
            self.listener._on_handshake(self)
        elif isinstance(event, events.StreamReset):
            self.listener._on_reset(self, event.stream_id)
        elif isinstance(event, events.ConnectionTerminated):
            self.listener._on_terminated(self)


class _Route:
    __slots__ = ("listener", "proto", "stream_id")

    def __init__(self, listener: QuicListener, proto: _Protocol, stream_id: int):
        self.listener, self.proto, self.stream_id = listener, proto, stream_id

    @property
    def alive(self) -> bool:
        return self.proto.alive

    def send(self, data: bytes, done) -> None:
        try:
            self.listener.loop.call_soon_threadsafe(self.listener._reply, self.proto, self.stream_id, data, done)
        except RuntimeError:  # the loop is closed
            done(False)


class QuicListener(Listener):
    """The QUIC receive thread (see the module doc).

    Args:
        host, port: where to listen (port 0: any free port).
        ctx: ring, pool, limits, counters, admission, deadlines and the handshake's keys.
        cert_path, key_path: a PEM certificate and key; both None: self-signed at start.
        linger: seconds to wait at shutdown for replies to be acknowledged.
        reuse_port: bind with ``SO_REUSEPORT`` (several processes on one port; the kernel keeps a
            peer address on one of them, which holds as long as the set of processes does).

    Raises :class:`OSError` when the address cannot be bound, :class:`app.core.errors.ConfigError`
    for a certificate or key that cannot be read.
    """

    transport = "quic"

    def __init__(self, host: str, port: int, ctx: ListenerContext, *, cert_path: str | None = None,
                 key_path: str | None = None, linger: float = 1.0, reuse_port: bool = False):
        super().__init__(ctx)
        if cert_path or key_path:
            cert, key = tls.load(cert_path or "", key_path or "")
            self.certificate_source = "configured"
        else:
            cert, key = tls.self_signed(host)
            self.certificate_source = "self-signed"
        self.fingerprint = tls.fingerprint(cert)
        self.configuration = QuicConfiguration(is_client=False, alpn_protocols=[ALPN])
        self.configuration.certificate, self.configuration.private_key = cert, key
        self.linger = linger
        self.sock = datagram_socket(host, port, reuse_port=reuse_port)
        self.port = self.sock.getsockname()[1]
        self.loop = asyncio.new_event_loop()
        self._server: QuicServer | None = None
        self._transport: _SocketTransport | None = None
        self._parked: deque[Entry] = deque()
        self._draining = False
        self._pending = 0  # frames of live connections accepted or parked, reply not yet handed to QUIC
        self._protocols: set[_Protocol] = set()
        # The deadlines' clock stops while the socket is not read (ring full): nothing can arrive then.
        self._paused_since: float | None = None
        self._paused_total = 0.0
        self._sweeper: asyncio.TimerHandle | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="zv-ingest-quic", daemon=True)
        ctx.ring.on_space(self._on_space)

    # ------------------------------------------------------------------ life cycle
    def start(self) -> None:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the QUIC listener did not start")

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._setup())
        self._ready.set()
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    async def _setup(self) -> None:
        self._server = QuicServer(configuration=self.configuration,
                                  create_protocol=partial(_Protocol, listener=self))
        self._transport = _SocketTransport(self.loop, self.sock, self._server)
        self._server.connection_made(self._transport)
        self._sweeper = self.loop.call_later(self.ctx.sweep_seconds, self._sweep)

    def drain(self) -> None:
        """New streams are reset from now on; datagrams are still read (acknowledgements)."""
        self._draining = True

    def parked(self) -> int:
        return len(self._parked)

    def pending(self) -> int:
        return self._pending  # kept on the loop thread; an int is read whole from any thread

    def close(self, timeout: float = 5.0) -> None:
        if not self._thread.is_alive():
            self.sock.close()
            return
        done = threading.Event()

        async def shut() -> None:
            if self._sweeper is not None:
                self._sweeper.cancel()
                self._sweeper = None
            deadline = time.monotonic() + self.linger
            while time.monotonic() < deadline and self._unacknowledged():
                await asyncio.sleep(0.01)
            for entry in self._parked:
                entry.buffer.release()
                self.ctx.counters.rejected("shutdown")
            self._parked.clear()
            server = self._server
            assert server is not None  # the thread runs only once start() made the server
            for proto in {p for p in server._protocols.values() if isinstance(p, _Protocol)}:
                self._release_streams(proto, "shutdown")
            server.close()  # CONNECTION_CLOSE to every peer, then the transport
            self.sock.close()
            done.set()
            self.loop.stop()

        asyncio.run_coroutine_threadsafe(shut(), self.loop)
        done.wait(timeout + self.linger)
        self._thread.join(timeout)

    def _unacknowledged(self) -> bool:
        # aioquic forgets a stream once both directions are finished and acknowledged; the
        # table is not public API, so without it the linger is a plain wait.
        protocols = self._server._protocols.values() if self._server is not None else ()
        for proto in set(protocols):
            streams = getattr(proto._quic, "_streams", None)
            if streams is None or any(_is_client_bidi(s) for s in streams):
                return True
        return False

    def info(self) -> dict:
        return {"alpn": ALPN, "certificate": self.certificate_source, "certificate_sha256": self.fingerprint}

    # ------------------------------------------------------------------ deadlines
    def _now(self) -> float:
        """Seconds on the deadlines' clock: monotonic time less the time the socket was not read."""
        now = time.monotonic()
        paused = self._paused_total + (now - self._paused_since if self._paused_since is not None else 0.0)
        return now - paused

    def _pause(self) -> None:
        if self._transport is not None and self._transport.is_reading():
            self._transport.pause_reading()
            self._paused_since = time.monotonic()

    def _resume(self) -> None:
        if self._transport is not None:
            self._transport.resume_reading()
        if self._paused_since is not None:
            self._paused_total += time.monotonic() - self._paused_since
            self._paused_since = None

    def _sweep(self) -> None:
        """On the loop, every ``sweep_seconds``: cut the handshakes and half-received frames
        past their deadlines."""
        try:
            if self._paused_since is None:  # while the socket is not read, every clock stands still
                now = self._now()
                for proto in list(self._protocols):
                    try:
                        self._sweep_one(proto, now)
                    except Exception:  # a bug must cost one connection, not the listener
                        log.exception("QUIC ingest: connection failed")
                        self._on_terminated(proto)
                        proto.close()
        finally:
            if self._sweeper is not None:
                self._sweeper = self.loop.call_later(self.ctx.sweep_seconds, self._sweep)

    def _sweep_one(self, proto: _Protocol, now: float) -> None:
        if not proto.alive or proto.denied:
            return
        if not proto.authed:
            if now >= proto.auth_deadline:
                assert self.ctx.auth is not None  # authed is False only under a handshake
                self._deny(proto, Unauthorized(f"no auth frame within {self.ctx.auth.timeout:g} s of connecting",
                                               field="auth"))
            return
        for sid, st in list(proto.streams.items()):
            if st.dropped or st.t_start is None:
                continue
            if now >= self.ctx.frame_deadline(st.t_start, st.t_last, st.t_bytes):
                size = st.header.size if st.header is not None else None
                self._refuse(proto, sid, st, BodyTimeout(self.ctx.stall_message(st.t_bytes, size), field="frame"),
                             "body_timeout")

    # ------------------------------------------------------------------ the handshake
    def _on_handshake(self, proto: _Protocol) -> None:
        """TLS is up: send the challenge on a stream of our own (keys configured)."""
        if proto.authed or proto.denied:
            return
        quic = proto._quic
        sid = quic.get_next_available_stream_id(is_unidirectional=True)
        quic.send_stream_data(sid, bytes(zap.encode_challenge(proto.challenge)), end_stream=True)
        proto.transmit()

    def _on_auth_data(self, proto: _Protocol, ev: events.StreamDataReceived) -> None:
        """Bytes of a connection that has not authenticated: its first stream must carry
        exactly one auth frame; anything else ends the connection."""
        assert self.ctx.auth is not None  # authed is False only under a handshake
        sid = ev.stream_id
        self.ctx.counters.received(len(ev.data))
        try:
            if proto.auth_sid is None:
                proto.auth_sid = sid
            elif sid != proto.auth_sid:
                raise Unauthorized("a stream opened before the handshake was done: wait for the server to end the "
                                   "auth frame's stream", field="auth")
            buf = proto.auth_buf
            buf += ev.data
            if len(buf) >= zap.HEADER_SIZE:
                header = zap.read_header(buf[:zap.HEADER_SIZE], self.ctx.limits)
                if header.type != zap.TYPE_AUTH:
                    raise Unauthorized("this server requires an API key: answer its challenge with an auth frame "
                                       "before any other frame (docs/wire-format.md section 8)", field="auth")
                if header.size != zap.AUTH_FRAME_SIZE or len(buf) > zap.AUTH_FRAME_SIZE:
                    raise BadSize(f"an auth frame is {zap.AUTH_FRAME_SIZE} bytes, one stream carries it alone",
                                  field="size")
            elif buf[:4] != zap.MAGIC[:len(buf[:4])]:
                raise BadMagic(f"magic is {bytes(buf[:4])!r}, expected {zap.MAGIC!r}", field="magic")
            if not ev.end_stream:
                return
            mac = zap.decode_auth(bytes(buf), zap.TYPE_AUTH, self.ctx.limits).value
            name = self.ctx.auth.check(proto.challenge, mac)
        except ZapVerifyError as exc:  # malformed, or Unauthorized / Forbidden
            self._deny(proto, exc)
            return
        proto.authed, proto.key_name, proto.auth_buf = True, name, bytearray()
        proto._quic.send_stream_data(sid, b"", end_stream=True)  # the acknowledgement: frames may follow
        proto.transmit()
        log.debug("QUIC ingest: connection authenticated with key %r", name)

    def _deny(self, proto: _Protocol, exc: ZapVerifyError) -> None:
        """A failed handshake: CONNECTION_CLOSE with the wire code as the application error code."""
        proto.denied = True
        self.ctx.counters.rejected("unauthorized")
        # Counted (unauthorized); a line per connection at info would let a scanner flood the log.
        log.debug("QUIC ingest: connection refused: %s %s", exc.code, exc.message)
        proto._quic.close(error_code=exc.wire_code, reason_phrase=f"{exc.code}: {exc.message}"[:200])
        proto.transmit()

    # ------------------------------------------------------------------ ring room
    def _on_space(self) -> None:
        try:
            self.loop.call_soon_threadsafe(self._unpark)
        except RuntimeError:  # closed
            pass

    def _unpark(self) -> None:
        while self._parked:
            if not self.ctx.ring.try_put(self._parked[0]):
                return
            self._parked.popleft()
            self.ctx.counters.queued()
        self._resume()

    def _deliver(self, entry: Entry) -> None:
        route = entry.route
        assert isinstance(route, _Route)  # this listener's own entries
        route.proto.in_flight += 1
        self._pending += 1
        if not self._parked and self.ctx.ring.try_put(entry):
            self.ctx.counters.queued()
            return
        self._parked.append(entry)
        self.ctx.counters.stalled()
        self._pause()

    # ------------------------------------------------------------------ streams
    def _on_data(self, proto: _Protocol, ev: events.StreamDataReceived) -> None:
        sid = ev.stream_id
        if not _is_client_bidi(sid) or proto.denied:
            return
        if not proto.authed:
            return self._on_auth_data(proto, ev)
        st = proto.streams.get(sid)
        if st is None:
            st = proto.streams[sid] = _Stream()
        if self._draining and not st.dropped:  # no new frames; a half-read one is not taken either
            self._drop(proto, sid, st, "shutdown", NotReady.wire_code)
        if st.dropped:
            if ev.end_stream:
                proto.streams.pop(sid, None)
            return
        data = memoryview(ev.data)
        self.ctx.counters.received(len(data))
        now = self._now()
        if st.t_start is None:
            st.t_start = now
        st.t_last = now
        st.t_bytes += len(data)
        if st.frame is None:
            take = zap.HEADER_SIZE - len(st.head)
            st.head += data[:take]
            data = data[take:]
            if st.head[:4] != zap.MAGIC[:len(st.head[:4])]:
                return self._drop(proto, sid, st, "bad_magic", BadMagic.wire_code)
            if len(st.head) < zap.HEADER_SIZE:
                if ev.end_stream:
                    self._drop(proto, sid, st, "truncated", BadSize.wire_code)
                return
            try:
                st.header = zap.read_header(st.head, self.ctx.limits)
            except FrameTooLarge:
                return self._drop(proto, sid, st, "too_large", FrameTooLarge.wire_code)
            except WireError as exc:
                return self._drop(proto, sid, st, "bad_header", exc.wire_code)
            if self.ctx.rate is not None and proto.key_name is not None:
                wait = self.ctx.rate(proto.key_name)
                if wait > 0:
                    return self._refuse(proto, sid, st, RateLimited(
                        f"rate limit of key {proto.key_name!r}; retry in {wait:.2f} s", retry_after=wait),
                        "rate_limited")
            st.frame = FrameLanding(self.ctx, st.header, st.head)
        frame = st.frame
        n = len(data)
        if frame.filled + n > frame.size:
            return self._drop(proto, sid, st, "too_large", FrameTooLarge.wire_code)
        try:
            frame.make_room(frame.filled + n)
        except BufferTooLarge:
            return self._drop(proto, sid, st, "too_large", FrameTooLarge.wire_code)
        except (PoolExhausted, Overloaded) as exc:  # no room now, or over the admission bound
            return self._refuse(proto, sid, st, exc, exc.code.lower())
        except ZapVerifyError as exc:  # the pool is closed: shutting down
            return self._drop(proto, sid, st, "internal", exc.wire_code)
        if n:
            frame.write(data)
        if ev.end_stream:
            if not frame.complete:
                return self._drop(proto, sid, st, "truncated", BadSize.wire_code)
            entry = Entry(frame.take(), frame.size, _Route(self, proto, sid), self.transport)
            st.frame, st.t_start = None, None
            self._deliver(entry)

    def _drop(self, proto: _Protocol, sid: int, st: _Stream, reason: str, code: int) -> None:
        """Drop a stream's frame: STOP_SENDING and RESET_STREAM with ``code``, counted."""
        if st.frame is not None:
            st.frame.release()
            st.frame = None
        st.dropped, st.t_start = True, None
        self.ctx.counters.rejected(reason)
        quic = proto._quic
        try:
            quic.stop_stream(sid, code)
        except ValueError:  # its receiving part is already finished
            pass
        quic.reset_stream(sid, code)
        proto.transmit()

    def _refuse(self, proto: _Protocol, sid: int, st: _Stream, exc: ZapVerifyError, reason: str) -> None:
        """Answer a frame that found no room (``POOL_EXHAUSTED``), is over the admission bound
        (``OVERLOADED``) or its key's rate (``RATE_LIMITED``), or stalled (``BODY_TIMEOUT``) with
        that error frame on its stream at once (STOP_SENDING with the same code), counted
        ``reason``; what it held goes back."""
        if st.frame is not None:
            st.frame.release()
            st.frame = None
        st.dropped, st.t_start = True, None
        self.ctx.counters.rejected(reason)
        quic = proto._quic
        try:
            quic.stop_stream(sid, exc.wire_code)
        except ValueError:
            pass
        request_id = st.header.request_id if st.header is not None else 0
        try:
            quic.send_stream_data(sid, bytes(zap.error_frame(exc, request_id)), end_stream=True)
            self.ctx.counters.replied(True, error=True)
        except Exception:  # the peer reset or stopped the stream meanwhile
            self.ctx.counters.replied(False, error=True)
        proto.transmit()

    def _on_reset(self, proto: _Protocol, sid: int) -> None:
        st = proto.streams.pop(sid, None)
        if st is not None and st.frame is not None and not st.dropped:
            st.frame.release()
            st.frame = None
            self.ctx.counters.rejected("truncated")

    def _on_terminated(self, proto: _Protocol) -> None:
        self._protocols.discard(proto)
        if proto.alive:
            proto.alive = False
            self._pending -= proto.in_flight
            self._release_streams(proto, "disconnected")
            self.ctx.counters.connection(-1)

    def _release_streams(self, proto: _Protocol, reason: str) -> None:
        for st in proto.streams.values():
            if st.frame is not None:
                st.frame.release()
                st.frame = None
                self.ctx.counters.rejected(reason)
        proto.streams.clear()

    def _reply(self, proto: _Protocol, sid: int, data: bytes, done) -> None:
        """On the loop: the reply of an accepted frame, on its stream."""
        proto.streams.pop(sid, None)
        if not proto.alive:
            done(False)
            return
        proto.in_flight -= 1
        self._pending -= 1
        try:
            proto._quic.send_stream_data(sid, data, end_stream=True)
        except Exception:  # the peer reset or stopped the stream meanwhile
            done(False)
            return
        proto.transmit()
        done(True)
