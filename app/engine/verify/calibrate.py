"""Crossover calibration: measured fixed and per-item costs of a backend (docs/architecture.md, "Batches and routing").

A backend's cost for n items is modelled as ``fixed + n · per_item``; the crossover against
the CPU is the smallest n at which the backend is no slower.  The Engine runs this at start
for backends that ask for it (the GPU) and keeps the results per scheme.  Where a backend
has several kernels for a scheme (ML-DSA's thread and block kernels), :func:`choose_variant`
measures each first and leaves the backend on the fastest.
"""

from __future__ import annotations

import logging
import math
import statistics
import time

from app.core.batch import Batch, Item
from app.engine.backends.base import Backend
from app.engine.verify.grouping import batch_of, group_items

log = logging.getLogger("zapverify.engine")

#: A crossover that is never reached.
NEVER = 1 << 62


def tiler(items: list[Item]):
    """A function n -> Batch of n items cycling through ``items`` (one batch key group)."""
    groups = group_items(items)
    key, idx = next((k, v) for k, v in groups.items() if k is not None)
    base = [items[i] for i in idx]

    def tiled(n: int) -> Batch:
        return batch_of(key, [base[i % len(base)] for i in range(n)])

    return tiled


def measure(backend: Backend, tiled, budget: float, max_items: int = 1 << 16) -> tuple[float, float]:
    """(fixed seconds, seconds per item) of ``backend``: the median of three one-item
    batches, then batches growing fourfold from 64 items until one takes a quarter of
    ``budget`` seconds (or ``max_items``)."""
    one = tiled(1)
    backend.run(one)  # warm-up: builds, pools, caches
    times = []
    for _ in range(3):
        t = time.perf_counter()
        backend.run(one)
        times.append(time.perf_counter() - t)
    t1 = statistics.median(times)
    n, tn = 64, 0.0
    while True:
        batch = tiled(n)
        t = time.perf_counter()
        backend.run(batch)
        tn = time.perf_counter() - t
        if tn >= budget / 4 or n >= max_items:
            break
        n *= 4
    per_item = max((tn - t1) / (n - 1), tn / n / 100, 1e-12)
    return max(t1 - per_item, 0.0), per_item


def choose_variant(backend: Backend, scheme_id: str, variants: tuple[str, ...], tiled,
                   budget: float) -> tuple[str, float, float]:
    """Measure ``backend`` on ``scheme_id`` with each of its kernel ``variants`` (two or
    more, :attr:`Capabilities.variants`), leave it on the one with the lowest per-item cost
    and return (that variant, its fixed seconds, its seconds per item).

    A variant that fails (cannot be chosen, or raises while measured) is skipped; raises
    :class:`RuntimeError` when none could be measured, leaving the backend on the first."""
    best: tuple[str, float, float] | None = None
    for variant in variants:
        try:
            backend.choose_variant(scheme_id, variant)
            fixed, per = measure(backend, tiled, budget)
        except Exception as exc:
            log.warning("calibration of %s on %s: variant %s failed (%s)", scheme_id, backend.name, variant, exc)
            continue
        log.info("%s on %s, %s kernel: %.3g items/s", scheme_id, backend.name, variant, 1.0 / per)
        if best is None or per < best[2]:
            best = (variant, fixed, per)
    if best is None:
        backend.choose_variant(scheme_id, variants[0])
        raise RuntimeError(f"no kernel variant of {scheme_id} could be measured")
    backend.choose_variant(scheme_id, best[0])
    return best


def crossover(fixed_b: float, per_b: float, fixed_c: float, per_c: float) -> int | None:
    """Smallest n with fixed_b + n·per_b ≤ fixed_c + n·per_c (None: no such n)."""
    if per_b >= per_c:
        return 1 if fixed_b <= fixed_c and per_b == per_c else None
    return max(1, math.ceil((fixed_b - fixed_c) / (per_c - per_b)))
