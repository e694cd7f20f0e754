"""What the kernel-host and CUDA backends share: a backend running our kernel sources.

Schemes are discovered from :data:`app.engine.device.registry.VERIFY_KERNELS`: a scheme
is offered when its family's .cu file exists *and* its entry point builds on this device;
:meth:`KernelBackend.availability` says which, and why not.  A kernel backend also builds
Merkle trees on its device (``run(batch, commit=True)``), so a batch verified there is
committed there too (docs/architecture.md, "Merkle leaf and receipts").  Where the BLS12-381
aggregate kernels build (bls12_381_aggregate.cu), it also verifies BLS aggregate items
(``aggregates`` in its capabilities) and verifies ``bls12-381`` batches by random linear
combination (:func:`app.engine.device.ops.verify_bls_rlc`; docs/bls-aggregate.md).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np

from app.core.batch import AggregateBatch, Batch
from app.core.errors import BackendUnavailable, KernelError
from app.core.result import Result
from app.core.schemes import SCHEMES, Scheme
from app.engine.backends.base import READY, Backend, Capabilities
from app.engine.device import ops
from app.engine.device.registry import (
    BLS_AGGREGATE,
    BLS_AGGREGATE_ENTRIES,
    MERKLE,
    VERIFY_KERNELS,
    VERIFY_VARIANTS,
    KernelSource,
    VerifyKernel,
    verify_kernel,
)

NO_KERNEL = "no kernel"
#: The ``kernel_variant`` setting that lets the start-up calibration choose.
AUTO = "auto"

log = logging.getLogger("zapverify.engine")


class KernelDevice(ops.Device, Protocol):
    """A device that also builds entry points by name (raising :class:`BackendUnavailable`
    or :class:`KernelError` when it cannot) and describes itself for /v1/status: the host
    build (:class:`app.engine.device.hostlib.HostDevice`) and CUDA
    (:class:`app.engine.device.cudadev.CupyDevice`)."""

    def function(self, source: KernelSource, entry: str) -> Any: ...

    def info(self) -> dict[str, Any]: ...


class KernelBackend(Backend):
    """Base of the backends that run the kernel sources on an :class:`ops.Device`.

    Args:
        kernels: the verify-kernel table (default: the registry's); tests pass their own.
        bls_batch: verify ``bls12-381`` batches by random linear combination on the device
            (where the aggregate kernels build); off, one single-verify thread per item.
        kernel_variant: for a scheme with several kernels (``variants``), ``"auto"`` lets the
            engine's start-up calibration pick the fastest (:meth:`choose_variant`; the
            default row until then, and where nothing is calibrated); a variant name
            (``"thread"``, ``"block"``) forces it for every scheme that has it and builds
            (the default where it does not build, with a warning).
        variants: the table of those schemes, ``{scheme id: {variant: kernel}}`` (default:
            the registry's :data:`VERIFY_VARIANTS` with the registry's kernels, none with
            ``kernels`` of a test's own).

    Subclasses set ``name`` and implement :meth:`_make_device`.  Every device call runs
    under one lock: a device and its stream serve one batch at a time.
    """

    name = "kernel"
    #: Whether the engine measures crossover sizes and rates for this backend at start.
    calibrate_at_start = False

    def __init__(self, kernels: Mapping[str, VerifyKernel] | None = None, *, bls_batch: bool = True,
                 kernel_variant: str = AUTO, variants: Mapping[str, Mapping[str, VerifyKernel]] | None = None):
        self._kernels = dict(kernels) if kernels is not None else None
        self.bls_batch = bls_batch
        self.kernel_variant = kernel_variant
        if variants is None:
            variants = VERIFY_VARIANTS if kernels is None else {}
        self._variants = {sid: dict(rows) for sid, rows in variants.items()}
        #: The variant serving each scheme of ``variants`` (absent: the default, its first).
        self._chosen: dict[str, str] = {}
        self._choices: dict[str, tuple[str, ...]] | None = None
        self._aggregates: str | None = None
        #: What the last random-linear-combination batch did (tests, benchmarks).
        self.last_rlc: ops.RlcReport | None = None
        self._lock = threading.RLock()
        self._device: KernelDevice | None = None
        self._device_error: str | None = None
        self._availability: dict[str, str] | None = None
        self._merkle: str | None = None
        self._capabilities: Capabilities | None = None

    # ------------------------------------------------------------------ device
    def _make_device(self) -> KernelDevice:
        raise NotImplementedError

    @property
    def device(self) -> KernelDevice:
        """The device, created on first use; raises :class:`BackendUnavailable`."""
        with self._lock:
            if self._device is None:
                if self._device_error is not None:
                    raise BackendUnavailable(self._device_error, field="backend")
                try:
                    self._device = self._make_device()
                except Exception as exc:
                    self._device_error = f"{self.name} unavailable: {exc}"
                    raise BackendUnavailable(self._device_error, field="backend") from exc
            return self._device

    def available(self) -> bool:
        try:
            return self.device is not None
        except BackendUnavailable:
            return False

    # ------------------------------------------------------------------ discovery
    def kernel(self, scheme: Scheme) -> VerifyKernel | None:
        """The verify kernel of ``scheme`` if its source file exists (built or not): the
        chosen variant's for a scheme with several (:meth:`choose_variant`)."""
        chosen = self._chosen.get(scheme.id)
        if chosen is not None:
            row = self._variants[scheme.id][chosen]
            return row if row.source.exists() else None
        return verify_kernel(scheme, self._kernels)

    def variant(self, scheme_id: str) -> str | None:
        """The variant serving ``scheme_id`` (None: a scheme with one kernel)."""
        rows = self._variants.get(scheme_id)
        return self._chosen.get(scheme_id, next(iter(rows))) if rows else None

    def _builds(self, row: VerifyKernel) -> bool:
        try:
            self.device.function(row.source, row.entry)
            return row.source.exists()
        except (BackendUnavailable, KernelError):
            return False

    def variants(self) -> dict[str, tuple[str, ...]]:
        """Per scheme of ``variants`` whose default kernel is ready, the variants that build
        here when there are two or more to choose from (the capabilities' ``variants``).
        A forced ``kernel_variant`` is applied here, the first time this is asked: its
        schemes are listed with none to choose."""
        with self._lock:
            if self._choices is None:
                ready = self.schemes()
                out: dict[str, tuple[str, ...]] = {}
                for sid, rows in self._variants.items():
                    if sid not in ready:
                        continue
                    built = tuple(v for v, row in rows.items() if self._builds(row))
                    if self.kernel_variant != AUTO:
                        if self.kernel_variant in built:
                            self._chosen[sid] = self.kernel_variant
                        elif self.kernel_variant in rows:
                            log.warning("%s: kernel variant %r of %s does not build here; %r serves it", self.name,
                                        self.kernel_variant, sid, next(iter(rows)))
                    elif len(built) >= 2:
                        out[sid] = built
                self._choices = out
            return dict(self._choices)

    def choose_variant(self, scheme_id: str, variant: str) -> None:
        """Serve ``scheme_id`` with ``variant`` of its kernels from now on (the engine's
        calibration, measuring each).  Raises :class:`KernelError` for a variant that is
        unknown or does not build here."""
        with self._lock:
            row = self._variants.get(scheme_id, {}).get(variant)
            if row is None or not self._builds(row):
                raise KernelError(f"{self.name} has no kernel variant {variant!r} for {scheme_id}", field="backend")
            self._chosen[scheme_id] = variant
            if self._capabilities is not None:  # a GPU's batch sizes follow the kernel's waves
                self._capabilities = dataclasses.replace(self._capabilities, batch_items=self.batch_items())

    def availability(self) -> dict[str, str]:
        """Per scheme id: ``"ready"``, ``"no kernel"``, ``"build failed: …"`` or
        ``"unavailable: …"``.  Builds every present kernel the first time it is asked."""
        with self._lock:
            if self._availability is None:
                out: dict[str, str] = {}
                for sid, scheme in SCHEMES.items():
                    k = self.kernel(scheme)
                    if k is None:
                        out[sid] = NO_KERNEL
                        continue
                    try:
                        self.device.function(k.source, k.entry)
                        out[sid] = READY
                    except BackendUnavailable as exc:
                        out[sid] = f"unavailable: {exc.message}"
                    except KernelError as exc:
                        out[sid] = f"build failed: {exc.message}"
                self._availability = out
            return dict(self._availability)

    def schemes(self) -> frozenset[str]:
        """The scheme ids whose kernel is ready here."""
        return frozenset(s for s, state in self.availability().items() if state == READY)

    def merkle_state(self) -> str:
        """``"ready"`` when the Merkle kernels build on this device, else why not."""
        with self._lock:
            if self._merkle is None:
                try:
                    for entry in ("zv_merkle_leaves", "zv_merkle_level", "zv_merkle_tail"):
                        self.device.function(MERKLE, entry)
                    self._merkle = READY
                except (BackendUnavailable, KernelError) as exc:
                    self._merkle = f"build failed: {exc.message}"
            return self._merkle

    def _ready_kernel(self, scheme: Scheme) -> VerifyKernel:
        self.variants()  # a forced kernel variant applies from the first batch on
        k = self.kernel(scheme)
        if k is None or scheme.id not in self.schemes():
            raise BackendUnavailable(f"{self.name} has no kernel for {scheme.id} "
                                     f"({self.availability().get(scheme.id, NO_KERNEL)})", field="scheme")
        return k

    def aggregates_state(self) -> str:
        """``"ready"`` when every entry point of bls12_381_aggregate.cu builds here, else why not."""
        with self._lock:
            if self._aggregates is None:
                try:
                    if not BLS_AGGREGATE.exists():
                        raise KernelError(f"no {BLS_AGGREGATE.path.name}", field="backend")
                    for entry in BLS_AGGREGATE_ENTRIES:
                        self.device.function(BLS_AGGREGATE, entry)
                    self._aggregates = READY
                except (BackendUnavailable, KernelError) as exc:
                    self._aggregates = f"build failed: {exc.message}"
            return self._aggregates

    def batch_items(self) -> dict[str, int]:
        """Per ready scheme, the items per batch that keep this device busy; none by default
        (the GPU sizes them by waves, :class:`app.engine.backends.cuda.CudaBackend`)."""
        return {}

    def capabilities(self) -> Capabilities:
        """Per-scheme availability, Merkle state and the device's description, built (and
        every present kernel compiled) the first time it is asked."""
        with self._lock:
            if self._capabilities is None:
                variants = self.variants()  # first: a forced variant shows in the device's description
                self._capabilities = Capabilities(
                    schemes=self.availability(), commits=self.merkle_state(),
                    calibrate_at_start=self.calibrate_at_start, batch_items=self.batch_items(),
                    aggregates=self.aggregates_state() == READY, device=self.info(), variants=variants)
            return self._capabilities

    # ------------------------------------------------------------------ work
    def run(self, batch: Batch | AggregateBatch, *, commit: bool = False) -> Result:
        """Verdicts of ``batch`` (``bool[N]``), with its Merkle leaves and root where
        ``commit`` (the verdicts never leave the device first, :func:`ops.verify_and_commit`).
        BLS aggregate items (an :class:`AggregateBatch`) are verified by
        :func:`ops.verify_aggregates` (no leaves: the engine's commit step hashes them), and a
        ``bls12-381`` batch by :func:`ops.verify_bls_rlc` where ``bls_batch`` is on and the
        aggregate kernels are ready.  Raises :class:`BackendUnavailable` for a scheme without
        a ready kernel (and for aggregate items without the aggregate kernels),
        :class:`KernelError` when the device fails."""
        if not isinstance(batch, Batch):
            if self.aggregates_state() != READY:
                raise BackendUnavailable(f"{self.name} does not verify BLS aggregate items "
                                         f"({self.aggregates_state()})", field="backend")
            with self._lock:
                return Result.of(self.name, ops.verify_aggregates(self.device, batch.items))
        k = self._ready_kernel(batch.scheme)
        # The batch kernels implement the registry's BLS12-381 verify: a table of other kernels
        # (tests' toy ones) keeps its own single verify.
        if batch.scheme.id == "bls12-381" and self.bls_batch and len(batch) > 1 \
                and k == VERIFY_KERNELS.get("bls12-381") and self.aggregates_state() == READY:
            with self._lock:
                verdicts, self.last_rlc = ops.verify_bls_rlc(self.device, k, batch)
                if not commit:
                    return Result.of(self.name, verdicts)
                leaves, root = ops.commit(self.device, batch, verdicts)
                return Result.of(self.name, verdicts, leaves, root)
        if commit:
            return Result.of(self.name, *self._verify_and_commit(k, batch))
        with self._lock:
            return Result.of(self.name, ops.verify_batch(self.device, k, batch))

    def _verify_and_commit(self, k: VerifyKernel, batch: Batch) -> tuple[np.ndarray, np.ndarray, bytes]:
        """(verdicts, leaves, root) of ``batch`` in one launch each."""
        with self._lock:
            return ops.verify_and_commit(self.device, k, batch)

    def info(self) -> dict:
        """Device, per-scheme availability and Merkle state, for /v1/status."""
        try:
            device = self.device.info()
        except BackendUnavailable as exc:
            return {"available": False, "reason": exc.message}
        return {"available": True, "device": device, "schemes": self.availability(),
                "merkle": self.merkle_state(), "bls_aggregates": self.aggregates_state(),
                "kernel_variants": {sid: self.variant(sid) for sid in self._variants}}
