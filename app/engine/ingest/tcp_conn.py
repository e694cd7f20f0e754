"""One TCP ingest connection: its state, and what it does without the listener — the read
clock of the frame in progress, the keyed handshake's two steps, and its replies on their way
out (docs/architecture.md, "Layout").

:class:`app.engine.ingest.tcp.TcpListener` serves many of these from one thread (selector,
accept, ring, pool waits, sweeps); a :class:`Conn` is touched by that thread only, except
``inbox``, which workers fill under the listener's lock (:class:`Route`).
"""

from __future__ import annotations

import itertools
import socket
from collections import deque
from collections.abc import Callable

from app.core.errors import BadSize, Unauthorized, ZapVerifyError
from app.engine.ingest.base import FrameLanding, IngestAuth
from app.engine.ingest.ring import Entry
from app.wire import zap

#: Replies gathered into one sendmsg(2).
IOV = 64

Done = Callable[[bool], None]


class Conn:
    """The receive thread's state of one connection."""

    route: Route  # set right after construction (the route refers back to the connection)

    def __init__(self, sock: socket.socket, peer: tuple):
        self.sock, self.peer = sock, peer
        self.head = bytearray(zap.HEADER_SIZE)
        self.head_view = memoryview(self.head)
        self.head_n = 0
        self.header: zap.Header | None = None
        self.frame: FrameLanding | None = None
        self.skip = 0
        # The handshake (keys configured): the challenge sent, the auth frame being read, by when.
        self.authed = True
        self.challenge = b""
        self.auth: bytearray | None = None
        self.auth_n = 0
        self.auth_deadline = 0.0
        self.key_name: str | None = None
        # The read clock of the frame in progress (ListenerContext.frame_deadline), seconds and bytes.
        self.t_start = self.t_last = 0.0
        self.t_bytes = 0
        self.t_paused: float | None = None
        self.skip_reply: bytes | None = None
        self.parked: Entry | None = None
        self.pool_deadline: float | None = None
        self.in_flight = 0
        self.out: deque[tuple[memoryview, Done]] = deque()
        self.inbox: list[tuple[bytes, Done]] = []
        self.eof = self.closing = self.closed = False
        self.linger_until: float | None = None
        self.events = 0

    # ------------------------------------------------------------------ the read clock
    def received(self, n: int, now: float) -> bool:
        """Count ``n`` bytes read at ``now`` on the frame's clock; True when they began a frame
        (the clock started: the listener puts the connection under its sweep)."""
        first = not self.skip and self.header is None and self.head_n == 0
        if first:
            self.t_start, self.t_bytes, self.t_paused = now, 0, None
        self.t_last = now
        self.t_bytes += n
        return first

    def clock_runs(self, now: float, reading: bool) -> bool:
        """Stop the clock while the connection is not read (a pool or ring wait) and shift it by
        the pause once reading resumes; True when it ran up to ``now`` (a deadline applies)."""
        if not reading:
            if self.t_paused is None:
                self.t_paused = now
            return False
        if self.t_paused is not None:
            pause, self.t_paused = now - self.t_paused, None
            self.t_start += pause
            self.t_last += pause
            return False
        return True

    # ------------------------------------------------------------------ the handshake
    def begin_auth(self) -> ZapVerifyError | None:
        """The connection's first header is in: an auth frame of the right size goes on into
        :attr:`auth`; anything else is the error to refuse it with (``BadSize`` loses the framing)."""
        header = self.header
        assert header is not None
        if header.type != zap.TYPE_AUTH:
            return Unauthorized("this server requires an API key: answer its challenge with an auth frame before "
                                "any other frame (docs/wire-format.md section 8)", field="auth")
        if header.size != zap.AUTH_FRAME_SIZE:
            return BadSize(f"an auth frame is {zap.AUTH_FRAME_SIZE} bytes, this one says {header.size}", field="size")
        self.auth = bytearray(header.size)
        self.auth[:zap.HEADER_SIZE] = self.head
        self.auth_n = zap.HEADER_SIZE
        return None

    def finish_auth(self, auth: IngestAuth, limits: zap.Limits) -> str:
        """The whole auth frame is in: the name of the key whose MAC it carries, the connection
        authenticated.  Raises what :meth:`IngestAuth.check` raises, or a malformed frame's
        :class:`app.core.errors.WireError` (the auth frame dropped either way)."""
        assert self.auth is not None
        frame, self.auth, self.auth_n = self.auth, None, 0
        mac = zap.decode_auth(frame, zap.TYPE_AUTH, limits).value
        name = auth.check(self.challenge, mac)
        self.authed, self.key_name = True, name
        self.header, self.head_n = None, 0
        return name

    # ------------------------------------------------------------------ replies
    def push(self, data: bytes, done: Done) -> None:
        """A frame this thread writes itself (an error it answers, the challenge): in flight
        until written."""
        self.in_flight += 1
        self.out.append((memoryview(data), done))

    def take_inbox(self) -> None:
        """Move the workers' replies to the write queue (under the listener's lock)."""
        self.out.extend((memoryview(d), done) for d, done in self.inbox)
        self.inbox.clear()

    def flush(self) -> bool:
        """Write what the socket takes now, up to :data:`IOV` replies per sendmsg(2); each reply
        written whole is no longer in flight and its ``done(True)`` is called.  False when
        the peer is gone (the caller closes the connection)."""
        while self.out:
            try:
                n = self.sock.sendmsg([mv for mv, _ in itertools.islice(self.out, IOV)])
            except (BlockingIOError, InterruptedError):
                return True
            except OSError:
                return False
            while n:
                mv, done = self.out[0]
                if n < len(mv):
                    self.out[0] = (mv[n:], done)
                    break
                n -= len(mv)
                self.out.popleft()
                self.in_flight -= 1
                done(True)
        return True

    def fail_replies(self, inbox: list[tuple[bytes, Done]]) -> None:
        """The connection is closed: every reply not written (and ``inbox``, taken from it
        under the lock) is ``done(False)``."""
        for _, done in list(self.out) + inbox:
            done(False)
        self.out.clear()


class Route:
    """Replies of one connection; ``send`` may be called from any thread (``enqueue`` is the
    listener's: it hands the reply to the receive thread under its lock)."""

    __slots__ = ("enqueue", "conn")

    def __init__(self, enqueue: Callable[[Conn, bytes, Done], None], conn: Conn):
        self.enqueue, self.conn = enqueue, conn

    @property
    def alive(self) -> bool:
        return not self.conn.closed

    def send(self, data: bytes, done: Done) -> None:
        self.enqueue(self.conn, data, done)
