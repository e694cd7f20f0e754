"""The small protocol every verification backend implements (DESIGN.md section 3)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from app.engine.batch import Batch


@runtime_checkable
class Backend(Protocol):
    """A place where batches are verified (``cpu``, ``kernel-host``, ``cuda``, a test mock).

    ``verify`` returns ``bool[N]`` in item order and must never raise for a malformed
    item (that item is ``False``); it may raise for a failure of the backend itself, in
    which case the engine falls back to the CPU and says so.

    A backend may also offer ``verify_with_leaves(batch) -> (bool[N], uint8[N, 32])``,
    returning the Merkle leaf hashes (DESIGN.md section 5) it computed beside the verdicts;
    the engine then uses them instead of hashing the leaves itself.
    """

    name: str

    def available(self) -> bool: ...

    def schemes(self) -> frozenset[str]: ...

    def verify(self, batch: Batch) -> np.ndarray: ...

    def close(self) -> None: ...
