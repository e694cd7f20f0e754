"""NIC ingest: ZAP frames over raw TCP, UDP and QUIC into the pool, through the ring, verified.

This is the seed's receive path (docs/architecture.md, "Pipeline" and "Memory"; docs/wire-format.md)::

    socket ─► receive thread ─► magic + header check ─► pool buffer ─► ring ─► verify worker
              (tcp.py, udp.py, quic.py)                  (pool.land)   (ring.py)  (worker.py)
                                                                                 │ join small frames,
                                            reply on the same route ◄────────────┘ verify, split,
                                            (then the buffer is released)          receipts

Each transport has its own receive thread (:mod:`~app.engine.ingest.tcp`,
:mod:`~app.engine.ingest.udp`, :mod:`~app.engine.ingest.quic`, whose docs give the wire
rules: TCP replies are tagged by ``request_id``, not ordered; UDP replies go to the
sender; QUIC answers on the frame's own stream).  They check the 4 magic bytes before
anything else and drop bad frames there, counted by reason
(:data:`~app.engine.ingest.counters.DROP_REASONS`).  Whole frames go to one bounded
:class:`~app.engine.ingest.ring.Ring`; when it is full TCP and QUIC stop reading and UDP drops.
:class:`~app.engine.ingest.worker.VerifyWorker` threads verify them.

:class:`Ingest` starts and stops all of it with the engine (``app/main.py``): a port of
``None`` leaves a transport off (the settings' 0), 0 here binds any free port.

A half-received frame (TCP, QUIC) has a read deadline and a minimum rate, as an HTTP body
has, and lands in pool memory and an admission charge that grow with what has arrived
(:class:`~app.engine.ingest.base.FrameLanding`): a header alone holds neither what it
declares nor the connection for long.  With API keys configured, TCP and QUIC take frames
only after a keyed handshake (:class:`~app.engine.ingest.base.IngestAuth`); UDP, which
cannot carry one, refuses to start then unless ``udp_unauthenticated`` says the network is
trusted.

Shutdown (:meth:`Ingest.stop`) loses no frame that was taken in: the listeners stop taking
new frames; frames waiting for room in the ring are put in it; the ring is closed and the
workers verify everything in it; every reply is written; only then are the connections
and sockets closed.  A frame is either answered or was never taken in (a half-received
frame counts as ``shutdown``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from app.core.errors import ConfigError
from app.engine.admission import Admission
from app.engine.ingest.base import IngestAuth, IngestKey, Listener, ListenerContext
from app.engine.ingest.counters import DROP_REASONS, OUTCOMES, TransportCounters
from app.engine.ingest.ring import Ring
from app.engine.ingest.worker import VerifyWorker
from app.engine.memory.pool import UmaPool
from app.engine.receipts.store import ReceiptStore
from app.engine.verify.engine import Engine
from app.wire import zap

__all__ = ["DROP_REASONS", "OUTCOMES", "TRANSPORTS", "Ingest", "IngestConfig"]

log = logging.getLogger("zapverify.ingest")

TRANSPORTS = ("tcp", "udp", "quic")


@dataclass
class IngestConfig:
    """Ingest settings (built from :class:`app.config.Settings` by the app).

    Attributes:
        host: bind address of every listener.
        tcp_port, udp_port, quic_port: None = off, 0 = any free port.
        ring_slots: frames the ring holds.
        coalesce_items: largest batch the worker joins small frames into, items.
        coalesce_wait_seconds: how long the worker waits for more frames to join, seconds.
        max_in_flight: TCP frames per connection between read and reply written.
        tcp_sndbuf: kernel send buffer of each TCP connection, bytes (None: the kernel's).
        workers: verify worker threads.
        quic_cert, quic_key: PEM files; None: a self-signed certificate made at start.
        shutdown_seconds: how long :meth:`Ingest.stop` waits for replies to go out.
        reuse_port: bind with ``SO_REUSEPORT``, so that several worker processes share the
            ports (the kernel spreads TCP connections, and UDP/QUIC peers by address, over them).
        limits: the ZAP decoder's bounds.
        reserve_step_bytes: pool memory and admission charge a frame gets ahead of its bytes
            (the HTTP path's ``zap_reserve_step_bytes``).
        frame_timeout_seconds, frame_min_bytes_per_second: the read deadline and minimum rate
            of a half-received TCP or QUIC frame (the HTTP body's ``body_read_timeout_seconds``
            and ``body_min_bytes_per_second``); a frame past them is cut with ``BODY_TIMEOUT``.
        auth_keys: the configured API keys (``app.api.security.ApiKey``); any: TCP and QUIC
            require the keyed handshake (docs/wire-format.md section 8), UDP refuses to start
            unless ``udp_unauthenticated``.
        handshake_timeout_seconds: seconds from connect within which the handshake must be done
            (the HTTP request head's ``header_timeout_seconds``).
        udp_unauthenticated: let UDP ingest run, unauthenticated, although keys are configured
            (a trusted network only).
        rate: ``rate(key_name)`` takes a token of that key's rate limit per frame (0.0 when
            granted, else the seconds to wait); None = no limit.
    """

    host: str = "127.0.0.1"
    tcp_port: int | None = None
    udp_port: int | None = None
    quic_port: int | None = None
    ring_slots: int = 1024
    coalesce_items: int = 1024
    coalesce_wait_seconds: float = 0.0005
    max_in_flight: int = 64
    tcp_sndbuf: int | None = None
    workers: int = 1
    quic_cert: str | None = None
    quic_key: str | None = None
    shutdown_seconds: float = 10.0
    pool_wait_seconds: float = 1.0
    reuse_port: bool = False
    limits: zap.Limits = field(default_factory=zap.Limits)
    #: The process's admission bound, shared with the HTTP routes (app/engine/admission.py).
    admission: Admission | None = None
    reserve_step_bytes: int = 1 << 20
    frame_timeout_seconds: float = 30.0
    frame_min_bytes_per_second: float = 65536.0
    auth_keys: Sequence[IngestKey] = ()
    handshake_timeout_seconds: float = 10.0
    udp_unauthenticated: bool = False
    rate: Callable[[str], float] | None = None

    def port(self, transport: str) -> int | None:
        return getattr(self, f"{transport}_port")



class Served(Protocol):
    """What ingest is given by the process that runs it (an :class:`app.engine.runtime.Runtime`
    is one): the engine that verifies frames, the pool they land in (None: heap memory) and
    the receipt store (None: receipts off)."""

    @property
    def engine(self) -> Engine: ...

    @property
    def pool(self) -> UmaPool | None: ...

    @property
    def store(self) -> ReceiptStore | None: ...


class Ingest:
    """The ingest listeners and verify workers of one runtime.

    Args:
        runtime: an :class:`app.engine.runtime.Runtime`: its engine verifies the frames, its
            ``pool`` (if any) is where they land, its ``store`` (if any) gets the receipts
            (source ``tcp``/``udp``/``quic``).
        config: an :class:`IngestConfig`.
        observer: ``observer(transport, outcome)`` for every frame's final outcome
            (Prometheus' ``zapverify_ingest_frames_total``).
    """

    def __init__(self, runtime: Served, config: IngestConfig | None = None, *,
                 observer: Callable[[str, str], None] | None = None):
        self.runtime = runtime
        self.engine = runtime.engine
        self.config = config or IngestConfig()
        self.ring = Ring(self.config.ring_slots)
        self.counters = {t: TransportCounters(t, observer) for t in TRANSPORTS}
        self.listeners: dict[str, Listener] = {}
        self.workers: list[VerifyWorker] = []
        self.started = False
        self.stopped = False

    @property
    def enabled(self) -> bool:
        return any(self.config.port(t) is not None for t in TRANSPORTS)

    @property
    def ports(self) -> dict[str, int | None]:
        """The bound port per transport (None when off)."""
        return {t: (self.listeners[t].port if t in self.listeners else None) for t in TRANSPORTS}

    def start(self) -> None:
        """Bind every configured listener, then start the workers and receive threads.

        Raises :class:`ConfigError` (field ``ingest_<transport>_port``) when an address
        cannot be bound, (field ``ingest_udp_unauthenticated``) when UDP is on with API keys
        configured and not explicitly allowed, and what
        :class:`~app.engine.ingest.quic.QuicListener` raises for a certificate that cannot be
        read; nothing is left running then.
        """
        cfg = self.config
        auth = IngestAuth(cfg.auth_keys, cfg.handshake_timeout_seconds) if cfg.auth_keys else None
        if auth is not None and cfg.udp_port is not None:
            if not cfg.udp_unauthenticated:
                raise ConfigError("UDP ingest cannot authenticate its datagrams, and API keys are configured: turn "
                                  "UDP off (ZAPVERIFY_INGEST_UDP_PORT=0) or, on a trusted network only, set "
                                  "ZAPVERIFY_INGEST_UDP_UNAUTHENTICATED=true", field="ingest_udp_unauthenticated")
            log.warning("UDP ingest on %s:%s takes frames from anyone who can reach it although API keys are "
                        "configured (ingest_udp_unauthenticated)", cfg.host, cfg.udp_port)
        try:
            for t in TRANSPORTS:
                port = cfg.port(t)
                if port is None:
                    continue
                ctx = ListenerContext(self.ring, self.runtime.pool, cfg.limits, self.counters[t],
                                      cfg.pool_wait_seconds, cfg.admission, reserve_step=cfg.reserve_step_bytes,
                                      frame_timeout=cfg.frame_timeout_seconds,
                                      frame_min_rate=cfg.frame_min_bytes_per_second,
                                      auth=auth if t != "udp" else None, rate=cfg.rate if t != "udp" else None)
                try:
                    self.listeners[t] = self._listener(t, port, ctx)
                except OSError as exc:
                    raise ConfigError(f"cannot listen for {t} on {cfg.host}:{port}: {exc.strerror or exc}",
                                      field=f"ingest_{t}_port") from exc
        except Exception:
            for listener in self.listeners.values():
                listener.close(1.0)
            self.listeners.clear()
            raise
        if not self.listeners:
            return
        max_items = coalesce_target(self.engine, cfg.coalesce_items)
        for i in range(cfg.workers):
            worker = VerifyWorker(self.ring, self.engine, self.counters, pool=self.runtime.pool,
                                  store=self.runtime.store, limits=cfg.limits,
                                  max_items=max_items, linger=cfg.coalesce_wait_seconds,
                                  name=f"zv-verify-{i}")
            worker.start()
            self.workers.append(worker)
        for listener in self.listeners.values():
            listener.start()
        self.started = True
        log.info("ingest listening on %s: %s%s", cfg.host,
                 ", ".join(f"{t} {p}" for t, p in self.ports.items() if p is not None),
                 "; TCP and QUIC require an API key with the verify scope" if auth is not None else "")

    def _listener(self, transport: str, port: int, ctx: ListenerContext) -> Listener:
        cfg = self.config
        if transport == "tcp":
            from app.engine.ingest.tcp import TcpListener

            return TcpListener(cfg.host, port, ctx, max_in_flight=cfg.max_in_flight, sndbuf=cfg.tcp_sndbuf,
                               reuse_port=cfg.reuse_port)
        if transport == "udp":
            from app.engine.ingest.udp import UdpListener

            return UdpListener(cfg.host, port, ctx, reuse_port=cfg.reuse_port)
        from app.engine.ingest.quic import QuicListener

        return QuicListener(cfg.host, port, ctx, cert_path=cfg.quic_cert, key_path=cfg.quic_key,
                            reuse_port=cfg.reuse_port)

    def stop(self, timeout: float | None = None) -> None:
        """Stop taking frames, answer every frame taken in, then close (see the module doc).

        ``timeout`` (default ``shutdown_seconds``) bounds the wait for replies; what is left
        after it is dropped and counted (``shutdown``).
        """
        if self.stopped:
            return
        self.stopped = True
        if not self.started:
            return
        deadline = time.monotonic() + (self.config.shutdown_seconds if timeout is None else timeout)
        for listener in self.listeners.values():
            listener.drain()
        # Frames waiting for room in the ring get it as the workers empty it.
        while time.monotonic() < deadline and any(lst.parked() for lst in self.listeners.values()):
            time.sleep(0.005)
        self.ring.close()
        for worker in self.workers:
            worker.join(max(0.0, deadline - time.monotonic()))
        while time.monotonic() < deadline and any(lst.pending() for lst in self.listeners.values()):
            time.sleep(0.005)
        for listener in self.listeners.values():
            listener.close(max(1.0, deadline - time.monotonic()))
        log.info("ingest stopped")

    # ------------------------------------------------------------------ reporting
    def status(self) -> dict[str, Any]:
        """What /v1/status shows under ``ingest`` (counts are frames, bytes are bytes)."""
        ring = self.ring.stats()
        transports = {}
        for t in TRANSPORTS:
            depth, high = self.ring.depth(t)
            listener = self.listeners.get(t)
            transports[t] = {"enabled": listener is not None, "port": listener.port if listener else None,
                             "ring_depth": depth, "ring_high_water": high, **self.counters[t].snapshot(),
                             **(listener.info() if listener else {})}
        return {
            "enabled": bool(self.listeners), "bind": self.config.host, "running": self.started and not self.stopped,
            "ring": ring,
            "coalesce": {"max_items": self.config.coalesce_items, "wait_seconds": self.config.coalesce_wait_seconds,
                         "workers": len(self.workers), "batches_total": sum(w.batches_total for w in self.workers),
                         "joined_frames_total": sum(w.joined_frames_total for w in self.workers)},
            "transports": transports,
            "authentication": "api-key" if self.config.auth_keys else "none",
        }


#: Joined batch size when ``coalesce_items`` is 0 and no backend says what it prefers.
DEFAULT_COALESCE_ITEMS = 1024


def coalesce_target(engine: Engine, configured: int) -> int:
    """Largest batch the verify workers join small frames into: ``configured`` when set,
    else the largest batch an accelerated backend prefers (a GPU: its pipelined chunk, at
    least one full wave), else :data:`DEFAULT_COALESCE_ITEMS`.  The wait bound
    (``coalesce_wait_seconds``) still caps the latency a small frame pays for joining."""
    if configured > 0:
        return configured
    sizes = [size for b in engine.accelerated for size in b.capabilities().batch_items.values()]
    return max(sizes, default=DEFAULT_COALESCE_ITEMS)
