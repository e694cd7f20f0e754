"""What each long-lived part of a server process is built with, read from its settings
(:class:`app.config.Settings`, docs/operations.md): the engine's, the UMA pool's, the NIC
ingest's and the ZAP decoder's configurations.  The runtime (:mod:`app.engine.runtime`) builds
the parts from these; tests and scripts build one part alone.

Settings are read by attribute, never imported at run time: this module, like the whole
engine, imports no web framework and no pydantic.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.engine.admission import Admission
from app.engine.ingest import IngestConfig
from app.engine.ingest.base import IngestKey
from app.engine.verify.engine import EngineConfig
from app.wire.zap import Limits

if TYPE_CHECKING:
    from app.config import Settings


@dataclass(frozen=True)
class PoolConfig:
    """The UMA pool and the host choice behind it (docs/architecture.md, "Memory").

    Attributes:
        size_bytes: pool size in bytes (``ZAP_UMA_POOL_BYTES``).
        transport: ``auto`` or a transport of :data:`app.engine.host.pick.TRANSPORTS`
            (``ZAP_TRANSPORT``).
        source: ``auto`` (the allocator the pick chose), ``pinned``, ``managed`` or ``heap``.
        wait_seconds: how long an acquire waits for room before ``PoolExhausted``.
        debug: track every buffer's owner (tests, ``ZAP_POOL_DEBUG``).
        probe_root: the directory the host probe reads as ``/`` (tests give a fake host).
    """

    size_bytes: int
    transport: str = "auto"
    source: str = "auto"
    wait_seconds: float = 1.0
    debug: bool = False
    probe_root: str = "/"


def engine_config(settings: Settings) -> EngineConfig:
    return EngineConfig(backend=settings.backend, cpu_workers=settings.cpu_workers, cpu_chunk=settings.cpu_chunk,
                        bls_batch=settings.bls_batch,
                        crossover=dict(settings.crossover), hybrid=settings.hybrid,
                        hybrid_min=settings.hybrid_min, faults=dict(settings.faults),
                        shadow_rate=settings.shadow_rate, shadow_min_per_batch=settings.shadow_min_per_batch,
                        shadow_warmup_items=settings.shadow_warmup_items, shadow_mode=settings.shadow_mode,
                        shadow_queue_items=settings.shadow_queue_items)


def pool_config(settings: Settings) -> PoolConfig:
    return PoolConfig(size_bytes=settings.uma_pool_bytes, transport=settings.transport, source=settings.pool_source,
                      wait_seconds=settings.pool_wait_seconds, debug=settings.pool_debug)


def zap_limits(settings: Settings) -> Limits:
    """The ZAP decoder's bounds from the settings."""
    return Limits(max_frame_bytes=settings.zap_max_frame_bytes, max_items=settings.zap_max_items,
                  max_message_bytes=settings.max_message_bytes)


def admission(settings: Settings) -> Admission:
    """The process's admission control (docs/operations.md, "Load shedding")."""
    return Admission(settings.admission_max_items, settings.admission_max_bytes,
                     settings.admission_retry_after_seconds,
                     default_deadline=settings.admission_default_deadline_seconds,
                     max_deadline=settings.admission_max_deadline_seconds,
                     pipeline=settings.admission_pipeline_seconds,
                     max_queued=settings.admission_max_queued,
                     max_share=settings.admission_max_share)


def ingest_config(settings: Settings, *, reuse_port: bool = False, admission: Admission | None = None,
                  keys: Sequence[IngestKey] = (), rate: Callable[[str], float] | None = None) -> IngestConfig:
    """The ingest listeners of ``settings`` (a port of 0 leaves its transport off).

    ``reuse_port``: several worker processes bind the same ports (``SO_REUSEPORT``).  ``keys``:
    the API keys (any: TCP and QUIC require the keyed handshake); ``rate``: a key's token
    bucket, shared with the HTTP routes.  A half-received frame has the HTTP body's read
    deadline and minimum rate; the handshake, the request head's deadline."""
    def port(p: int) -> int | None:
        return p or None

    return IngestConfig(host=settings.ingest_host, tcp_port=port(settings.ingest_tcp_port),
                        udp_port=port(settings.ingest_udp_port), quic_port=port(settings.ingest_quic_port),
                        ring_slots=settings.ingest_ring_slots, coalesce_items=settings.ingest_coalesce_items,
                        coalesce_wait_seconds=settings.ingest_coalesce_wait_seconds,
                        max_in_flight=settings.ingest_max_in_flight, workers=settings.ingest_workers,
                        quic_cert=str(settings.ingest_quic_cert) if settings.ingest_quic_cert else None,
                        quic_key=str(settings.ingest_quic_key) if settings.ingest_quic_key else None,
                        shutdown_seconds=settings.ingest_shutdown_seconds,
                        pool_wait_seconds=settings.pool_wait_seconds, limits=zap_limits(settings),
                        reuse_port=reuse_port, admission=admission,
                        reserve_step_bytes=settings.zap_reserve_step_bytes,
                        frame_timeout_seconds=settings.body_read_timeout_seconds,
                        frame_min_bytes_per_second=settings.body_min_bytes_per_second,
                        auth_keys=tuple(keys), handshake_timeout_seconds=settings.header_timeout_seconds,
                        udp_unauthenticated=settings.ingest_udp_unauthenticated, rate=rate)
