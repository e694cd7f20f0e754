"""What every ingest listener shares: its context, its life cycle, how a frame lands while it
arrives (:class:`FrameLanding`), the read deadline of a half-received frame
(:meth:`ListenerContext.frame_deadline`) and the keyed handshake (:class:`IngestAuth`)."""

from __future__ import annotations

import hmac
import secrets
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import numpy as np

from app.core.deadline import read_deadline
from app.core.errors import BufferTooLarge, Forbidden, Unauthorized
from app.engine.admission import Admission, AdmittedBuffer, Ticket
from app.engine.ingest.counters import TransportCounters
from app.engine.ingest.ring import Ring
from app.engine.memory.heap import HeapBuffer, land
from app.engine.memory.pool import PoolBuffer, UmaPool
from app.wire import zap


class IngestKey(Protocol):
    """A configured API key as ingest sees it (``app.api.security.ApiKey`` is one): the SHA-256
    of the key's text, its scopes, and a name for logs."""

    @property
    def digest(self) -> bytes: ...

    @property
    def scopes(self) -> frozenset[str]: ...

    @property
    def name(self) -> str: ...


class IngestAuth:
    """The keyed handshake of the TCP and QUIC listeners (docs/wire-format.md, section 8,
    "Ingest authentication").

    On a new connection the server sends a challenge frame with 32 random bytes; the client
    answers with an auth frame carrying ``HMAC-SHA256(key = SHA-256(api key), AUTH_CONTEXT ‖
    challenge)`` (:func:`app.wire.zap.auth_mac`).  The server knows only the digests, which is
    why the digest is the HMAC key: whoever holds the keys file can authenticate, and that
    file is a secret already.

    Args:
        keys: the configured keys (any scopes; only ``verify`` lets a connection verify).
        timeout: seconds from connect within which the auth frame must have arrived.
    """

    scope = "verify"

    def __init__(self, keys: Sequence[IngestKey], timeout: float):
        if not keys:
            raise ValueError("ingest authentication needs at least one key")
        self.keys = tuple(keys)
        self.timeout = timeout

    @staticmethod
    def challenge() -> bytes:
        """A fresh challenge: :data:`app.wire.zap.CHALLENGE_SIZE` bytes from the OS's CSPRNG."""
        return secrets.token_bytes(zap.CHALLENGE_SIZE)

    def check(self, challenge: bytes, mac: bytes) -> str:
        """The name of the key whose MAC of ``challenge`` is ``mac``.

        Every configured digest is tried, with no early exit and :func:`hmac.compare_digest`,
        so the time taken says nothing about which key came close.  Raises
        :class:`Unauthorized` (wire code 0x0020) when no key matches, :class:`Forbidden`
        (0x0021) when the matching key lacks the ``verify`` scope.
        """
        found: IngestKey | None = None
        for key in self.keys:
            if hmac.compare_digest(zap.auth_mac(key.digest, challenge), mac):
                found = key
        if found is None:
            raise Unauthorized("the auth frame's MAC matches no configured API key", field="auth")
        if self.scope not in found.scopes:
            raise Forbidden(f"API key {found.name!r} lacks the {self.scope!r} scope", field="auth")
        return found.name


class FrameLanding:
    """The pool memory and the admission charge of one frame while its bytes arrive.

    A header alone must not hold what its ``size`` declares (a 16-byte header could claim
    256 MiB and then send nothing), so both grow with what was received
    (docs/operations.md, "Load shedding"):

    * the admission charge (:class:`app.engine.admission.Ticket`) starts at ``min(size, step)``
      and is raised by ``step`` bytes (:meth:`Ticket.add`) each time the bytes received reach
      it: it is never more than the bytes received plus one ``step``;
    * the pool buffer starts at ``min(size, step)`` and is replaced by one twice as large (at
      most ``size``; the bytes so far copied over) when they outgrow it, as the HTTP path's
      ``app.api.landing.GrowingLanding`` does: what one frame holds is at most
      ``max(step, 2 × received)``, and the copies add up to less than ``size``.  A frame of at
      most ``step`` bytes lands in one buffer of its size, copied once, as before.

    The receive thread writes bytes ``[filled, room)`` of :attr:`array` and then advances
    :attr:`filled`; :meth:`make_room` grows ``room``.  :meth:`take` hands the whole frame on
    (its buffer, with the ticket: releasing the buffer ends the charge); :meth:`release`
    gives everything back.  Used by one thread at a time.
    """

    def __init__(self, ctx: ListenerContext, header: zap.Header, head: bytes | bytearray):
        self.ctx, self.size = ctx, header.size
        self.step = max(ctx.reserve_step, zap.HEADER_SIZE)
        self._head = bytes(head[:zap.HEADER_SIZE])
        #: Bytes of the frame received so far, the header's included.
        self.filled = zap.HEADER_SIZE
        self.buf: PoolBuffer | HeapBuffer | None = None
        self.capacity = 0
        self.ticket: Ticket | None = None
        #: Bytes charged to admission (the whole frame when there is no admission bound).
        self.charged = 0 if ctx.admission is not None else self.size

    @property
    def room(self) -> int:
        """Bytes of the frame that may be written now (the buffer's and the charge's bound)."""
        return min(self.capacity, self.charged)

    @property
    def complete(self) -> bool:
        return self.filled >= self.size

    @property
    def array(self) -> Any:
        assert self.buf is not None  # make_room() landed it
        return self.buf.array

    def make_room(self, upto: int) -> None:
        """Charge and land so that the frame's first ``upto`` bytes (at most ``size``) fit.

        Raises :class:`app.core.errors.Overloaded` (over the admission bound),
        :class:`app.core.errors.PoolExhausted` (no room now: the caller may wait and call
        again), :class:`app.core.errors.BufferTooLarge` (the frame is larger than the whole
        pool), or another :class:`app.core.errors.ZapVerifyError` (the pool is closed).  What
        was charged or landed before the failure stays until :meth:`release`.
        """
        upto = min(max(upto, zap.HEADER_SIZE), self.size)
        pool = self.ctx.pool
        if pool is not None and self.size > pool.capacity_bytes:  # no amount of waiting helps
            raise BufferTooLarge(f"a frame of {self.size} bytes exceeds the UMA pool's capacity of "
                                 f"{pool.capacity_bytes} bytes", field="size")
        admission = self.ctx.admission
        if admission is not None and self.charged < upto:
            want = min(self.size, max(upto, self.charged + self.step))
            if self.ticket is None:
                self.ticket = admission.admit(nbytes=want)
            else:
                self.ticket.add(nbytes=want - self.charged)
            self.charged = want
        if self.capacity < upto:
            want = min(self.size, max(upto, self.step, 2 * self.capacity))
            new = land(pool, want, "ingest", timeout=0)
            if self.buf is None:
                new.array[:zap.HEADER_SIZE] = np.frombuffer(self._head, dtype=np.uint8)
            else:
                new.array[:self.filled] = self.buf.array[:self.filled]
                self.buf.release()
            self.buf, self.capacity = new, want

    def write(self, data: bytes | memoryview) -> None:
        """Copy ``data`` in after the bytes so far (QUIC: stream data arrives as chunks);
        :meth:`make_room` must have made room for it."""
        n = len(data)
        if self.filled + n > self.room:
            raise ValueError(f"{n} bytes at {self.filled} do not fit the {self.room} bytes made room for")
        self.array[self.filled:self.filled + n] = np.frombuffer(data, dtype=np.uint8)
        self.filled += n

    def take(self) -> PoolBuffer | HeapBuffer:
        """The whole frame's buffer, with its admission ticket (an
        :class:`app.engine.admission.AdmittedBuffer`, used wherever the buffer is): releasing
        it ends the charge.  The landing holds nothing afterwards."""
        assert self.buf is not None and self.complete
        buf, ticket = self.buf, self.ticket
        self.buf, self.ticket, self.capacity = None, None, 0
        if ticket is None:
            return buf
        # An AdmittedBuffer is used wherever the buffer it wraps is (same interface).
        return cast("PoolBuffer | HeapBuffer", AdmittedBuffer(buf, ticket))

    def release(self) -> None:
        """Give back the buffer and the charge (a frame dropped half-received); idempotent."""
        buf, ticket = self.buf, self.ticket
        self.buf, self.ticket, self.capacity = None, None, 0
        if buf is not None:
            buf.release()
        if ticket is not None:
            ticket.release()


@dataclass
class ListenerContext:
    """What a receive thread needs.

    Attributes:
        ring: where whole frames go.
        pool: where they land (None: heap memory).
        limits: the ZAP bounds; ``max_frame_bytes`` is checked on the header, before a buffer is taken.
        counters: this transport's counters.
        pool_wait_seconds: how long TCP waits for a pool buffer before answering ``POOL_EXHAUSTED``.
        admission: the process's admission bound (app/engine/admission.py); None = none.
        reserve_step: bytes of pool memory and of admission charge a frame gets ahead of
            what has arrived (:class:`FrameLanding`).
        frame_timeout: a half-received frame (TCP, QUIC) that gets no byte for this many
            seconds is cut, and so is one slower than ``frame_min_rate`` after this grace.
        frame_min_rate: bytes per second a frame must average after ``frame_timeout``; 0 = no minimum.
        auth: the keyed handshake TCP and QUIC require (None: no API keys, no handshake).
        rate: takes one token of a key's rate limit, by the key's name: 0.0 when granted, else
            the seconds until one is there (None: no limit).
    """

    ring: Ring
    pool: UmaPool | None
    limits: zap.Limits
    counters: TransportCounters
    pool_wait_seconds: float = 1.0
    admission: Admission | None = None
    reserve_step: int = 1 << 20
    frame_timeout: float = 30.0
    frame_min_rate: float = 0.0
    auth: IngestAuth | None = None
    rate: Callable[[str], float] | None = None

    def frame_deadline(self, start: float, last: float, received: int) -> float:
        """When a frame that began at ``start`` and last got bytes at ``last`` (``received``
        bytes so far, seconds on one clock) is cut: ``min(last + timeout, start + timeout +
        received / min_rate)``, the rule of HTTP bodies (app/core/deadline.py)."""
        return read_deadline(start, last, received, self.frame_timeout, self.frame_min_rate)

    @property
    def sweep_seconds(self) -> float:
        """How often a listener looks for frames (and handshakes) past their deadline: a
        deadline is enforced within this much of when it falls."""
        shortest = min(self.frame_timeout, self.auth.timeout) if self.auth is not None else self.frame_timeout
        return max(0.01, min(0.25, shortest / 4))

    def stall_message(self, received: int, size: int | None) -> str:
        """What a frame cut by its deadline is told (the error frame's message)."""
        rate = f" or averaged under {self.frame_min_rate:g} bytes/s" if self.frame_min_rate > 0 else ""
        of = f" of {size}" if size is not None else ""
        return f"the frame stalled after {received}{of} bytes (no byte for {self.frame_timeout:g} s{rate})"

    def land(self, nbytes: int) -> PoolBuffer | HeapBuffer:
        """A buffer for a frame of ``nbytes`` that has wholly arrived (a UDP datagram; a TCP or
        QUIC frame grows in a :class:`FrameLanding` instead), not waiting for room, charged to
        the admission bound first; releasing it ends the charge.  Raises
        :class:`app.core.errors.Overloaded` beyond the bound, else what
        :func:`app.engine.memory.heap.land` raises."""
        if self.admission is None:
            return land(self.pool, nbytes, "ingest", timeout=0)
        ticket = self.admission.admit(nbytes=nbytes)
        try:
            # An AdmittedBuffer is used wherever the buffer it wraps is (same interface).
            return cast("PoolBuffer | HeapBuffer", AdmittedBuffer(land(self.pool, nbytes, "ingest", timeout=0), ticket))
        except BaseException:
            ticket.release()
            raise


def datagram_socket(host: str, port: int, *, reuse_port: bool = False, rcvbuf: int = 4 << 20) -> socket.socket:
    """A bound UDP socket (IPv6 when ``host`` has a colon), receive buffer asked for
    ``rcvbuf`` bytes (the kernel caps it at net.core.rmem_max).  Raises :class:`OSError`."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


class Listener:
    """A receive thread of one transport.  Life cycle, driven by :class:`app.engine.ingest.Ingest`:
    ``start()``; at shutdown ``drain()`` (no new frames; replies still go out), ``pending()``
    until the replies are out, then ``close(timeout)``."""

    transport = "?"
    port: int

    def __init__(self, ctx: ListenerContext):
        self.ctx = ctx

    def start(self) -> None:
        raise NotImplementedError

    def drain(self) -> None:
        raise NotImplementedError

    def pending(self) -> int:
        """Frames taken in whose replies are not written yet."""
        return 0

    def parked(self) -> int:
        """Whole frames waiting for room in the ring."""
        return 0

    def close(self, timeout: float = 5.0) -> None:
        raise NotImplementedError

    def info(self) -> dict[str, Any]:
        """Transport-specific facts for /v1/status (the QUIC certificate, ...)."""
        return {}
