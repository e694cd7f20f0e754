"""Host probe: what this machine offers the pipeline (docs/architecture.md, "Host classes").

:func:`probe_host` reads the OS and machine, the CUDA runtime (through CuPy, when it can be
imported) and the NVIDIA driver, ROCm, Metal, RDMA HCAs, the ibverbs library, the GPUDirect
peer-memory module, hugepages, vfio-pci bound devices and the process capabilities DPDK
needs.  Each capability comes back as :class:`Capability` — ``available`` plus, when it is
not, every reason why — so :mod:`app.engine.host.pick` can say which prerequisites are missing.

Every file is read under an injectable ``root`` and the OS/machine can be overridden, so the
tests build each host class from a fake tree.  Only the standard library is imported here;
CuPy is imported lazily and only when probing the live host (``root`` = ``/``), since the
devices CuPy sees belong to the live host, not to a tree under another root.
"""

from __future__ import annotations

import platform
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

#: Bits of the Linux capability sets (include/uapi/linux/capability.h).
CAP_IPC_LOCK = 14
CAP_SYS_NICE = 23

#: PCI vendor ids of RDMA HCAs (pci.ids); 0x15b3 covers ConnectX and BlueField.
HCA_VENDORS = {"0x15b3": "Mellanox (NVIDIA)", "0x8086": "Intel", "0x14e4": "Broadcom",
               "0x1077": "QLogic", "0x1fc1": "QLogic (TrueScale)", "0x1d0f": "Amazon (EFA)"}
#: Mellanox PCI device ids of recent ConnectX generations (pci.ids, vendor 15b3).
MELLANOX_MODELS = {"0x1017": "ConnectX-5", "0x1019": "ConnectX-5 Ex", "0x101b": "ConnectX-6",
                   "0x101d": "ConnectX-6 Dx", "0x101f": "ConnectX-6 Lx", "0x1021": "ConnectX-7",
                   "0x1023": "ConnectX-8", "0xa2d6": "BlueField-2", "0xa2dc": "BlueField-3"}
PEERMEM_MODULES = ("nvidia_peermem", "nv_peer_mem")
#: Where a distribution puts libibverbs (Debian multiarch, Red Hat lib64, source builds).
IBVERBS_DIRS = ("usr/lib", "usr/lib64", "lib", "lib64", "usr/local/lib", "usr/local/lib64",
                "usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu", "lib/x86_64-linux-gnu",
                "lib/aarch64-linux-gnu")

_PCI_ADDRESS = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_IMPORT = object()  # "import CuPy yourself" marker for probe_host(cupy=...)


@dataclass(frozen=True)
class Capability:
    """One thing the host may offer.

    Attributes:
        available: whether it can be used.
        reasons: when not available, each missing prerequisite in words; empty otherwise.
    """

    available: bool
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class GpuDevice:
    """A GPU seen by the CUDA/HIP runtime (``source="cupy"``) or only by the driver
    (``source="driver"``, from ``/proc/driver/nvidia/gpus/*/information``).

    ``total_bytes``/``free_bytes`` are device memory in bytes (None when not known; free memory
    is read for the current device only, since reading it makes a context on the device);
    ``compute_capability`` is ``"major.minor"`` (CUDA) or the gfx arch name (HIP).
    """

    index: int
    name: str
    source: str
    total_bytes: int | None = None
    free_bytes: int | None = None
    compute_capability: str | None = None
    bus: str | None = None


@dataclass(frozen=True)
class Hca:
    """An RDMA host channel adapter under ``/sys/class/infiniband``."""

    name: str
    vendor_id: str | None
    vendor: str
    device_id: str | None
    model: str | None
    firmware: str | None
    ports: tuple[tuple[str, str, str], ...] = ()  # (port, state, link layer)


@dataclass(frozen=True)
class HugepagePool:
    size_kib: int
    total: int
    free: int


@dataclass(frozen=True)
class HostProbe:
    """What :func:`probe_host` found.  ``to_dict()`` gives the JSON form."""

    system: str
    machine: str
    root: str
    mem_total_bytes: int | None
    cuda: Capability
    rocm: Capability
    metal: Capability
    rdma: Capability
    ibverbs: Capability
    peermem: Capability
    hugepages: Capability
    vfio: Capability
    dpdk_caps: Capability
    gpus: tuple[GpuDevice, ...] = ()
    nvidia_driver: str | None = None
    cupy_version: str | None = None
    cupy_hip: bool = False
    kfd: bool = False
    hcas: tuple[Hca, ...] = ()
    ibverbs_path: str | None = None
    peermem_module: str | None = None
    hugepage_pools: tuple[HugepagePool, ...] = ()
    vfio_devices: tuple[str, ...] = ()
    cap_ipc_lock: bool | None = None
    cap_sys_nice: bool | None = None

    CAPABILITIES = ("cuda", "rocm", "metal", "rdma", "ibverbs", "peermem", "hugepages", "vfio", "dpdk_caps")

    def capabilities(self) -> dict[str, Capability]:
        """Every capability by name, in a fixed order."""
        return {name: getattr(self, name) for name in self.CAPABILITIES}

    def gpu_names(self) -> list[str]:
        return [g.name for g in self.gpus]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ---------------------------------------------------------------------------------- reading
class _Tree:
    """Reads files under ``root``; every miss is None, never an exception."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def path(self, rel: str) -> Path:
        return self.root / rel.lstrip("/")

    def read(self, rel: str) -> str | None:
        try:
            return self.path(rel).read_text(errors="replace")
        except OSError:
            return None

    def exists(self, rel: str) -> bool:
        return self.path(rel).exists()

    def children(self, rel: str) -> list[str]:
        try:
            return sorted(p.name for p in self.path(rel).iterdir())
        except OSError:
            return []


def parse_cap_bits(status_text: str, set_name: str = "CapEff") -> int | None:
    """The capability set ``set_name`` from ``/proc/<pid>/status`` text as an int, or None."""
    m = re.search(rf"^{set_name}:\s*([0-9a-fA-F]+)\s*$", status_text, re.M)
    return int(m.group(1), 16) if m else None


def _kv(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


def _int(text: str | None) -> int | None:
    try:
        return int(text.strip()) if text is not None else None
    except ValueError:
        return None


# ---------------------------------------------------------------------------------- probes
def _probe_driver(t: _Tree) -> tuple[list[GpuDevice], str | None]:
    gpus = []
    for i, bus in enumerate(t.children("proc/driver/nvidia/gpus")):
        info = _kv(t.read(f"proc/driver/nvidia/gpus/{bus}/information") or "")
        gpus.append(GpuDevice(i, info.get("Model", "NVIDIA GPU"), "driver", bus=info.get("Bus Location", bus)))
    version = t.read("proc/driver/nvidia/version")
    driver = None
    if version:
        m = re.search(r"Kernel Module\s+(?:for\s+\S+\s+)?([0-9][0-9.]*)", version)
        driver = m.group(1) if m else version.splitlines()[0].strip()
    return gpus, driver


def _import_cupy() -> tuple[Any | None, str | None]:
    try:
        import cupy  # noqa: PLC0415 - optional dependency, imported only when probing the live host
        return cupy, None
    except Exception as exc:  # ImportError, or a CUDA library that fails to load
        return None, f"{type(exc).__name__}: {exc}"


def _cupy_devices(cupy: Any) -> tuple[list[GpuDevice], str | None]:
    """Devices the CuPy runtime sees, or ([], why not)."""
    rt = cupy.cuda.runtime
    try:
        count = int(rt.getDeviceCount())
    except Exception as exc:  # CUDARuntimeError when there is no driver or no device
        return [], f"{type(exc).__name__}: {exc}"
    devices = []
    try:
        current = int(cupy.cuda.Device().id)
    except Exception:
        current = 0
    for i in range(count):
        props = rt.getDeviceProperties(i)
        name = props.get("name", b"")
        name = name.decode(errors="replace") if isinstance(name, bytes) else str(name)
        if getattr(rt, "is_hip", False):
            arch = props.get("gcnArchName", b"")
            cc = arch.decode(errors="replace") if isinstance(arch, bytes) else (str(arch) or None)
        else:
            cc = f"{props.get('major', 0)}.{props.get('minor', 0)}"
        free = None
        if i == current:  # memGetInfo needs a context, which costs memory on every device it is made on
            try:
                free = int(rt.memGetInfo()[0])
            except Exception:  # a device that is busy or in an exclusive mode still counts
                pass
        pci = props.get("pciBusID")
        bus = (f"{props.get('pciDomainID', 0):04x}:{pci:02x}:{props.get('pciDeviceID', 0):02x}.0"
               if isinstance(pci, int) else None)
        devices.append(GpuDevice(i, name, "cupy", int(props.get("totalGlobalMem", 0)) or None, free, cc, bus))
    if not devices:
        return [], "the runtime reports 0 devices"
    return devices, None


def _probe_gpu(t: _Tree, cupy: Any) -> dict[str, Any]:
    """CUDA and ROCm capabilities, sharing one CuPy import."""
    driver_gpus, driver = _probe_driver(t)
    cupy_err = None
    if cupy is _IMPORT:
        cupy, cupy_err = (_import_cupy() if t.root == Path("/")
                          else (None, "not consulted for a probe under another root"))
    elif cupy is None:
        cupy_err = "not importable"
    hip = bool(cupy is not None and getattr(cupy.cuda.runtime, "is_hip", False))
    version = getattr(cupy, "__version__", None) if cupy is not None else None
    devices, dev_err = _cupy_devices(cupy) if cupy is not None else ([], None)

    cuda_reasons = []
    if cupy is None:
        cuda_reasons.append(f"CuPy is not importable ({cupy_err}); install zapverify[cuda]")
    elif hip:
        cuda_reasons.append("CuPy is a ROCm (HIP) build, not a CUDA build")
    elif dev_err:
        cuda_reasons.append(f"the CUDA runtime sees no device ({dev_err})")
    if not driver_gpus and not (devices and not hip):
        cuda_reasons.append("no NVIDIA GPU in /proc/driver/nvidia/gpus")
    cuda_ok = bool(devices) and not hip
    if cuda_ok:
        cuda_reasons = []

    rocm_reasons = []
    if not t.exists("opt/rocm"):
        rocm_reasons.append("no ROCm install at /opt/rocm")
    if not t.exists("dev/kfd"):
        rocm_reasons.append("no /dev/kfd (amdgpu kernel driver not loaded)")
    if cupy is None:
        rocm_reasons.append(f"CuPy is not importable ({cupy_err})")
    elif not hip:
        rocm_reasons.append("CuPy is a CUDA build, not a ROCm (HIP) build")
    elif dev_err:
        rocm_reasons.append(f"the HIP runtime sees no device ({dev_err})")

    gpus = devices or driver_gpus  # the driver's list names GPUs that CuPy cannot reach
    return {"cuda": Capability(cuda_ok, tuple(cuda_reasons)),
            "rocm": Capability(not rocm_reasons, tuple(rocm_reasons)),
            "gpus": tuple(gpus), "kfd": t.exists("dev/kfd"), "nvidia_driver": driver, "cupy_version": version,
            "cupy_hip": hip}


def _probe_metal(system: str, machine: str) -> Capability:
    reasons = []
    if system != "Darwin":
        reasons.append(f"OS is {system}; Metal needs macOS (Darwin)")
    if machine not in ("arm64", "aarch64"):
        reasons.append(f"machine is {machine}; Apple Silicon is arm64")
    return Capability(not reasons, tuple(reasons))


def _probe_hcas(t: _Tree) -> tuple[Capability, tuple[Hca, ...]]:
    hcas = []
    for name in t.children("sys/class/infiniband"):
        base = f"sys/class/infiniband/{name}"
        vendor_id = (t.read(f"{base}/device/vendor") or "").strip().lower() or None
        device_id = (t.read(f"{base}/device/device") or "").strip().lower() or None
        model = MELLANOX_MODELS.get(device_id or "") if vendor_id == "0x15b3" else None
        ports = []
        for port in t.children(f"{base}/ports"):
            state = (t.read(f"{base}/ports/{port}/state") or "").strip()
            layer = (t.read(f"{base}/ports/{port}/link_layer") or "").strip()
            ports.append((port, state, layer))
        hcas.append(Hca(name, vendor_id, HCA_VENDORS.get(vendor_id or "", "unknown vendor"), device_id, model,
                        (t.read(f"{base}/fw_ver") or "").strip() or None, tuple(ports)))
    cap = Capability(True) if hcas else Capability(False, ("no RDMA HCA in /sys/class/infiniband",))
    return cap, tuple(hcas)


def _probe_ibverbs(t: _Tree) -> tuple[Capability, str | None]:
    for d in IBVERBS_DIRS:
        for name in t.children(d):
            if name.startswith("libibverbs.so"):
                return Capability(True), f"/{d}/{name}"
    return Capability(False, ("libibverbs not found in the library directories (install rdma-core)",)), None


def _probe_peermem(t: _Tree) -> tuple[Capability, str | None]:
    modules = t.read("proc/modules")
    if modules is None:
        return Capability(False, ("cannot read /proc/modules",)), None
    loaded = {line.split(" ", 1)[0] for line in modules.splitlines() if line.strip()}
    for m in PEERMEM_MODULES:
        if m in loaded:
            return Capability(True), m
    return Capability(False, ("neither nvidia_peermem nor nv_peer_mem is loaded (/proc/modules)",)), None


def _probe_hugepages(t: _Tree) -> tuple[Capability, tuple[HugepagePool, ...]]:
    pools = []
    for d in t.children("sys/kernel/mm/hugepages"):
        m = re.fullmatch(r"hugepages-(\d+)kB", d)
        if not m:
            continue
        base = f"sys/kernel/mm/hugepages/{d}"
        pools.append(HugepagePool(int(m.group(1)), _int(t.read(f"{base}/nr_hugepages")) or 0,
                                  _int(t.read(f"{base}/free_hugepages")) or 0))
    pools.sort(key=lambda p: p.size_kib)
    if not pools:
        return Capability(False, ("no hugepage support (/sys/kernel/mm/hugepages is absent)",)), ()
    if not any(p.total > 0 for p in pools):
        sizes = ", ".join(f"{p.size_kib} kB" for p in pools)
        return Capability(False, (f"no hugepages reserved (nr_hugepages = 0 for {sizes})",)), tuple(pools)
    return Capability(True), tuple(pools)


def _probe_vfio(t: _Tree) -> tuple[Capability, tuple[str, ...]]:
    base = "sys/bus/pci/drivers/vfio-pci"
    if not t.exists(base):
        return Capability(False, ("vfio-pci driver not loaded (/sys/bus/pci/drivers/vfio-pci is absent)",)), ()
    devices = tuple(n for n in t.children(base) if _PCI_ADDRESS.match(n))
    if not devices:
        return Capability(False, ("no PCI device is bound to vfio-pci",)), ()
    return Capability(True), devices


def _probe_caps(t: _Tree, system: str) -> tuple[Capability, bool | None, bool | None]:
    if system != "Linux":
        return Capability(False, (f"OS is {system}; DPDK's capability model is Linux's",)), None, None
    status = t.read("proc/self/status")
    bits = parse_cap_bits(status) if status else None
    if bits is None:
        return Capability(False, ("cannot read CapEff from /proc/self/status",)), None, None
    ipc_lock, sys_nice = bool(bits >> CAP_IPC_LOCK & 1), bool(bits >> CAP_SYS_NICE & 1)
    reasons = [f"process lacks {name}" for name, ok in (("CAP_IPC_LOCK", ipc_lock), ("CAP_SYS_NICE", sys_nice))
               if not ok]
    return Capability(not reasons, tuple(reasons)), ipc_lock, sys_nice


def probe_host(root: str | Path = "/", *, system: str | None = None, machine: str | None = None,
               cupy: Any = _IMPORT) -> HostProbe:
    """Probe the host under ``root``.

    Args:
        root: directory that stands for ``/`` (a fake tree in tests).
        system / machine: override ``platform.system()`` / ``platform.machine()``.
        cupy: a CuPy module (or a stand-in with ``cuda.runtime`` and ``cuda.Device``), None
            for "not importable"; by default CuPy is imported when ``root`` is ``/``.

    Never raises for what the host lacks: that is what the reasons are for.
    """
    t = _Tree(root)
    system = system or platform.system()
    machine = machine or platform.machine()
    gpu = _probe_gpu(t, cupy)
    rdma, hcas = _probe_hcas(t)
    ibverbs, ibverbs_path = _probe_ibverbs(t)
    peermem, peermem_module = _probe_peermem(t)
    hugepages, pools = _probe_hugepages(t)
    vfio, vfio_devices = _probe_vfio(t)
    caps, ipc_lock, sys_nice = _probe_caps(t, system)
    meminfo = _kv(t.read("proc/meminfo") or "")
    mem_kib = _int(meminfo.get("MemTotal", "").removesuffix("kB"))
    return HostProbe(system=system, machine=machine, root=str(root),
                     mem_total_bytes=mem_kib * 1024 if mem_kib else None,
                     cuda=gpu["cuda"], rocm=gpu["rocm"], metal=_probe_metal(system, machine),
                     rdma=rdma, ibverbs=ibverbs, peermem=peermem, hugepages=hugepages, vfio=vfio,
                     dpdk_caps=caps, gpus=gpu["gpus"], nvidia_driver=gpu["nvidia_driver"],
                     cupy_version=gpu["cupy_version"], cupy_hip=gpu["cupy_hip"], kfd=gpu["kfd"], hcas=hcas,
                     ibverbs_path=ibverbs_path, peermem_module=peermem_module, hugepage_pools=pools,
                     vfio_devices=vfio_devices, cap_ipc_lock=ipc_lock, cap_sys_nice=sys_nice)
