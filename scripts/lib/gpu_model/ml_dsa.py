"""Method ``keccak`` of scripts/gpu_model: SASS instructions, shared- and local-memory traffic
per ML-DSA verification and a PREDICTED H200 rate for both kernels (one thread per signature,
zv_verify_ml_dsa_<level>; one block of 128 per signature, zv_verify_ml_dsa_block_<level>);
writes bench/results/ml_dsa_sass.md and .json.

  1. nvcc compiles the ml_dsa compilation unit for sm_90 (-cubin, the project's flags) and
     cuobjdump -sass disassembles it.  The Keccak-f[1600] permutation is one out-of-line
     function (ZV_KECCAK_OUTLINE, keccak.cuh) shared by every sponge call: its
     straight-line body is counted exactly (I_perm instructions per permutation).
  2. Permutations per verification (n_perm) follow from FIPS 204's sizes: tr = H(pk)
     absorbs pk_len + padding at rate 136; μ absorbs 64 + 2 + |ctx| + |M|; SampleInBall
     squeezes 8 + (bytes drawn) ≤ one block in practice; ExpandA runs K·L SHAKE128 streams,
     each as many 168-byte blocks as rejection sampling needs (counted here with hashlib on
     random ρ, mean over 200 keys); c̃′ absorbs 64 + K·32·bitlen(w1).  Messages are 32
     bytes, ctx empty.
  3. The rest of the work (NTTs, unpacking, the multiply-accumulate of Â, UseHint) is not
     a straight line; its instructions are estimated from the host build (the same source,
     g++ -O2, no bound checks): the measured time of one verification minus n_perm times
     the measured time of one permutation of the same library, relative to the latter,
     scales I_perm·n_perm.  This assumes that part has the same instructions-per-second
     ratio to Keccak on both machines — an assumption, which is why the total is a
     prediction.  It errs towards more instructions: x86-64 runs Keccak's 64-bit lanes
     natively while sm_90 needs two 32-bit instructions per lane operation, so on the GPU
     Keccak's share is larger.
  4. Rate = issue bound of 32-bit integer instructions on an H200: SMs × 32-bit integer
     lanes per clock per SM × boost clock ÷ instructions per verification.  An upper bound:
     it ignores local-memory latency (the polynomials live in local memory) and the
     occupancy the register count allows; the Keccak-only bound is given as well.
  5. Memory traffic, counted from the kernels' loops (ml_dsa.cuh) per verification, and a
     bound from each.  Thread kernel: the polynomials live in local memory; every NTT
     butterfly loads and stores two words ((L + 2K + 1) transforms of 1024), ExpandA's
     multiply-accumulate loads ẑ and loads and stores the accumulator per coefficient
     (K·L·256), the K rows' unpacking, pointwise products and UseHint touch 6 words per
     coefficient, z's unpacking stores L·256.  Its resident working set (warps per SM × 32
     × the stack frame ptxas reports, over 132 SMs) is far above the 50 MB L2, so that
     traffic is charged to HBM (4.8 TB/s); the Keccak state and squeeze buffers, touched
     around each permutation call, are assumed to hit L1 and are not charged.  Bound: HBM
     bandwidth ÷ bytes per verification.
     Block kernel: the same loops in shared memory (ExpandA's accumulate is an atomic load
     and store), with 2-way bank conflicts in the 5 NTT layers whose butterfly span is
     below 32 (len 1 .. 16: two lanes of a warp meet in one bank), so those layers count
     twice.  Bound: 128 bytes per clock per SM ÷ bytes (conflicts included).  Its local
     memory is a thread's Keccak state (L1), not charged.
  6. Block kernel, issue: warp instructions per verification.  The serial hashes (tr and μ,
     SampleInBall, c̃′) are charged I_perm whole warp instructions per permutation, as if one
     lane ran it: SampleInBall does, while tr, μ and c̃′ run on the first warp's block sponge
     (25 lanes, two warp barriers per round, keccak.cuh), whose inlined rounds are not
     counted apart — an approximation, checked by the SIMULATED second opinion; ExpandA's
     K·L streams run one per thread, ⌈K·L/32⌉ warps each as long as its longest stream (the
     mean of that maximum over random ρ, from hashlib); the non-Keccak work is item 3's
     estimate divided by 32 (spread over all lanes).  Bound: 2 int32 warp instructions per
     clock per SM ÷ warp instructions.
  7. Block kernel, latency: one block's critical path is at least SampleInBall's, then the
     longer of μ's chain (tr and μ) and the longest ExpandA stream, then c̃′'s permutations,
     at one instruction per clock for the warp that runs them (an optimistic issue rate for a
     lone, dependent chain), plus the non-Keccak part spread over the block's 4 warps.  The
     blocks resident per SM (registers and shared memory from ptxas, occupancy.py) run side
     by side.  Bound: SMs × resident blocks × clock ÷ critical-path cycles.
  8. Every bound is an upper bound on the rate (each ignores the others' costs and latency
     that is not hidden), so the PREDICTION for each kernel is the smallest of its bounds,
     and is itself an upper bound.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from app.engine.device import hostbuild, occupancy, ptxas
from app.engine.reference import kat
from scripts.lib import kernels
from scripts.lib.gpu_model import H200, build_unit, write
from tests.oracles import ml_dsa_model as m

FAMILIES = ("ml-dsa",)
NAME = "ml_dsa_sass"
UNIT = "ml_dsa"
METHOD = ("keccak: SASS of the out-of-line Keccak permutation × permutations per verify (FIPS 204 sizes), "
          "the rest scaled by the host build's time ratio; for the thread kernel the 32-bit integer issue bound "
          "and its local-memory traffic against HBM, for the block kernel warp-instruction issue, shared-memory "
          "traffic and one block's critical path; the smallest bound of each; scripts/lib/gpu_model/ml_dsa.py")
MSG_LEN = 32


def permutation_body(ins: list[kernels.Instr]) -> list[str]:
    """The out-of-line Keccak function inside one entry: from the CALL target to its RET."""
    targets = {int(i.text.split()[-1], 16) for i in ins if i.text.startswith("CALL.REL")}
    if len(targets) != 1:
        raise RuntimeError(f"expected one call target (the permutation), found {sorted(map(hex, targets))}")
    (target,) = targets
    body, inside = [], False
    for i in ins:
        inside = inside or i.address == target
        if inside:
            body.append(i.text)
            if i.text.startswith("RET"):
                return body
    raise RuntimeError("no RET after the permutation's start")


def blocks(n_bytes: int, rate: int) -> int:
    """Permutations to absorb n bytes and squeeze one block (pad10*1 adds at least a byte)."""
    return n_bytes // rate + 1


def expand_a_blocks(p: m.Params, keys: int = 200) -> float:
    """Mean SHAKE128 blocks per Â entry over ``keys`` random ρ (rejection sampling, Alg. 30)."""
    rng = random.Random(204)
    total = 0
    for _ in range(keys):
        rho = rng.randbytes(32)
        r, s = rng.randrange(p.k), rng.randrange(p.l)
        stream = hashlib.shake_128(rho + bytes([s, r])).digest(168 * 8)
        got = pos = 0
        while got < 256:
            if int.from_bytes(stream[pos:pos + 3], "little") & 0x7FFFFF < m.Q:
                got += 1
            pos += 3
        total += -(-pos // 168)
    return total / keys


def expand_a_warps(p: m.Params, keys: int = 50) -> tuple[float, float]:
    """The block kernel's ExpandA over ``keys`` random ρ: (mean of Σ over its ⌈K·L/32⌉ warps of
    the warp's longest stream, mean of the longest stream of all), in SHAKE128 blocks."""
    rng = random.Random(2041)
    per_warp_sum, longest = 0, 0
    for _ in range(keys):
        rho = rng.randbytes(32)
        lengths = []
        for e in range(p.k * p.l):
            r, s_ = divmod(e, p.l)
            stream = hashlib.shake_128(rho + bytes([s_, r])).digest(168 * 8)
            got = pos = 0
            while got < 256:
                if int.from_bytes(stream[pos:pos + 3], "little") & 0x7FFFFF < m.Q:
                    got += 1
                pos += 3
            lengths.append(-(-pos // 168))
        per_warp_sum += sum(max(lengths[w:w + 32]) for w in range(0, len(lengths), 32))
        longest += max(lengths)
    return per_warp_sum / keys, longest / keys


def traffic(p: m.Params) -> dict[str, float]:
    """Bytes per verification (item 5 of the method): the thread kernel's polynomial traffic in
    local memory, and the block kernel's in shared memory (raw, and with bank conflicts)."""
    k, ell, n = p.k, p.l, 256
    w1_bytes = k * 32 * (6 if p.w1_m == 44 else 4)
    ntt = (ell + 2 * k + 1) * 1024 * 16
    local = ntt + k * ell * n * 12 + k * n * 4 * 6 + ell * n * 4
    # Block: decode stores z, t, zeroes acc and hint; the MAC loads ẑ and atomically updates
    # acc; pointwise loads acc, ĉ, t̂ and stores acc; w1 loads acc and hint, stores w1.
    shared = ntt + k * ell * n * 12 + (ell + k) * n * 4 + k * n * 5 + k * n * 16 + k * n * 5 + w1_bytes
    conflicts = (ell + 2 * k + 1) * 1024 * 16 * 5 / 8  # the 5 layers of 8 with 2-way conflicts count twice
    return {"thread_local_bytes": local, "block_shared_bytes": shared, "block_shared_bytes_with_conflicts":
            shared + conflicts}


def permutations(p: m.Params) -> dict[str, float]:
    w1_bits = 6 if p.w1_m == 44 else 4
    return {"tr": blocks(p.pk_bytes, 136), "mu": blocks(64 + 2 + MSG_LEN, 136), "sample_in_ball": 1,
            "expand_a": p.k * p.l * expand_a_blocks(p), "c_tilde": blocks(64 + p.k * 32 * w1_bits, 136)}


def host_times(level: int, runs: int) -> tuple[float, float]:
    """Median host seconds per verification (valid items) and per Keccak permutation, both
    from the same host library (zv_mldsa_hook_keccak), measured side by side."""
    src = kernels.source(UNIT)
    lib = hostbuild.load(src.stem, src.parent)
    items = kat.sign_items(f"ml-dsa-{level}", 200, seed=5, msg_len=MSG_LEN)
    state = np.zeros(25, np.uint64)
    n_perm = 20_000
    tv, tp = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        if not all(m.kernel_verdicts(lib, items)):
            raise RuntimeError(f"ml-dsa-{level}: the host build rejected a valid item")
        tv.append((time.perf_counter() - t0) / len(items))
        t0 = time.perf_counter()
        lib.zv_mldsa_hook_keccak(ctypes.c_uint64(n_perm), ctypes.c_void_p(state.ctypes.data))
        tp.append((time.perf_counter() - t0) / n_perm)
    return statistics.median(tv), statistics.median(tp)


def add_arguments(ap) -> None:
    ap.add_argument("--runs", type=int, default=5, help="keccak: host timing runs per set (ML-DSA)")


def predict(scheme_ids: list[str], args, work: Path, prov: dict) -> None:
    if kernels.tool("cuobjdump") is None:
        raise RuntimeError("cuobjdump is needed (pip install '.[model]')")
    os.environ.pop("ZAPVERIFY_KERNEL_VERIFY", None)  # time the build without bound checks
    cubin, log, _ = build_unit(work, UNIT)
    usage = {e.entry: e for e in ptxas.parse(log)}
    funcs = kernels.by_function(kernels.cuobjdump_sass(cubin))
    issue = H200.sms * H200.int32_lanes_per_sm_clock * H200.clock_hz
    warp_issue = H200.sms * H200.int32_warp_instructions_per_sm_clock * H200.clock_hz
    shared_bw = H200.sms * H200.shared_bytes_per_sm_clock * H200.clock_hz
    rows = {}
    for level, p in m.PARAMS.items():
        if f"ml-dsa-{level}" not in scheme_ids:
            continue
        ins = funcs[f"zv_verify_ml_dsa_{level}"]
        perm = permutation_body(ins)
        n_perm = permutations(p)
        total_perm = sum(n_perm.values())
        t_verify, t_perm = host_times(level, args.runs)
        rest_ratio = max(0.0, (t_verify - total_perm * t_perm) / (total_perm * t_perm))
        i_perm = len(perm)
        keccak_ins = i_perm * total_perm
        total_ins = keccak_ins * (1 + rest_ratio)
        rest_ins = total_ins - keccak_ins
        mem = traffic(p)
        # Thread kernel: the issue bound (item 4) and the local-memory bound (item 5).
        t_use = usage[f"zv_verify_ml_dsa_{level}"]
        t_warps = occupancy.blocks_per_sm(t_use.registers, 128) * 4
        t_bounds = {"issue": issue / total_ins, "local_memory_hbm": H200.hbm_bytes_per_s / mem["thread_local_bytes"]}
        # Block kernel: issue in warp instructions (item 6), shared memory (5), latency (7).
        b_use = usage[f"zv_verify_ml_dsa_block_{level}"]
        b_blocks = occupancy.blocks_per_sm(b_use.registers, 128, b_use.shared_bytes)
        warp_blocks, longest = expand_a_warps(p)
        serial_perm = n_perm["tr"] + n_perm["mu"] + n_perm["sample_in_ball"] + n_perm["c_tilde"]
        block_warp_ins = i_perm * (serial_perm + warp_blocks) + rest_ins / 32
        critical = i_perm * (n_perm["sample_in_ball"] + max(n_perm["tr"] + n_perm["mu"], longest)
                             + n_perm["c_tilde"]) + rest_ins / 32 / 4
        b_bounds = {"issue": warp_issue / block_warp_ins,
                    "shared_memory": shared_bw / mem["block_shared_bytes_with_conflicts"],
                    "latency": H200.sms * b_blocks * H200.clock_hz / critical}
        rows[f"ml-dsa-{level}"] = {
            "static_sass_instructions": len(ins), "permutation_sass_instructions": i_perm,
            "permutations_per_verify": {k: round(v, 2) for k, v in n_perm.items()},
            "permutations_total": round(total_perm, 2), "keccak_instructions_per_verify": round(keccak_ins),
            "host_us_per_verify": round(t_verify * 1e6, 1), "host_us_per_permutation": round(t_perm * 1e6, 3),
            "non_keccak_to_keccak_ratio_host": round(rest_ratio, 2),
            "predicted_instructions_per_verify": round(total_ins),
            "keccak_only_bound_verifies_per_s": round(issue / keccak_ins),
            **{k: round(v) for k, v in mem.items()},
            "thread": {"registers": t_use.registers, "stack_bytes": t_use.stack_bytes,
                       "spill_bytes": t_use.spill_store_bytes + t_use.spill_load_bytes, "warps_per_sm": t_warps,
                       "resident_local_bytes_per_gpu": t_warps * 32 * t_use.stack_bytes * H200.sms,
                       "bounds_verifies_per_s": {k: round(v) for k, v in t_bounds.items()},
                       "predicted_h200_verifies_per_s": round(min(t_bounds.values())),
                       "binding": min(t_bounds, key=t_bounds.__getitem__)},
            "block": {"registers": b_use.registers, "stack_bytes": b_use.stack_bytes,
                      "spill_bytes": b_use.spill_store_bytes + b_use.spill_load_bytes,
                      "shared_bytes": b_use.shared_bytes, "blocks_per_sm": b_blocks,
                      "expand_a_warp_blocks": round(warp_blocks, 2), "longest_stream_blocks": round(longest, 2),
                      "warp_instructions_per_verify": round(block_warp_ins),
                      "critical_path_cycles": round(critical),
                      "bounds_verifies_per_s": {k: round(v) for k, v in b_bounds.items()},
                      "predicted_h200_verifies_per_s": round(min(b_bounds.values())),
                      "binding": min(b_bounds, key=b_bounds.__getitem__)},
            # The thread kernel's figure as this file has always reported it (issue bound only).
            "predicted_h200_verifies_per_s": round(min(t_bounds.values())),
        }
    result = {"nvcc": ptxas.version(), "flags": ptxas.NVCC_FLAGS, "message_bytes": MSG_LEN, "sets": rows,
              "kernel_sources_sha256": hostbuild.sources_digest()}
    lines = ["# ML-DSA kernels: instructions, memory traffic and PREDICTED H200 rates of both kernels", "",
             "**Predictions, not measurements** (no GPU ran them).  Method `keccak` of `scripts/gpu_model` "
             f"(below); {result['nvcc']}; flags {' '.join(ptxas.NVCC_FLAGS)}; {MSG_LEN}-byte messages, empty "
             "context.  Each bound is an upper bound on the rate; a kernel's PREDICTION is the smallest "
             "of its bounds.", "",
             "| set | kernel | regs | stack B | spill B | shared B | resident | bounds (M verifies/s) | "
             "PREDICTED H200 verifies/s |",
             "|---|---|---:|---:|---:|---:|---|---|---:|"]
    for sid, r in rows.items():
        t, b = r["thread"], r["block"]
        lines.append(f"| {sid} | thread | {t['registers']} | {t['stack_bytes']} | {t['spill_bytes']} | 0 | "
                     f"{t['warps_per_sm']} warps/SM | " + ", ".join(
                         f"{k} {v / 1e6:.2f}" for k, v in t["bounds_verifies_per_s"].items()) +
                     f" | **{t['predicted_h200_verifies_per_s'] / 1e6:.2f} M** ({t['binding']}) |")
        lines.append(f"| {sid} | block | {b['registers']} | {b['stack_bytes']} | {b['spill_bytes']} | "
                     f"{b['shared_bytes']} | {b['blocks_per_sm']} blocks/SM | " + ", ".join(
                         f"{k} {v / 1e6:.2f}" for k, v in b["bounds_verifies_per_s"].items()) +
                     f" | **{b['predicted_h200_verifies_per_s'] / 1e6:.2f} M** ({b['binding']}) |")
    lines += ["", "Counts per verification:", "",
              "| set | static SASS | I_perm | permutations | Keccak instr. | host non-Keccak : Keccak | "
              "instr. (thread) | local B (thread) | resident local B / GPU (thread) | warp instr. (block) | "
              "critical path cycles (block) | shared B (block, with conflicts) |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for sid, r in rows.items():
        lines.append(f"| {sid} | {r['static_sass_instructions']} | {r['permutation_sass_instructions']} | "
                     f"{r['permutations_total']} | {r['keccak_instructions_per_verify']} | "
                     f"{r['non_keccak_to_keccak_ratio_host']} | {r['predicted_instructions_per_verify']} | "
                     f"{r['thread_local_bytes']} | {r['thread']['resident_local_bytes_per_gpu']} | "
                     f"{r['block']['warp_instructions_per_verify']} | {r['block']['critical_path_cycles']} | "
                     f"{r['block_shared_bytes']} ({r['block_shared_bytes_with_conflicts']}) |")
    lines += ["", "Permutations per verification by phase: " + "; ".join(
        f"{sid}: " + ", ".join(f"{k} {v}" for k, v in r["permutations_per_verify"].items()) for sid, r in rows.items()),
        "", "## Method", "", (__doc__ or "").split("\n\n", 1)[1].strip("\n")]
    write(args.out, NAME, lines, result, prov, METHOD)
    for sid, r in rows.items():
        print(f"{sid}: PREDICTED thread {r['thread']['predicted_h200_verifies_per_s'] / 1e6:.2f} M/s, "
              f"block {r['block']['predicted_h200_verifies_per_s'] / 1e6:.2f} M/s", file=sys.stderr)
