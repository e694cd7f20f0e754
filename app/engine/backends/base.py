"""The one contract every verification backend implements (docs/architecture.md, "Backends").

A backend does all its work through one method, :meth:`Backend.run`, which returns an
:class:`app.core.result.Result`, and says what it can do in one declared record,
:class:`Capabilities`.  The engine reads the record to route; it never asks a backend for a
method by name (no ``getattr``/``hasattr``/``isinstance`` probing).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from app.core.batch import AggregateBatch, Batch
from app.core.result import Result

#: A scheme's (or the Merkle kernels') state when the backend can serve it.
READY = "ready"


@dataclass(frozen=True)
class Capabilities:
    """What a backend declares about itself; fixed once the backend has looked at its device.

    Attributes:
        schemes: per scheme id the backend knows of, :data:`READY` or why it cannot serve
            it here (``"no kernel"``, ``"build failed: …"``, ``"unavailable: …"``).  A
            scheme whose state starts with ``"build failed"`` or ``"unavailable"`` is shown
            as degraded (served by the CPU), not left out; one it does not list, or lists
            as ``"no kernel"``, it simply does not offer.
        commits: :data:`READY` when ``run(batch, commit=True)`` makes the leaves and root on
            the backend's device (its Merkle kernels built); else why not.  The engine uses
            them only after the start-up check matched the CPU's tree.
        calibrate_at_start: the engine measures this backend's crossover against the CPU and
            its rates per scheme at start (a GPU: yes; the host build of the kernels: no).
        batch_items: per scheme id, the items per batch that keep the backend busy (a GPU:
            whole waves), which callers joining small frames into batches aim for.
        aggregates: ``run`` takes an :class:`app.core.batch.AggregateBatch` (BLS aggregate
            items, docs/bls-aggregate.md): the CPU's.
        device: a JSON-ready description for /v1/status ``devices`` (device, per-scheme
            availability, Merkle state), or None for a backend that is not a device.
        variants: per scheme id, the kernels the backend can choose between for it when
            there are two or more (e.g. ML-DSA's ``("thread", "block")``): the engine's
            start-up calibration measures each through :meth:`Backend.choose_variant` and
            keeps the fastest.  Absent: one way to run the scheme (or a forced one).
    """

    schemes: Mapping[str, str]
    commits: str = "no Merkle kernels"
    calibrate_at_start: bool = False
    batch_items: Mapping[str, int] = field(default_factory=dict)
    aggregates: bool = False
    device: Mapping[str, Any] | None = None
    variants: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def served(self) -> frozenset[str]:
        """The scheme ids this backend serves (state :data:`READY`)."""
        return frozenset(s for s, state in self.schemes.items() if state == READY)

    def broken(self) -> dict[str, str]:
        """Schemes the backend should serve but cannot (a kernel that did not build, a device
        that is unavailable): {scheme id: why}."""
        return {s: why for s, why in self.schemes.items() if why.startswith(("build failed", "unavailable"))}


class Backend(Protocol):
    """A place where batches are verified (``cpu``, ``kernel-host``, ``cuda``, a test mock).

    Implementations subclass this protocol to inherit the no-op :meth:`warm_up` and
    :meth:`close`; they set ``name`` and implement :meth:`capabilities` and :meth:`run`.
    """

    #: The backend's name in routing, stats, metrics and /v1/status (``"cpu"``, ``"cuda"``).
    name: str

    def capabilities(self) -> Capabilities:
        """What this backend offers (see :class:`Capabilities`); may build kernels the first
        time it is asked (seconds), then answers the same record."""
        ...

    def run(self, batch: Batch | AggregateBatch, *, commit: bool = False) -> Result:
        """Verify ``batch`` (N ≥ 0 items of one scheme, or BLS aggregate items where
        ``capabilities().aggregates``).

        Returns an :class:`app.core.result.Result` with ``bool[N]`` verdicts in item order
        and one span naming this backend.  Leaves (``uint8[N, 32]``) and root (32 bytes):

        * ``commit=False``: only the verdicts are asked for; a backend that hashes the leaves
          beside the verdicts anyway (the CPU, on the same cores) returns them too, else None.
        * ``commit=True``: the leaves and the RFC 6962 root as well, where the backend makes
          them itself (``capabilities().commits`` is :data:`READY`: the device's Merkle
          kernels, the verdicts never coming back to the host first); a backend that cannot
          returns what it has.

        The engine's commit step (:mod:`app.engine.commit.step`) makes whatever is missing,
        so a backend never needs to hash on the host for the engine's sake.

        Never raises for a malformed item (that item is ``False``).  Raises
        :class:`app.core.errors.BackendUnavailable` for a scheme it does not serve, and may
        raise anything for a failure of the backend itself: the engine then re-runs the
        batch on the CPU and marks this backend failed for the scheme.
        """
        ...

    def choose_variant(self, scheme_id: str, variant: str) -> None:
        """Serve ``scheme_id`` with its kernel ``variant`` (one of
        ``capabilities().variants[scheme_id]``) from now on.  Nothing to choose by default;
        a backend with variants raises :class:`app.core.errors.KernelError` for one it
        cannot build."""
        return None

    def warm_up(self) -> None:
        """Start-up work worth doing before the first batch (worker pools, native builds);
        none by default."""
        return None

    def close(self) -> None:
        """Release pools and devices; nothing by default."""
        return None
