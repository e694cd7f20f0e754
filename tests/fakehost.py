"""Fake host trees and a CuPy runtime stand-in for the probe and pick tests.

Each ``add_*`` writes what the real kernel or driver exposes at that path (formats from
proc(5), sysfs-class-infiniband, Documentation/admin-guide/mm/hugetlbpage.rst and the NVIDIA
driver's /proc/driver/nvidia files).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

ALL_CAPS = "000001ffffffffff"
NO_CAPS = "0000000000000000"


def _write(root: Path, rel: str, text: str) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def linux(root: Path, *, cap_eff: str = ALL_CAPS, modules: str = "", ram_kib: int = 32 * 1024 * 1024) -> Path:
    _write(root, "proc/self/status", f"Name:\tpython3\nCapInh:\t0000000000000000\nCapPrm:\t{cap_eff}\n"
                                     f"CapEff:\t{cap_eff}\nCapBnd:\t{ALL_CAPS}\n")
    _write(root, "proc/meminfo", f"MemTotal:       {ram_kib} kB\nMemFree:        1024 kB\n")
    _write(root, "proc/modules", modules)
    for size in (2048, 1048576):
        _write(root, f"sys/kernel/mm/hugepages/hugepages-{size}kB/nr_hugepages", "0\n")
        _write(root, f"sys/kernel/mm/hugepages/hugepages-{size}kB/free_hugepages", "0\n")
    return root


def add_module(root: Path, name: str) -> None:
    p = root / "proc/modules"
    p.write_text(p.read_text() + f"{name} 16384 0 - Live 0x0000000000000000\n")


def add_nvidia_gpu(root: Path, model: str, bus: str = "0000:01:00.0", driver: str = "570.133.20") -> None:
    _write(root, f"proc/driver/nvidia/gpus/{bus}/information",
           f"Model: \t\t {model}\nIRQ:   \t\t 170\nGPU UUID: \t GPU-0c1d2e3f\nVideo BIOS: \t ??.??.??.??.??\n"
           f"Bus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\nBus Location: \t {bus}\n"
           "Device Minor: \t 0\nGPU Excluded:\t No\n")
    _write(root, "proc/driver/nvidia/version",
           f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {driver}  Release Build  "
           "(dvs-builder@U16-I3-B03-4-3)  Fri Mar 14 2025\nGCC version:  gcc version 12.2.0\n")


def add_hca(root: Path, name: str = "mlx5_0", vendor: str = "0x15b3", device: str = "0x1021",
            ports: tuple[tuple[str, str], ...] = (("4: ACTIVE", "InfiniBand"),)) -> None:
    base = f"sys/class/infiniband/{name}"
    _write(root, f"{base}/device/vendor", vendor + "\n")
    _write(root, f"{base}/device/device", device + "\n")
    _write(root, f"{base}/fw_ver", "28.39.1002\n")
    for i, (state, layer) in enumerate(ports, 1):
        _write(root, f"{base}/ports/{i}/state", state + "\n")
        _write(root, f"{base}/ports/{i}/link_layer", layer + "\n")


def add_ibverbs(root: Path, libdir: str = "usr/lib/x86_64-linux-gnu") -> None:
    _write(root, f"{libdir}/libibverbs.so.1", "")


def add_hugepages(root: Path, n: int, size_kib: int = 2048) -> None:
    _write(root, f"sys/kernel/mm/hugepages/hugepages-{size_kib}kB/nr_hugepages", f"{n}\n")
    _write(root, f"sys/kernel/mm/hugepages/hugepages-{size_kib}kB/free_hugepages", f"{n}\n")


def add_vfio(root: Path, *bdfs: str) -> None:
    base = root / "sys/bus/pci/drivers/vfio-pci"
    base.mkdir(parents=True, exist_ok=True)
    for name in ("bind", "unbind", "new_id", "remove_id", "uevent", "module"):
        (base / name).write_text("")
    for bdf in bdfs:
        (base / bdf).mkdir()


def add_rocm(root: Path) -> None:
    (root / "opt/rocm/lib").mkdir(parents=True, exist_ok=True)
    _write(root, "dev/kfd", "")


class FakeRuntime:
    """Answers like ``cupy.cuda.runtime`` for the given devices: dicts with name, total, free, cc."""

    def __init__(self, devices: list[dict], hip: bool = False, error: Exception | None = None):
        self.devices, self.is_hip, self.error, self.current = devices, hip, error, 0

    def getDeviceCount(self) -> int:  # noqa: N802 - CuPy's name
        if self.error:
            raise self.error
        return len(self.devices)

    def getDeviceProperties(self, i: int) -> dict:  # noqa: N802
        d = self.devices[i]
        props = {"name": d["name"].encode(), "totalGlobalMem": d["total"], "pciBusID": 1, "pciDomainID": 0,
                 "pciDeviceID": 0}
        if self.is_hip:
            props["gcnArchName"] = d["cc"].encode()
        else:
            props["major"], props["minor"] = map(int, d["cc"].split("."))
        return props

    def memGetInfo(self) -> tuple[int, int]:  # noqa: N802
        d = self.devices[self.current]
        return d["free"], d["total"]


def fake_cupy(*devices: dict, hip: bool = False, error: Exception | None = None) -> SimpleNamespace:
    rt = FakeRuntime(list(devices), hip, error)

    class Device:
        def __init__(self, i: int | None = None):
            self.id = rt.current if i is None else i

    return SimpleNamespace(__version__="13.6.0", cuda=SimpleNamespace(runtime=rt, Device=Device))


GIB = 1024**3
H200 = {"name": "NVIDIA H200", "total": 141 * GIB, "free": 140 * GIB, "cc": "9.0"}
H100 = {"name": "NVIDIA H100 80GB HBM3", "total": 80 * GIB, "free": 79 * GIB, "cc": "9.0"}
GB10 = {"name": "NVIDIA GB10", "total": 119 * GIB, "free": 100 * GIB, "cc": "12.1"}
MI300X = {"name": "AMD Instinct MI300X", "total": 192 * GIB, "free": 190 * GIB, "cc": "gfx942:sramecc+:xnack-"}
