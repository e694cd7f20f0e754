"""The Runtime: what one server process serves with (docs/architecture.md, "Layout").

It owns the engine and what the engine works beside but does not need to route a batch: the
stats every batch and frame is counted into, the host probe and transport pick, the UMA pool
frames land in, and the receipt store.  ``app/main.py`` builds one per process; the routes
(``app.state.runtime``, :mod:`app.api.deps`) and the NIC ingest (:class:`app.engine.ingest.Ingest`)
are given it, so nothing reaches the pool or the store through the engine.

This module imports no web framework.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.engine.backends.base import Backend
from app.engine.host.pick import Pick
from app.engine.host.pick import pick as pick_transport
from app.engine.host.probe import HostProbe, probe_host
from app.engine.memory.pool import UmaPool
from app.engine.receipts.store import ReceiptStore
from app.engine.stats import Stats
from app.engine.verify.engine import Engine, EngineConfig


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


class Runtime:
    """One process's engine, stats, host probe and pick, UMA pool and receipt store.

    Args:
        engine: routes and verifies batches; its ``stats`` are the runtime's.
        host, pick: the host probe and transport pick (None: not probed, as in scripts).
        pool: where received frames land (None: heap memory, as in scripts and most tests).
        store: the receipt store (None: receipts off, or not opened yet: ``app/main.py``
            opens it in the app's life span and sets it here).

    Use :meth:`open` to build one from configurations; the constructor wraps parts already
    built (tests).
    """

    def __init__(self, engine: Engine, *, host: HostProbe | None = None, pick: Pick | None = None,
                 pool: UmaPool | None = None, store: ReceiptStore | None = None):
        self.engine, self.host, self.pick, self.pool, self.store = engine, host, pick, pool, store

    @classmethod
    def open(cls, config: EngineConfig | None = None, pool: PoolConfig | None = None,
             backends: Sequence[Backend] = ()) -> Runtime:
        """Probe the host, pick the transport and allocator and allocate the pool (where
        ``pool`` is given), then build the engine with new stats.

        Raises :class:`app.core.errors.TransportUnavailable` for a forced transport that cannot
        run, :class:`app.core.errors.AllocatorUnavailable` for a pool source the host lacks,
        :class:`app.core.errors.ConfigError` for a pool size under one page, and what
        :class:`Engine` raises (a forced backend that is not here).
        """
        host = chosen = uma = None
        if pool is not None:
            host = probe_host(pool.probe_root)
            chosen = pick_transport(host, pool.transport)
            source = chosen.pool_source if pool.source == "auto" else pool.source
            uma = UmaPool.create(pool.size_bytes, source, wait_seconds=pool.wait_seconds, debug=pool.debug)
        try:
            engine = Engine(config, backends=backends, stats=Stats())
        except BaseException:
            if uma is not None:
                uma.close()
            raise
        return cls(engine, host=host, pick=chosen, pool=uma)

    @property
    def stats(self) -> Stats:
        """The dashboard's and /metrics' counters (the engine records batches into them)."""
        return self.engine.stats

    def host_status(self) -> dict[str, Any]:
        """``{"probe", "pick", "pool"}``: the host probe, the transport pick and the UMA pool's
        statistics, each None where the runtime has none."""
        return {"probe": self.host.to_dict() if self.host else None,
                "pick": self.pick.to_dict() if self.pick else None,
                "pool": self.pool.stats() if self.pool else None}

    def close(self) -> None:
        """Close the engine's backends, then the pool (the store is closed by its opener)."""
        try:
            self.engine.close()
        finally:
            if self.pool is not None:
                self.pool.close()
