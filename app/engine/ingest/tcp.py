"""ZAP over TCP: frames back to back on a byte stream, each framed by its header's ``size``.

One receive thread serves the listening socket and every connection with non-blocking
sockets and a selector.  Per connection it reads the 16-byte header into a small scratch
buffer, checks the magic as soon as 4 bytes are in, then the rest of the header
(:func:`app.wire.zap.read_header`), takes a pool buffer and ``recv_into``-s the rest of the
frame straight into it, so a frame of up to ``reserve_step`` bytes is copied once, by the
kernel.  The buffer and the frame's admission charge grow with the bytes received, not
with what the header declares (:class:`app.engine.ingest.base.FrameLanding`).  The whole
frame goes to the ring.

Deadlines (docs/operations.md, "Load shedding"): a frame whose first byte has arrived must
get a byte at least every ``frame_timeout`` seconds and, after that grace, average
``frame_min_rate`` bytes per second (the rule of HTTP bodies), counted only while the
thread reads the connection (a wait for ring or pool room stops the clock).  A frame past
its deadline is answered ``BODY_TIMEOUT`` (its ``request_id`` when its header was in), its
memory and charge go back, it counts as ``body_timeout``, and the connection is closed.  A
connection idle *between* frames holds no buffer and no charge and is left open: clients
keep connections for bursts.

Authentication (docs/wire-format.md section 8, "Ingest authentication"): with API keys
configured the server sends a challenge frame on accept, and the first frame it reads must
be the client's auth frame, complete within the handshake deadline; anything else — another
frame first, a MAC that matches no key, a key without the ``verify`` scope, a handshake too
late — is answered ``UNAUTHORIZED``/``FORBIDDEN`` (``request_id`` 0) and the connection
closed, counted ``unauthorized``.  No frame of the connection is landed or verified before.
With a rate limit, each frame then takes a token of its key (``RATE_LIMITED`` beyond).

Replies are tagged by ``request_id``, not ordered: they go out as their batches finish
(frames of different schemes, or joined into different batches, finish in another order
than they came), so a client matches them by ``request_id`` — the same rule as the
WebSocket endpoint.  A reply is written by the receive thread when the socket can take it
(writes never block a worker); once it is written, the frame's buffer is released.

Flow control:

* at most ``max_in_flight`` frames of one connection are between "read" and "reply
  written"; at the bound the connection is not read, so a client that never reads its
  replies holds only its own buffers, and TCP flow control holds it back, not the others;
* a full ring: the connection whose frame does not fit keeps it and stops reading until
  the ring has room (backpressure, never a drop);
* no pool buffer (at the header, or when a growing frame needs a larger one): the
  connection waits up to ``pool_wait_seconds`` without reading; then the rest of the
  frame is read and thrown away and the frame answered ``POOL_EXHAUSTED``; the same for a
  frame over the admission bound (``OVERLOADED``, at once).

Errors: a header that breaks ZAP v1 (bad magic, version, type, flags, size) loses the
framing of the stream, so it is answered with an error frame and the connection is closed
once the replies already due are written.  A body that breaks ZAP v1 is answered with an
error frame carrying its ``request_id`` by the verify worker; the connection stays open.
A connection that ends in the middle of a frame counts it ``truncated``.
"""

from __future__ import annotations

import logging
import selectors
import socket
import threading
import time
from collections import deque

from app.core.errors import (
    BadMagic,
    BodyTimeout,
    BufferTooLarge,
    FrameTooLarge,
    Overloaded,
    PoolExhausted,
    RateLimited,
    Unauthorized,
    WireError,
    ZapVerifyError,
)
from app.engine.ingest.base import FrameLanding, Listener, ListenerContext
from app.engine.ingest.ring import Entry
from app.engine.ingest.tcp_conn import Conn, Done, Route
from app.wire import zap

log = logging.getLogger("zapverify.ingest.tcp")

#: Frames one connection may complete per readiness event, so that one fast sender does
#: not keep the thread from the others.
_FRAMES_PER_EVENT = 32
_READ, _WRITE = selectors.EVENT_READ, selectors.EVENT_WRITE
#: How long a connection the server closes keeps being read (and the bytes thrown away)
#: after its FIN, so that unread bytes do not turn the close into a reset that could
#: destroy replies the peer has not read yet (a "lingering close").
LINGER_SECONDS = 2.0


class TcpListener(Listener):
    """The TCP receive thread (see the module doc).

    Args:
        host, port: where to listen (port 0: any free port; :attr:`port` says which).
        ctx: ring, pool, limits, counters, admission, deadlines and the handshake's keys.
        max_in_flight: frames per connection between read and reply written.
        sndbuf: kernel send buffer per connection, bytes (None: the kernel's, autotuned);
            with ``max_in_flight`` it bounds what a peer that does not read can make us hold.
        reuse_port: bind with ``SO_REUSEPORT`` (several processes on one port).

    Raises :class:`OSError` when the address cannot be bound.
    """

    transport = "tcp"

    def __init__(self, host: str, port: int, ctx: ListenerContext, *, max_in_flight: int = 64,
                 sndbuf: int | None = None, reuse_port: bool = False):
        super().__init__(ctx)
        self.max_in_flight = max_in_flight
        self.sndbuf = sndbuf
        self.sock = socket.create_server((host, port), family=_family(host), backlog=512, reuse_port=reuse_port)
        self.sock.setblocking(False)
        self.port = self.sock.getsockname()[1]
        self._sel = selectors.DefaultSelector()
        self._sel.register(self.sock, _READ, None)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._sel.register(self._wake_r, _READ, None)
        self._lock = threading.Lock()
        self._dirty: list[Conn] = []
        self._conns: set[Conn] = set()
        self._parked: deque[Conn] = deque()
        self._pool_waiters: list[Conn] = []
        self._lingering: list[Conn] = []
        # Connections with a frame in progress or a handshake due (a superset: the sweep prunes it).
        self._timed: set[Conn] = set()
        self._next_sweep = 0.0
        self._space = False
        self._scratch = bytearray(64 * 1024)
        self._draining = False
        self._stopped = False
        ctx.ring.on_space(self._on_space)
        self._thread = threading.Thread(target=self._run, name="zv-ingest-tcp", daemon=True)

    # ------------------------------------------------------------------ life cycle
    def start(self) -> None:
        self._thread.start()

    def drain(self) -> None:
        """Stop accepting connections and reading frames; replies still go out."""
        self._draining = True
        self._wake()

    def parked(self) -> int:
        return len(self._parked)

    def pending(self) -> int:
        """Frames read whose replies are not written yet (parked ones included)."""
        with self._lock:
            return sum(c.in_flight for c in self._conns)

    def close(self, timeout: float = 5.0) -> None:
        """Close every connection and the thread; frames not accepted count as ``shutdown``."""
        self._stopped = True
        self._wake()
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.warning("TCP ingest thread did not stop within %.1f s", timeout)

    # ------------------------------------------------------------------ thread
    def _wake(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except (BlockingIOError, OSError):  # a wake-up is already pending, or we are closed
            pass

    def _on_space(self) -> None:
        self._space = True
        self._wake()

    def _run(self) -> None:
        try:
            while not self._stopped:
                timeout = 0.005 if self._pool_waiters else 0.1 if self._lingering else None
                if self._timed:
                    wait = max(0.0, self._next_sweep - time.monotonic())
                    timeout = wait if timeout is None else min(timeout, wait)
                for key, mask in self._sel.select(timeout):
                    if key.fileobj is self.sock:
                        self._accept()
                    elif key.fileobj is self._wake_r:
                        self._drain_wakeups()
                    else:
                        conn = key.data
                        try:
                            if conn.linger_until is not None:
                                self._discard(conn)
                                continue
                            if mask & _READ:
                                self._read(conn)
                            if mask & _WRITE and not conn.closed:
                                self._flush(conn)
                            self._update(conn)
                        except Exception:  # a bug must cost one connection, not the listener
                            log.exception("TCP ingest: connection %s failed", conn.peer)
                            self._close(conn, reset=True)
                self._service()
        except Exception:
            log.exception("TCP ingest thread failed")
        finally:
            self._shutdown()

    def _drain_wakeups(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def _service(self) -> None:
        """Work that other threads asked for: replies to write, room in the ring, pool waits, drain."""
        with self._lock:
            dirty, self._dirty = self._dirty, []
            for conn in dirty:
                conn.take_inbox()
        for conn in dirty:
            if not conn.closed:
                self._flush(conn)
                self._update(conn)
        if self._space or self._parked:
            self._space = False
            while self._parked:
                conn = self._parked[0]
                if conn.closed:
                    self._parked.popleft()
                    continue
                if conn.parked is None or not self.ctx.ring.try_put(conn.parked):
                    break
                self.ctx.counters.queued()
                conn.parked = None
                self._parked.popleft()
                self._update(conn)
        if self._pool_waiters:
            for conn in list(self._pool_waiters):
                if conn.closed or self._make_room(conn) or conn.pool_deadline is None:  # landed, or refused
                    self._pool_waiters.remove(conn)
                    self._update(conn)
                elif conn.pool_deadline is not None and time.monotonic() >= conn.pool_deadline:
                    self._pool_waiters.remove(conn)
                    self._give_up_pool(conn)
                    self._update(conn)
        if self._lingering:
            now = time.monotonic()
            for conn in [c for c in self._lingering if c.linger_until is not None and c.linger_until <= now]:
                self._hard_close(conn)
        if self._timed and time.monotonic() >= self._next_sweep:
            self._sweep()
        if self._draining and self.sock.fileno() >= 0:
            self._sel.unregister(self.sock)
            self.sock.close()
            for conn in list(self._conns):
                self._update(conn)

    def _shutdown(self) -> None:
        for conn in list(self._conns):
            self._close(conn)
        deadline = time.monotonic() + LINGER_SECONDS
        while self._lingering and time.monotonic() < deadline:
            for key, _ in self._sel.select(0.05):
                if isinstance(key.data, Conn):
                    self._discard(key.data)
        for conn in list(self._lingering):
            self._hard_close(conn)
        for s in (self.sock, self._wake_r, self._wake_w):
            s.close()
        self._sel.close()

    # ------------------------------------------------------------------ connections
    def _accept(self) -> None:
        for _ in range(64):
            try:
                sock, peer = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of descriptors, ...: keep serving the others
                log.warning("accept failed: %s", exc)
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.sndbuf:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.sndbuf)
            conn = Conn(sock, peer)
            conn.route = Route(self._enqueue, conn)
            with self._lock:
                self._conns.add(conn)
            self.ctx.counters.connection(+1)
            auth = self.ctx.auth
            if auth is not None:  # the challenge goes out first; nothing is landed before the answer
                conn.authed = False
                conn.challenge = auth.challenge()
                conn.auth_deadline = time.monotonic() + auth.timeout
                self._time(conn)
                self._send_control(conn, bytes(zap.encode_challenge(conn.challenge)))
            if not conn.closed:
                self._update(conn)

    def _wants_read(self, c: Conn) -> bool:
        return not (c.closed or c.eof or c.closing or self._draining or c.parked is not None
                    or c.pool_deadline is not None or c.in_flight >= self.max_in_flight)

    def _update(self, c: Conn) -> None:
        if c.closed:
            return
        if (c.eof or c.closing) and not c.in_flight and not c.out:
            self._close(c)
            return
        want = (_READ if self._wants_read(c) else 0) | (_WRITE if c.out else 0)
        if want == c.events:
            return
        if c.events == 0:
            self._sel.register(c.sock, want, c)
        elif want == 0:
            self._sel.unregister(c.sock)
        else:
            self._sel.modify(c.sock, want, c)
        c.events = want

    def _close(self, c: Conn, *, reset: bool = False) -> None:
        """End the connection: what it still holds is dropped; unless the peer ``reset`` it,
        our side is shut down (FIN) and the socket read until the peer closes its side or
        :data:`LINGER_SECONDS` pass."""
        if c.closed:
            return
        with self._lock:
            c.closed = True
            inbox, c.inbox = c.inbox, []
            self._conns.discard(c)
        if reset or c.eof:
            self._hard_close(c)
        else:
            try:
                c.sock.shutdown(socket.SHUT_WR)
                c.linger_until = time.monotonic() + LINGER_SECONDS
                self._lingering.append(c)
                want = _READ
                if c.events == 0:
                    self._sel.register(c.sock, want, c)
                elif c.events != want:
                    self._sel.modify(c.sock, want, c)
                c.events = want
            except OSError:
                self._hard_close(c)
        counters = self.ctx.counters
        self._timed.discard(c)
        if c.frame is not None or c.head_n or c.pool_deadline is not None:
            self._drop_partial(c, "shutdown" if self._stopped else "truncated" if c.authed else "unauthorized")
        if c.parked is not None:
            c.parked.buffer.release()
            c.parked = None
            counters.rejected("shutdown" if self._stopped else "disconnected")
        c.fail_replies(inbox)
        counters.connection(-1)

    def _hard_close(self, c: Conn) -> None:
        if c.linger_until is not None:
            self._lingering.remove(c)
            c.linger_until = None
        if c.events:
            self._sel.unregister(c.sock)
            c.events = 0
        try:
            c.sock.close()
        except OSError:
            pass

    def _discard(self, c: Conn) -> None:
        """Read and throw away what a lingering connection still sends; close at its EOF."""
        try:
            while c.sock.recv_into(self._scratch):
                pass
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            pass
        self._hard_close(c)

    def _drop_partial(self, c: Conn, reason: str) -> None:
        """Drop the frame in progress (its buffer and admission charge go back), counted ``reason``."""
        if c.frame is not None:
            c.frame.release()
        c.frame, c.header, c.head_n, c.pool_deadline = None, None, 0, None
        c.auth, c.auth_n = None, 0
        self.ctx.counters.rejected(reason)

    # ------------------------------------------------------------------ deadlines
    def _time(self, c: Conn) -> None:
        """Put ``c`` under the sweep (a frame began, or a handshake is due)."""
        if not self._timed:
            self._next_sweep = time.monotonic() + self.ctx.sweep_seconds
        self._timed.add(c)

    def _sweep(self) -> None:
        """Cut the handshakes and half-received frames past their deadlines; forget the
        connections that have neither any more."""
        now = time.monotonic()
        self._next_sweep = now + self.ctx.sweep_seconds
        for c in list(self._timed):
            try:
                self._sweep_one(c, now)
            except Exception:  # a bug must cost one connection, not the listener
                log.exception("TCP ingest: connection %s failed", c.peer)
                self._timed.discard(c)
                self._close(c, reset=True)

    def _sweep_one(self, c: Conn, now: float) -> None:
        """The handshake deadline of ``c``, else its frame's read deadline (clock stopped while unread)."""
        if c.closed or c.closing:
            self._timed.discard(c)
            return
        if not c.authed:
            if now >= c.auth_deadline:
                self._timed.discard(c)
                assert self.ctx.auth is not None  # authed is False only under a handshake
                self._refuse_auth(c, Unauthorized(f"no auth frame within {self.ctx.auth.timeout:g} s of connecting",
                                                  field="auth"))
                self._update(c)
            return
        if not (c.skip or c.head_n or c.header is not None):
            self._timed.discard(c)  # between frames: idle connections are not cut
            return
        # Not read (pool wait, ...): its clock stops, and restarts shifted by the pause.
        if not c.clock_runs(now, bool(c.skip or self._wants_read(c))):
            return
        if now >= self.ctx.frame_deadline(c.t_start, c.t_last, c.t_bytes):
            self._timed.discard(c)
            self._cut(c)
            self._update(c)

    def _cut(self, c: Conn) -> None:
        """A frame past its read deadline: ``BODY_TIMEOUT``, what it holds given back, closed."""
        size = c.header.size if c.header is not None else None
        request_id = c.header.request_id if c.header is not None else 0
        exc = BodyTimeout(self.ctx.stall_message(c.t_bytes, size), field="frame")
        if c.skip:  # a refused frame being read past: it was counted when refused
            c.skip, c.skip_reply = 0, None
        else:
            self._drop_partial(c, "body_timeout")
        if c.pool_deadline is not None and c in self._pool_waiters:
            self._pool_waiters.remove(c)
        c.header, c.head_n, c.pool_deadline = None, 0, None
        c.closing = True
        # Counted (body_timeout); a line per connection at info would let a scanner flood the log.
        log.debug("TCP ingest: %s cut: %s", c.peer, exc.message)
        self._send_own(c, bytes(zap.error_frame(exc, request_id)))

    # ------------------------------------------------------------------ reading
    def _read(self, c: Conn) -> None:
        frames = 0
        counters = self.ctx.counters
        while frames < _FRAMES_PER_EVENT and (c.skip or self._wants_read(c)):
            frame = c.frame
            if frame is not None and frame.filled >= frame.room and not self._make_room(c):
                return
            try:
                if c.skip:
                    n = c.sock.recv_into(self._scratch, min(c.skip, len(self._scratch)))
                elif c.header is None:
                    n = c.sock.recv_into(c.head_view[c.head_n:])
                elif c.auth is not None:
                    n = c.sock.recv_into(memoryview(c.auth)[c.auth_n:])
                else:
                    assert frame is not None  # landed when the header was read
                    n = c.sock.recv_into(frame.array.data[frame.filled:frame.room])
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # reset by the peer
                self._close(c, reset=True)
                return
            if n == 0:
                self._eof(c)
                return
            counters.received(n)
            if c.received(n, time.monotonic()):  # the first byte of a frame
                self._time(c)
            if c.skip:
                c.skip -= n
                if not c.skip and c.skip_reply is not None:
                    self._send_own(c, c.skip_reply)
                    c.skip_reply = None
                continue
            if c.header is None:
                c.head_n += n
                if c.head_n >= 4 and c.head[:4] != zap.MAGIC:
                    self._fatal(c, BadMagic(f"magic is {bytes(c.head[:4])!r}, expected {zap.MAGIC!r}",
                                            field="magic"), "bad_magic")
                    return
                if c.head_n < zap.HEADER_SIZE:
                    continue
                try:
                    c.header = zap.read_header(c.head, self.ctx.limits)
                except FrameTooLarge as exc:
                    self._fatal(c, exc, "too_large")
                    return
                except WireError as exc:
                    self._fatal(c, exc, "bad_header")
                    return
                if not c.authed:
                    if not self._begin_auth(c):
                        return
                    continue
                if not self._take_buffer(c):
                    return
            elif c.auth is not None:
                c.auth_n += n
                if c.auth_n == len(c.auth) and not self._finish_auth(c):
                    return
                continue
            else:
                assert frame is not None
                frame.filled += n
            if c.frame is not None and c.frame.complete:
                self._complete(c)
                frames += 1

    # ------------------------------------------------------------------ the handshake
    def _begin_auth(self, c: Conn) -> bool:
        """The first header of a connection that must authenticate (:meth:`Conn.begin_auth`);
        False if refused."""
        exc = c.begin_auth()
        if exc is None:
            return True
        if isinstance(exc, Unauthorized):
            self._refuse_auth(c, exc)
        else:  # a wrong size: the framing is lost
            self._fatal(c, exc, "unauthorized")
        return False

    def _finish_auth(self, c: Conn) -> bool:
        """The whole auth frame is in: check its MAC against every key.  False if refused."""
        assert self.ctx.auth is not None
        try:
            name = c.finish_auth(self.ctx.auth, self.ctx.limits)
        except ZapVerifyError as exc:  # a malformed frame, or Unauthorized / Forbidden
            self._refuse_auth(c, exc)
            return False
        log.debug("TCP ingest: %s authenticated with key %r", c.peer, name)
        return True

    def _refuse_auth(self, c: Conn, exc: ZapVerifyError) -> None:
        """A failed handshake: the error frame (``request_id`` 0: the connection's), then closed."""
        c.head_n, c.header = 0, None
        c.auth, c.auth_n = None, 0
        self.ctx.counters.rejected("unauthorized")
        c.closing = True
        log.debug("TCP ingest: %s refused: %s %s", c.peer, exc.code, exc.message)  # counted (unauthorized)
        self._send_own(c, bytes(zap.error_frame(exc, 0)))

    # ------------------------------------------------------------------ landing
    def _take_buffer(self, c: Conn) -> bool:
        """Start landing the frame whose header is in (its key's rate limit first); False
        while it cannot be read on (no pool room yet, or refused and being read past)."""
        assert c.header is not None
        rate = self.ctx.rate
        if rate is not None and c.key_name is not None:
            wait = rate(c.key_name)
            if wait > 0:
                self._skip_frame(c, RateLimited(f"rate limit of key {c.key_name!r}; retry in {wait:.2f} s",
                                                retry_after=wait), "rate_limited")
                return False
        c.frame = FrameLanding(self.ctx, c.header, c.head)
        return self._make_room(c)

    def _make_room(self, c: Conn) -> bool:
        """Grow the frame's buffer and charge for the next bytes (:meth:`FrameLanding.make_room`);
        False while there is no pool room (the connection waits, unread, up to
        ``pool_wait_seconds``) or when the frame was refused and is being read past."""
        frame = c.frame
        assert frame is not None and c.header is not None
        try:
            frame.make_room(frame.filled + 1)
        except PoolExhausted:
            if c.pool_deadline is None:
                c.pool_deadline = time.monotonic() + self.ctx.pool_wait_seconds
                self._pool_waiters.append(c)
            return False
        except ZapVerifyError as exc:
            c.pool_deadline = None
            # Over the process's admission bound: answered at once.  Larger than the whole pool:
            # answered, the framing kept.  Anything else: the pool is closed, shutting down.
            reason = ("overloaded" if isinstance(exc, Overloaded) else
                      "too_large" if isinstance(exc, BufferTooLarge) else "internal")
            self._abandon(c, exc, reason)
            return False
        c.pool_deadline = None
        return True

    def _give_up_pool(self, c: Conn) -> None:
        assert c.header is not None and c.frame is not None
        c.pool_deadline = None
        self._abandon(c, PoolExhausted(f"UMA pool exhausted: no room for {c.frame.filled + 1} bytes of a "
                                       f"{c.header.size}-byte frame within {self.ctx.pool_wait_seconds:g} s",
                                       field="pool"), "pool_exhausted")

    def _abandon(self, c: Conn, exc: ZapVerifyError, reason: str) -> None:
        """Give back what the half-received frame holds, then read past the rest and answer ``exc``."""
        received = zap.HEADER_SIZE
        if c.frame is not None:
            received = c.frame.filled
            c.frame.release()
            c.frame = None
        self._skip_frame(c, exc, reason, received)

    def _skip_frame(self, c: Conn, exc: ZapVerifyError, reason: str, received: int = zap.HEADER_SIZE) -> None:
        """Read the rest of this frame (``received`` bytes of it are in) into scratch memory,
        then answer it with ``exc``."""
        assert c.header is not None
        self.ctx.counters.rejected(reason)
        c.skip = c.header.size - received
        c.skip_reply = bytes(zap.error_frame(exc, c.header.request_id))
        c.header, c.head_n = None, 0
        if not c.skip:
            self._send_own(c, c.skip_reply)
            c.skip_reply = None

    def _complete(self, c: Conn) -> None:
        assert c.frame is not None and c.header is not None  # a whole frame has been read
        entry = Entry(c.frame.take(), c.header.size, c.route, self.transport)
        c.frame, c.header, c.head_n = None, None, 0
        c.in_flight += 1
        if self.ctx.ring.try_put(entry):
            self.ctx.counters.queued()
        else:
            c.parked = entry
            self._parked.append(c)
            self.ctx.counters.stalled()

    def _eof(self, c: Conn) -> None:
        """The peer finished sending (it may still read): answer what is due, then close."""
        c.eof = True
        if c.frame is not None or c.head_n or c.pool_deadline is not None:
            if c.pool_deadline is not None:
                self._pool_waiters.remove(c)
            self._drop_partial(c, "truncated" if c.authed else "unauthorized")
        # A connection that leaves without a word (a port check) is not a frame: not counted.
        c.authed = True  # nothing more is read; its handshake deadline is moot
        self._timed.discard(c)
        c.skip = 0
        c.skip_reply = None

    def _fatal(self, c: Conn, exc: ZapVerifyError, reason: str) -> None:
        """A header that breaks ZAP v1: the framing is lost; answer, then close."""
        self.ctx.counters.rejected(reason)
        request_id = zap.peek_request_id(c.head) if c.head_n >= zap.HEADER_SIZE else 0
        c.head_n = 0
        c.header = None
        c.closing = True
        self._send_own(c, bytes(zap.error_frame(exc, request_id)))

    def _send_control(self, c: Conn, data: bytes) -> None:
        """A frame of the protocol itself (the challenge): not a reply, counted nowhere."""
        c.push(data, lambda sent: None)
        self._flush(c)

    # ------------------------------------------------------------------ writing
    def _send_own(self, c: Conn, data: bytes) -> None:
        """An error frame this thread answers itself (no buffer, no worker)."""
        c.push(data, lambda sent: self.ctx.counters.replied(sent, error=True))
        self._flush(c)

    def _enqueue(self, c: Conn, data: bytes, done: Done) -> None:
        with self._lock:
            queued = not c.closed
            if queued:
                c.inbox.append((data, done))
                self._dirty.append(c)
        if not queued:
            done(False)
        else:
            self._wake()

    def _flush(self, c: Conn) -> None:
        if not c.flush():  # the peer is gone
            self._close(c, reset=True)


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET
