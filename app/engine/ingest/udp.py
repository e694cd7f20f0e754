"""ZAP over UDP: one frame per datagram, the reply sent to the datagram's source address.

The receive thread first *peeks* at a datagram (``MSG_PEEK``; with ``MSG_TRUNC`` Linux
also gives its full length) and checks, before taking any buffer: the magic, the rest of
the header, and that the datagram is exactly ``size`` bytes.  Only then is a pool buffer
of exactly ``size`` bytes taken and the datagram ``recvfrom_into``-ed straight into it.
A datagram that fails a check is read into a scratch byte and thrown away, and counted by
reason (``bad_magic``, ``bad_header``, ``truncated``, ``too_large``); so are datagrams
that find the ring full (``ring_full``) or the pool without room (``pool_exhausted``):
UDP never waits, the sender retries.  A frame whose body breaks ZAP v1 is answered with an
error frame by the verify worker.

A frame is at most 65,507 bytes here (the largest IPv4 UDP payload) whatever the frame limit.
Replies are sent from the worker's thread with ``sendto`` on the non-blocking socket; one
that the kernel refuses is counted in ``replies_lost``.
"""

from __future__ import annotations

import logging
import selectors
import socket
import sys
import threading
from dataclasses import replace

from app.core.errors import BufferTooLarge, FrameTooLarge, Overloaded, PoolExhausted, WireError, ZapVerifyError
from app.engine.ingest.base import Listener, ListenerContext, datagram_socket
from app.engine.ingest.ring import Entry
from app.wire import zap

log = logging.getLogger("zapverify.ingest.udp")

#: The largest UDP payload over IPv4 (65,535 − 8 − 20), bytes.
MAX_DATAGRAM = 65507
#: Datagrams handled per readiness event before the thread looks at its wake-up socket.
_PER_EVENT = 256
#: Receive buffer asked for, bytes (the kernel caps it at net.core.rmem_max).
_RCVBUF = 4 << 20
_PEEK_LEN_KNOWN = sys.platform.startswith("linux")  # MSG_PEEK|MSG_TRUNC returns the real length


class _Route:
    __slots__ = ("listener", "addr")

    def __init__(self, listener: UdpListener, addr: tuple):
        self.listener, self.addr = listener, addr

    @property
    def alive(self) -> bool:
        return not self.listener.closed

    def send(self, data: bytes, done) -> None:
        try:
            self.listener.sock.sendto(data, self.addr)
            sent = True
        except OSError:  # buffer full, or closed: the sender's timeout retries
            sent = False
        done(sent)


class UdpListener(Listener):
    """The UDP receive thread (see the module doc).

    Raises :class:`OSError` when the address cannot be bound.
    """

    transport = "udp"

    def __init__(self, host: str, port: int, ctx: ListenerContext, *, reuse_port: bool = False):
        super().__init__(replace(ctx, limits=replace(ctx.limits, max_frame_bytes=min(ctx.limits.max_frame_bytes,
                                                                                      MAX_DATAGRAM))))
        self.sock = datagram_socket(host, port, reuse_port=reuse_port, rcvbuf=_RCVBUF)
        self.port = self.sock.getsockname()[1]
        self.closed = False
        self._draining = False
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._sel.register(self.sock, selectors.EVENT_READ)
        self._sel.register(self._wake_r, selectors.EVENT_READ)
        self._head = bytearray(zap.HEADER_SIZE)
        self._scratch = bytearray(1)
        self._thread = threading.Thread(target=self._run, name="zv-ingest-udp", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def drain(self) -> None:
        """Stop reading datagrams (the socket stays open for the replies still due)."""
        self._draining = True
        self._wake()

    def close(self, timeout: float = 5.0) -> None:
        self._draining = True
        self._wake()
        self._thread.join(timeout)
        self.closed = True
        self.sock.close()

    def info(self) -> dict:
        return {"max_frame_bytes": self.ctx.limits.max_frame_bytes}

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except OSError:
            pass

    def _run(self) -> None:
        try:
            while not self._draining:
                for key, _ in self._sel.select():
                    if key.fileobj is self._wake_r:
                        try:
                            self._wake_r.recv(4096)
                        except OSError:
                            pass
                    elif not self._draining:
                        for _ in range(_PER_EVENT):
                            if not self._one():
                                break
        except Exception:
            log.exception("UDP ingest thread failed")
        finally:
            self._sel.close()
            self._wake_r.close()
            self._wake_w.close()

    def _discard(self) -> None:
        try:
            self.sock.recv_into(self._scratch, 1)  # the rest of a datagram goes with it
        except OSError:
            pass

    def _one(self) -> bool:
        """Handle one datagram; False when none is waiting."""
        counters = self.ctx.counters
        try:
            length, _ = self.sock.recvfrom_into(self._head, zap.HEADER_SIZE, socket.MSG_PEEK | socket.MSG_TRUNC)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            self._discard()
            return True
        got = min(length, zap.HEADER_SIZE)
        counters.received(length)
        if self._head[:min(got, 4)] != zap.MAGIC[:min(got, 4)]:
            return self._drop("bad_magic")
        if got < zap.HEADER_SIZE:
            return self._drop("truncated")
        try:
            header = zap.read_header(self._head, self.ctx.limits)
        except FrameTooLarge:
            return self._drop("too_large")
        except WireError:
            return self._drop("bad_header")
        known = _PEEK_LEN_KNOWN
        if known and length != header.size:
            return self._drop("truncated" if length < header.size else "too_large")
        if self.ctx.ring.full():
            return self._drop("ring_full")
        try:
            buf = self.ctx.land(header.size if known else header.size + 8)
        except Overloaded:
            return self._drop("overloaded")
        except PoolExhausted:
            return self._drop("pool_exhausted")
        except BufferTooLarge:
            return self._drop("too_large")
        except ZapVerifyError:  # the pool is closed: shutting down
            return self._drop("internal")
        try:
            n, addr = self.sock.recvfrom_into(buf.array.data, buf.array.shape[0])
        except OSError:
            buf.release()
            return self._drop("truncated", discard=False)
        if n != header.size:  # only where the peeked length was not the real one
            buf.release()
            return self._drop("truncated" if n < header.size else "too_large", discard=False)
        entry = Entry(buf, n, _Route(self, addr), self.transport)
        if self.ctx.ring.try_put(entry):
            counters.queued()
        else:
            buf.release()
            counters.rejected("ring_full")
        return True

    def _drop(self, reason: str, discard: bool = True) -> bool:
        if discard:
            self._discard()
        self.ctx.counters.rejected(reason)
        return True
