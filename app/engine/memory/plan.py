"""Planning the UMA pool: its constants, and the capacity the host can honour.

Capacity is ``ZAP_UMA_POOL_BYTES`` (4 GiB by default, as in the seed), clamped to what the
host can page-lock: ``RLIMIT_MEMLOCK`` (unless the process has ``CAP_IPC_LOCK``, which lifts
it, see mlock(2)) and a quarter of RAM; the effective size and what clamped it are reported
(docs/architecture.md, "Memory").  Nothing is allocated here.
"""

from __future__ import annotations

import mmap
import os
import resource
from dataclasses import dataclass
from typing import Any

from app.core.errors import ConfigError
from app.core.units import fmt_bytes
from app.engine.host.probe import CAP_IPC_LOCK, parse_cap_bits

SLAB_CLASSES = (256, 1 << 10, 4 << 10, 16 << 10, 64 << 10, 1 << 20)
CHUNK_BYTES = 1 << 20
PAGE_BYTES = mmap.PAGESIZE
DEFAULT_POOL_BYTES = 4 << 30
#: Share of the device's free memory managed memory may take.
MANAGED_FREE_FRACTION = 0.9
OWNERS = ("ingest", "dispatch", "backend", "merkle", "store")
SOURCES = ("pinned", "managed", "heap")
#: Byte written over released memory in debug mode; a stale write shows up as a non-poison byte.
POISON = 0xA5



# ------------------------------------------------------------------------------ capacity
@dataclass(frozen=True)
class PinLimits:
    """What bounds the memory this process may page-lock.

    Attributes:
        memlock_bytes: the soft ``RLIMIT_MEMLOCK`` in bytes; None when unlimited.
        cap_ipc_lock: whether the process holds ``CAP_IPC_LOCK`` (lifts the rlimit).
        ram_bytes: physical memory in bytes; None when unknown.
    """

    memlock_bytes: int | None
    cap_ipc_lock: bool
    ram_bytes: int | None

    @classmethod
    def read(cls) -> PinLimits:
        """The limits of this process, from getrlimit(2), /proc/self/status and sysconf(3)."""
        soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
        try:
            with open("/proc/self/status") as f:
                bits = parse_cap_bits(f.read())
        except OSError:
            bits = None
        try:
            ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError):
            ram = None
        return cls(None if soft == resource.RLIM_INFINITY else int(soft),
                   bool(bits is not None and bits >> CAP_IPC_LOCK & 1), ram)


def clamp_capacity(requested: int, limits: PinLimits, device_free: int | None = None) -> tuple[int, tuple[str, ...]]:
    """The pool size the host can honour, in bytes, and what clamped it (in words).

    ``device_free`` (bytes) is given for managed memory only; the result is then also at
    most :data:`MANAGED_FREE_FRACTION` of it.
    """
    capacity, why = requested, []
    if limits.memlock_bytes is not None and not limits.cap_ipc_lock and limits.memlock_bytes < capacity:
        capacity = limits.memlock_bytes
        why.append(f"RLIMIT_MEMLOCK {fmt_bytes(limits.memlock_bytes)} (raise ulimit -l or grant CAP_IPC_LOCK)")
    if limits.ram_bytes is not None and limits.ram_bytes // 4 < capacity:
        capacity = limits.ram_bytes // 4
        why.append(f"a quarter of RAM ({fmt_bytes(limits.ram_bytes)})")
    if device_free is not None and int(device_free * MANAGED_FREE_FRACTION) < capacity:
        capacity = int(device_free * MANAGED_FREE_FRACTION)
        why.append(f"{MANAGED_FREE_FRACTION:.0%} of free device memory ({fmt_bytes(device_free)})")
    return capacity, tuple(why)


def check_request(requested_bytes: Any, source: Any) -> None:
    if isinstance(requested_bytes, bool) or not isinstance(requested_bytes, int) or requested_bytes < PAGE_BYTES:
        raise ConfigError(f"uma_pool_bytes must be an integer of at least {PAGE_BYTES}, got {requested_bytes!r}",
                          field="uma_pool_bytes")
    if source not in SOURCES:
        raise ConfigError(f"pool_source must be one of {', '.join(SOURCES)}, got {source!r}", field="pool_source")


def plan_pool(requested_bytes: int, source: str, limits: PinLimits | None = None,
              device_free: int | None = None) -> dict[str, Any]:
    """The pool :meth:`UmaPool.create` would build, without allocating it.

    Returns ``{"source", "requested_bytes", "capacity_bytes", "chunk_bytes", "clamped_by"}``
    (bytes; ``clamped_by`` in words).  ``device_free``: free device memory in bytes, for
    ``managed``.  Raises :class:`ConfigError` for a bad size or source, or when the host
    lets the process page-lock less than one page.
    """
    check_request(requested_bytes, source)
    capacity, why = clamp_capacity(requested_bytes, limits or PinLimits.read(),
                                   device_free if source == "managed" else None)
    chunk = min(CHUNK_BYTES, capacity // PAGE_BYTES * PAGE_BYTES)
    if chunk < PAGE_BYTES:
        raise ConfigError(f"the host lets this process page-lock only {capacity} bytes "
                          f"({'; '.join(why)}); the pool needs at least {PAGE_BYTES}", field="uma_pool_bytes")
    return {"source": source, "requested_bytes": requested_bytes, "capacity_bytes": capacity // chunk * chunk,
            "chunk_bytes": chunk, "clamped_by": list(why)}
