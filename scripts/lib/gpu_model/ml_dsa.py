"""Method ``keccak`` of scripts/gpu_model: SASS instructions per ML-DSA verification and a
PREDICTED H200 rate; writes bench/results/ml_dsa_sass.md and .json.

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

from app.engine.device import hostbuild, ptxas
from app.engine.reference import kat
from scripts.lib import kernels
from scripts.lib.gpu_model import H200, build_unit, write
from tests.oracles import ml_dsa_model as m

FAMILIES = ("ml-dsa",)
NAME = "ml_dsa_sass"
UNIT = "ml_dsa"
METHOD = ("keccak: SASS of the out-of-line Keccak permutation × permutations per verify (FIPS 204 sizes), "
          "the rest scaled by the host build's time ratio, against the 32-bit integer issue bound; "
          "scripts/lib/gpu_model/ml_dsa.py")
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
    cubin, _, _ = build_unit(work, UNIT)
    funcs = kernels.by_function(kernels.cuobjdump_sass(cubin))
    issue = H200.sms * H200.int32_lanes_per_sm_clock * H200.clock_hz
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
        keccak_ins = len(perm) * total_perm
        total_ins = keccak_ins * (1 + rest_ratio)
        rows[f"ml-dsa-{level}"] = {
            "static_sass_instructions": len(ins), "permutation_sass_instructions": len(perm),
            "permutations_per_verify": {k: round(v, 2) for k, v in n_perm.items()},
            "permutations_total": round(total_perm, 2), "keccak_instructions_per_verify": round(keccak_ins),
            "host_us_per_verify": round(t_verify * 1e6, 1), "host_us_per_permutation": round(t_perm * 1e6, 3),
            "non_keccak_to_keccak_ratio_host": round(rest_ratio, 2),
            "predicted_instructions_per_verify": round(total_ins),
            "predicted_h200_verifies_per_s": round(issue / total_ins),
            "keccak_only_bound_verifies_per_s": round(issue / keccak_ins),
        }
    result = {"nvcc": ptxas.version(), "flags": ptxas.NVCC_FLAGS, "message_bytes": MSG_LEN, "sets": rows,
              "kernel_sources_sha256": hostbuild.sources_digest()}
    lines = ["# ML-DSA kernel: SASS instructions per verification and a PREDICTED H200 rate", "",
             "**A prediction, not a measurement** (no GPU ran it).  Method `keccak` of `scripts/gpu_model` "
             f"(below); {result['nvcc']}; flags {' '.join(ptxas.NVCC_FLAGS)}; {MSG_LEN}-byte messages, empty "
             "context.", "",
             "| set | static SASS | I_perm | permutations / verify | Keccak instr. / verify | host non-Keccak : Keccak "
             "| predicted instr. / verify | PREDICTED H200 verifies/s | Keccak-only bound /s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for sid, r in rows.items():
        lines.append(f"| {sid} | {r['static_sass_instructions']} | {r['permutation_sass_instructions']} | "
                     f"{r['permutations_total']} | {r['keccak_instructions_per_verify']} | "
                     f"{r['non_keccak_to_keccak_ratio_host']} | {r['predicted_instructions_per_verify']} | "
                     f"{r['predicted_h200_verifies_per_s'] / 1e6:.1f} M | "
                     f"{r['keccak_only_bound_verifies_per_s'] / 1e6:.1f} M |")
    lines += ["", "Permutations per verification by phase: " + "; ".join(
        f"{sid}: " + ", ".join(f"{k} {v}" for k, v in r["permutations_per_verify"].items()) for sid, r in rows.items()),
        "", "## Method", "", (__doc__ or "").split("\n\n", 1)[1].strip("\n")]
    write(args.out, NAME, lines, result, prov, METHOD)
    for sid, r in rows.items():
        print(f"{sid}: PREDICTED {r['predicted_h200_verifies_per_s'] / 1e6:.1f} M verifies/s", file=sys.stderr)
