"""The Engine: routes each batch to a backend, commits it to a Merkle root, keeps stats.

Routing per scheme (docs/architecture.md, "Batches and routing"): an accelerated backend (anything but ``cpu``)
is used when its start-up self-test for that scheme passed and the batch has at least its
crossover size; otherwise the CPU.  ``backend`` in :class:`EngineConfig` forces one backend
for every scheme.  A backend that raises during a batch is marked failed for that scheme and
the batch is re-run on the CPU, so a verdict never depends on which backend was up.

Crossover sizes: ``EngineConfig.crossover`` fixes them per scheme; otherwise, for backends
that ask for it (the GPU), :meth:`Engine.calibrate` measures at start the fixed cost and the
per-item cost of the backend and of the CPU per scheme, and the crossover is the smallest
batch on which the backend is the faster (never, if it is not faster per item).

Hybrid mode (``EngineConfig.hybrid``): a batch of at least ``hybrid_min`` items routed to an
accelerated backend is split, the backend taking the share r_b / (r_b + r_cpu) of its items
(r: items per second, measured at start and refined by every split batch) and the CPU the
rest, both at once; verdicts are joined in item order.

Merkle roots: a batch verified on a backend whose Merkle kernels passed their start-up
check is committed on that backend too (verdicts stay on the device); otherwise on the CPU.

This module imports no web framework.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Literal, TypeGuard, cast

import numpy as np

from app.core.batch import AGGREGATE_LABELS, AggregateItem, Batch, Item
from app.core.errors import BackendUnavailable, EmptyBatch, NotReady
from app.core.schemes import SCHEMES, Scheme
from app.engine.backends.base import (
    Backend,
    CommitsOnDevice,
    CommittingBackend,
    Device,
    HashesLeaves,
    VerifiesAggregates,
    WarmsUp,
)
from app.engine.backends.cpu import CpuBackend
from app.engine.commit import merkle
from app.engine.host.pick import Pick
from app.engine.host.pick import pick as pick_transport
from app.engine.host.probe import HostProbe, probe_host
from app.engine.memory.pool import UmaPool
from app.engine.verify import calibrate, faults, kat, selftest
from app.engine.verify.grouping import batch_of, group_items

log = logging.getLogger("zapverify.engine")


@dataclass
class EngineConfig:
    """Plain engine settings (built from :class:`app.config.Settings` by the app)."""

    backend: str = "auto"
    cpu_workers: int = 0
    cpu_chunk: int = 0
    cpu_parallelism: Literal["auto", "thread", "process"] = "auto"
    #: Verify BLS12-381 batches on the CPU by random linear combination (app/engine/verify/bls_batch.py).
    bls_batch: bool = True
    #: Fixed crossover batch size per scheme id (items), for every accelerated backend.
    crossover: dict[str, int] = field(default_factory=dict)
    #: Measure crossovers and rates at start: None = for backends that ask (``calibrate_at_start``).
    calibrate: bool | None = None
    #: Time budget of one (backend, scheme) measurement, seconds.
    calibrate_seconds: float = 0.25
    #: Split large batches between an accelerated backend and the CPU.
    hybrid: bool = False
    #: Smallest batch (items) that hybrid mode splits.
    hybrid_min: int = 4096
    #: UMA pool size in bytes (``ZAP_UMA_POOL_BYTES``); None: no probe, pick or pool (scripts, tests).
    pool_bytes: int | None = None
    #: ``auto`` or a transport of :data:`app.engine.host.pick.TRANSPORTS` (``ZAP_TRANSPORT``).
    transport: str = "auto"
    #: ``auto`` (the allocator Pick chose), ``pinned``, ``managed`` or ``heap``.
    pool_source: str = "auto"
    pool_wait_seconds: float = 1.0
    pool_debug: bool = False
    #: Directory the host probe reads as ``/``.
    probe_root: str = "/"
    #: Injected faults, ``{"<backend>:<scheme>": "selftest" | "raise" | "garbage"}`` (app/engine/verify/faults.py).
    faults: dict[str, str] = field(default_factory=dict)


@dataclass
class Committed:
    """Verdicts committed to a Merkle tree (docs/architecture.md, "Merkle leaf and receipts").

    Attributes:
        verdicts: ``bool[N]`` in item order.
        leaves: ``uint8[N, 32]`` Merkle leaf hashes.
        root: the 32-byte RFC 6962 root of ``leaves``.
        verify_seconds / merkle_seconds: wall time of each phase, seconds.
    """

    verdicts: np.ndarray
    leaves: np.ndarray
    root: bytes
    verify_seconds: float
    merkle_seconds: float

    @property
    def valid(self) -> int:
        return int(np.count_nonzero(self.verdicts))


@dataclass
class BatchResult(Committed):
    """What :meth:`Engine.verify` returns for one batch; ``backend`` made the verdicts,
    ``merkle_backend`` the tree."""

    backend: str = "cpu"
    merkle_backend: str = "cpu"


@dataclass
class ItemsResult(Committed):
    """What :meth:`Engine.verify_items` returns: verdicts of a mixed request in input order,
    and the backend that verified each scheme."""

    backends: dict[str, str] = field(default_factory=dict)


@dataclass
class SchemeRoute:
    """Self-test outcome of every backend for one scheme (shown on /v1/status)."""

    selftest: dict[str, bool] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    #: Measured crossover per accelerated backend (items; None: never faster than the CPU).
    crossover: dict[str, int | None] = field(default_factory=dict)
    #: Measured throughput per backend, items per second (hybrid split weights).
    rates: dict[str, float] = field(default_factory=dict)


@dataclass
class _Run:
    """One batch's verification: verdicts, who ran them, and the device's tree if any."""

    verdicts: np.ndarray
    backend: str
    seconds: float
    leaves: np.ndarray | None = None
    root: bytes | None = None
    merkle_backend: str = "cpu"


#: Backend name under which items refused before any backend (wrong key, signature or
#: context length) are counted: they are ``False`` verdicts all the same.
PRECHECK = "precheck"



def _note_backend(backends: dict[str, str], scheme_id: str, name: str) -> None:
    """Add ``name`` to what decided ``scheme_id``'s items ("cpu", "cuda+cpu", "precheck", ...)."""
    prev = backends.get(scheme_id)
    if prev is None:
        backends[scheme_id] = name
    elif name not in prev.split("+"):
        backends[scheme_id] = f"{prev}+{name}"


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
            self.config.cpu_workers, self.config.cpu_chunk, self.config.cpu_parallelism,
            bls_batch=self.config.bls_batch)
        self.backends: list[Backend] = [b for b in backends if b.name != "cpu"] + [self.cpu]
        self._started = False
        if self.config.faults:
            injected = faults.parse(self.config.faults)

            def inject(b: Backend) -> Backend:
                if b.name not in injected:
                    return b
                return cast(Backend, faults.FaultyBackend(b, injected[b.name], lambda: self._started))

            self.cpu = inject(self.cpu)
            self.backends = [inject(b) for b in self.backends[:-1]] + [self.cpu]
        self.routes: dict[str, SchemeRoute] = {s: SchemeRoute() for s in SCHEMES}
        #: Per accelerated backend: "ready" when its Merkle kernels matched the CPU at start.
        self.merkle: dict[str, str] = {}
        self.stats = Stats()
        self.ready = False
        self._lock = threading.Lock()
        self._hybrid_pool: ThreadPoolExecutor | None = None
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

        Raises :class:`app.core.errors.TransportUnavailable` for a forced transport that cannot
        run, :class:`app.core.errors.AllocatorUnavailable` for a pool source the host lacks.
        """
        cfg = self.config
        assert cfg.pool_bytes is not None  # only called when the engine has a pool
        self.host = probe_host(cfg.probe_root)
        self.pick = pick_transport(self.host, cfg.transport)
        source = self.pick.pool_source if cfg.pool_source == "auto" else cfg.pool_source
        self.pool = UmaPool.create(cfg.pool_bytes, source, wait_seconds=cfg.pool_wait_seconds, debug=cfg.pool_debug)

    @property
    def accelerated(self) -> list[Backend]:
        """The backends other than the CPU, in order of preference."""
        return self.backends[:-1]

    # ------------------------------------------------------------------ life cycle
    def start(self) -> None:
        """Run the known-answer self-test of every backend for every scheme, check the
        Merkle kernels of the accelerated ones, measure crossovers where asked, then be ready."""
        if isinstance(self.cpu, WarmsUp):
            self.cpu.warm_up()
        answers = kat.known_answers()
        for backend in self.backends:
            self._unbuilt(backend)
            for scheme_id, kas in answers.items():
                if scheme_id not in backend.schemes():
                    continue
                ok, why = selftest.check_scheme(backend, kas)
                self.routes[scheme_id].selftest[backend.name] = ok
                if not ok:
                    self.routes[scheme_id].failures[backend.name] = why
                    log.warning("self-test of %s on %s failed (%s): routed elsewhere", scheme_id,
                                backend.name, why)
        self._started = True  # injected runtime faults act from here on
        for backend in self.accelerated:
            self.merkle[backend.name] = selftest.check_merkle(backend, answers)
        cpu_bad = [s for s, r in self.routes.items() if not r.selftest.get("cpu")]
        if cpu_bad:
            log.error("CPU reference self-test failed for %s", ", ".join(cpu_bad))
        if any(self._calibrates(b) for b in self.accelerated):
            self.calibrate(answers)
        self.ready = not cpu_bad
        log.info("engine ready=%s backends=%s", self.ready, [b.name for b in self.backends])

    def _unbuilt(self, backend: Backend) -> None:
        """Record the schemes whose kernel exists but did not build (or whose device is
        unavailable) as failed self-tests of ``backend``: they are served by the CPU and must
        show as degraded (/readyz, /v1/status, ``zapverify_backend_available``), not vanish."""
        availability = getattr(backend, "availability", None)
        if availability is None:
            return
        for scheme_id, state in availability().items():
            if state.startswith(("build failed", "unavailable")) and scheme_id in self.routes:
                self.routes[scheme_id].selftest[backend.name] = False
                self.routes[scheme_id].failures[backend.name] = state
                log.warning("%s kernel of %s not usable (%s): routed to the CPU", backend.name, scheme_id, state)

    def _merkle_on(self, backend: Backend) -> TypeGuard[CommittingBackend]:
        """Whether ``backend`` commits on its device: its Merkle kernels passed the start-up check."""
        return isinstance(backend, CommitsOnDevice) and self.merkle.get(backend.name) == "ready"

    def close(self) -> None:
        if self._hybrid_pool is not None:
            self._hybrid_pool.shutdown(wait=False, cancel_futures=True)
        for b in self.backends:
            b.close()
        if self.pool is not None:
            self.pool.close()

    # ------------------------------------------------------------------ calibration
    def _calibrates(self, backend: Backend) -> bool:
        if self.config.calibrate is not None:
            return self.config.calibrate
        return isinstance(backend, Device) and bool(backend.calibrate_at_start)

    def calibrate(self, answers: dict[str, list[kat.KnownAnswer]] | None = None) -> None:
        """Measure, per scheme whose self-test passed on an accelerated backend, that
        backend's and the CPU's fixed and per-item cost on known-answer items; store the
        crossover (``routes[s].crossover``) and rates (``routes[s].rates``).  Schemes with a
        configured crossover keep it (their rates are still measured, for hybrid mode)."""
        answers = answers or kat.known_answers()
        budget = self.config.calibrate_seconds
        cpu_costs: dict[str, tuple[float, float]] = {}
        for backend in self.accelerated:
            if not self._calibrates(backend):
                continue
            for scheme_id, route in self.routes.items():
                if not route.selftest.get(backend.name):
                    continue
                tiled = calibrate.tiler([ka.item for ka in answers[scheme_id] if ka.expected])
                try:
                    fixed_b, per_b = calibrate.measure(backend, tiled, budget)
                    if scheme_id not in cpu_costs:
                        cpu_costs[scheme_id] = calibrate.measure(self.cpu, tiled, budget)
                except Exception as exc:
                    log.warning("calibration of %s on %s failed (%s)", scheme_id, backend.name, exc)
                    continue
                fixed_c, per_c = cpu_costs[scheme_id]
                route.crossover[backend.name] = calibrate.crossover(fixed_b, per_b, fixed_c, per_c)
                route.rates[backend.name] = 1.0 / per_b
                route.rates[self.cpu.name] = 1.0 / per_c
                log.info("%s on %s: %.3g items/s vs cpu %.3g, crossover %s", scheme_id, backend.name,
                         1.0 / per_b, 1.0 / per_c, route.crossover[backend.name])

    def crossover(self, backend: Backend, scheme: Scheme) -> int:
        """Smallest batch of ``scheme`` that goes to ``backend`` (configured, else measured,
        else 1)."""
        if scheme.id in self.config.crossover:
            return self.config.crossover[scheme.id]
        measured = self.routes[scheme.id].crossover.get(backend.name, 1)
        return calibrate.NEVER if measured is None else measured

    # ------------------------------------------------------------------ routing
    def backend_for(self, scheme: Scheme, n: int) -> Backend:
        """The backend a batch of ``n`` items of ``scheme`` goes to (see module doc)."""
        route = self.routes[scheme.id]
        if self.config.backend != "auto":
            forced = next(b for b in self.backends if b.name == self.config.backend)
            if self.ready and not route.selftest.get(forced.name, False):
                return self.cpu  # a forced backend that failed its self-test is never trusted
            return forced
        for b in self.accelerated:
            if route.selftest.get(b.name) and n >= self.crossover(b, scheme):
                return b
        return self.cpu

    # ------------------------------------------------------------------ verification
    def verify(self, batch: Batch) -> BatchResult:
        """Verify one columnar batch and commit it to a Merkle root.

        Raises :class:`EmptyBatch` for zero items, :class:`app.core.errors.RequestError` for
        columns of the wrong shape.
        """
        if len(batch) == 0:
            raise EmptyBatch("a batch needs at least one item", field="count")
        batch.validate()
        run = self._run(batch)
        t0 = time.perf_counter()
        leaves, root, merkle_backend = run.leaves, run.root, run.merkle_backend
        if root is None:
            if leaves is None:
                leaves = merkle.batch_leaves(batch, run.verdicts)
            root = merkle.root(leaves)
            merkle_backend = self.cpu.name
        assert leaves is not None  # a device that made the root made the leaves
        t_merkle = time.perf_counter() - t0
        return BatchResult(run.verdicts, leaves, root, run.seconds, t_merkle, backend=run.backend,
                           merkle_backend=merkle_backend)

    def _fail(self, backend: Backend, scheme: Scheme, exc: BaseException) -> None:
        log.error("%s failed on %s (%s); re-running on cpu", backend.name, scheme.id, exc)
        route = self.routes[scheme.id]
        route.selftest[backend.name] = False
        route.failures[backend.name] = f"runtime: {type(exc).__name__}: {exc}"

    def _run(self, batch: Batch) -> _Run:
        n = len(batch)
        backend = self.backend_for(batch.scheme, n)
        if backend is not self.cpu and self._splits(backend, batch):
            return self._run_hybrid(batch, backend)
        t0 = time.perf_counter()
        run: _Run | None = None
        if backend is not self.cpu:
            try:
                if self._merkle_on(backend):
                    verdicts, leaves, root = backend.verify_commit(batch)
                    run = _Run(_checked(verdicts, n), backend.name, 0.0, np.asarray(leaves), bytes(root),
                               backend.name)
                else:
                    run = _Run(_checked(backend.verify(batch), n), backend.name, 0.0)
            except Exception as exc:
                self._fail(backend, batch.scheme, exc)
                backend, t0 = self.cpu, time.perf_counter()
        if run is None:
            cpu_verdicts, cpu_leaves = _call(self.cpu, batch)
            run = _Run(_checked(cpu_verdicts, n), self.cpu.name, 0.0, cpu_leaves)
        run.seconds = time.perf_counter() - t0
        self.stats.record(batch.scheme.id, backend.name, n, int(np.count_nonzero(run.verdicts)), run.seconds)
        return run

    # ------------------------------------------------------------------ hybrid split
    def _splits(self, backend: Backend, batch: Batch) -> bool:
        rates = self.routes[batch.scheme.id].rates
        return (self.config.hybrid and len(batch) >= self.config.hybrid_min
                and rates.get(backend.name, 0) > 0 and rates.get(self.cpu.name, 0) > 0)

    def split_point(self, backend: Backend, scheme: Scheme, n: int) -> int:
        """Items of a hybrid batch of ``n`` that ``backend`` takes (the rest go to the CPU):
        n · r_b / (r_b + r_cpu), rounded, kept within [1, n − 1]."""
        rates = self.routes[scheme.id].rates
        r_b, r_c = rates[backend.name], rates[self.cpu.name]
        return min(n - 1, max(1, round(n * r_b / (r_b + r_c))))

    def _run_hybrid(self, batch: Batch, backend: Backend) -> _Run:
        n, scheme = len(batch), batch.scheme
        k = self.split_point(backend, scheme, n)
        with self._lock:
            if self._hybrid_pool is None:
                self._hybrid_pool = ThreadPoolExecutor(2, thread_name_prefix="zv-hybrid")
        t0 = time.perf_counter()

        def timed(fn, part):
            t = time.perf_counter()
            v = _checked(fn(part), len(part))
            return v, time.perf_counter() - t

        cpu_part, dev_part = batch.slice(k, n), batch.slice(0, k)
        cpu_future = self._hybrid_pool.submit(timed, self.cpu.verify, cpu_part)
        names = [backend.name, self.cpu.name]
        try:
            v_dev, t_dev = timed(backend.verify, dev_part)
        except Exception as exc:
            self._fail(backend, scheme, exc)
            v_dev, t_dev = timed(self.cpu.verify, dev_part)
            names[0] = self.cpu.name
        v_cpu, t_cpu = cpu_future.result()
        verdicts = np.concatenate([v_dev, v_cpu])
        seconds = time.perf_counter() - t0
        rates = self.routes[scheme.id].rates
        if names[0] == backend.name:  # refine the split weights from this batch
            rates[backend.name] = 0.8 * rates[backend.name] + 0.2 * k / max(t_dev, 1e-9)
        rates[self.cpu.name] = 0.8 * rates[self.cpu.name] + 0.2 * (n - k) / max(t_cpu, 1e-9)
        self.stats.record(scheme.id, names[0], k, int(np.count_nonzero(v_dev)), t_dev)
        self.stats.record(scheme.id, self.cpu.name, n - k, int(np.count_nonzero(v_cpu)), t_cpu)
        run = _Run(verdicts, "+".join(dict.fromkeys(names)), seconds)
        if names[0] == backend.name and self._merkle_on(backend):
            try:
                run.leaves, run.root = backend.commit(batch, verdicts)
                run.merkle_backend = backend.name
            except Exception as exc:
                log.error("Merkle tree on %s failed (%s); built on cpu", backend.name, exc)
                self.merkle[backend.name] = f"runtime: {type(exc).__name__}: {exc}"
                run.leaves = run.root = None
        return run

    def verify_items(self, items: Sequence[Item]) -> ItemsResult:
        """Verify a mixed list of items; verdicts and leaves come back in input order.

        Items are grouped into one batch per (scheme, key length, context, options).  An
        item whose key or signature length does not fit its scheme, or whose context is
        over 255 bytes, is ``False`` without reaching a backend.  The Merkle root covers
        every item in input order; leaves of groups verified on a device come from it, and
        the root is built on a device when every group was.  Raises :class:`EmptyBatch`
        for an empty list.
        """
        if not items:
            raise EmptyBatch("a request needs at least one item", field="items")
        n = len(items)
        verdicts = np.zeros(n, dtype=bool)
        leaves = np.empty((n, 32), dtype=np.uint8)
        have_leaf = np.zeros(n, dtype=bool)
        backends: dict[str, str] = {}
        tree_on: set[str] = set()
        t_verify = 0.0
        for group, idx in group_items(items).items():
            if group is None:  # items false as given: their leaves hash exactly what was sent
                tree_on.add(self.cpu.name)
                # Counted like any verdict, so the dashboard and metrics see every item.
                for scheme_id, count in Counter(items[i].scheme for i in idx).items():
                    self.stats.record(scheme_id, PRECHECK, count, 0, 0.0)
                    _note_backend(backends, scheme_id, PRECHECK)
                continue
            batch = batch_of(group, [items[i] for i in idx])
            run = self._run(batch)
            verdicts[idx] = run.verdicts
            if run.leaves is not None:
                leaves[idx] = run.leaves
                have_leaf[idx] = True
            tree_on.add(run.merkle_backend if run.root is not None else self.cpu.name)
            t_verify += run.seconds
            _note_backend(backends, group[0], run.backend)
        t0 = time.perf_counter()
        for i in np.flatnonzero(~have_leaf):
            it = items[int(i)]
            leaves[i] = np.frombuffer(merkle.leaf_hash(SCHEMES[it.scheme].code, bool(verdicts[i]),
                                                       it.public_key, it.message, it.signature), np.uint8)
        root = None
        if len(tree_on) == 1 and (name := next(iter(tree_on))) != self.cpu.name:
            dev = next(b for b in self.accelerated if b.name == name)
            try:
                root = dev.merkle_root(leaves) if isinstance(dev, CommitsOnDevice) else None
            except Exception as exc:
                log.error("Merkle root on %s failed (%s); built on cpu", name, exc)
        if root is None:
            root = merkle.root(leaves)
        return ItemsResult(verdicts, leaves, root, t_verify, time.perf_counter() - t0, backends=backends)

    def verify_aggregate(self, items: Sequence[AggregateItem]) -> ItemsResult:
        """Verify BLS aggregate items (FastAggregateVerify / AggregateVerify) on the CPU.

        Verdicts and aggregate leaves (docs/bls-aggregate.md) in input order, the root over
        them; counted per mode on the dashboard and in metrics under
        :data:`app.core.batch.AGGREGATE_LABELS`.  Raises :class:`EmptyBatch` for no
        items, :class:`BackendUnavailable` when the CPU backend given cannot verify them.
        """
        if not items:
            raise EmptyBatch("a request needs at least one item", field="items")
        t0 = time.perf_counter()
        if not isinstance(self.cpu, VerifiesAggregates):
            raise BackendUnavailable(f"the {self.cpu.name} backend cannot verify BLS aggregate items")
        verdicts, leaves = self.cpu.verify_aggregate(items)
        t_verify = time.perf_counter() - t0
        backends: dict[str, str] = {}
        for mode, label in AGGREGATE_LABELS.items():
            idx = [i for i, it in enumerate(items) if it.mode == mode]
            if idx:
                # Verify time is shared out by item count: the items ran interleaved.
                self.stats.record(label, self.cpu.name, len(idx), int(np.count_nonzero(verdicts[idx])),
                                  t_verify * len(idx) / len(items))
                backends[label] = self.cpu.name
        t1 = time.perf_counter()
        root = merkle.root(leaves)
        return ItemsResult(verdicts, leaves, root, t_verify, time.perf_counter() - t1, backends=backends)

    def degraded(self) -> dict[str, dict[str, str]]:
        """Schemes an accelerated backend should serve but the CPU serves instead, because
        that backend failed its self-test or a batch: {scheme: {backend: reason}}."""
        out: dict[str, dict[str, str]] = {}
        for s, r in self.routes.items():
            for b, ok in r.selftest.items():
                if b != self.cpu.name and not ok:
                    out.setdefault(s, {})[b] = r.failures.get(b, "self-test failed")
        return out

    def require_ready(self) -> None:
        if not self.ready:
            raise NotReady("the engine has not passed its self-test yet")


# ------------------------------------------------------------------ calibration helpers
def _call(backend: Backend, batch: Batch) -> tuple[np.ndarray, np.ndarray | None]:
    """Verdicts, and leaf hashes where the backend makes them beside (``verify_with_leaves``)."""
    if isinstance(backend, HashesLeaves):
        verdicts, leaves = backend.verify_with_leaves(batch)
        return np.asarray(verdicts, dtype=bool), leaves
    return np.asarray(backend.verify(batch), dtype=bool), None


def _checked(verdicts, n: int) -> np.ndarray:
    v = np.asarray(verdicts, dtype=bool)
    if v.shape != (n,):
        raise RuntimeError(f"returned shape {v.shape}, expected ({n},)")
    return v
