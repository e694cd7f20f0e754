"""The protocol every verification backend implements, and the optional abilities a backend
may declare (docs/architecture.md, "Backends").

The engine asks for an ability with ``isinstance(backend, Ability)`` on these
runtime-checkable protocols, so each optional method is written down once here, with its
shapes, instead of being probed for by name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from app.core.batch import AggregateItem, Batch


@runtime_checkable
class Backend(Protocol):
    """A place where batches are verified (``cpu``, ``kernel-host``, ``cuda``, a test mock).

    ``verify`` returns ``bool[N]`` in item order and must never raise for a malformed
    item (that item is ``False``); it may raise for a failure of the backend itself, in
    which case the engine falls back to the CPU and says so.
    """

    name: str

    def available(self) -> bool: ...

    def schemes(self) -> frozenset[str]: ...

    def verify(self, batch: Batch) -> np.ndarray: ...

    def close(self) -> None: ...


@runtime_checkable
class WarmsUp(Protocol):
    """A backend with start-up work (worker pools) worth doing before the first batch."""

    def warm_up(self) -> None: ...


@runtime_checkable
class HashesLeaves(Protocol):
    """A backend that hashes the Merkle leaves (docs/architecture.md, "Merkle leaf and receipts") beside
    the verdicts, on the same cores; the engine then uses them instead of hashing again."""

    def verify_with_leaves(self, batch: Batch) -> tuple[np.ndarray, np.ndarray]:
        """(``bool[N]`` verdicts, ``uint8[N, 32]`` leaf hashes), in item order."""
        ...


@runtime_checkable
class VerifiesAggregates(Protocol):
    """A backend that verifies BLS aggregate items (docs/bls-aggregate.md); the CPU's."""

    def verify_aggregate(self, items: Sequence[AggregateItem]) -> tuple[np.ndarray, np.ndarray]:
        """(``bool[N]`` verdicts, ``uint8[N, 32]`` aggregate leaf hashes), in item order."""
        ...


@runtime_checkable
class CommitsOnDevice(Protocol):
    """A backend with Merkle kernels: it builds leaves and RFC 6962 roots where the verdicts
    are, so they need not come back to the host first.  The engine uses them only once
    ``merkle_state()`` is ``"ready"`` and the start-up check matched the CPU's tree."""

    def merkle_state(self) -> str:
        """``"ready"``, or why the Merkle kernels cannot run here."""
        ...

    def verify_commit(self, batch: Batch) -> tuple[np.ndarray, np.ndarray, bytes]:
        """(``bool[N]`` verdicts, ``uint8[N, 32]`` leaves, 32-byte root) of ``batch``."""
        ...

    def commit(self, batch: Batch, verdicts: np.ndarray) -> tuple[np.ndarray, bytes]:
        """(``uint8[N, 32]`` leaves, 32-byte root) of ``batch`` under host ``verdicts``."""
        ...

    def merkle_root(self, leaves: np.ndarray) -> bytes:
        """RFC 6962 root of ``uint8[N, 32]`` leaves (N ≥ 1)."""
        ...


class CommittingBackend(Backend, CommitsOnDevice, Protocol):
    """A backend that commits on its device (what the engine narrows to before using it)."""


@runtime_checkable
class SizesBatches(Protocol):
    """A backend that runs best on batches of a certain size (a GPU: whole waves), which
    callers joining small frames into batches aim for (``ingest_coalesce_items`` = 0)."""

    def preferred_batch_items(self, scheme_id: str) -> int | None:
        """Items per batch that keep this backend busy for ``scheme_id``, or None."""
        ...


@runtime_checkable
class Device(Protocol):
    """A backend on a device: it describes itself for /v1/status and says whether the
    engine should measure its crossover against the CPU at start."""

    #: Measure crossover and rates at start (the GPU: yes; the host build: no).
    calibrate_at_start: bool

    def info(self) -> dict[str, Any]:
        """Device, per-scheme availability and Merkle state (JSON-ready)."""
        ...
