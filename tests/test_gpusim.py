"""scripts/gpusim (docs/kernels.md, "Device code without a GPU"): the simulator device, its
build key, the negative control and the report.

The tests marked ``sim`` run the kernels' PTX under GPGPU-Sim and need the simulator built
(``scripts/gpusim --build-only``, minutes); they run where ``ZAPVERIFY_GPUSIM=1`` (as
.ci/run sets after building it) and skip elsewhere.  The rest need nothing.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from app.core.schemes import SCHEMES
from app.engine.commit import merkle
from app.engine.device import ops, registry
from app.engine.reference import kat
from app.engine.verify.grouping import batch_of
from scripts.lib.gpusim import build, check, report
from scripts.lib.gpusim.device import SimDevice

ROOT = Path(__file__).resolve().parents[1]
SIM = os.environ.get("ZAPVERIFY_GPUSIM") == "1"
sim_only = pytest.mark.skipif(not SIM, reason="set ZAPVERIFY_GPUSIM=1 to run the kernels under GPGPU-Sim")


class Recorder(SimDevice):
    """A SimDevice whose runs are recorded, not simulated: every buffer a run names comes
    back filled with its index (so reads after a run succeed)."""

    def __init__(self, **kw):
        super().__init__(None, modules={"ed25519": Path("ed25519.ptx"), "merkle": Path("merkle.ptx")}, **kw)  # type: ignore[arg-type]
        self.runs: list[tuple[str, list]] = []

    def _run(self, module, launches):
        self.runs.append((module.name, launches))
        for ln in launches:
            for a in ln.args:
                if isinstance(a, int):
                    self._bufs[a].data = np.full(self._bufs[a].size, a % 256, dtype=np.uint8)


def ed25519_batch(n: int):
    items = kat.sign_items("ed25519", n, seed=1, msg_len=16)
    return batch_of(("ed25519", 32, b"", (False, False)), items)


def test_a_batch_runs_as_the_cuda_backend_runs_it_one_process_per_module():
    """verify_and_commit on the simulator device: the verify launch with the registry's block
    and the kernel contract's arguments in one run, then the Merkle leaves and tail in the
    next (one simulator process loads one module); nothing runs before the first read."""
    dev = Recorder(max_grid=2)
    kernel = registry.VERIFY_KERNELS["ed25519"]
    batch = ed25519_batch(300)
    db = ops.put_batch(dev, batch)
    out = ops.verify(dev, kernel, db)
    assert dev.runs == []  # recorded only
    ops.merkle_leaves(dev, db, out)
    assert [m for m, _ in dev.runs] == ["ed25519.ptx"]  # a launch of another module ran the first
    [verify] = dev.runs[0][1]
    assert (verify.entry, verify.block, verify.grid) == ("zv_verify_ed25519", kernel.block, 2)  # 3 blocks capped at 2
    assert verify.args[1] == np.uint32(32) and verify.args[3] == np.uint32(64) and verify.args[9] == np.uint64(300)
    dev.get(out, 300)
    assert [m for m, _ in dev.runs] == ["ed25519.ptx", "merkle.ptx"]
    assert dev.runs[1][1][0].entry == "zv_merkle_leaves"


def test_a_one_block_launch_and_the_grid_cap():
    dev = Recorder(max_grid=3)
    leaves = np.zeros((5000, 32), dtype=np.uint8)
    ops.merkle_root_buffer(dev, dev.put(leaves), 5000, tail_max=1000)
    dev.sync()
    launches = dev.runs[0][1]
    assert [(ln.entry, ln.grid, ln.block) for ln in launches] == [
        ("zv_merkle_level", 3, ops.HASH_BLOCK), ("zv_merkle_level", 3, ops.HASH_BLOCK),
        ("zv_merkle_level", 3, ops.HASH_BLOCK), ("zv_merkle_tail", 1, ops.TAIL_BLOCK)]


def test_the_program_holds_only_the_buffers_its_launches_name():
    dev = Recorder()
    unused = dev.put(np.arange(7, dtype=np.uint8))
    src = dev.put(np.arange(64, dtype=np.uint8))
    dst = dev.alloc(32)
    dev.launch(registry.MERKLE, "zv_merkle_level", 1, (src, np.uint64(2), dst))
    program, used = dev._program(["zv_merkle_leaves", "zv_merkle_level"], dev._pending)
    assert used == [src, dst] and unused not in used
    assert program[:8] == b"ZVSIMP01"
    pos = 8
    (nbuf,) = struct.unpack_from("<I", program, pos)
    pos += 4
    size, filled = struct.unpack_from("<QB", program, pos)
    pos += 9
    assert (nbuf, size, filled, program[pos:pos + 64]) == (2, 64, 1, bytes(range(64)))
    pos += 64
    assert struct.unpack_from("<QB", program, pos) == (32, 0)  # written by the kernel, never sent
    pos += 9
    assert struct.unpack_from("<IIIII", program, pos) == (1, 1, 1, 256, 3)  # 1 launch: entry 1, grid, block, 3 args
    pos += 20
    args = [struct.unpack_from("<BQ", program, pos + 9 * k) for k in range(3)]
    assert args == [(0, 0), (2, 2), (0, 1)]  # buffer 0, u64 2, buffer 1


def test_a_scalar_of_another_type_is_refused_naming_the_entry():
    dev = Recorder()
    dev.launch(registry.MERKLE, "zv_merkle_level", 1, (dev.alloc(64), 2, dev.alloc(32)))
    dev._pending[0].args = (0, 2.5, 1)
    with pytest.raises(Exception, match="zv_merkle_level"):
        dev._program(["zv_merkle_level"], dev._pending)


def test_the_build_key_covers_every_input(tmp_path, monkeypatch):
    src, patches = tmp_path / "gpusim", tmp_path / "patches"
    src.mkdir()
    patches.mkdir()
    (src / "build.sh").write_text("echo 1\n")
    monkeypatch.setattr(build, "PATCHES", patches)
    monkeypatch.setattr(build, "toolkit_version", lambda home: "release 13.0")
    first = build.inputs_digest(src, tmp_path)
    (patches / "01-x.patch").write_text("--- a\n")
    second = build.inputs_digest(src, tmp_path)
    (src / "build.sh").write_text("echo 2\n")
    third = build.inputs_digest(src, tmp_path)
    monkeypatch.setattr(build, "toolkit_version", lambda home: "release 13.1")
    assert len({first, second, third, build.inputs_digest(src, tmp_path)}) == 4


def test_without_the_shared_sources_the_build_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.setenv("ZAPVERIFY_GPUSIM_SRC", str(tmp_path / "absent"))
    with pytest.raises(build.SimBuildError, match="absent"):
        build.ensure(ROOT)


def test_the_negative_control_removes_exactly_one_barrier():
    text = registry.VERIFY_KERNELS["ed25519"].source.path.read_text()
    broken = check.control_text(text)
    assert broken.count("ZV_SYNC();") == text.count("ZV_SYNC();") - 1
    assert "zv_ed_fe_block_batch_invert(zs, prefix, (int)count, tops, tops_prefix);" in broken
    with pytest.raises(ValueError, match="barrier"):
        check.control_text(broken)


def test_the_run_passes_only_when_every_family_agrees_and_the_control_is_caught():
    agree = check.Result("merkle", "k", items=4)
    wrong = check.Result("ed25519", "k", items=4, disagreements=1)
    caught = check.Result("control", "k", items=64, disagreements=32)
    missed = check.Result("control", "k", items=64)
    assert report.passed([agree, caught])
    assert not report.passed([agree, wrong, caught])
    assert not report.passed([agree, missed])
    assert not report.passed([check.Result("hash", "k")])  # nothing compared is no agreement
    assert not report.passed([check.Result("hash", "k", items=3, error="simulator failed")])


def shipped_entries() -> set[str]:
    """Every entry point scripts/ptxas's record lists, less the test-only bls12_381_parts.cu."""
    lines = (ROOT / "bench" / "results" / "kernels_ptxas.txt").read_text().splitlines()
    return {ln.split()[1] for ln in lines if ln.split() and ln.split()[0].endswith(".cu")
            and ln.split()[0] != "bls12_381_parts.cu"}


def sample_entries(sample: check.Sample) -> set[str]:
    """The entry points a sample's families launch (by the registry, not by running them)."""
    out: set[str] = set()
    for fam in check.families(sample):
        if fam == "hash":
            out |= {e for e, _ in registry.HASH_KERNELS.values()}
        elif fam == "merkle":
            out |= {"zv_merkle_level", "zv_merkle_tail"}
        elif fam == "bls12-381-aggregate":
            out |= {*registry.BLS_AGGREGATE_ENTRIES, "zv_verify_bls12_381"}
        else:
            kernel = check.family_kernel(fam)[1]
            assert kernel is not None, fam
            out |= {kernel.entry, "zv_merkle_leaves"}  # a batch is committed on the device
    return out


def test_the_full_sample_runs_every_shipped_entry_point_and_ci_every_verify_family():
    """The full sample launches every entry point the service ships (P-256 and the ML-DSA
    block kernels included); CI's at least one of each verify family, both ML-DSA kernels, an
    SHA-2 and a SHAKE SLH-DSA set, plus hash and Merkle."""
    shipped = shipped_entries()
    assert len(shipped) == 40 and "zv_verify_ml_dsa_block_65" in shipped and "zv_verify_p256" in shipped
    assert sample_entries(check.FULL) == shipped
    ci = check.families(check.CI)
    for fam in ("hash", "merkle", "ed25519", "secp256k1", "p256", "bip340", "bls12-381"):
        assert fam in ci
    assert {f for f in ci if f.startswith("ml-dsa")} >= {"ml-dsa-44", "ml-dsa-44-block"}
    assert any(f.startswith("slh-dsa-sha2") for f in ci) and any(f.startswith("slh-dsa-shake") for f in ci)
    kas = check.scheme_sample("bls12-381", check.CI)
    assert sorted(ka.expected for ka in kas) == [False, True]


def test_a_variant_family_checks_its_own_kernel_on_its_schemes_items():
    scheme, kernel = check.family_kernel("ml-dsa-65-block")
    assert scheme == "ml-dsa-65" and kernel is not None and kernel.entry == "zv_verify_ml_dsa_block_65"
    assert kernel.lanes == kernel.block
    assert check.family_kernel("ml-dsa-65")[1] is registry.VERIFY_KERNELS["ml-dsa-65"]
    assert "ml-dsa-65-block" in check.known_families()
    assert check.family_kernel("nonsense") == ("nonsense", None)


def test_the_record_names_the_entry_points_that_ran():
    fams = [report.as_dict(check.Result("a", "k", items=1, entries=["zv_b", "zv_a"])),
            report.as_dict(check.Result("control", "k", items=1, entries=["zv_control_only"])),
            report.as_dict(check.Result("c", "k", items=1, entries=["zv_a", "zv_c"]))]
    assert report.entries_run({"families": fams}) == ["zv_a", "zv_b", "zv_c"]


def test_the_samples_reach_what_the_issue_asks():
    """Ed25519, secp256k1, P-256 and BIP-340 of the full sample fill more than the two blocks'
    first chunks (a second chunk) with a partial last warp; every ML-DSA and SLH-DSA set is in it."""
    from app.engine.verify.grouping import group_items

    full = check.FULL
    for scheme in ("ed25519", "secp256k1", "p256", "bip340"):
        kas = check.scheme_sample(scheme, full)
        largest = max(len(idx) for key, idx in group_items([ka.item for ka in kas]).items() if key is not None)
        # one batch, so it is one launch: past both blocks' first chunks, its last warp partial
        assert largest > full.max_grid * registry.VERIFY_KERNELS[scheme].block and largest % 32, (scheme, largest)
        assert sum(not ka.expected for ka in kas) >= 140
    assert {s for s in SCHEMES if s.startswith(("ml-dsa", "slh-dsa"))} <= set(full.schemes)
    assert {1, 2, 3, 1023, 1024} <= {n for n, _ in full.trees}


def test_the_bls_aggregate_family_is_in_the_full_sample_only_and_its_sample_has_both_verdicts():
    """The aggregate kernels' family: in the full sample (not CI's: a pairing takes tens of
    seconds under the simulator), taken by --families; its items give both verdicts, the
    eth variant's empty case true, the tree more than two rounds, and an RLC batch whose
    second group fails."""
    from app.engine.reference import bls_aggregate
    from app.engine.reference.reference import verify_bls12_381

    assert "bls12-381-aggregate" in check.families(check.FULL)
    assert "bls12-381-aggregate" not in check.families(check.CI)
    assert "bls12-381-aggregate" in check.known_families()
    items, rlc = check.aggregate_sample()
    assert [bls_aggregate.verify_item(it) for it in items] == [True, False, False, True, False, True]
    assert max(len(it.public_keys) for it in items) > 4  # three rounds of the key sum
    assert [verify_bls12_381(it.public_key, it.message, it.signature) for it in rlc] == [True, True, False]


# ------------------------------------------------------------------ under the simulator
@pytest.fixture(scope="module")
def sim():
    return build.ensure(ROOT)


@sim_only
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_merkle_roots_under_the_simulator_equal_the_cpus(sim):
    dev = SimDevice(sim)
    rng = np.random.default_rng(35)
    for n, tail_max in ((1, ops.TAIL_MAX), (3, ops.TAIL_MAX), (1023, 64)):
        leaves = rng.integers(0, 256, size=(n, 32), dtype=np.uint8)
        assert ops.root(dev, leaves, tail_max=tail_max) == merkle.root(leaves)


@sim_only
@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_the_negative_control_is_caught_under_the_simulator(sim, tmp_path):
    """ed25519.cu without its post-inversion barrier: warp 0's items stay right, the other
    warps' valid items answer False; the check is shown able to fail."""
    res = check.check_control(lambda **kw: SimDevice(sim, **kw), tmp_path)
    assert not res.error, res.error
    assert report.control_ok(res)
    assert all(int(f.split()[1]) >= 32 for f in res.first)  # only past the first warp


# ------------------------------------------------------------------ timing mode (no simulator needed)
TIMING_LOG = """GPGPU-Sim uArch: CTA/core = 4, limited by: regs
gpu_sim_cycle = 1000
gpu_sim_insn = 64000
gpu_tot_issued_cta = 4
gpgpu_n_tot_w_icount = 2500
Warp Occupancy Distribution:
Stall:10\tW0_Idle:300\tW0_Scoreboard:1200\tW1:500\tW2:0\tW25:1000\tW32:1000
"""


def test_timing_statistics_are_read_from_the_simulators_log():
    from scripts.lib.gpusim import timing

    st = timing.parse_stats(TIMING_LOG)
    assert (st["gpu_sim_cycle"], st["gpgpu_n_tot_w_icount"], st["cta_per_core"]) == (1000, 2500, 4)
    assert st["issued_by_active_lanes"] == {1: 500, 2: 0, 25: 1000, 32: 1000}
    t = timing.Timing("ml-dsa-65-block", "zv_verify_ml_dsa_block_65", items=4, blocks=4, block=128, registers=128,
                      shared_bytes=21000, cycles=1000, warp_instructions=2500,
                      issued_by_active_lanes=st["issued_by_active_lanes"], agreed=True)
    assert t.single_lane_share() == 0.2
    limits = timing.SmLimits(threads=1536, registers=65536, shared_bytes=102400, blocks=32, schedulers=4,
                             clock_hz=1.132e9)
    row = timing.row(t, limits, predicted_h200=132 * 1.98e9 / 500)  # the model: 500 cycles per verify per SM
    assert row["cycles_per_verify"] == 250 and row["simulated_over_predicted"] == 2.0
    assert row["issue_slot_use"] == 0.625
    assert row["simulated_carried_to_h200_verifies_per_s"] == round(132 * 1.98e9 / 250)
    with pytest.raises(RuntimeError):
        timing.parse_stats("GPGPU-Sim: functional mode only\n")


def test_a_sampled_wave_extrapolates_its_cycles_at_the_windows_rate():
    """A wave stopped by --max-cycles: cycles per verify = window cycles × wave instructions ÷
    window instructions ÷ items; the record says the row is sampled and how much it saw."""
    from scripts.lib.gpusim import timing

    assert timing.functional_instructions("GPGPU-Sim: Done functional simulation (2721930 instructions simulated).\n"
                                          "GPGPU-Sim: Done functional simulation (512 instructions simulated).") == 512
    with pytest.raises(RuntimeError):
        timing.functional_instructions(TIMING_LOG)
    st = timing.parse_stats(TIMING_LOG)
    t = timing.Timing("ml-dsa-65", "zv_verify_ml_dsa_65", items=256, blocks=2, block=128, registers=254,
                      shared_bytes=0, cycles=1000, thread_instructions=64000, warp_instructions=2500,
                      issued_by_active_lanes=st["issued_by_active_lanes"], agreed=True,
                      max_cycles=1000, wave_instructions=640000)
    assert t.sampled and t.wave_cycles() == 10000.0  # a tenth of the wave's instructions in 1,000 cycles
    limits = timing.SmLimits(threads=1536, registers=65536, shared_bytes=102400, blocks=32, schedulers=4,
                             clock_hz=1.132e9)
    row = timing.row(t, limits, predicted_h200=None)
    assert row["cycles_per_verify"] == round(10000 / 256, 1) and row["cycles"] == 1000
    assert row["sampled"] == {"max_cycles": 1000, "window_thread_instructions": 64000,
                              "wave_thread_instructions": 640000, "window_share": 0.1}
    full = timing.row(timing.Timing("ed25519", "zv_verify_ed25519", 4, 1, 128, 168, 0, cycles=1000,
                                    thread_instructions=64000, agreed=True), limits, None)
    assert full["sampled"] is None and full["cycles_per_verify"] == 250
    data = {"provenance": {"commit": "0" * 40, "date": "2026-12-06T00:00:00Z", "host": "h"}, "command": "c",
            "config": timing.CONFIG, "options": list(timing.OPTIONS), "limits": vars(limits),
            "rows": [full, row], "not_run": []}
    md = timing.markdown(data)
    assert "| ≈39 (sampled) |" in md and "| 250 |" in md
    assert ("zv_verify_ml_dsa_65: its first 1,000 cycles ran 64,000 of the wave's 640,000 thread instructions "
            "(10.0%)") in md


def test_max_cycles_is_refused_without_timing_mode():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpusim"), "--max-cycles", "1000"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--max-cycles N needs --timing" in proc.stderr


@sim_only
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_wave_past_max_cycles_is_sampled_under_the_simulator(sim):
    """The ML-DSA-65 block kernel's wave (~800 k cycles) stopped at 100 k: sampled, its verdicts
    checked by the functional run, the window a part of the wave."""
    from scripts.lib.gpusim import timing

    t = timing.run(sim, "ml-dsa-65-block", check.family_kernel("ml-dsa-65-block")[1], max_cycles=100_000)
    assert t.sampled and t.agreed and t.cycles == 100_000
    assert 0 < t.thread_instructions < t.wave_instructions and t.wave_cycles() > 100_000


def test_a_full_wave_is_the_sms_resident_blocks():
    from scripts.lib.gpusim import timing

    sm = timing.SmLimits(threads=1536, registers=65536, shared_bytes=102400, blocks=32, schedulers=4, clock_hz=1e9)
    assert sm.resident_blocks(128, 168, 18560) == 3  # registers: 168 × 128 × 3 = 64,512
    assert sm.resident_blocks(128, 128, 21000) == 4  # registers and shared memory both allow 4
    assert sm.resident_blocks(32, 64, 0) == 32  # the block limit
    assert sm.resident_blocks(128, 32, 0) == 12  # the thread limit


# ------------------------------------------------------------------ failing fast
@pytest.fixture()
def cli(monkeypatch):
    import runpy

    # run_path returns a copy of the script's globals: patch the ones its functions read
    ns = runpy.run_path(str(ROOT / "scripts" / "gpusim"), run_name="gpusim_cli")["setup"].__globals__
    monkeypatch.setattr(build, "cuda_home", lambda: Path("/nonexistent-cuda"))
    ns["warm_ptxinfo"] = lambda src, cuda, ptx: None
    return ns


def test_a_failed_simulator_build_ends_the_setup_without_waiting_for_the_module_builds(cli, monkeypatch):
    import threading
    import time

    started, release = threading.Event(), threading.Event()

    def slow_ptx(source):  # a module build that would take the whole test's time
        started.set()
        release.wait(60)
        return Path(f"{source.name}.ptx")

    def failed_build(root):
        started.wait(10)
        raise build.SimBuildError("apt-get install failed")

    cli["ptx_of"] = slow_ptx
    monkeypatch.setattr(build, "ensure", failed_build)
    t0 = time.perf_counter()
    with pytest.raises(build.SimBuildError):
        cli["setup"](["ed25519", "bls12-381"], False)
    assert time.perf_counter() - t0 < 10
    release.set()


def test_a_family_waits_only_for_its_own_modules_and_a_failed_one_is_raised(cli):
    import threading

    from app.core.errors import KernelBuildError

    release = threading.Event()

    def ptx(source):
        if source.name == "bls12_381":
            release.wait(60)
            raise KernelBuildError("NVRTC rejected bls12_381.cu")
        return Path(f"{source.name}.ptx")

    cli["ptx_of"] = ptx
    modules = cli["ModuleBuilds"](["merkle", "ed25519", "bls12-381"]).start()
    modules.wait(["ed25519"])  # ready while BLS12-381's build is still running
    assert not modules.done["bls12_381"].is_set()
    release.set()
    with pytest.raises(KernelBuildError):
        modules.wait(["bls12-381"])
