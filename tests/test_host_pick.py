"""Pick: every host class of docs/architecture.md, "Host classes", from a fake tree, near misses, ZAP_TRANSPORT."""

from __future__ import annotations

import json
import logging

import pytest

from app.core.errors import ConfigError, TransportUnavailable
from app.engine.host.pick import TRANSPORTS, host_class, pick, render_report, report_dict
from app.engine.host.probe import probe_host
from app.engine.memory.pool import UmaPool
from tests import fakehost as fh


def _checks(choice):
    return {c.name: c.missing for c in choice.checks}


def gb10_host(root):
    fh.add_nvidia_gpu(fh.linux(root), "NVIDIA GB10", bus="000f:01:00.0")
    return probe_host(root, system="Linux", machine="aarch64", cupy=fh.fake_cupy(fh.GB10))


def dgx_host(root, *, ibverbs=True, peermem="nvidia_peermem", hca=True):
    fh.linux(root)
    for i in range(2):
        fh.add_nvidia_gpu(root, "NVIDIA H100 80GB HBM3", bus=f"0000:{0x18 + i:02x}:00.0")
    if hca:
        fh.add_hca(root, "mlx5_0", "0x15b3", "0x1021")
    if ibverbs:
        fh.add_ibverbs(root)
    if peermem:
        fh.add_module(root, peermem)
    return probe_host(root, system="Linux", machine="x86_64", cupy=fh.fake_cupy(fh.H100, fh.H100))


def cuda_host(root):
    fh.add_nvidia_gpu(fh.linux(root), "NVIDIA H200")
    return probe_host(root, system="Linux", machine="x86_64", cupy=fh.fake_cupy(fh.H200))


def apple_host(root):
    return probe_host(root, system="Darwin", machine="arm64", cupy=None)


def linux_cpu_host(root):
    return probe_host(fh.linux(root), system="Linux", machine="x86_64", cupy=None)


def rocm_host(root):
    fh.add_rocm(fh.linux(root))
    return probe_host(root, system="Linux", machine="x86_64", cupy=fh.fake_cupy(fh.MI300X, hip=True))


@pytest.mark.parametrize("build, cls, label, transport, allocator, source, verify", [
    (gb10_host, "gb10", "GB10 (Grace-Blackwell), no HCA visible", "uma", "cuda-managed", "managed", "cuda"),
    (dgx_host, "dgx", "DGX with CX-7 + nvidia-peermem", "gpudirect", "cuda-pinned", "pinned", "cuda"),
    (cuda_host, "cuda", "generic CUDA box, no IB", "uma", "cuda-pinned", "pinned", "cuda"),
    (apple_host, "apple-silicon", "Apple Silicon", "uma", "metal-shared", "heap", "cpu"),
    (linux_cpu_host, "linux-cpu", "Linux, no GPU", "heap", "heap", "heap", "cpu"),
    (rocm_host, "rocm", "ROCm box", "uma", "hip-pinned", "pinned", "cpu"),
])
def test_table_of_design_section_8(tmp_path, build, cls, label, transport, allocator, source, verify):
    choice = pick(build(tmp_path))
    assert (choice.host_class, choice.host_label, choice.transport, choice.allocator, choice.pool_source,
            choice.verify) == (cls, label, transport, allocator, source, verify)
    assert choice.headline == f"{label} → {transport}"
    # auto tries in the fixed order and stops at the first that can run
    names = [c.name for c in choice.checks]
    assert names == list(TRANSPORTS[:TRANSPORTS.index(transport) + 1])
    assert all(not c.available and c.missing for c in choice.checks[:-1]) and choice.checks[-1].available


def test_gb10_reasons(tmp_path):
    missing = _checks(pick(gb10_host(tmp_path)))
    assert missing["gpudirect"] == (
        "no RDMA HCA in /sys/class/infiniband",
        "libibverbs not found in the library directories (install rdma-core)",
        "neither nvidia_peermem nor nv_peer_mem is loaded (/proc/modules)")
    assert missing["dpdk"] == ("no hugepages reserved (nr_hugepages = 0 for 2048 kB, 1048576 kB)",
                               "vfio-pci driver not loaded (/sys/bus/pci/drivers/vfio-pci is absent)")


def test_linux_without_gpu_reasons(tmp_path):
    choice = pick(linux_cpu_host(tmp_path))
    missing = _checks(choice)
    assert missing["gpudirect"][0].startswith("no CUDA (CuPy is not importable")
    assert [m.split(" (")[0] for m in missing["uma"]] == ["no CUDA", "no ROCm", "no Metal"]
    assert "no NVIDIA GPU in /proc/driver/nvidia/gpus" in missing["uma"][0]
    assert choice.notes == ()


def test_dgx_notes_say_gpudirect_ingest_is_not_implemented(tmp_path):
    choice = pick(dgx_host(tmp_path))
    assert any("GPUDirect RDMA ingest is probed, not implemented" in n for n in choice.notes)


def test_apple_notes_say_metal_is_not_implemented(tmp_path):
    assert any(n.startswith("Metal shared storage is not implemented") for n in pick(apple_host(tmp_path)).notes)


# ------------------------------------------------------------------ near misses
def test_peermem_loaded_but_no_hca(tmp_path):
    choice = pick(dgx_host(tmp_path, hca=False))
    assert (choice.host_class, choice.host_label, choice.transport) == ("cuda", "generic CUDA box, no IB", "uma")
    assert _checks(choice)["gpudirect"] == ("no RDMA HCA in /sys/class/infiniband",)


def test_hca_but_no_ibverbs_library(tmp_path):
    choice = pick(dgx_host(tmp_path, ibverbs=False))
    assert (choice.host_class, choice.transport, choice.allocator) == ("dgx", "uma", "cuda-pinned")
    assert _checks(choice)["gpudirect"] == ("libibverbs not found in the library directories (install rdma-core)",)


def test_hca_without_peermem_is_not_dgx(tmp_path):
    choice = pick(dgx_host(tmp_path, peermem=None))
    assert (choice.host_class, choice.host_label, choice.transport) == (
        "cuda", "generic CUDA box, IB without peer memory", "uma")
    assert _checks(choice)["gpudirect"] == ("neither nvidia_peermem nor nv_peer_mem is loaded (/proc/modules)",)


def test_nv_peer_mem_also_makes_a_dgx(tmp_path):
    choice = pick(dgx_host(tmp_path, peermem="nv_peer_mem"))
    assert (choice.host_label, choice.transport) == ("DGX with CX-7 + nv-peer-mem", "gpudirect")


def test_gb10_with_hca_but_no_peermem_stays_managed(tmp_path):
    fh.add_hca(fh.linux(tmp_path), "rocep1s0f0", "0x15b3", "0x1021")
    fh.add_nvidia_gpu(tmp_path, "NVIDIA GB10")
    choice = pick(probe_host(tmp_path, system="Linux", machine="aarch64", cupy=fh.fake_cupy(fh.GB10)))
    assert (choice.host_class, choice.host_label, choice.allocator) == (
        "gb10", "GB10 (Grace-Blackwell), HCA without peer memory", "cuda-managed")


def test_hugepages_but_no_vfio(tmp_path):
    root = fh.linux(tmp_path)
    fh.add_hugepages(root, 512)
    fh.add_vfio(root)  # the driver is loaded, nothing bound
    choice = pick(probe_host(root, system="Linux", machine="x86_64", cupy=None))
    assert choice.transport == "heap"
    assert _checks(choice)["dpdk"] == ("no PCI device is bound to vfio-pci",)


def test_dpdk_on_a_host_without_gpu(tmp_path):
    root = fh.linux(tmp_path)
    fh.add_hugepages(root, 512)
    fh.add_vfio(root, "0000:3b:00.0")
    choice = pick(probe_host(root, system="Linux", machine="x86_64", cupy=None))
    assert (choice.host_class, choice.transport, choice.allocator, choice.verify) == (
        "linux-cpu", "dpdk", "heap", "cpu")
    assert any(n.startswith("DPDK ingest is probed, not implemented") for n in choice.notes)


def test_dpdk_without_capabilities(tmp_path):
    root = fh.linux(tmp_path, cap_eff=f"{1 << 14:016x}")
    fh.add_hugepages(root, 512)
    fh.add_vfio(root, "0000:3b:00.0")
    choice = pick(probe_host(root, system="Linux", machine="x86_64", cupy=None))
    assert choice.transport == "heap" and _checks(choice)["dpdk"] == ("process lacks CAP_SYS_NICE",)


def test_nvidia_gpu_without_cupy_falls_back_to_heap(tmp_path):
    fh.add_nvidia_gpu(fh.linux(tmp_path), "NVIDIA H200")
    choice = pick(probe_host(tmp_path, system="Linux", machine="x86_64", cupy=None))
    assert (choice.host_class, choice.transport, choice.verify) == ("cuda", "heap", "cpu")
    assert "install zapverify[cuda]" in _checks(choice)["uma"][0]


# ------------------------------------------------------------------ ZAP_TRANSPORT
def test_forced_transport_that_cannot_run_lists_what_is_missing(tmp_path):
    probe = linux_cpu_host(tmp_path)
    with pytest.raises(TransportUnavailable) as err:
        pick(probe, "gpudirect")
    e = err.value
    assert e.code == "TRANSPORT_UNAVAILABLE" and e.field == "transport" and e.status == 503
    assert len(e.missing) == 4 and e.missing[1] == "no RDMA HCA in /sys/class/infiniband"
    assert "transport 'gpudirect' (ZAP_TRANSPORT) is unavailable on this host (Linux, no GPU)" in e.message
    assert all(m in e.message for m in e.missing)
    assert e.to_dict()["missing"] == e.missing


def test_forced_transport_is_tried_alone(tmp_path):
    choice = pick(dgx_host(tmp_path), "uma")
    assert (choice.requested, choice.transport, [c.name for c in choice.checks]) == ("uma", "uma", ["uma"])
    assert choice.why() == "forced by ZAP_TRANSPORT"
    assert pick(dgx_host(tmp_path), "heap").allocator == "heap"


def test_forced_dpdk_from_the_environment(tmp_path, monkeypatch):
    from app.config import Settings

    monkeypatch.setenv("ZAP_TRANSPORT", "dpdk")
    transport = Settings().transport
    assert transport == "dpdk"
    with pytest.raises(TransportUnavailable) as err:
        pick(gb10_host(tmp_path), transport)
    assert err.value.missing == ["no hugepages reserved (nr_hugepages = 0 for 2048 kB, 1048576 kB)",
                                 "vfio-pci driver not loaded (/sys/bus/pci/drivers/vfio-pci is absent)"]


def test_unknown_transport(tmp_path):
    with pytest.raises(ConfigError) as err:
        pick(linux_cpu_host(tmp_path), "carrier-pigeon")
    assert err.value.field == "transport"


def test_decision_is_logged_in_one_short_line_and_the_reasons_at_debug(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="zapverify.pick"):
        pick(gb10_host(tmp_path))
    lines = [r.getMessage() for r in caplog.records if r.name == "zapverify.pick"]
    assert len(lines) == 1 and "\n" not in lines[0] and len(lines[0]) < 160
    assert lines[0].startswith("host GB10 (Grace-Blackwell), no HCA visible; transport uma, allocator cuda-managed")
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="zapverify.pick"):
        pick(gb10_host(tmp_path))
    detail = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG and r.name == "zapverify.pick"]
    assert len(detail) == 1 and "gpudirect: no RDMA HCA" in detail[0]


def test_host_class_of_other_systems(tmp_path):
    assert host_class(probe_host(tmp_path, system="Windows", machine="AMD64", cupy=None)) == (
        "other", "Windows, no GPU")


# ------------------------------------------------------------------ report
def test_report_text_and_json(tmp_path):
    probe = linux_cpu_host(tmp_path)
    choice = pick(probe)
    text = render_report(probe, choice)
    lines = text.splitlines()
    assert lines[0] == "Linux, no GPU → heap"
    assert "  not uma:" in lines and any(line.startswith("    - no Metal (OS is Linux") for line in lines)
    assert "  rdma       no  no RDMA HCA in /sys/class/infiniband" in lines
    # A "yes" that is only part of DPDK's needs says so, next to the "not dpdk" reasons.
    assert "  dpdk_caps  yes CAP_IPC_LOCK and CAP_SYS_NICE held (DPDK also needs hugepages and vfio)" in lines
    assert "pool" not in lines

    with UmaPool.create(2 << 20, "heap") as pool:
        pool.acquire(3000, "ingest")
        stats = pool.stats()
    text = render_report(probe, choice, stats)
    assert "  heap, capacity 2.0 MiB (asked 2.0 MiB)" in text.splitlines()
    assert "in use 4.0 KiB, high water 4.0 KiB" in text
    d = json.loads(json.dumps(report_dict(probe, choice, stats)))
    assert d["pick"]["headline"] == "Linux, no GPU → heap" and d["pool"]["in_use_bytes"] == 4096
    assert d["host"]["system"] == "Linux"


def test_report_lists_gpus_and_hcas(tmp_path):
    probe = dgx_host(tmp_path)
    text = render_report(probe, pick(probe))
    assert "  0: NVIDIA H100 80GB HBM3 (cc 9.0, 80.0 GiB, 79.0 GiB free) [cupy]" in text
    assert "  mlx5_0: Mellanox (NVIDIA) ConnectX-7 fw 28.39.1002 ports 1:4: ACTIVE/InfiniBand" in text
