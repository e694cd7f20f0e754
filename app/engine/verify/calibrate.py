"""Crossover calibration: measured fixed and per-item costs of a backend (docs/architecture.md, "Batches and routing").

A backend's cost for n items is modelled as ``fixed + n · per_item``; the crossover against
the CPU is the smallest n at which the backend is no slower.  The Engine runs this at start
for backends that ask for it (the GPU) and keeps the results per scheme.
"""

from __future__ import annotations

import math
import statistics
import time

from app.core.batch import Batch, Item
from app.engine.backends.base import Backend
from app.engine.verify.grouping import batch_of, group_items

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


def crossover(fixed_b: float, per_b: float, fixed_c: float, per_c: float) -> int | None:
    """Smallest n with fixed_b + n·per_b ≤ fixed_c + n·per_c (None: no such n)."""
    if per_b >= per_c:
        return 1 if fixed_b <= fixed_c and per_b == per_c else None
    return max(1, math.ceil((fixed_b - fixed_c) / (per_c - per_b)))
