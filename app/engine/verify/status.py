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


def _crossover_shown(route: SchemeRoute) -> dict[str, int | None]:
    """Measured crossovers, items; None where the backend is never faster than the CPU."""
    return {b: (None if c is None or c >= calibrate.NEVER else c) for b, c in route.crossover.items()}


def engine_status(engine: Engine) -> dict[str, Any]:
    """Routing table, self-test outcome, crossover (items) and rates (items per second) per
    scheme, and what each accelerated device offers.  A scheme whose accelerated self-test
    failed is listed under ``degraded`` and routed to the CPU."""
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
        "devices": devices,
        "schemes": {
            s: {"backend": engine.backend_for(SCHEMES[s], 1 << 30).name,
                "selftest": dict(r.selftest), "failures": dict(r.failures),
                "crossover": {**_crossover_shown(r),
                              **({"configured": cfg.crossover[s]} if s in cfg.crossover else {})},
                "rates": {b: round(v, 1) for b, v in r.rates.items()}}
            for s, r in engine.routes.items()
        },
    }
