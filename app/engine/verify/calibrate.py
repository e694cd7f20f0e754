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
from collections.abc import Callable
from typing import Any

from app.core.batch import AggregateBatch, AggregateItem, Batch, Item
from app.engine.backends.base import Backend
from app.engine.verify.grouping import batch_of, group_items

log = logging.getLogger("zapverify.engine")

#: A crossover that is never reached.
NEVER = 1 << 62
#: The key of BLS12-381 aggregate requests in ``EngineConfig.crossover`` and on /v1/status: their
#: crossover is counted in pairings, Σ (keys + 1) over a request's items (docs/bls-aggregate.md).
AGGREGATES = "bls12-381-aggregates"


def tiler(items: list[Item]):
    """A function n -> Batch of n items cycling through ``items`` (one batch key group)."""
    groups = group_items(items)
    key, idx = next((k, v) for k, v in groups.items() if k is not None)
    base = [items[i] for i in idx]

    def tiled(n: int) -> Batch:
        return batch_of(key, [base[i % len(base)] for i in range(n)])

    return tiled


def pairings(work: AggregateBatch) -> int:
    """The work of aggregate items, in the unit their crossover counts: Σ (keys + 1)."""
    return sum(len(it.public_keys) + 1 for it in work.items)


def aggregate_tiler(items: list[Item]) -> Callable[[int], AggregateBatch]:
    """A function n -> :class:`AggregateBatch` of about n pairings (:func:`pairings`), cycling
    through aggregate items made from valid ``bls12-381`` known answers: FastAggregateVerify of
    one key and AggregateVerify of one pair, in turn (2 pairings each).  With one signer both
    are CoreVerify of the item (draft-irtf-cfrg-bls-signature-04 §3.3.4, §2.9), so valid known
    answers give valid aggregate items with nothing signed at start.  Raises ``ValueError``
    when ``items`` holds no 48-byte key with a 96-byte signature."""
    base = [it for it in items if it.scheme == "bls12-381" and len(it.public_key) == 48 and len(it.signature) == 96]
    if not base:
        raise ValueError("no bls12-381 items to make aggregate items from")
    shapes = [AggregateItem(mode, (it.public_key,), (it.message,), it.signature)
              for it in base for mode in ("fast_aggregate", "aggregate")]

    def tiled(n: int) -> AggregateBatch:
        return AggregateBatch(tuple(shapes[i % len(shapes)] for i in range(max(1, -(-n // 2)))))

    return tiled


def measure(backend: Backend, tiled, budget: float, max_items: int = 1 << 16,
            units: Callable[[Any], int] = len) -> tuple[float, float]:
    """(fixed seconds, seconds per unit) of ``backend``: the median of three one-item
    batches, then batches growing fourfold from 64 items until one takes a quarter of
    ``budget`` seconds (or ``max_items``).  A unit is an item, or what ``units`` counts in a
    batch (:func:`pairings` for aggregate batches)."""
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
    u1, un = units(one), units(batch)
    per_item = max((tn - t1) / max(1, un - u1), tn / un / 100, 1e-12)
    return max(t1 - u1 * per_item, 0.0), per_item


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
