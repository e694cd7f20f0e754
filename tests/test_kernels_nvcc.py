"""nvcc check (docs/kernels.md): every kernel source compiles for sm_90.

Runs where nvcc is on PATH; writes registers, stack and spill bytes per entry point to
bench/results/kernels_ptxas.txt (the file is produced here, never typed).
"""

from pathlib import Path

import pytest

from app.engine.kernels import ptxas, registry
from app.engine.kernels.hostbuild import sources_digest

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
def test_every_kernel_compiles_for_sm90_and_report_is_written():
    sources = registry.sources()
    assert {p.stem for p in sources} >= {"hash", "merkle"}
    results = [ptxas.compile_source(p) for p in sources]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(ptxas.report(results, sources_digest()))
    failed = {r.source: r.log[-3000:] for r in results if not r.ok}
    assert not failed, failed
    entries = {e.entry for r in results for e in r.entries}
    assert {"zv_sha256_batch", "zv_shake256_batch", "zv_merkle_leaves", "zv_merkle_level",
            "zv_merkle_tail"} <= entries
    for row in registry.VERIFY_KERNELS.values():
        if row.source.exists():
            assert row.entry in entries, f"{row.source.name}.cu does not export {row.entry}"
