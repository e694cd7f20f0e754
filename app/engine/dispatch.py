"""The Engine: routes each batch to a backend, commits it to a Merkle root, keeps stats.

Routing per scheme (DESIGN.md section 3): an accelerated backend (anything but ``cpu``)
is used when its start-up self-test for that scheme passed and the batch has at least its
crossover size; otherwise the CPU.  ``backend`` in :class:`EngineConfig` forces one backend
for every scheme.  A backend that raises during a batch is marked failed for that scheme and
the batch is re-run on the CPU, so a verdict never depends on which backend was up.

This module imports no web framework, so the GPU check script can use it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from app.engine import kat, merkle
from app.engine.backends.base import Backend
from app.engine.backends.cpu import CpuBackend
from app.engine.batch import Batch
from app.engine.kat import Item
from app.engine.pick import Pick
from app.engine.pick import pick as pick_transport
from app.engine.pool import UmaPool
from app.engine.probe import HostProbe, probe_host
from app.engine.schemes import MAX_CONTEXT_BYTES, SCHEMES, Scheme
from app.errors import BackendUnavailable, EmptyBatch, NotReady

log = logging.getLogger("zapverify.engine")


@dataclass
class EngineConfig:
    """Plain engine settings (built from :class:`app.config.Settings` by the app)."""

    backend: str = "auto"
    cpu_workers: int = 0
    cpu_chunk: int = 256
    cpu_parallelism: str = "auto"
    crossover: dict[str, int] = field(default_factory=dict)
    #: UMA pool size in bytes (``ZAP_UMA_POOL_BYTES``); None: no probe, pick or pool (scripts, tests).
    pool_bytes: int | None = None
    #: ``auto`` or a transport of :data:`app.engine.pick.TRANSPORTS` (``ZAP_TRANSPORT``).
    transport: str = "auto"
    #: ``auto`` (the allocator Pick chose), ``pinned``, ``managed`` or ``heap``.
    pool_source: str = "auto"
    pool_wait_seconds: float = 1.0
    pool_debug: bool = False
    #: Directory the host probe reads as ``/``.
    probe_root: str = "/"


@dataclass
class BatchResult:
    """What :meth:`Engine.verify` returns for one batch.

    Attributes:
        verdicts: ``bool[N]`` in item order.
        leaves: ``uint8[N, 32]`` Merkle leaf hashes (DESIGN.md section 5).
        root: the 32-byte RFC 6962 root of ``leaves``.
        backend: the name of the backend whose verdicts these are.
        verify_seconds / merkle_seconds: wall time of each phase, seconds.
    """

    verdicts: np.ndarray
    leaves: np.ndarray
    root: bytes
    backend: str
    verify_seconds: float
    merkle_seconds: float

    @property
    def valid(self) -> int:
        return int(np.count_nonzero(self.verdicts))


@dataclass
class ItemsResult:
    """What :meth:`Engine.verify_items` returns: verdicts of a mixed request in input order."""

    verdicts: np.ndarray
    leaves: np.ndarray
    root: bytes
    backends: dict[str, str]
    verify_seconds: float
    merkle_seconds: float

    @property
    def valid(self) -> int:
        return int(np.count_nonzero(self.verdicts))


@dataclass
class SchemeRoute:
    """Self-test outcome of every backend for one scheme (shown on /v1/status)."""

    selftest: dict[str, bool] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)


class Engine:
    """Verifies batches on the best backend per scheme.

    Args:
        config: an :class:`EngineConfig`.
        backends: backends in order of preference; the CPU backend is always added last.
    """

    def __init__(self, config: EngineConfig | None = None, backends: Sequence[Backend] = ()):
        from app.engine.stats import Stats

        self.config = config or EngineConfig()
        self.cpu = next((b for b in backends if b.name == "cpu"), None) or CpuBackend(
            self.config.cpu_workers, self.config.cpu_chunk, self.config.cpu_parallelism)
        self.backends: list[Backend] = [b for b in backends if b.name != "cpu"] + [self.cpu]
        self.routes: dict[str, SchemeRoute] = {s: SchemeRoute() for s in SCHEMES}
        self.stats = Stats()
        self.ready = False
        self._lock = threading.Lock()
        if self.config.backend != "auto" and self.config.backend not in {b.name for b in self.backends}:
            raise BackendUnavailable(f"backend {self.config.backend!r} forced but not available here; "
                                     f"have: {', '.join(b.name for b in self.backends)}", field="backend")
        self.host: HostProbe | None = None
        self.pick: Pick | None = None
        self.pool: UmaPool | None = None
        if self.config.pool_bytes is not None:
            self._open_pool()

    def _open_pool(self) -> None:
        """Probe the host, pick the transport and allocator, and allocate the UMA pool.

        Raises :class:`app.errors.TransportUnavailable` for a forced transport that cannot
        run, :class:`app.errors.AllocatorUnavailable` for a pool source the host lacks.
        """
        cfg = self.config
        self.host = probe_host(cfg.probe_root)
        self.pick = pick_transport(self.host, cfg.transport)
        source = self.pick.pool_source if cfg.pool_source == "auto" else cfg.pool_source
        self.pool = UmaPool.create(cfg.pool_bytes, source, wait_seconds=cfg.pool_wait_seconds, debug=cfg.pool_debug)

    # ------------------------------------------------------------------ life cycle
    def start(self) -> None:
        """Run the known-answer self-test of every backend for every scheme, then be ready."""
        if hasattr(self.cpu, "warm_up"):
            self.cpu.warm_up()
        answers = kat.known_answers()
        for backend in self.backends:
            for scheme_id, kas in answers.items():
                if scheme_id not in backend.schemes():
                    continue
                ok, why = self._selftest(backend, kas)
                self.routes[scheme_id].selftest[backend.name] = ok
                if not ok:
                    self.routes[scheme_id].failures[backend.name] = why
                    log.warning("self-test of %s on %s failed (%s): routed elsewhere", scheme_id,
                                backend.name, why)
        cpu_bad = [s for s, r in self.routes.items() if not r.selftest.get("cpu")]
        if cpu_bad:
            log.error("CPU reference self-test failed for %s", ", ".join(cpu_bad))
        self.ready = not cpu_bad
        log.info("engine ready=%s backends=%s", self.ready, [b.name for b in self.backends])

    def _selftest(self, backend: Backend, kas: list[kat.KnownAnswer]) -> tuple[bool, str]:
        try:
            for group, idx in _group([ka.item for ka in kas]).items():
                if group is None:
                    continue
                batch = _batch_of(group, [kas[i].item for i in idx])
                got = backend.verify(batch)
                want = np.array([kas[i].expected for i in idx])
                if not np.array_equal(np.asarray(got, dtype=bool), want):
                    return False, f"verdicts {got.astype(int).tolist()} != expected {want.astype(int).tolist()}"
            return True, ""
        except Exception as exc:  # a backend that cannot even run is a failed self-test
            return False, f"{type(exc).__name__}: {exc}"

    def close(self) -> None:
        for b in self.backends:
            b.close()
        if self.pool is not None:
            self.pool.close()

    # ------------------------------------------------------------------ routing
    def backend_for(self, scheme: Scheme, n: int) -> Backend:
        """The backend a batch of ``n`` items of ``scheme`` goes to (see module doc)."""
        route = self.routes[scheme.id]
        if self.config.backend != "auto":
            forced = next(b for b in self.backends if b.name == self.config.backend)
            if self.ready and not route.selftest.get(forced.name, False):
                return self.cpu  # a forced backend that failed its self-test is never trusted
            return forced
        for b in self.backends[:-1]:
            if route.selftest.get(b.name) and n >= self.config.crossover.get(scheme.id, 1):
                return b
        return self.cpu

    # ------------------------------------------------------------------ verification
    def verify(self, batch: Batch) -> BatchResult:
        """Verify one columnar batch and commit it to a Merkle root.

        Raises :class:`EmptyBatch` for zero items, :class:`app.errors.RequestError` for
        columns of the wrong shape.
        """
        if len(batch) == 0:
            raise EmptyBatch("a batch needs at least one item", field="count")
        batch.validate()
        verdicts, leaves, backend, t_verify = self._run(batch)
        t0 = time.perf_counter()
        if leaves is None:
            leaves = merkle.batch_leaves(batch, verdicts)
        root = merkle.root(leaves)
        t_merkle = time.perf_counter() - t0
        return BatchResult(verdicts, leaves, root, backend, t_verify, t_merkle)

    def _run(self, batch: Batch) -> tuple[np.ndarray, np.ndarray | None, str, float]:
        """Verdicts, leaf hashes when the backend made them (else None), backend name, seconds."""
        backend = self.backend_for(batch.scheme, len(batch))
        t0 = time.perf_counter()
        try:
            verdicts, leaves = _call(backend, batch)
            if verdicts.shape != (len(batch),):
                raise RuntimeError(f"returned shape {verdicts.shape}, expected ({len(batch)},)")
        except Exception as exc:
            if backend is self.cpu:
                raise
            log.error("%s failed on %s (%s); re-running on cpu", backend.name, batch.scheme.id, exc)
            route = self.routes[batch.scheme.id]
            route.selftest[backend.name] = False
            route.failures[backend.name] = f"runtime: {type(exc).__name__}: {exc}"
            backend = self.cpu
            t0 = time.perf_counter()
            verdicts, leaves = _call(self.cpu, batch)
        seconds = time.perf_counter() - t0
        self.stats.record(batch.scheme.id, backend.name, len(batch), int(np.count_nonzero(verdicts)), seconds)
        return verdicts, leaves, backend.name, seconds

    def verify_items(self, items: Sequence[Item]) -> ItemsResult:
        """Verify a mixed list of items; verdicts and leaves come back in input order.

        Items are grouped into one batch per (scheme, key length, context, options).  An
        item whose key or signature length does not fit its scheme, or whose context is
        over 255 bytes, is ``False`` without reaching a backend.  The Merkle root covers
        every item in input order.  Raises :class:`EmptyBatch` for an empty list.
        """
        if not items:
            raise EmptyBatch("a request needs at least one item", field="items")
        n = len(items)
        verdicts = np.zeros(n, dtype=bool)
        leaves = np.empty((n, 32), dtype=np.uint8)
        backends: dict[str, str] = {}
        t_verify = t_merkle = 0.0
        groups = _group(items)
        for group, idx in groups.items():
            if group is None:
                continue
            batch = _batch_of(group, [items[i] for i in idx])
            v, batch_leaves, name, secs = self._run(batch)
            verdicts[idx] = v
            t_verify += secs
            t0 = time.perf_counter()
            leaves[idx] = batch_leaves if batch_leaves is not None else merkle.batch_leaves(batch, v)
            t_merkle += time.perf_counter() - t0
            prev = backends.get(group[0])
            backends[group[0]] = name if prev in (None, name) else f"{prev}+{name}"
        t0 = time.perf_counter()
        for i in groups.get(None, []):  # items false as given: hash exactly what was sent
            it = items[i]
            leaves[i] = np.frombuffer(merkle.leaf_hash(SCHEMES[it.scheme].code, False, it.public_key,
                                                       it.message, it.signature), np.uint8)
        root = merkle.root(leaves)
        t_merkle += time.perf_counter() - t0
        return ItemsResult(verdicts, leaves, root, backends, t_verify, t_merkle)

    def status(self) -> dict:
        """Routing table and self-test outcome per scheme, for /v1/status."""
        return {
            "ready": self.ready,
            "forced_backend": None if self.config.backend == "auto" else self.config.backend,
            "backends": [b.name for b in self.backends],
            "schemes": {
                s: {"backend": self.backend_for(SCHEMES[s], 1 << 30).name,
                    "selftest": dict(r.selftest), "failures": dict(r.failures)}
                for s, r in self.routes.items()
            },
        }

    def host_status(self) -> dict:
        """Probe, pick and pool for /v1/status: ``{"probe", "pick", "pool"}`` (None without a pool)."""
        return {"probe": self.host.to_dict() if self.host else None,
                "pick": self.pick.to_dict() if self.pick else None,
                "pool": self.pool.stats() if self.pool else None}

    def require_ready(self) -> None:
        if not self.ready:
            raise NotReady("the engine has not passed its self-test yet")


def _call(backend: Backend, batch: Batch) -> tuple[np.ndarray, np.ndarray | None]:
    if hasattr(backend, "verify_with_leaves"):
        verdicts, leaves = backend.verify_with_leaves(batch)
        return np.asarray(verdicts, dtype=bool), leaves
    return np.asarray(backend.verify(batch), dtype=bool), None


# ------------------------------------------------------------------ grouping helpers
GroupKey = tuple[str, int, bytes, bool, bool]


def _group(items: Sequence[Item]) -> dict[GroupKey | None, list[int]]:
    """Indices of ``items`` per batch key; key None collects items that are false as given."""
    groups: dict[GroupKey | None, list[int]] = {}
    for i, it in enumerate(items):
        s = SCHEMES[it.scheme]
        key: GroupKey | None = (it.scheme, len(it.public_key), bytes(it.context), it.prehashed, it.allow_high_s)
        if (len(it.public_key) not in s.pk_lens or len(it.signature) != s.sig_len
                or len(it.context) > MAX_CONTEXT_BYTES):
            key = None
        groups.setdefault(key, []).append(i)
    return groups


def _batch_of(key: GroupKey, items: list[Item]) -> Batch:
    scheme_id, _, ctx, prehashed, allow_high_s = key
    return Batch.from_items(SCHEMES[scheme_id], [i.public_key for i in items], [i.message for i in items],
                            [i.signature for i in items], ctx=ctx, prehashed=prehashed,
                            allow_high_s=allow_high_s)
