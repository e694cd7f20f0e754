"""What every ingest listener shares: its context and its life cycle."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any, cast

from app.engine.admission import Admission, AdmittedBuffer
from app.engine.ingest.counters import TransportCounters
from app.engine.ingest.ring import Ring
from app.engine.memory.heap import HeapBuffer, land
from app.engine.memory.pool import PoolBuffer, UmaPool
from app.wire import zap


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
    """

    ring: Ring
    pool: UmaPool | None
    limits: zap.Limits
    counters: TransportCounters
    pool_wait_seconds: float = 1.0
    admission: Admission | None = None

    def land(self, nbytes: int) -> PoolBuffer | HeapBuffer:
        """A buffer for a frame of ``nbytes`` (not waiting for room), charged to the admission
        bound first; releasing it ends the charge.  Raises :class:`app.core.errors.Overloaded`
        beyond the bound, else what :func:`app.engine.memory.heap.land` raises."""
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
