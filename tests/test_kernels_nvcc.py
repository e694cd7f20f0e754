"""nvcc check (docs/kernels.md): every kernel source compiles for sm_90.

Runs where nvcc is on PATH.  Registers, stack and spill bytes per entry point are written to
bench/results/kernels_ptxas.txt by scripts/ptxas (never typed); the test checks that
report describes the current sources.
"""

from pathlib import Path

import pytest

from app.engine.device import ptxas, registry
from app.engine.device.hostbuild import sources_digest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "kernels_ptxas.txt"

pytestmark = pytest.mark.skipif(ptxas.nvcc() is None, reason="nvcc is not on PATH")


def test_parse_reads_ptxas_report():
    log = """ptxas info    : Compiling entry function 'zv_sha256_batch' for 'sm_90'
ptxas info    : Function properties for zv_sha256_batch
    104 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 72 registers, used 0 barriers, 104 bytes cumulative stack size"""
    [e] = ptxas.parse(log)
    assert (e.entry, e.registers, e.stack_bytes, e.spill_store_bytes, e.spill_load_bytes) == \
        ("zv_sha256_batch", 72, 104, 8, 12)


@pytest.mark.slow
@pytest.mark.timeout(1800)  # nvcc's front end on every module, two at a time, on a busy 2-core machine
def test_every_kernel_compiles_for_sm90():
    """Every .cu compiles for sm_90 (to PTX: ptxas's register report is slower by minutes per
    module and is written by scripts/ptxas) and exports its entry points."""
    from concurrent.futures import ThreadPoolExecutor

    sources = registry.sources()
    assert {p.stem for p in sources} >= {"hash", "merkle"}
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(ptxas.compile_ptx, sources))
    failed = {r.source: r.log[-3000:] for r in results if not r.ok}
    assert not failed, failed
    entries = {e.entry for r in results for e in r.entries}
    assert {"zv_sha256_batch", "zv_shake256_batch", "zv_merkle_leaves", "zv_merkle_level",
            "zv_merkle_tail"} <= entries
    for row in registry.VERIFY_KERNELS.values():
        if row.source.exists():
            assert row.entry in entries, f"{row.source.name}.cu does not export {row.entry}"


def test_the_ptxas_report_is_of_the_current_sources():
    """bench/results/kernels_ptxas.txt (scripts/ptxas) describes these sources: a
    kernel change without a new report fails here, not silently."""
    digest = sources_digest()
    head = RESULTS.read_text().splitlines()[:6]
    assert f"# kernel sources sha256: {digest}" in head, "rerun scripts/ptxas"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_kernel_source_compiles_in_one_file_with_host_code(tmp_path):
    """zv_port.cuh's two macros (docs/kernels.md "One source: zv_port.cuh"): in nvcc's host pass a ZV_HD
    body is host code, so a harness that includes a kernel source and has a host main()
    compiles and runs.  SLH-DSA holds the shared-memory atomicAdd and the barriers inside
    ZV_HD functions, Merkle the vector loads of zv_load_item; before the guard was
    __CUDA_ARCH__, nvcc's host pass rejected both."""
    import subprocess

    for unit, folder in (("slh_dsa", "schemes"), ("merkle", "hashes")):
        src = tmp_path / f"{unit}_harness.cu"
        src.write_text(f'#include "{folder}/{unit}.cu"\n#include <cstdio>\n'
                       'int main() { printf("%d\\n", ZV_CUDA_COMPILER * 10 + ZV_DEVICE_BUILD); return 0; }\n')
        exe = tmp_path / unit
        proc = subprocess.run([ptxas.nvcc(), "-std=c++17", "-arch=sm_90", f"-I{registry.KERNEL_DIR}", "-o", str(exe),
                               str(src)], capture_output=True, text=True, timeout=850)
        assert proc.returncode == 0, proc.stderr[-3000:]
        # host code of an nvcc build: a CUDA compiler, no device code being generated
        assert subprocess.run([str(exe)], capture_output=True, text=True).stdout.strip() == "10"
