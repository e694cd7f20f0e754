"""The Engine: routes each batch to a backend and hands the result to the commit step.

One verification entry, :meth:`Engine.run`, takes whatever a request carries (a columnar
batch, a mixed list of items, BLS aggregate items) and returns one result type
(:class:`app.engine.verify.verdicts.Committed`).  It routes and does nothing else: the
backends verify (one ``run`` each, :mod:`app.engine.backends.base`), the commit step makes
the leaves and root a backend did not (:mod:`app.engine.commit.step`), and the runtime
(:mod:`app.engine.runtime`) owns the UMA pool, the stats the engine counts batches into and
the receipt store.

Routing per scheme (docs/architecture.md, "Batches and routing"): an accelerated backend (anything but ``cpu``)
is used when its start-up self-test for that scheme passed and the batch has at least its
crossover size; otherwise the CPU.  ``backend`` in :class:`EngineConfig` forces one backend
for every scheme.  A backend that raises during a batch is marked failed for that scheme and
the batch is re-run on the CPU, so a verdict never depends on which backend was up.

Crossover sizes: ``EngineConfig.crossover`` fixes them per scheme; otherwise, for backends
that ask for it (the GPU), :meth:`Engine.calibrate` measures at start the fixed cost and the
per-item cost of the backend and of the CPU per scheme, and the crossover is the smallest
batch on which the backend is the faster (never, if it is not faster per item).  BLS
aggregate requests have a crossover of their own, in pairings (key
``bls12-381-aggregates``; :meth:`Engine.aggregate_crossover`).

Hybrid mode (``EngineConfig.hybrid``): a batch of at least ``hybrid_min`` items routed to an
accelerated backend is split, the backend taking the share r_b / (r_b + r_cpu) of its items
(r: items per second, measured at start and refined by every split batch) and the CPU the
rest, both at once; verdicts and leaves are joined in item order.

Shadow verification (:mod:`app.engine.verify.shadow`; docs/architecture.md, "Shadow
verification"): a CSPRNG-chosen sample of every batch an accelerated backend verified (and,
in warm-up, its every ``True`` verdict) is verified again on the CPU reference, off the
request's path (``async``) or before it is answered (``sync``, where a batch with a mismatch
is re-run on the CPU); a mismatch degrades the scheme on that backend at once, as a failed
self-test does, until :meth:`Engine.enable` (the admin endpoint) or a restart.  The result of
every call carries a :class:`~app.engine.verify.shadow.ShadowTicket`, through which the
pipeline records a mismatch found later on the batch's receipt.

Merkle leaves and roots: a whole batch verified on a backend whose Merkle kernels passed their
start-up check is committed on that backend too (``run(batch, commit=True)``: the verdicts stay
on the device); the commit step makes what a backend did not, with the CPU backend's native
hasher where it is loaded.

This module imports no web framework.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Literal, cast

import numpy as np

from app.core.batch import AGGREGATE_LABELS, AggregateBatch, AggregateItem, Batch, Item
from app.core.errors import BackendUnavailable, EmptyBatch, NotFound, NotReady
from app.core.result import Result
from app.core.schemes import SCHEMES, Scheme
from app.engine.backends import native
from app.engine.backends.base import READY, Backend
from app.engine.backends.cpu import CpuBackend
from app.engine.commit.step import CommitStep
from app.engine.reference import kat
from app.engine.stats import Stats
from app.engine.verify import calibrate, faults, selftest
from app.engine.verify.grouping import batch_of, group_items
from app.engine.verify.shadow import Mismatch, ShadowChecker, ShadowConfig, ShadowTicket
from app.engine.verify.verdicts import PRECHECK, Committed, Work, note_backend

log = logging.getLogger("zapverify.engine")


@dataclass
class EngineConfig:
    """Plain engine settings (built from :class:`app.config.Settings` by the app)."""

    backend: str = "auto"
    cpu_workers: int = 0
    cpu_chunk: int = 0
    cpu_parallelism: Literal["auto", "thread", "process"] = "auto"
    #: Verify BLS12-381 batches on the CPU by random linear combination (app/engine/reference/bls_batch.py).
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
    #: Injected faults, ``{"<backend>:<scheme>": "<mode>[@after=N]"}``, modes ``selftest``,
    #: ``raise``, ``garbage``, ``invert`` (app/engine/verify/faults.py).
    faults: dict[str, str] = field(default_factory=dict)
    #: Shadow verification (app/engine/verify/shadow.py, :class:`ShadowConfig`): fraction of
    #: each accelerated batch re-checked on the CPU reference, 0..1.
    shadow_rate: float = 0.001
    #: Items of each accelerated batch checked at least.
    shadow_min_per_batch: int = 1
    #: Per (backend, scheme): every ``True`` verdict among the first this many items is checked.
    shadow_warmup_items: int = 10000
    #: ``async`` (off the request's path) or ``sync`` (checked, and corrected, before answering).
    shadow_mode: Literal["async", "sync"] = "async"
    #: Most sampled items waiting for the async checker; more are dropped and counted.
    shadow_queue_items: int = 4096

    def shadow_config(self) -> ShadowConfig:
        """The ``shadow_*`` settings as a validated :class:`ShadowConfig`; raises
        :class:`app.core.errors.ConfigError` naming the one out of range."""
        return ShadowConfig(rate=self.shadow_rate, min_per_batch=self.shadow_min_per_batch,
                            warmup_items=self.shadow_warmup_items, mode=self.shadow_mode,
                            queue_items=self.shadow_queue_items).validate()


@dataclass
class SchemeRoute:
    """Self-test outcome of every backend for one scheme (shown on /v1/status)."""

    selftest: dict[str, bool] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    #: Measured crossover per accelerated backend (items; None: never faster than the CPU).
    crossover: dict[str, int | None] = field(default_factory=dict)
    #: Measured throughput per backend, items per second (hybrid split weights).
    rates: dict[str, float] = field(default_factory=dict)
    #: The kernel variant the calibration chose per backend, for a scheme with several.
    kernel: dict[str, str] = field(default_factory=dict)
    #: When (seconds since the epoch) a backend that passed its self-test was degraded at run
    #: time (a failed batch or a shadow mismatch), per backend.
    degraded_since: dict[str, float] = field(default_factory=dict)


class Engine:
    """Routes batches to the best backend per scheme and commits them (see the module doc).

    Args:
        config: an :class:`EngineConfig`.
        backends: backends in order of preference; the CPU backend is always added last
            (a :class:`app.engine.backends.cpu.CpuBackend` of ``config`` unless one named
            ``cpu`` is given).
        stats: where every batch is counted (a new :class:`app.engine.stats.Stats` if None;
            the runtime passes its own, :mod:`app.engine.runtime`).
    """

    def __init__(self, config: EngineConfig | None = None, backends: Sequence[Backend] = (),
                 stats: Stats | None = None):
        self.config = config or EngineConfig()
        self.cpu: Backend = next((b for b in backends if b.name == "cpu"), None) or CpuBackend(
            self.config.cpu_workers, self.config.cpu_chunk, self.config.cpu_parallelism,
            bls_batch=self.config.bls_batch)
        self.backends: list[Backend] = [b for b in backends if b.name != "cpu"] + [self.cpu]
        self._started = False
        #: True once :meth:`start` is over: delayed faults count batches from here.
        self._serving = False
        if self.config.faults:
            injected = faults.parse(self.config.faults)

            def inject(b: Backend) -> Backend:
                if b.name not in injected:
                    return b
                return faults.FaultyBackend(b, injected[b.name], lambda: self._started, lambda: self._serving)

            self.cpu = inject(self.cpu)
            self.backends = [inject(b) for b in self.backends[:-1]] + [self.cpu]
        self.routes: dict[str, SchemeRoute] = {s: SchemeRoute() for s in SCHEMES}
        #: Crossover (in pairings) and rates (pairings per second) of BLS aggregate requests per
        #: backend, measured apart from plain bls12-381 batches (:meth:`calibrate`).
        self.aggregate_route = SchemeRoute()
        #: Per accelerated backend: "ready" when its Merkle kernels matched the CPU at start.
        self.merkle: dict[str, str] = {}
        self.stats = stats if stats is not None else Stats()
        #: Re-checks accelerated verdicts on the CPU reference (app/engine/verify/shadow.py).
        self.shadow = ShadowChecker(self.config.shadow_config(), self._shadow_mismatch, self.stats)
        #: Leaves and roots of every result; hashes with the CPU backend's native loops once
        #: its warm-up has loaded them.
        self.commit = CommitStep(native.leaf_hasher)
        self.ready = False
        #: Set by :meth:`close`: a :meth:`start` still running (the app's start-up thread) stops.
        self._closing = False
        self._lock = threading.Lock()
        self._hybrid_pool: ThreadPoolExecutor | None = None
        if self.config.backend != "auto" and self.config.backend not in {b.name for b in self.backends}:
            raise BackendUnavailable(f"backend {self.config.backend!r} forced but not available here; "
                                     f"have: {', '.join(b.name for b in self.backends)}", field="backend")

    @property
    def accelerated(self) -> list[Backend]:
        """The backends other than the CPU, in order of preference."""
        return self.backends[:-1]

    # ------------------------------------------------------------------ life cycle
    def start(self) -> None:
        """Warm every backend up, run the known-answer self-test of every backend for every
        scheme it serves, check the Merkle kernels of the accelerated ones, measure
        crossovers where asked, then be ready.

        A :meth:`close` while this runs (a server stopped, or one whose port was taken, during
        its start-up self-test) ends it at the next step, not ready: a check that failed
        because the backend was closed under it says nothing of the backend, so it is neither
        recorded nor logged as a failed self-test.  A closed engine does not start."""
        for backend in self.backends:
            if self._closing:
                return self._abandon_start()
            backend.warm_up()
        answers = kat.known_answers()
        for backend in self.backends:
            if self._closing:
                return self._abandon_start()
            caps = backend.capabilities()
            # A kernel that exists but did not build (or a device that is unavailable) is a
            # failed self-test: served by the CPU and shown degraded (/readyz, /v1/status,
            # ``zapverify_backend_available``), not left out.
            for scheme_id, why in caps.broken().items():
                if scheme_id in self.routes:
                    self._failed(backend, scheme_id, why)
                    log.warning("%s kernel of %s not usable (%s): routed to the CPU", backend.name, scheme_id, why)
            for scheme_id, kas in answers.items():
                if scheme_id not in caps.served:
                    continue
                ok, why = selftest.check_scheme(backend, kas)
                if self._closing:  # closed under the check ("cannot schedule new futures after shutdown")
                    return self._abandon_start()
                self.routes[scheme_id].selftest[backend.name] = ok
                if not ok:
                    self.routes[scheme_id].failures[backend.name] = why
                    log.warning("self-test of %s on %s failed (%s): routed elsewhere", scheme_id,
                                backend.name, why)
        self._started = True  # injected runtime faults act from here on
        for backend in self.accelerated:
            if self._closing:
                return self._abandon_start()
            passed = [s for s, r in self.routes.items() if r.selftest.get(backend.name)]
            self.merkle[backend.name] = selftest.check_merkle(backend, {s: answers[s] for s in passed})
        if self._closing:
            return self._abandon_start()
        cpu_bad = [s for s, r in self.routes.items() if not r.selftest.get(self.cpu.name)]
        if cpu_bad:
            log.error("CPU reference self-test failed for %s", ", ".join(cpu_bad))
        if any(self._calibrates(b) for b in self.accelerated):
            self.calibrate(answers)
        self.ready = not cpu_bad
        self._serving = True
        log.info("engine ready=%s backends=%s", self.ready, [b.name for b in self.backends])

    def _abandon_start(self) -> None:
        """What :meth:`start` does when the engine was closed under it: stop, not ready."""
        self.ready = False
        log.info("engine closed during its start-up self-test: start-up abandoned")

    def _failed(self, backend: Backend, scheme_id: str, why: str) -> None:
        route = self.routes[scheme_id]
        if self._started and route.selftest.get(backend.name) is False:
            return  # already degraded: keep the first reason and time
        route.selftest[backend.name] = False
        route.failures[backend.name] = why
        if self._started:
            route.degraded_since[backend.name] = time.time()

    def _shadow_mismatch(self, backend_name: str, scheme_id: str, m: Mismatch) -> None:
        """A shadow check contradicted ``backend_name`` on ``scheme_id``: degrade it there now."""
        backend = next((b for b in self.accelerated if b.name == backend_name), None)
        if backend is not None:
            self._failed(backend, scheme_id, f"shadow: item {m.index} of a {m.batch_items}-item batch verified "
                                             f"{m.accelerated}, the CPU reference says {m.reference}")

    def enable(self, backend_name: str, scheme_id: str) -> tuple[bool, str]:
        """Re-enable ``backend_name`` for ``scheme_id`` after it was degraded (a shadow
        mismatch, a failed batch, a failed self-test): its known-answer self-test is run on it
        again first.  Returns (True, the reason it had been degraded for, "" if it was not) or
        (False, why the self-test failed: it stays degraded, with that reason).

        Raises :class:`app.core.errors.NotFound` (field ``backend`` or ``scheme``) for a
        backend this engine does not have (the CPU is never degraded) or an unknown scheme.
        """
        backend = next((b for b in self.accelerated if b.name == backend_name), None)
        if backend is None:
            raise NotFound(f"no accelerated backend {backend_name!r} here; have: "
                           f"{', '.join(b.name for b in self.accelerated) or 'none'}", field="backend")
        if scheme_id not in self.routes:
            raise NotFound(f"unknown scheme {scheme_id!r}", field="scheme")
        if scheme_id not in backend.capabilities().served:
            raise NotFound(f"backend {backend_name!r} does not serve {scheme_id!r}", field="scheme")
        route = self.routes[scheme_id]
        before = route.failures.get(backend_name, "") if route.selftest.get(backend_name) is False else ""
        ok, why = selftest.check_scheme(backend, kat.known_answers()[scheme_id])
        if not ok:
            route.selftest[backend_name] = False
            route.failures[backend_name] = f"re-enable refused, self-test failed: {why}"
            route.degraded_since.setdefault(backend_name, time.time())
            log.error("re-enabling %s on %s refused: its self-test failed (%s)", scheme_id, backend_name, why)
            return False, why
        route.selftest[backend_name] = True
        route.failures.pop(backend_name, None)
        route.degraded_since.pop(backend_name, None)
        log.warning("%s re-enabled on %s by an operator (self-test passed; it had been degraded: %s)",
                    scheme_id, backend_name, before or "it was not")
        return True, before

    def _commits_on(self, backend: Backend) -> bool:
        """Whether ``backend`` commits on its device: its Merkle kernels passed the start-up check."""
        return self.merkle.get(backend.name) == READY

    def close(self) -> None:
        self._closing = True  # before the backends close: a running start() then stops quietly
        self.shadow.close()
        if self._hybrid_pool is not None:
            self._hybrid_pool.shutdown(wait=False, cancel_futures=True)
        for b in self.backends:
            b.close()

    # ------------------------------------------------------------------ calibration
    def _calibrates(self, backend: Backend) -> bool:
        if self.config.calibrate is not None:
            return self.config.calibrate
        return backend.capabilities().calibrate_at_start

    def calibrate(self, answers: dict[str, list[kat.KnownAnswer]] | None = None) -> None:
        """Measure, per scheme whose self-test passed on an accelerated backend, that
        backend's and the CPU's fixed and per-item cost on known-answer items; store the
        crossover (``routes[s].crossover``) and rates (``routes[s].rates``).  Schemes with a
        configured crossover keep it (their rates are still measured, for hybrid mode).  A
        scheme the backend can run with several kernels (``capabilities().variants``) is
        measured with each, and the backend keeps the fastest (``routes[s].kernel``)."""
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
                variants = backend.capabilities().variants.get(scheme_id, ())
                try:
                    if len(variants) >= 2:
                        route.kernel[backend.name], fixed_b, per_b = calibrate.choose_variant(
                            backend, scheme_id, variants, tiled, budget)
                    else:
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
            self._calibrate_aggregates(backend, answers)

    def _calibrate_aggregates(self, backend: Backend, answers: dict[str, list[kat.KnownAnswer]]) -> None:
        """Measure ``backend``'s and the CPU's cost of BLS aggregate requests per pairing
        (calibrate.aggregate_tiler's items) and store their crossover and rates in
        :attr:`aggregate_route`, where the backend declares aggregates and passed the
        bls12-381 self-test.  A failed measurement leaves none: :meth:`aggregate_crossover`
        then falls back to bls12-381's."""
        if not (backend.capabilities().aggregates and self.routes["bls12-381"].selftest.get(backend.name)):
            return
        route = self.aggregate_route
        try:
            tiled = calibrate.aggregate_tiler([ka.item for ka in answers["bls12-381"] if ka.expected])
            budget = self.config.calibrate_seconds
            fixed_b, per_b = calibrate.measure(backend, tiled, budget, units=calibrate.pairings)
            fixed_c, per_c = calibrate.measure(self.cpu, tiled, budget, units=calibrate.pairings)
        except Exception as exc:
            log.warning("calibration of aggregates on %s failed (%s): bls12-381's crossover applies",
                        backend.name, exc)
            return
        route.crossover[backend.name] = calibrate.crossover(fixed_b, per_b, fixed_c, per_c)
        route.rates[backend.name] = 1.0 / per_b
        route.rates[self.cpu.name] = 1.0 / per_c
        log.info("aggregates on %s: %.3g pairings/s vs cpu %.3g, crossover %s pairings", backend.name,
                 1.0 / per_b, 1.0 / per_c, route.crossover[backend.name])

    def aggregate_crossover(self, backend: Backend) -> int:
        """Smallest aggregate request, in pairings (Σ keys + 1), that goes to ``backend``:
        configured (``crossover["bls12-381-aggregates"]``), else measured at start, else
        bls12-381's crossover (one pairing of an aggregate item costs about what one of a
        single verify does)."""
        found = self._set_crossover(calibrate.AGGREGATES, self.aggregate_route, backend)
        return self.crossover(backend, SCHEMES["bls12-381"]) if found is None else found

    def crossover(self, backend: Backend, scheme: Scheme) -> int:
        """Smallest batch of ``scheme`` that goes to ``backend`` (configured, else measured,
        else 1)."""
        found = self._set_crossover(scheme.id, self.routes[scheme.id], backend)
        return 1 if found is None else found

    def _set_crossover(self, key: str, route: SchemeRoute, backend: Backend) -> int | None:
        """The crossover configured under ``key``, else the one measured into ``route`` for
        ``backend`` (:data:`calibrate.NEVER` where it is never faster), else None."""
        if key in self.config.crossover:
            return self.config.crossover[key]
        if backend.name not in route.crossover:
            return None
        measured = route.crossover[backend.name]
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
    def run(self, work: Work) -> Committed:
        """Verify ``work`` and commit it to a Merkle root: the one verification entry, for a
        columnar batch, a mixed list of items and a list of BLS aggregate items alike (the
        kind is the request's: a :class:`Batch`, or a list whose first item is an
        :class:`AggregateItem` or an :class:`Item`).

        Verdicts and leaves come back in input order.  Raises :class:`EmptyBatch` for no
        items, :class:`app.core.errors.RequestError` for a batch's columns of the wrong
        shape, :class:`BackendUnavailable` for aggregate items the CPU backend given cannot
        verify.
        """
        if isinstance(work, Batch):
            return self._verify_batch(work)
        if work and isinstance(work[0], AggregateItem):
            return self._verify_aggregate(cast(Sequence[AggregateItem], work))
        return self._verify_items(cast(Sequence[Item], work))

    def _verify_batch(self, batch: Batch) -> Committed:
        """One columnar batch (see :meth:`run`)."""
        if len(batch) == 0:
            raise EmptyBatch("a batch needs at least one item", field="count")
        batch.validate()
        ticket = ShadowTicket()
        result, seconds = self._run(batch, ticket)
        t0 = time.perf_counter()
        merkle_backend = result.backend if result.root is not None else self.cpu.name
        done = self.commit(batch, result)
        assert done.leaves is not None and done.root is not None  # the commit step made what was missing
        return Committed(done.verdicts, done.leaves, done.root, seconds, time.perf_counter() - t0,
                         {batch.scheme.id: result.backend}, [batch.scheme.id], ticket, merkle_backend)

    def _fail(self, backend: Backend, scheme: Scheme, exc: BaseException) -> None:
        log.error("%s failed on %s (%s); re-running on cpu", backend.name, scheme.id, exc)
        self._failed(backend, scheme.id, f"runtime: {type(exc).__name__}: {exc}")

    def _on(self, backend: Backend, batch: Batch) -> Result:
        """``backend``'s checked result for ``batch``: committed on its device where its Merkle
        kernels passed the start-up check; an unchecked device's leaves and root are dropped
        (the CPU's, the reference, are kept)."""
        commit = self._commits_on(backend)
        result = backend.run(batch, commit=commit).check(len(batch))
        if backend is not self.cpu and not commit:
            result = replace(result, leaves=None, root=None)
        return result

    def _shadowed(self, backend: Backend, batch: Batch, result: Result, ticket: ShadowTicket | None,
                  where: np.ndarray | None) -> Result | None:
        """``result`` of ``batch`` on ``backend`` after its shadow check: itself, or None when
        a ``sync`` check found a mismatch (the caller re-runs the batch on the CPU; the
        mismatches go to ``ticket`` as corrected).  ``where`` maps batch items to the
        ticket's work (None: the same index)."""
        found = self.shadow.check(backend.name, batch, result.verdicts, ticket, where)
        if not found:
            return result
        if ticket is not None:
            ticket.report([(m.index if where is None else int(where[m.index]), m) for m in found])
        log.error("%s batch of %d re-verified on cpu: a sync shadow check contradicted %s",
                  batch.scheme.id, len(batch), backend.name)
        return None

    def _run(self, batch: Batch, ticket: ShadowTicket | None = None,
             where: np.ndarray | None = None) -> tuple[Result, float]:
        """``batch``'s result on the backend it is routed to (the CPU where that one raises,
        or a ``sync`` shadow check contradicts it; the batch split where hybrid mode says so)
        and the verify time, seconds.  An accelerated result is shadow-checked, its
        mismatches reported to ``ticket`` at ``where`` (see :meth:`_shadowed`)."""
        n = len(batch)
        backend = self.backend_for(batch.scheme, n)
        if backend is not self.cpu and self._splits(backend, batch):
            return self._run_hybrid(batch, backend, ticket, where)
        t0 = time.perf_counter()
        result: Result | None = None
        if backend is not self.cpu:
            try:
                result = self._on(backend, batch)
            except Exception as exc:
                self._fail(backend, batch.scheme, exc)
                backend, t0 = self.cpu, time.perf_counter()
            else:
                result = self._shadowed(backend, batch, result, ticket, where)
                if result is None:
                    backend = self.cpu
        if result is None:
            result = self._on(self.cpu, batch)
        seconds = time.perf_counter() - t0
        self.stats.record(batch.scheme.id, backend.name, n, result.valid, seconds)
        return result, seconds

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

    def _run_hybrid(self, batch: Batch, backend: Backend, ticket: ShadowTicket | None = None,
                    where: np.ndarray | None = None) -> tuple[Result, float]:
        """The first share of ``batch`` on ``backend``, the rest on the CPU at the same time;
        the joined result has both parts' leaves where each made them, and no root (the
        commit step builds the whole batch's).  The device's share is shadow-checked as a
        whole batch would be (its items are the batch's first, so ``where`` maps them too)."""
        n, scheme = len(batch), batch.scheme
        k = self.split_point(backend, scheme, n)
        with self._lock:
            if self._hybrid_pool is None:
                self._hybrid_pool = ThreadPoolExecutor(2, thread_name_prefix="zv-hybrid")
        t0 = time.perf_counter()

        def timed(b: Backend, part: Batch) -> tuple[Result, float]:
            t = time.perf_counter()
            r = self._on(b, part)
            return r, time.perf_counter() - t

        cpu_part, dev_part = batch.slice(k, n), batch.slice(0, k)
        cpu_future = self._hybrid_pool.submit(timed, self.cpu, cpu_part)
        try:
            r_dev, t_dev = timed(backend, dev_part)
        except Exception as exc:
            self._fail(backend, scheme, exc)
            r_dev, t_dev = timed(self.cpu, dev_part)
        else:
            if self._shadowed(backend, dev_part, r_dev, ticket, where) is None:
                r_dev, t_dev = timed(self.cpu, dev_part)
        r_cpu, t_cpu = cpu_future.result()
        seconds = time.perf_counter() - t0
        on_device = r_dev.backend == backend.name
        rates = self.routes[scheme.id].rates
        if on_device:  # refine the split weights from this batch
            rates[backend.name] = 0.8 * rates[backend.name] + 0.2 * k / max(t_dev, 1e-9)
        rates[self.cpu.name] = 0.8 * rates[self.cpu.name] + 0.2 * (n - k) / max(t_cpu, 1e-9)
        self.stats.record(scheme.id, r_dev.backend, k, r_dev.valid, t_dev)
        self.stats.record(scheme.id, self.cpu.name, n - k, r_cpu.valid, t_cpu)
        return Result.join([self.commit.with_leaves(dev_part, r_dev), r_cpu]), seconds

    def _verify_items(self, items: Sequence[Item]) -> Committed:
        """A mixed list of items (see :meth:`run`).

        Items are grouped into one batch per (scheme, key length, context, options).  An
        item whose key or signature length does not fit its scheme, or whose context is
        over 255 bytes, is ``False`` without reaching a backend.  The Merkle root covers
        every item in input order; leaves of groups verified on a device come from it.
        Raises :class:`EmptyBatch` for an empty list.
        """
        if not items:
            raise EmptyBatch("a request needs at least one item", field="items")
        n = len(items)
        verdicts = np.zeros(n, dtype=bool)
        leaves = np.empty((n, 32), dtype=np.uint8)
        backends: dict[str, str] = {}
        t_verify = t_merkle = 0.0
        ticket = ShadowTicket()
        for group, idx in group_items(items).items():
            t0 = time.perf_counter()
            if group is None:  # items false as given: their leaves hash exactly what was sent
                given = [items[i] for i in idx]
                leaves[idx] = self.commit.leaves(given, np.zeros(len(idx), dtype=bool))
                t_merkle += time.perf_counter() - t0
                # Counted like any verdict, so the dashboard and metrics see every item.
                for scheme_id, count in Counter(it.scheme for it in given).items():
                    self.stats.record(scheme_id, PRECHECK, count, 0, 0.0)
                    note_backend(backends, scheme_id, PRECHECK)
                continue
            batch = batch_of(group, [items[i] for i in idx])
            result, seconds = self._run(batch, ticket, np.asarray(idx, dtype=np.int64))
            t1 = time.perf_counter()
            result = self.commit.with_leaves(batch, result)
            t_merkle += time.perf_counter() - t1
            assert result.leaves is not None  # with_leaves made them
            verdicts[idx] = result.verdicts
            leaves[idx] = result.leaves
            t_verify += seconds
            note_backend(backends, group[0], result.backend)
        t0 = time.perf_counter()
        root = self.commit.root(leaves)
        return Committed(verdicts, leaves, root, t_verify, t_merkle + time.perf_counter() - t0, backends,
                         [it.scheme for it in items], ticket)

    def aggregate_backend(self, items: Sequence[AggregateItem]) -> Backend:
        """The backend BLS aggregate ``items`` go to: :meth:`aggregate_backend_for` their
        pairing count (Σ keys + 1 over the items)."""
        return self.aggregate_backend_for(calibrate.pairings(AggregateBatch(tuple(items))))

    def aggregate_backend_for(self, pairs: int) -> Backend:
        """The backend an aggregate request of ``pairs`` pairings goes to: a forced backend as
        for ``bls12-381`` (:meth:`backend_for`); else the first accelerated backend that
        declares ``aggregates``, passed the bls12-381 self-test and whose
        :meth:`aggregate_crossover` ``pairs`` reaches; else the CPU (either way only a backend
        that declares ``aggregates``)."""
        bls = SCHEMES["bls12-381"]
        if self.config.backend != "auto":
            b = self.backend_for(bls, 1)
            return b if b is not self.cpu and b.capabilities().aggregates else self.cpu
        for b in self.accelerated:
            if (b.capabilities().aggregates and self.routes[bls.id].selftest.get(b.name)
                    and pairs >= self.aggregate_crossover(b)):
                return b
        return self.cpu

    def _verify_aggregate(self, items: Sequence[AggregateItem]) -> Committed:
        """BLS aggregate items (see :meth:`run`) (FastAggregateVerify / AggregateVerify) on the backend
        :meth:`aggregate_backend` picks; a failure there re-runs them on the CPU.

        Verdicts and aggregate leaves (docs/bls-aggregate.md) in input order, the root over
        them; counted per mode on the dashboard and in metrics under
        :data:`app.core.batch.AGGREGATE_LABELS`.  Raises :class:`EmptyBatch` for no
        items, :class:`BackendUnavailable` when the CPU backend given cannot verify them.
        """
        if not items:
            raise EmptyBatch("a request needs at least one item", field="items")
        if not self.cpu.capabilities().aggregates:
            raise BackendUnavailable(f"the {self.cpu.name} backend cannot verify BLS aggregate items")
        work = AggregateBatch(tuple(items))
        t0 = time.perf_counter()
        backend = self.aggregate_backend(items)
        try:
            result = backend.run(work).check(len(work))
        except Exception as exc:
            if backend is self.cpu:
                raise
            log.exception("BLS aggregate items on %s failed: re-run on the CPU", backend.name)
            self._failed(backend, "bls12-381", f"aggregate items failed: {exc}")
            backend = self.cpu
            result = self.cpu.run(work).check(len(work))
        t_verify = time.perf_counter() - t0
        backends: dict[str, str] = {}
        for mode, label in AGGREGATE_LABELS.items():
            idx = [i for i, it in enumerate(items) if it.mode == mode]
            if idx:
                # Verify time is shared out by item count: the items ran interleaved.
                self.stats.record(label, backend.name, len(idx), int(np.count_nonzero(result.verdicts[idx])),
                                  t_verify * len(idx) / len(items))
                backends[label] = backend.name
        t1 = time.perf_counter()
        done = self.commit(work, result)
        assert done.leaves is not None and done.root is not None
        return Committed(done.verdicts, done.leaves, done.root, t_verify, time.perf_counter() - t1, backends,
                         [AGGREGATE_LABELS[it.mode] for it in items])

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
