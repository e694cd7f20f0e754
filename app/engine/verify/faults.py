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
from typing import Any

import numpy as np

from app.core.batch import Batch
from app.core.errors import ConfigError, KernelLaunchError
from app.core.schemes import SCHEMES

MODES = ("selftest", "raise", "garbage")

#: The backend methods a fault intercepts (each takes the batch first).
_VERIFYING = ("verify", "verify_commit", "verify_with_leaves")


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


class FaultyBackend:
    """``inner`` with the faults ``faults`` ({scheme: mode}); everything else is ``inner``'s.

    ``started()`` tells whether the engine's start-up is over: ``selftest`` faults act before,
    ``raise`` and ``garbage`` after.  The verifying methods are looked up on ``inner``, so
    this wrapper offers exactly the capabilities (``verify_commit``, ...) that ``inner`` has.
    """

    def __init__(self, inner: Any, faults: Mapping[str, str], started: Callable[[], bool]):
        self._inner, self._faults, self._started = inner, dict(faults), started
        self.name = inner.name

    def _fault(self, batch: Batch) -> str | None:
        mode = self._faults.get(batch.scheme.id)
        if mode is None:
            return None
        if self._started():
            return mode if mode != "selftest" else None
        return mode if mode == "selftest" else None

    def _wrap(self, method: Callable[..., Any]) -> Callable[..., Any]:
        def faulty(batch: Batch, *args: Any, **kw: Any) -> Any:
            mode = self._fault(batch)
            if mode in ("selftest", "raise"):
                raise KernelLaunchError(f"fault injected ({mode}) on {self.name} for {batch.scheme.id}")
            out = method(batch, *args, **kw)
            if mode == "garbage":
                verdicts = np.ones(len(batch) + 1, dtype=bool)
                return verdicts if not isinstance(out, tuple) else (verdicts, *out[1:])
            return out
        return faulty

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._inner, attr)
        return self._wrap(value) if attr in _VERIFYING else value
