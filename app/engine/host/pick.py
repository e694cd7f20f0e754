"""Pick: host class → transport → allocator (docs/architecture.md, "Host classes").

| host class                              | transport (auto)      | allocator    |
|-----------------------------------------|-----------------------|--------------|
| GB10 (Grace-Blackwell), no HCA visible  | uma                   | cuda-managed |
| DGX with CX-7 + nvidia-peermem          | gpudirect (+ UMA pool)| cuda-pinned  |
| generic CUDA box, no IB                 | uma                   | cuda-pinned  |
| ROCm box                                | uma                   | hip-pinned   |
| Apple Silicon                           | uma                   | metal-shared |
| Linux, no GPU                           | heap                  | heap         |

``auto`` tries gpudirect, dpdk, uma, then heap, taking the first whose prerequisites the
probe found; a named transport (``ZAP_TRANSPORT``) is tried alone and raises
:class:`app.core.errors.TransportUnavailable` listing what is missing.  Where a transport's data
path is not implemented yet the pick carries a note saying so, shown on the dashboard.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any

from app.core.errors import ConfigError, TransportUnavailable
from app.core.units import fmt_bytes
from app.engine.host.probe import Capability, HostProbe

log = logging.getLogger("zapverify.pick")

TRANSPORTS = ("gpudirect", "dpdk", "uma", "heap")
#: The pool memory each allocator draws from (see :mod:`app.engine.memory.pool`).
ALLOCATOR_SOURCE = {"cuda-pinned": "pinned", "cuda-managed": "managed", "hip-pinned": "pinned",
                    "metal-shared": "heap", "heap": "heap"}

_NOTES = {
    "gpudirect": "GPUDirect RDMA ingest is probed, not implemented: frames arrive through sockets "
                 "into the UMA pool",
    "dpdk": "DPDK ingest is probed, not implemented: frames arrive through kernel sockets into the pool",
    "metal-shared": "Metal shared storage is not implemented: the pool is page-aligned heap memory a "
                    "Metal buffer could wrap without a copy; verification runs on the CPU",
    "hip-pinned": "no ROCm verify backend: the pool is pinned through CuPy's HIP build and "
                  "verification runs on the CPU",
}


@dataclass(frozen=True)
class TransportCheck:
    """One transport as Pick saw it: ``missing`` lists its absent prerequisites."""

    name: str
    available: bool
    missing: tuple[str, ...] = ()


@dataclass(frozen=True)
class Pick:
    """The decision for this host.

    Attributes:
        host_class: ``gb10``, ``dgx``, ``cuda``, ``rocm``, ``apple-silicon``, ``linux-cpu`` or ``other``.
        host_label: the class in words, as in the table of docs/architecture.md, "Host classes".
        requested: ``auto`` or the transport named by ``ZAP_TRANSPORT``.
        transport / allocator: what was chosen; ``pool_source`` is the pool memory it implies.
        verify: ``cuda`` when a CUDA device is usable, else ``cpu``.
        checks: every transport tried, in order, with its missing prerequisites.
        notes: data paths that are probed but not implemented, in words.
    """

    host_class: str
    host_label: str
    requested: str
    transport: str
    allocator: str
    pool_source: str
    verify: str
    checks: tuple[TransportCheck, ...]
    notes: tuple[str, ...] = ()

    @property
    def headline(self) -> str:
        """``"<host class> → <transport>"``, e.g. ``"Linux, no GPU → heap"``."""
        return f"{self.host_label} → {self.transport}"

    def why(self) -> str:
        """One line: why each transport tried before the chosen one was passed over."""
        skipped = [f"{c.name}: {'; '.join(c.missing)}" for c in self.checks if not c.available]
        how = "forced by ZAP_TRANSPORT" if self.requested != "auto" else "auto"
        return f"{how}" + (f"; passed over {' | '.join(skipped)}" if skipped else "")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "headline": self.headline}


# ------------------------------------------------------------------------------ host class
def _nvidia(probe: HostProbe) -> bool:
    return probe.cuda.available or (bool(probe.gpus) and not probe.cupy_hip)


def host_class(probe: HostProbe) -> tuple[str, str]:
    """The host's class id and its label (docs/architecture.md, "Host classes")."""
    if probe.system == "Darwin" and probe.machine in ("arm64", "aarch64"):
        return "apple-silicon", "Apple Silicon"
    if _nvidia(probe):
        hca = probe.hcas[0] if probe.hcas else None
        if hca and probe.peermem.available:
            model = (hca.model or hca.vendor).replace("ConnectX-", "CX-")
            return "dgx", f"DGX with {model} + {(probe.peermem_module or '').replace('_', '-')}"
        ib = "no HCA visible" if hca is None else "HCA without peer memory"
        if any("GB10" in name for name in probe.gpu_names()):
            return "gb10", f"GB10 (Grace-Blackwell), {ib}"
        return "cuda", "generic CUDA box, " + ("no IB" if hca is None else "IB without peer memory")
    if probe.kfd or probe.cupy_hip or probe.rocm.available:
        return "rocm", "ROCm box"
    if probe.system == "Linux":
        return "linux-cpu", "Linux, no GPU"
    return "other", f"{probe.system}, no GPU"


# ------------------------------------------------------------------------------ transports
def _lack(what: str, cap: Capability) -> list[str]:
    return [] if cap.available else [f"no {what} ({'; '.join(cap.reasons)})"]


def missing_prerequisites(probe: HostProbe, transport: str) -> list[str]:
    """What ``transport`` needs and the probe did not find; empty when it can run."""
    if transport == "gpudirect":
        return (_lack("CUDA", probe.cuda) + list(probe.rdma.reasons) + list(probe.ibverbs.reasons)
                + list(probe.peermem.reasons))
    if transport == "dpdk":
        return list(probe.hugepages.reasons) + list(probe.vfio.reasons) + list(probe.dpdk_caps.reasons)
    if transport == "uma":
        if probe.cuda.available or probe.rocm.available or probe.metal.available:
            return []
        return _lack("CUDA", probe.cuda) + _lack("ROCm", probe.rocm) + _lack("Metal", probe.metal)
    if transport == "heap":
        return []
    raise ConfigError(f"unknown transport {transport!r}; choose one of auto, {', '.join(TRANSPORTS)}",
                      field="transport")


def _allocator(probe: HostProbe, cls: str, transport: str) -> str:
    if transport == "heap":
        return "heap"
    if probe.cuda.available:
        return "cuda-managed" if cls == "gb10" else "cuda-pinned"
    if probe.rocm.available:
        return "hip-pinned"
    if probe.metal.available:
        return "metal-shared"
    return "heap"  # DPDK on a host without a GPU


def pick(probe: HostProbe, transport: str = "auto") -> Pick:
    """Resolve the host class, transport and allocator, and log the decision in one line.

    Args:
        probe: from :func:`app.engine.host.probe.probe_host`.
        transport: ``auto`` or one of :data:`TRANSPORTS`.

    Raises:
        TransportUnavailable: a named transport lacks prerequisites (``.missing`` lists them).
        ConfigError: the transport name is unknown.
    """
    transport = (transport or "auto").strip().lower()
    cls, label = host_class(probe)
    order = TRANSPORTS if transport == "auto" else (transport,)
    checks = []
    for name in order:
        missing = missing_prerequisites(probe, name)
        checks.append(TransportCheck(name, not missing, tuple(missing)))
        if not missing:
            break
    chosen = checks[-1]
    if not chosen.available:  # only a named transport can get here: heap needs nothing
        raise TransportUnavailable(
            f"transport {transport!r} (ZAP_TRANSPORT) is unavailable on this host ({label}); missing: "
            + "; ".join(chosen.missing), missing=list(chosen.missing))
    allocator = _allocator(probe, cls, chosen.name)
    notes = tuple(_NOTES[k] for k in (chosen.name, allocator) if k in _NOTES)
    result = Pick(cls, label, transport, chosen.name, allocator, ALLOCATOR_SOURCE[allocator],
                  "cuda" if probe.cuda.available else "cpu", tuple(checks), notes)
    # The reasons each other transport was passed over run to ~1,000 characters: debug only
    # (`zapverify probe` and /v1/status show them too).
    log.info("host %s; transport %s, allocator %s, verify on %s (%s)", label, result.transport,
             allocator, result.verify, "auto" if transport == "auto" else "forced by ZAP_TRANSPORT")
    log.debug("transport pick: %s", result.why())
    return result


# ------------------------------------------------------------------------------ report
#: What a "yes" means where it is only part of what its transport needs.
_HELD = {"dpdk_caps": "CAP_IPC_LOCK and CAP_SYS_NICE held (DPDK also needs hugepages and vfio)"}


def report_dict(probe: HostProbe, choice: Pick, pool_stats: dict | None = None) -> dict[str, Any]:
    """The probe report as JSON-ready data: ``{"host", "pick", "pool"}``."""
    return {"host": probe.to_dict(), "pick": choice.to_dict(), "pool": pool_stats}


def render_report(probe: HostProbe, choice: Pick, pool_stats: dict | None = None) -> str:
    """The probe report as text (``zapverify probe``); the first line is :attr:`Pick.headline`.

    ``pool_stats`` is :meth:`app.engine.memory.pool.UmaPool.stats` or :func:`app.engine.memory.plan.plan_pool`.
    """
    lines = [choice.headline,
             f"  host class  {choice.host_class} ({probe.system} {probe.machine}, "
             f"{fmt_bytes(probe.mem_total_bytes)} RAM)",
             f"  transport   {choice.transport} ({'auto' if choice.requested == 'auto' else 'forced'})",
             f"  allocator   {choice.allocator} (pool memory: {choice.pool_source})",
             f"  verify      {'CUDA, where its self-test passes; else CPU' if choice.verify == 'cuda' else 'CPU only'}"]
    for check in choice.checks:
        if not check.available:
            lines.append(f"  not {check.name}:")
            lines += [f"    - {m}" for m in check.missing]
    lines += [f"  note: {n}" for n in choice.notes]
    lines.append("gpus")
    for g in probe.gpus or ():
        mem = f"{fmt_bytes(g.total_bytes)}, {fmt_bytes(g.free_bytes)} free" if g.total_bytes else "memory ?"
        lines.append(f"  {g.index}: {g.name} (cc {g.compute_capability or '?'}, {mem}) [{g.source}]")
    if not probe.gpus:
        lines.append("  none")
    if probe.hcas:
        lines.append("hcas")
        lines += [f"  {h.name}: {h.vendor} {h.model or h.device_id or ''} fw {h.firmware or '?'} "
                  f"ports {', '.join(f'{p}:{s}/{ll}' for p, s, ll in h.ports) or '-'}" for h in probe.hcas]
    lines.append("capabilities")
    for name, cap in probe.capabilities().items():
        why = "; ".join(cap.reasons) if not cap.available else _HELD.get(name, "")
        lines.append(f"  {name:<10} {'yes' if cap.available else 'no ':<4}" + why)
    if pool_stats:
        s = pool_stats
        lines.append("pool")
        lines.append(f"  {s['source']}, capacity {fmt_bytes(s['capacity_bytes'])} "
                     f"(asked {fmt_bytes(s['requested_bytes'])}"
                     + (f"; clamped by {', '.join(s['clamped_by'])}" if s.get("clamped_by") else "") + ")")
        if "in_use_bytes" in s:  # a live pool, not only its plan
            lines.append(f"  in use {fmt_bytes(s['in_use_bytes'])}, high water {fmt_bytes(s['high_water_bytes'])}, "
                         f"waits {s['waits_total']}, exhaustions {s['exhaustions_total']}")
    return "\n".join(line.rstrip() for line in lines)
