"""Host probe: each capability read from a fake tree, with its reasons when absent."""

from __future__ import annotations

import json
import platform

import pytest

from app.engine.host.probe import parse_cap_bits, probe_host
from tests import fakehost as fh


@pytest.fixture
def root(tmp_path):
    return fh.linux(tmp_path)


def test_bare_linux_has_nothing_and_says_why(root):
    p = probe_host(root, system="Linux", machine="x86_64", cupy=None)
    assert (p.system, p.machine, p.mem_total_bytes) == ("Linux", "x86_64", 32 * 1024**3)
    for name, cap in p.capabilities().items():
        if name == "dpdk_caps":
            assert cap.available and cap.reasons == ()
        else:
            assert not cap.available and cap.reasons, name
    assert "CuPy is not importable" in p.cuda.reasons[0]
    assert "no NVIDIA GPU in /proc/driver/nvidia/gpus" in p.cuda.reasons
    assert p.rdma.reasons == ("no RDMA HCA in /sys/class/infiniband",)
    assert p.peermem.reasons == ("neither nvidia_peermem nor nv_peer_mem is loaded (/proc/modules)",)
    assert p.hugepages.reasons == ("no hugepages reserved (nr_hugepages = 0 for 2048 kB, 1048576 kB)",)
    assert p.vfio.reasons == ("vfio-pci driver not loaded (/sys/bus/pci/drivers/vfio-pci is absent)",)
    assert p.gpus == () and p.hcas == ()


def test_cuda_devices_come_from_the_runtime(root):
    fh.add_nvidia_gpu(root, "NVIDIA H200")
    p = probe_host(root, system="Linux", machine="x86_64", cupy=fh.fake_cupy(fh.H200, fh.H200))
    assert p.cuda.available and p.cuda.reasons == ()
    assert [(g.index, g.name, g.source, g.compute_capability) for g in p.gpus] == [
        (0, "NVIDIA H200", "cupy", "9.0"), (1, "NVIDIA H200", "cupy", "9.0")]
    assert p.gpus[0].total_bytes == 141 * fh.GIB and p.gpus[0].free_bytes == 140 * fh.GIB
    assert p.gpus[1].total_bytes == 141 * fh.GIB and p.gpus[1].free_bytes is None  # no context made there
    assert p.nvidia_driver == "570.133.20" and p.cupy_version == "13.6.0"
    assert not p.rocm.available and "CuPy is a CUDA build, not a ROCm (HIP) build" in p.rocm.reasons


def test_driver_gpu_without_cupy_is_listed_but_not_usable(root):
    fh.add_nvidia_gpu(root, "NVIDIA GB10", bus="000f:01:00.0")
    p = probe_host(root, system="Linux", machine="aarch64", cupy=None)
    assert not p.cuda.available
    assert p.cuda.reasons == ("CuPy is not importable (not importable); install zapverify[cuda]",)
    assert [(g.name, g.source, g.bus) for g in p.gpus] == [("NVIDIA GB10", "driver", "000f:01:00.0")]


def test_runtime_error_is_a_reason(root):
    fh.add_nvidia_gpu(root, "NVIDIA H100 80GB HBM3")
    cupy = fh.fake_cupy(error=RuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected"))
    p = probe_host(root, system="Linux", machine="x86_64", cupy=cupy)
    assert not p.cuda.available
    assert p.cuda.reasons[0].startswith("the CUDA runtime sees no device (RuntimeError: cudaErrorNoDevice")


def test_legacy_driver_version_line(root):
    fh.add_nvidia_gpu(root, "NVIDIA H200")
    (root / "proc/driver/nvidia/version").write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n")
    assert probe_host(root, system="Linux", machine="x86_64", cupy=None).nvidia_driver == "550.54.15"


def test_rocm_needs_install_kfd_and_a_hip_cupy(root):
    fh.add_rocm(root)
    p = probe_host(root, system="Linux", machine="x86_64", cupy=fh.fake_cupy(fh.MI300X, hip=True))
    assert p.rocm.available and p.cupy_hip and p.kfd
    assert p.gpus[0].name == "AMD Instinct MI300X" and p.gpus[0].compute_capability.startswith("gfx942")
    assert not p.cuda.available and "CuPy is a ROCm (HIP) build, not a CUDA build" in p.cuda.reasons
    cuda_only = probe_host(root, system="Linux", machine="x86_64", cupy=None)
    assert not cuda_only.rocm.available and any("CuPy is not importable" in r for r in cuda_only.rocm.reasons)


def test_metal_is_darwin_on_arm64(tmp_path):
    assert probe_host(tmp_path, system="Darwin", machine="arm64", cupy=None).metal.available
    intel = probe_host(tmp_path, system="Darwin", machine="x86_64", cupy=None).metal
    assert intel.reasons == ("machine is x86_64; Apple Silicon is arm64",)
    assert probe_host(tmp_path, system="Linux", machine="aarch64", cupy=None).metal.reasons == (
        "OS is Linux; Metal needs macOS (Darwin)",)


def test_hca_vendor_model_and_ports(root):
    fh.add_hca(root, "mlx5_0", "0x15b3", "0x1021", (("4: ACTIVE", "InfiniBand"), ("1: DOWN", "Ethernet")))
    fh.add_hca(root, "irdma0", "0x8086", "0x1593")
    p = probe_host(root, system="Linux", machine="x86_64", cupy=None)
    assert p.rdma.available
    mlx, intel = p.hcas[1], p.hcas[0]  # sorted by name
    assert (mlx.name, mlx.vendor, mlx.model, mlx.firmware) == ("mlx5_0", "Mellanox (NVIDIA)", "ConnectX-7",
                                                               "28.39.1002")
    assert mlx.ports == (("1", "4: ACTIVE", "InfiniBand"), ("2", "1: DOWN", "Ethernet"))
    assert (intel.vendor, intel.model) == ("Intel", None)


@pytest.mark.parametrize("libdir", ["usr/lib/x86_64-linux-gnu", "usr/lib64", "usr/lib/aarch64-linux-gnu"])
def test_ibverbs_found_in_distribution_lib_dirs(root, libdir):
    fh.add_ibverbs(root, libdir)
    p = probe_host(root, system="Linux", machine="x86_64", cupy=None)
    assert p.ibverbs.available and p.ibverbs_path == f"/{libdir}/libibverbs.so.1"


@pytest.mark.parametrize("module", ["nvidia_peermem", "nv_peer_mem"])
def test_peermem_module(root, module):
    fh.add_module(root, "nvidia_uvm")
    fh.add_module(root, module)
    p = probe_host(root, system="Linux", machine="x86_64", cupy=None)
    assert p.peermem.available and p.peermem_module == module


def test_peermem_name_must_match_whole_module(root):
    fh.add_module(root, "nvidia_peermem_extra")
    assert not probe_host(root, system="Linux", machine="x86_64", cupy=None).peermem.available


def test_hugepages_and_vfio(root):
    fh.add_hugepages(root, 1024)
    fh.add_vfio(root)
    p = probe_host(root, system="Linux", machine="x86_64", cupy=None)
    assert p.hugepages.available
    assert [(h.size_kib, h.total, h.free) for h in p.hugepage_pools] == [(2048, 1024, 1024), (1048576, 0, 0)]
    assert p.vfio.reasons == ("no PCI device is bound to vfio-pci",)
    fh.add_vfio(root, "0000:3b:00.0", "0000:3b:00.1")
    p = probe_host(root, system="Linux", machine="x86_64", cupy=None)
    assert p.vfio.available and p.vfio_devices == ("0000:3b:00.0", "0000:3b:00.1")


@pytest.mark.parametrize("cap_eff, ipc_lock, sys_nice, reasons", [
    (fh.ALL_CAPS, True, True, ()),
    (fh.NO_CAPS, False, False, ("process lacks CAP_IPC_LOCK", "process lacks CAP_SYS_NICE")),
    (f"{1 << 14:016x}", True, False, ("process lacks CAP_SYS_NICE",)),
    (f"{1 << 23:016x}", False, True, ("process lacks CAP_IPC_LOCK",)),
])
def test_dpdk_capabilities_from_capeff(tmp_path, cap_eff, ipc_lock, sys_nice, reasons):
    p = probe_host(fh.linux(tmp_path, cap_eff=cap_eff), system="Linux", machine="x86_64", cupy=None)
    assert (p.cap_ipc_lock, p.cap_sys_nice, p.dpdk_caps.reasons) == (ipc_lock, sys_nice, reasons)


def test_parse_cap_bits():
    assert parse_cap_bits("CapPrm:\t0000000000000001\nCapEff:\t0000000000804000\n") == (1 << 14) | (1 << 23)
    assert parse_cap_bits("Name: x\n") is None


def test_unreadable_files_are_reasons_not_errors(tmp_path):
    p = probe_host(tmp_path, system="Linux", machine="x86_64", cupy=None)
    assert p.peermem.reasons == ("cannot read /proc/modules",)
    assert p.dpdk_caps.reasons == ("cannot read CapEff from /proc/self/status",)
    assert p.mem_total_bytes is None


def test_fake_root_never_consults_the_live_cupy(root):
    p = probe_host(root, system="Linux", machine="x86_64")
    assert p.cupy_version is None
    assert "not consulted for a probe under another root" in p.cuda.reasons[0]


def test_to_dict_is_json(root):
    fh.add_hca(root)
    fh.add_nvidia_gpu(root, "NVIDIA H200")
    p = probe_host(root, system="Linux", machine="x86_64", cupy=fh.fake_cupy(fh.H200))
    d = json.loads(json.dumps(p.to_dict()))
    assert d["cuda"] == {"available": True, "reasons": []}
    assert d["gpus"][0]["name"] == "NVIDIA H200" and d["hcas"][0]["model"] == "ConnectX-7"


def test_live_host_probe_runs():
    p = probe_host()
    assert p.system == platform.system() and p.machine == platform.machine()
    json.dumps(p.to_dict())
