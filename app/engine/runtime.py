"""The Runtime: one server process (docs/architecture.md, "The front hall").

It builds every long-lived part of the process: the engine and the stats every batch and
frame is counted into, the host probe and transport pick with the UMA pool frames land in,
the receipt store and its pruner, admission control, the WebSocket endpoint's counters, the
NIC ingest and, with several uvicorn workers, this worker's side of the worker exchange.
:meth:`Runtime.running`, one async context, starts them in order and stops them in reverse.
The web layer (``app/main.py``) only wires HTTP to it; the routes reach its parts through
:mod:`app.api.deps`, and the NIC ingest (:class:`app.engine.ingest.Ingest`) is given it, so
nothing reaches the pool or the store through the engine.

This module imports no web framework (nor pydantic: settings are read by attribute).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from app.core.errors import NotReady, StoreUnavailable
from app.engine import configs
from app.engine.admission import Admission
from app.engine.backends.base import Backend
from app.engine.backends.factory import accelerated_backends
from app.engine.configs import PoolConfig
from app.engine.host.pick import Pick
from app.engine.host.pick import pick as pick_transport
from app.engine.host.probe import HostProbe, probe_host
from app.engine.ingest import Ingest
from app.engine.ingest.base import IngestKey
from app.engine.memory.pool import UmaPool
from app.engine.receipts.open import open_store
from app.engine.receipts.pruner import Pruner
from app.engine.receipts.store import ReceiptStore
from app.engine.stats import Stats, StatsListener, WsStats
from app.engine.verify.engine import Engine, EngineConfig
from app.engine.workers import WorkerExchange

if TYPE_CHECKING:
    from app.config import Settings

log = logging.getLogger("zapverify")

__all__ = ["PoolConfig", "Runtime"]


class Runtime:
    """One process's parts (see the module doc).

    Args:
        engine: routes and verifies batches (None: built from ``settings`` when the runtime
            starts, :meth:`running`); its ``stats`` are the runtime's.
        settings: the process's :class:`app.config.Settings` (None: given later by the app
            that serves a runtime built around parts made elsewhere, :meth:`bind`).
        host, pick: the host probe and transport pick (None: not probed, as in scripts).
        pool: where received frames land (None: heap memory, as in scripts and most tests).
        store: the receipt store (None: receipts off, or not opened yet: :meth:`running`
            opens it).

    Use :meth:`open` to build the engine's side from configurations (scripts, tests); the
    constructor wraps parts already built.
    """

    settings: Settings
    #: Admission control of this process (docs/operations.md, "Load shedding"), from the settings.
    admission: Admission

    def __init__(self, engine: Engine | None = None, *, settings: Settings | None = None,
                 host: HostProbe | None = None, pick: Pick | None = None, pool: UmaPool | None = None,
                 store: ReceiptStore | None = None):
        self._engine = engine
        #: The dashboard's and /metrics' counters (the engine records batches into them).
        self.stats: Stats = engine.stats if engine is not None else Stats()
        self.host, self.pick, self.pool, self.store = host, pick, pool, store
        #: The WebSocket endpoint's gauges and counters.
        self.ws = WsStats()
        self.pruner: Pruner | None = None
        self.ingest: Ingest | None = None
        self.exchange: WorkerExchange | None = None
        self._settings: Settings | None = None
        if settings is not None:
            self.bind(settings)

    def bind(self, settings: Settings) -> None:
        """Serve with ``settings``: they build admission control now and the rest when the
        runtime starts (an app given a runtime without settings binds its own)."""
        self._settings = self.settings = settings
        self.admission = configs.admission(settings)

    @property
    def bound(self) -> bool:
        """Whether :meth:`bind` has given this runtime its settings."""
        return self._settings is not None

    @classmethod
    def open(cls, config: EngineConfig | None = None, pool: PoolConfig | None = None,
             backends: Sequence[Backend] = (), *, settings: Settings | None = None) -> Runtime:
        """Probe the host, pick the transport and allocator and allocate the pool (where
        ``pool`` is given), then build the engine with new stats.

        Raises :class:`app.core.errors.TransportUnavailable` for a forced transport that cannot
        run, :class:`app.core.errors.AllocatorUnavailable` for a pool source the host lacks,
        :class:`app.core.errors.ConfigError` for a pool size under one page, and what
        :class:`Engine` raises (a forced backend that is not here).
        """
        rt = cls(settings=settings)
        rt._open(config, pool, backends)
        return rt

    @classmethod
    def build(cls, settings: Settings) -> Runtime:
        """A runtime of ``settings`` with its engine's side built now (scripts, tests; a
        server's is built when it starts).  Raises as :meth:`open` does."""
        rt = cls(settings=settings)
        rt._open_from_settings()
        return rt

    def _open(self, config: EngineConfig | None, pool: PoolConfig | None, backends: Sequence[Backend]) -> None:
        host = chosen = uma = None
        if pool is not None:
            host = probe_host(pool.probe_root)
            chosen = pick_transport(host, pool.transport)
            source = chosen.pool_source if pool.source == "auto" else pool.source
            uma = UmaPool.create(pool.size_bytes, source, wait_seconds=pool.wait_seconds, debug=pool.debug)
        try:
            engine = Engine(config, backends=backends, stats=self.stats)
        except BaseException:
            if uma is not None:
                uma.close()
            raise
        self._engine, self.host, self.pick, self.pool = engine, host, chosen, uma

    def _open_from_settings(self) -> None:
        """The engine's side from the settings: the accelerated backends this host has, the
        pool, the engine (what :meth:`open` does with the settings' configurations)."""
        s = self.settings
        backends = accelerated_backends(s.backend, cuda_device=s.cuda_device, cuda_transfer=s.cuda_transfer,
                                        kernel_variant=s.kernel_variant, chunk_items=s.cuda_chunk_items,
                                        waves=s.cuda_waves, streams=s.cuda_streams)
        self._open(configs.engine_config(s), configs.pool_config(s), backends)

    @property
    def engine(self) -> Engine:
        """The engine; raises :class:`NotReady` before a runtime built from settings started."""
        if self._engine is None:
            raise NotReady("the runtime has not started: no engine yet")
        return self._engine

    def host_status(self) -> dict[str, Any]:
        """``{"probe", "pick", "pool"}``: the host probe, the transport pick and the UMA pool's
        statistics, each None where the runtime has none."""
        return {"probe": self.host.to_dict() if self.host else None,
                "pick": self.pick.to_dict() if self.pick else None,
                "pool": self.pool.stats() if self.pool else None}

    def close(self) -> None:
        """Close the engine's backends, then the pool (the store is closed by its opener)."""
        try:
            if self._engine is not None:
                self._engine.close()
        finally:
            if self.pool is not None:
                self.pool.close()

    # ------------------------------------------------------------------ the process's life
    @asynccontextmanager
    async def running(self, *, keys: Sequence[IngestKey] = (), rate: Callable[[str], float] | None = None,
                      exchange: Path | None = None, observer: Any = None,
                      background: Sequence[Callable[[], Coroutine[Any, Any, None]]] = ()) -> AsyncIterator[Runtime]:
        """Start every part in order, yield, then stop them in reverse (the runtime closed last).

        In order: the engine's side (built from the settings unless given), the receipt store
        (opened and migrated before the first request: a store that cannot be opened stops the
        start rather than serving unrecorded verdicts), its pruner, the engine's self-test (in
        a thread, or awaited with ``listen_when_ready``, raising :class:`NotReady` when it
        fails), admission's learning of each scheme's cost, the ``background`` tasks, the worker
        exchange (``exchange``: its directory with several workers) and the NIC ingest (frames
        that arrive before the self-test passed are answered NOT_READY; stopped first, so every
        frame taken in is answered, with its receipt, before the store closes).

        ``keys``: the API keys (TCP and QUIC require the keyed handshake when any); ``rate``: a
        key's token bucket, shared with the HTTP routes; ``observer``: counts batches, frames
        and receipt writes too (the /metrics exporter).
        """
        settings = self.settings
        if self._engine is None:
            self._open_from_settings()
        if observer is not None:
            self.stats.add_listener(observer)
        async with contextlib.AsyncExitStack() as stack:
            stack.callback(self.close)
            self.store = await self._open_store_waiting() if settings.receipts else None
            if self.store is not None:
                # Inclusion proofs keep their trees' levels, within this bound (proof_cache.py).
                self.store.proofs.max_bytes = settings.receipt_proof_cache_bytes
                stack.callback(self.store.close)
                if observer is not None:
                    self.store.add_listener(observer)  # write latency (app/api/metrics.py)
                self.pruner = Pruner(self.store, max_age_seconds=settings.retention_max_age_seconds,
                                     max_rows=settings.retention_max_rows,
                                     interval_seconds=settings.prune_interval_seconds)
                self.pruner.start()
                stack.callback(self.pruner.stop)
            await self._start_engine()
            # Admission's cost model learns each scheme's cost from the batches verified here.
            rates = cast(StatsListener, self.admission.rates)  # of batches only: Stats calls what it has
            self.stats.add_listener(rates)
            stack.callback(self.stats.remove_listener, rates)
            for task in background:
                stack.push_async_callback(_cancelled, asyncio.create_task(task()))
            if exchange is not None:  # several workers: each shows the whole server
                self.exchange = WorkerExchange(exchange, self)
                self.stats.set_peers(self.exchange.peer_stats)
                stack.callback(self.stats.set_peers, None)
                stack.callback(self.exchange.withdraw)
                stack.push_async_callback(_cancelled, asyncio.create_task(self.exchange.publish_forever()))
            self.ingest = Ingest(self, configs.ingest_config(settings, reuse_port=exchange is not None,
                                                             admission=self.admission, keys=keys, rate=rate),
                                 observer=self.stats.record_frame)
            self.ingest.start()
            stack.push_async_callback(asyncio.to_thread, self.ingest.stop)
            yield self

    async def _start_engine(self) -> None:
        """The engine's self-test: awaited with ``listen_when_ready`` (so the server accepts no
        connection before it is ready), else in a background thread (/readyz turns 200 when
        it has passed)."""
        eng = self.engine
        if eng.ready:
            return
        if self.settings.listen_when_ready:
            await asyncio.to_thread(eng.start)
            if not eng.ready:
                raise NotReady("the engine's self-test failed; not accepting connections (see the log)")
        else:
            threading.Thread(target=eng.start, name="zv-engine-start", daemon=True).start()

    async def _open_store_waiting(self) -> ReceiptStore:
        """Open the receipt store, retrying for up to ``database_wait_seconds`` while the
        database cannot be reached (raises the last :class:`StoreUnavailable` after that)."""
        s = self.settings
        deadline = time.monotonic() + s.database_wait_seconds
        while True:
            try:
                return await asyncio.to_thread(open_store, s.receipts_database_url, pool_size=s.database_pool_size)
            except StoreUnavailable as exc:
                if time.monotonic() >= deadline:
                    raise
                log.warning("receipt store not reachable yet, retrying: %s", exc.message)
                await asyncio.sleep(1.0)


async def _cancelled(task: asyncio.Task) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
