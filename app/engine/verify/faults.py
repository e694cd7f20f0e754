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
* ``invert`` — the backend passes its self-test, then answers every batch with the right
  number of verdicts, each one inverted: no shape check can see it; only a shadow check
  (app/engine/verify/shadow.py) does, which degrades the scheme on that backend.

A runtime mode (``raise``, ``garbage``, ``invert``) may be delayed: ``<mode>@after=N`` makes
the backend behave for the first N batches of the scheme it runs once the engine has started
(known-answer self-tests and start-up checks not counted), then fault on every batch after.
``invert@after=3``: batches 1 to 3 are right, batches from the fourth on are inverted.
(Issue 36 wrote that as ``garbage@after=3``; here ``garbage`` keeps meaning the wrong length,
so a delayed ``garbage`` is caught by the shape check, not by a shadow check.)

Faults are keyed ``"<backend>:<scheme>"`` (``"kernel-host:ed25519"``, ``"cpu:ml-dsa-44"``).
The CPU takes only ``selftest`` (it is every other backend's fallback; a CPU self-test
failure keeps the engine from being ready).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from app.core.batch import AggregateBatch, Batch
from app.core.errors import ConfigError, KernelLaunchError
from app.core.result import Result
from app.core.schemes import SCHEMES
from app.engine.backends.base import Backend, Capabilities

MODES = ("selftest", "raise", "garbage", "invert")
#: Modes that act once the engine has started, and so may be delayed with ``@after=N``.
RUNTIME_MODES = ("raise", "garbage", "invert")

_SPEC = re.compile(r"^(?P<mode>[a-z]+)(?:@after=(?P<after>\d+))?$")


@dataclass(frozen=True)
class Fault:
    """One injected fault: ``mode`` (:data:`MODES`), acting after the first ``after`` batches
    the backend runs for the scheme once the engine has started (0: from the first)."""

    mode: str
    after: int = 0


def parse_mode(spec: str, key: str = "") -> Fault:
    """``"<mode>"`` or ``"<mode>@after=N"`` as a :class:`Fault`; raises :class:`ConfigError`
    (field ``faults``) for an unknown mode, a malformed delay, or a delayed ``selftest``."""
    m = _SPEC.match(spec) if isinstance(spec, str) else None
    where = f" for {key!r}" if key else ""
    if m is None or m["mode"] not in MODES:
        raise ConfigError(f"fault mode {spec!r}{where} is not one of {', '.join(MODES)}, optionally "
                          f"followed by @after=N for {', '.join(RUNTIME_MODES)}", field="faults")
    if m["after"] is not None and m["mode"] not in RUNTIME_MODES:
        raise ConfigError(f"fault mode {spec!r}{where}: only {', '.join(RUNTIME_MODES)} take @after=N",
                          field="faults")
    return Fault(m["mode"], int(m["after"] or 0))


def parse(faults: Mapping[str, str]) -> dict[str, dict[str, Fault]]:
    """``{"backend:scheme": "mode[@after=N]"}`` as ``{backend: {scheme: Fault}}``; raises
    :class:`ConfigError` (field ``faults``) for a key without a colon, an unknown scheme, an
    unknown mode or a malformed delay."""
    out: dict[str, dict[str, Fault]] = {}
    for key, spec in faults.items():
        backend, sep, scheme = key.partition(":")
        if not sep or scheme not in SCHEMES:
            raise ConfigError(f"fault key {key!r} is not '<backend>:<scheme>' with a known scheme", field="faults")
        fault = parse_mode(spec, key)
        if backend == "cpu" and fault.mode != "selftest":
            # The CPU is the fallback of every other backend: nothing would catch its failure.
            raise ConfigError(f"the cpu backend takes only the 'selftest' fault, not {spec!r}", field="faults")
        out.setdefault(backend, {})[scheme] = fault
    return out


class FaultyBackend(Backend):
    """``inner`` with the faults ``faults`` ({scheme: :class:`Fault` or its text}) in its
    :meth:`run`; its name, capabilities, warm-up and close are ``inner``'s.

    ``started()`` tells whether the engine's start-up self-tests are over: ``selftest``
    faults act before, the runtime modes after.  ``serving()`` (default: ``started``) tells
    whether the start-up is over altogether: a delayed fault counts its batches from then.
    """

    def __init__(self, inner: Backend, faults: Mapping[str, Fault | str], started: Callable[[], bool],
                 serving: Callable[[], bool] | None = None):
        self._inner, self._started = inner, started
        self._serving = serving or started
        self._faults = {s: f if isinstance(f, Fault) else parse_mode(f) for s, f in faults.items()}
        self._batches: dict[str, int] = {}
        self._lock = threading.Lock()
        self.name = inner.name

    def _fault(self, scheme_id: str | None) -> str | None:
        fault = self._faults.get(scheme_id) if scheme_id is not None else None
        if fault is None or scheme_id is None:
            return None
        if not self._started():
            return fault.mode if fault.mode == "selftest" else None
        if fault.mode == "selftest":
            return None
        if fault.after:
            if not self._serving():
                return None  # start-up checks after the self-test (Merkle, calibration) do not count
            with self._lock:
                n = self._batches[scheme_id] = self._batches.get(scheme_id, 0) + 1
            if n <= fault.after:
                return None
        return fault.mode

    def capabilities(self) -> Capabilities:
        return self._inner.capabilities()

    def run(self, batch: Batch | AggregateBatch, *, commit: bool = False) -> Result:
        """``inner.run``, or a :class:`KernelLaunchError` (``selftest``, ``raise``), or one
        verdict too many (``garbage``), or every verdict inverted (``invert``: leaves and root
        dropped, the commit step hashes the inverted verdicts as it would a device's)."""
        scheme_id = batch.scheme.id if isinstance(batch, Batch) else None  # faults are per scheme
        mode = self._fault(scheme_id)
        if mode in ("selftest", "raise"):
            raise KernelLaunchError(f"fault injected ({mode}) on {self.name} for {scheme_id}")
        out = self._inner.run(batch, commit=commit)
        if mode == "garbage":
            return Result(np.ones(len(batch) + 1, dtype=bool), out.leaves, out.root, out.spans)
        if mode == "invert":
            # Leaves commit to the verdicts: a device that got every verdict wrong would have
            # hashed its wrong verdicts, so they are made again from the inverted ones.
            return Result(~np.asarray(out.verdicts, dtype=bool), None, None, out.spans)
        return out

    def warm_up(self) -> None:
        self._inner.warm_up()

    def close(self) -> None:
        self._inner.close()
