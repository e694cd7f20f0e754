"""scripts/gpu_model: the SASS classes, the occupancy and issue arithmetic, and the host
build's operation counts its ``ops`` method predicts from (the nvcc / cuobjdump half runs in
the script); the other methods' SASS readers; every report labelled a PREDICTION."""

from __future__ import annotations

import json
import runpy
import shutil
from pathlib import Path

import pytest

from app.core.schemes import SCHEMES
from app.engine.device import hostbuild, registry
from bench import provenance
from scripts.lib import gpu_model
from scripts.lib.gpu_model import bls12_381, slh_dsa
from scripts.lib.gpu_model import ops as gm

ROOT = Path(__file__).resolve().parents[1]

SASS = """
        Function : zv_probe
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   IMAD.WIDE.U32 R2, R4, R5, R2 ;
        /*0020*/                   IMAD.X R3, R6, R7, R3 ;
        /*0030*/              @!P0 IADD3 R8, P1, R8, R9, RZ ;
        /*0040*/                   LOP3.LUT R8, R8, 0xff, RZ, 0xc0, !PT ;
        /*0050*/                   BRA 0x50 ;
        /*0060*/                   NOP;
"""


def test_sass_lines_are_classified_by_issue_pipe():
    mix = gm.sass_mix(SASS)
    assert mix == {"zv_probe": {"imad_wide": 1, "imad": 1, "alu": 2, "mem": 1, "ctrl": 1, "other": 0}}


def test_occupancy_follows_registers_and_shared_memory():
    c = gm.Compiled(registers=168, smem=0)
    assert gm.resident_warps(c, 128) == 12  # 168 regs -> 5376 per warp; three 4-warp blocks fit 64 K
    assert gm.resident_warps(gm.Compiled(registers=172), 128) == 8  # one register more: two blocks
    assert gm.resident_warps(gm.Compiled(registers=32, smem=100 * 1024), 128) == 8  # shared memory limits


def test_issue_model_takes_the_busiest_pipe():
    wi = {"imad_wide": 10.0, "imad": 0.0, "alu": 30.0, "mem": 0.0, "ctrl": 0.0, "other": 0.0}
    assert gm.cycles(wi) == 60.0  # ALU: 2 cycles each
    wi["imad_wide"] = 20.0
    assert gm.cycles(wi) == 80.0  # IMAD.WIDE: 4 cycles each
    # 132 SMs x 4 SMSPs x 1.98 GHz x 80% / cycles per item, at full occupancy
    assert gm.rate(100.0, 12) == pytest.approx(132 * 4 * 1.98e9 * 0.8 / 100)
    assert gm.rate(100.0, 6) == pytest.approx(gm.rate(100.0, 12) / 2)


def test_probe_source_applies_each_primitive_once_and_twice():
    src = gm.probe_source(["ZV_OP_FE25519_MUL"])
    assert src.count("zv_ed_fe_mul(&x, &x, &y);") == 3
    assert "probe_ZV_OP_FE25519_MUL_1" in src and "probe_ZV_OP_FE25519_MUL_2" in src
    # every counted primitive has a probe; the rest are event counts the model does not price
    assert set(gm.PROBES) | gm.EVENTS == set(hostbuild.op_names()) and not set(gm.PROBES) & gm.EVENTS


@pytest.mark.skipif(hostbuild.compiler() is None, reason="no C++ compiler")
def test_host_counts_split_per_thread_and_serial_work():
    """Ed25519 over 200 valid items: ~1,600 products and ~1,270 squarings per verify, and
    the block chunks' batched inversion counted apart, well under one inversion per item."""
    batch = gm.sample_batch("ed25519", 200)
    par, ser, valid = gm.verify_counts(registry.VERIFY_KERNELS["ed25519"], batch)
    assert valid == len(batch)
    assert 1400 < par["ZV_OP_FE25519_MUL"] < 1900 and 1100 < par["ZV_OP_FE25519_SQ"] < 1500
    assert par["ZV_OP_SHA512_BLOCK"] >= 1
    assert 0 < ser["ZV_OP_FE25519_SQ"] < 254 / 32  # one inversion per chunk, shared by its items
    assert sum(ser.values()) < 0.01 * sum(par.values())


def test_report_labels_every_rate_a_prediction():
    row = {"scheme": "ed25519", "source": "ed25519.cu", "entry": "zv_verify_ed25519", "block": 128,
           "registers": 168, "stack_bytes": 0, "spill_bytes": 0, "smem_bytes": 0, "nvcc_seconds": 1.0,
           "warps_per_sm": 12, "static_sass": {}, "sample_items": 1, "sample_valid": 1, "ops_per_verify": {},
           "serial_ops_per_verify": {}, "warp_instructions_per_item": {}, "thread_instructions_per_verify": 1,
           "cycles_per_item_per_smsp": 1.0, "predicted_kernel_rate": 2e7, "predicted_leaves_rate": 1e8,
           "predicted_device_rate": 1.6e7, "h2d_bytes_per_item": 150.0, "d2h_bytes_per_item": 33,
           "predicted_pcie_rate": 3e8, "predicted_end_to_end": 1.4e7, "predicted_serial": 1.3e7, "target": 15e6}
    text = "\n".join(gm.markdown([row], {}, "nvcc test"))
    assert "PREDICTION" in text and "(predicted)" in text
    assert "Below the target of 15.0 M/s" in text and "kernel (20.0 M/s)" in text


NVDISASM = """
\t.section\t.text.zv_verify_x,"ax",@progbits
zv_verify_x:
.text.zv_verify_x:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   CALL.REL.NOINC `($zv_verify_x$_Z10zv_fp6_mulP6zv_fp6) ;
        /*0020*/                   CALL.REL.NOINC `($zv_verify_x$_Z10zv_fp6_mulP6zv_fp6) ;
        /*0030*/                   EXIT ;
.L_x_1:
        /*0040*/                   BRA `(.L_x_1) ;
$zv_verify_x$_Z10zv_fp6_mulP6zv_fp6:
        /*0050*/                   IMAD.WIDE.U32 R2, R4, R5, RZ ;
        /*0060*/                   NOP;
        /*0070*/                   RET.REL.NODEC R20 `(zv_verify_x) ;
"""


def test_nvdisasm_labels_split_kernels_from_their_routines_and_follow_calls():
    sass, calls = bls12_381.sass_by_function(NVDISASM)
    assert sum(sass["zv_verify_x"].values()) == 5 and sum(sass["_Z10zv_fp6_mulP6zv_fp6"].values()) == 2  # no NOP
    assert calls == {"zv_verify_x": {"_Z10zv_fp6_mulP6zv_fp6": 2}}
    assert bls12_381.dynamic_count("zv_verify_x", sass, calls) == 5 + 2 * 2
    # the SLH-DSA method counts every listed instruction of a label, padding included
    assert slh_dsa.sass_counts(NVDISASM) == {"zv_verify_x": 5, "$zv_verify_x$_Z10zv_fp6_mulP6zv_fp6": 3}
    assert slh_dsa.warps_per_sm(128) == 16 and slh_dsa.warps_per_sm(64) == 32


def test_every_family_has_one_method_and_every_report_is_labelled(tmp_path):
    cli = runpy.run_path(str(ROOT / "scripts" / "gpu_model"), run_name="gpu_model_cli")
    families = {s.family for s in SCHEMES.values()}
    # every scheme family, and shapes built on them (BLS12-381 aggregates) naming their families
    assert families <= set(cli["FAMILY_METHOD"])
    for extra in set(cli["FAMILY_METHOD"]) - families:
        assert set(cli["FAMILY_METHOD"][extra].SCHEME_FAMILIES) <= families
    prov = provenance.collect()
    gpu_model.write(tmp_path, "x", ["# PREDICTED rates", "", "| a |"], {"rows": []}, prov, "test method")
    md = (tmp_path / "x.md").read_text()
    assert provenance.parse(md)["kind"] == "PREDICTION" and "(method: test method)" in md
    assert json.loads((tmp_path / "x.json").read_text())["kind"] == "PREDICTION"
    with pytest.raises(ValueError):
        gpu_model.write(tmp_path, "y", ["# rates"], None, prov, "m")  # a title that hides it
    # The command that wrote a record is printed under its provenance line.
    gpu_model.write(tmp_path, "z", ["# PREDICTED rates", "", "| a |"], None,
                    {**prov, "command": "scripts/gpu_model --scheme ed25519"}, "m")
    assert (tmp_path / "z.md").read_text().splitlines()[3:6] == [
        "", "Command: `scripts/gpu_model --scheme ed25519`.", ""]


@pytest.mark.skipif(hostbuild.compiler() is None, reason="no C++ compiler")
def test_bls_aggregate_counts_follow_the_shapes_launches():
    """The counts the ``products`` method prices: per FastAggregateVerify item two Miller-loop
    pairs and one final exponentiation whatever its key count, its Fp products growing by
    the same amount per key; AggregateVerify n + 1 pairs; the RLC batch one final
    exponentiation per group and fewer Fp products than single verifies; all verdicts true."""
    from scripts.lib.gpu_model import bls_aggregate

    rows = bls_aggregate.shape_counts(fast_keys=(1, 3, 5), aggregate_pairs=(1, 3), rlc_items=8)
    assert all(r["ok"] for r in rows)
    loops, pairs, finals, fp = ("ZV_OP_BLS_MILLER_LOOP", "ZV_OP_BLS_MILLER_PAIR", "ZV_OP_BLS_FINAL_EXP",
                                "ZV_OP_BLS_FP_MUL")
    fast = [r["counts"] for r in rows if r["shape"] == "FastAggregateVerify"]
    assert all(c[pairs] == 2 and c[finals] == 1 for c in fast)
    per_key = [(b[fp] - a[fp]) / 2 for a, b in zip(fast, fast[1:])]
    assert per_key[0] > 1000 and abs(per_key[1] - per_key[0]) / per_key[0] < 0.05
    agg = {r["keys"]: r["counts"] for r in rows if r["shape"] == "AggregateVerify"}
    assert agg[1][pairs] == 2 and agg[3][pairs] == agg[3][loops] == 4 and agg[3][finals] == 1
    rlc, single = rows[-2]["counts"], rows[-1]["counts"]
    assert rlc[finals] == 1 / 8 and rlc[pairs] == 9 / 8 and single[finals] == 1 and single[pairs] == 2
    assert rlc[fp] < single[fp]


@pytest.mark.skipif(hostbuild.compiler() is None or shutil.which("gprof") is None,
                    reason="no C++ compiler or gprof")
def test_bls_census_builds_and_counts_a_verify(tmp_path):
    """The ``leaves`` method's own host build (g++ -pg, not hostbuild's) still compiles the
    kernel source (it once lacked the fibers' headers, and scripts/gpu_model failed there)
    and counts the Fp leaves of one verify."""
    from app.engine.reference import kat

    [item] = kat.sign_items("bls12-381", 1, seed=1, msg_len=32)
    calls = bls12_381.census(tmp_path, "verify", item)
    assert calls["fp_mul"] > 10_000 and calls["fp_sqr"] > 1000 and calls["sha256_block"] > 0


def test_a_prediction_carries_the_simulators_second_opinion_for_the_kernels_it_names(tmp_path):
    rows = [{"family": "ml-dsa-65-block", "entry": "zv_verify_ml_dsa_block_65", "cycles_per_verify": 286653.0,
             "simulated_verifies_per_s_per_sm": 3949, "simulated_carried_to_h200_verifies_per_s": 911765,
             "simulated_over_predicted": 0.309, "single_lane_share": 0.079, "issue_slot_use": 0.14, "commit": "abc"},
            {"family": "ed25519", "entry": "zv_verify_ed25519", "error": "not run"}]
    (tmp_path / "gpusim_timing.json").write_text(json.dumps({"rows": rows}))
    lines = gpu_model.second_opinion("| ml-dsa-65 | block | 2,948,751 |", tmp_path)
    assert any("SIMULATED" in ln for ln in lines)
    assert sum("zv_verify_ml_dsa_block_65" in ln and "0.31" in ln for ln in lines) == 1
    assert not any("ed25519" in ln for ln in lines)  # a row with an error is not an opinion
    # A record none of whose kernels was simulated says so, and how far the simulated ones fell.
    none = gpu_model.second_opinion("| ed25519 |", tmp_path)
    assert "## Second opinion: none" in none and not any("SIMULATED" in ln for ln in none)
    assert any("0.31–0.31 of their predictions" in ln for ln in none)
    assert gpu_model.second_opinion("anything", tmp_path / "absent") == []
    # A sampled row says so beside its figure, and its extrapolated ratio stays out of the spread.
    rows.append({"family": "ml-dsa-65", "entry": "zv_verify_ml_dsa_65", "cycles_per_verify": 1_000_000.0,
                 "simulated_verifies_per_s_per_sm": 1132, "simulated_carried_to_h200_verifies_per_s": 261360,
                 "simulated_over_predicted": 0.03, "single_lane_share": 0.0, "issue_slot_use": 0.01, "commit": "def",
                 "sampled": {"max_cycles": 10, "window_thread_instructions": 1, "wave_thread_instructions": 8,
                             "window_share": 0.125}})
    (tmp_path / "gpusim_timing.json").write_text(json.dumps({"rows": rows}))
    opinion = gpu_model.second_opinion("| ml-dsa-65 | thread |", tmp_path)
    [thread] = [ln for ln in opinion if "zv_verify_ml_dsa_65`" in ln]
    assert "≈1,000,000 cycles per verify per SM, sampled (12.5% of the wave's instructions simulated" in thread
    assert any("0.31–0.31 of their predictions" in ln for ln in gpu_model.second_opinion("| ed25519 |", tmp_path))
