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
