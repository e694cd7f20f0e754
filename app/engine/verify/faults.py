"""Fault injection, for tests and drills (``ZAPVERIFY_FAULTS``; docs/operations.md, "Fault injection").

A fault makes one backend misbehave on one scheme, so that what the engine does about a
broken backend can be watched on a running server (/readyz, /v1/status, /metrics):

* ``selftest`` — the backend fails its start-up self-test for the scheme (it raises while
  the engine is starting); it then never serves the scheme: listed under ``degraded``, or,
  on the CPU, the engine is not ready.
* ``raise`` — the backend passes its self-test, then raises :class:`app.core.errors.KernelLaunchError`
  on every batch: the engine re-runs the batch on the CPU and marks the backend failed.
* ``garbage`` — the backend passes its self-test, then answers every batch with a verdict
  array of the wrong length: the engine's shape check catches it, as ``raise``.

Faults are keyed ``"<backend>:<scheme>"`` (``"kernel-host:ed25519"``, ``"cpu:ml-dsa-44"``).
The CPU takes only ``selftest`` (it is every other backend's fallback; a CPU self-test
failure keeps the engine from being ready).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from app.core.batch import AggregateBatch, Batch
from app.core.errors import ConfigError, KernelLaunchError
from app.core.result import Result
from app.core.schemes import SCHEMES
from app.engine.backends.base import Backend, Capabilities

MODES = ("selftest", "raise", "garbage")


def parse(faults: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """``{"backend:scheme": mode}`` as ``{backend: {scheme: mode}}``; raises :class:`ConfigError`
    (field ``faults``) for a key without a colon, an unknown scheme or an unknown mode."""
    out: dict[str, dict[str, str]] = {}
    for key, mode in faults.items():
        backend, sep, scheme = key.partition(":")
        if not sep or scheme not in SCHEMES:
            raise ConfigError(f"fault key {key!r} is not '<backend>:<scheme>' with a known scheme", field="faults")
        if mode not in MODES:
            raise ConfigError(f"fault mode {mode!r} for {key!r} is not one of {', '.join(MODES)}", field="faults")
        if backend == "cpu" and mode != "selftest":
            # The CPU is the fallback of every other backend: nothing would catch its failure.
            raise ConfigError(f"the cpu backend takes only the 'selftest' fault, not {mode!r}", field="faults")
        out.setdefault(backend, {})[scheme] = mode
    return out


class FaultyBackend(Backend):
    """``inner`` with the faults ``faults`` ({scheme: mode}) in its :meth:`run`; its name,
    capabilities, warm-up and close are ``inner``'s.

    ``started()`` tells whether the engine's start-up is over: ``selftest`` faults act before,
    ``raise`` and ``garbage`` after.
    """

    def __init__(self, inner: Backend, faults: Mapping[str, str], started: Callable[[], bool]):
        self._inner, self._faults, self._started = inner, dict(faults), started
        self.name = inner.name

    def _fault(self, scheme_id: str | None) -> str | None:
        mode = self._faults.get(scheme_id) if scheme_id is not None else None
        if mode is None:
            return None
        if self._started():
            return mode if mode != "selftest" else None
        return mode if mode == "selftest" else None

    def capabilities(self) -> Capabilities:
        return self._inner.capabilities()

    def run(self, batch: Batch | AggregateBatch, *, commit: bool = False) -> Result:
        """``inner.run``, or a :class:`KernelLaunchError` (``selftest``, ``raise``), or one
        verdict too many (``garbage``)."""
        scheme_id = batch.scheme.id if isinstance(batch, Batch) else None  # faults are per scheme
        mode = self._fault(scheme_id)
        if mode in ("selftest", "raise"):
            raise KernelLaunchError(f"fault injected ({mode}) on {self.name} for {scheme_id}")
        out = self._inner.run(batch, commit=commit)
        if mode == "garbage":
            return Result(np.ones(len(batch) + 1, dtype=bool), out.leaves, out.root, out.spans)
        return out

    def warm_up(self) -> None:
        self._inner.warm_up()

    def close(self) -> None:
        self._inner.close()
