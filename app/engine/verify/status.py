"""The engine's state as JSON for /v1/status and ``zapverify selftest``: routing per scheme,
self-test outcomes, crossovers and rates, and the devices (from each backend's declared
capabilities).

Kept apart from :class:`app.engine.verify.engine.Engine`, which routes and verifies; this
module only reads it.  The host probe, pick and pool are the runtime's
(:meth:`app.engine.runtime.Runtime.host_status`)."""

from __future__ import annotations

from typing import Any

from app.core.schemes import SCHEMES
from app.engine.verify import calibrate
from app.engine.verify.engine import Engine, SchemeRoute
from app.engine.verify.shadow import iso


def _crossover_shown(route: SchemeRoute) -> dict[str, int | None]:
    """Measured crossovers, items; None where the backend is never faster than the CPU."""
    return {b: (None if c is None or c >= calibrate.NEVER else c) for b, c in route.crossover.items()}


def shadow_status(engine: Engine) -> dict[str, Any]:
    """The shadow checker (docs/architecture.md, "Shadow verification"): its settings,
    ``pending`` (items queued) and ``dropped`` (items not checked, queue full) since start,
    ``schemes`` = {scheme: {backend: {checked, mismatches, dropped, degraded_since}}} for
    every (scheme, accelerated backend) sampled or degraded at run time (``degraded_since``:
    RFC 3339 time, null while it serves), and ``mismatches``: the last ones, oldest first."""
    cfg = engine.shadow.config
    schemes: dict[str, dict[str, dict[str, Any]]] = {}
    for s, per in engine.shadow.counts().items():
        for b, c in per.items():
            schemes.setdefault(s, {})[b] = {**c, "degraded_since": None}
    for s, r in engine.routes.items():
        for b, t in r.degraded_since.items():
            entry = schemes.setdefault(s, {}).setdefault(b, {"checked": 0, "mismatches": 0, "dropped": 0})
            entry["degraded_since"] = iso(t)
    return {"mode": cfg.mode, "rate": cfg.rate, "min_per_batch": cfg.min_per_batch,
            "warmup_items": cfg.warmup_items, "queue_items": cfg.queue_items,
            "pending": engine.shadow.pending(), "dropped": engine.shadow.dropped,
            "schemes": schemes, "mismatches": [m.to_json() for m in engine.shadow.mismatches()]}


def engine_status(engine: Engine) -> dict[str, Any]:
    """Routing table, self-test outcome, crossover (items) and rates (items per second) per
    scheme, and what each accelerated device offers.  A scheme whose accelerated self-test
    failed (or that failed a batch or a shadow check since) is listed under ``degraded`` and
    routed to the CPU; ``shadow`` is :func:`shadow_status`."""
    cfg = engine.config
    devices = {b.name: dict(device) for b in engine.accelerated
               if (device := b.capabilities().device) is not None}
    return {
        "ready": engine.ready,
        "forced_backend": None if cfg.backend == "auto" else cfg.backend,
        "backends": [b.name for b in engine.backends],
        "hybrid": cfg.hybrid,
        "degraded": engine.degraded(),
        "merkle": dict(engine.merkle),
        "shadow": shadow_status(engine),
        "devices": devices,
        "schemes": {
            s: {"backend": engine.backend_for(SCHEMES[s], 1 << 30).name,
                "selftest": dict(r.selftest), "failures": dict(r.failures),
                "crossover": {**_crossover_shown(r),
                              **({"configured": cfg.crossover[s]} if s in cfg.crossover else {})},
                "rates": {b: round(v, 1) for b, v in r.rates.items()},
                "kernel": dict(r.kernel),
                "degraded_since": {b: iso(t) for b, t in r.degraded_since.items()}}
            for s, r in engine.routes.items()
        },
        # BLS aggregate requests: crossover in pairings (keys + 1 per item), rates in pairings/s
        calibrate.AGGREGATES: {
            "backend": engine.aggregate_backend_for(1 << 30).name,
            "crossover": {**_crossover_shown(engine.aggregate_route),
                          **({"configured": cfg.crossover[calibrate.AGGREGATES]}
                             if calibrate.AGGREGATES in cfg.crossover else {})},
            "rates": {b: round(v, 1) for b, v in engine.aggregate_route.rates.items()}},
    }
