"""Method ``leaves`` of scripts/gpu_model: the BLS12-381 verify kernel's PREDICTED H200 rate
from the SASS of its Fp leaves and their call counts; writes bench/results/bls12_381_gpu.md.

 1. nvcc (app.engine.device.ptxas's flags) on the bls12_381 compilation unit: registers,
    stack frame and spills of zv_verify_bls12_381 and of every out-of-line routine.
 2. Leaf SASS costs (nvdisasm): tiny kernels each doing exactly one zv_fp_mul, zv_fp_sqr,
    zv_fp_add, zv_fp_sub or zv_fp_neg, and one zv_sha256_block, compiled the same way; from
    each, the SASS count of a kernel that only copies its operand (loads, store, exit) is
    subtracted.
 3. Leaf census: the same kernel source built for the host with ``g++ -pg -fno-inline`` and
    run on one valid item (app.engine.reference.kat); gprof's call counts of the leaves are the
    number of Fp products, additions, subtractions, negations and SHA-256 blocks per verify
    (the verify is data-independent except for decoding branches, so one item stands for
    all valid ones).
 4. Overhead: what the leaves leave out (moves between Fp values, stack traffic of the
    Fp2/Fp6/Fp12 temporaries, calls) is measured on zv_fp12_mul, which is straight-line
    code: its SASS plus, through the CALL instructions in the SASS, that of every
    out-of-line routine it calls (zv_fp6_mul, zv_fp2_mul, ...), recursively, over its own
    leaf census times the leaf costs.  The same ratio is shown for other straight-line
    routines as a check.
 5. Instructions per verify = Σ census × leaf cost × overhead + SHA-256 blocks × block cost.
    The issue bound (all lanes of every sub-partition) and the IMAD bound (32-bit integer
    multiply-add lanes) give an upper bound on the rate; the PREDICTION is that bound times
    an efficiency E (--efficiency, default 0.5: latency of the dependent carry chains at
    the occupancy the register count allows, and local-memory traffic), stated, not measured.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

from app.engine.device import ptxas
from app.engine.device.hostbuild import HOST_HEADERS, sources_digest
from app.engine.reference import kat
from scripts.lib import kernels
from scripts.lib.gpu_model import H200, build_unit, cached_build, write

FAMILIES = ("bls12-381",)
NAME = "bls12_381_gpu"
UNIT = "bls12_381"
METHOD = ("leaves: SASS of each Fp leaf × its gprof call count per verify, × the overhead measured on zv_fp12_mul, "
          "against the issue and IMAD bounds × an assumed efficiency; scripts/lib/gpu_model/bls12_381.py")

#: One leaf operation per kernel: "copy" is the baseline subtracted from the others.
LEAF_KERNELS = {
    "copy": "*r = *a;",
    "fp_mul": "zv_fp_mul(r, a, b);",
    "fp_sqr": "zv_fp_sqr(r, a);",
    "fp_add": "zv_fp_add(r, a, b);",
    "fp_sub": "zv_fp_sub(r, a, b);",
    "fp_neg": "zv_fp_neg(r, a);",
    "sha256_block": "zv_sha256_block(r->v, (const zv_u8 *)b);",
}
#: gprof name of each leaf's host function (SHA-256's compression is the sha2.cuh template's
#: instance, which zv_sha256_block wraps and zv_sha256_update/final call directly).
LEAF_HOST = {"fp_mul": "zv_fp_mont_mul", "fp_sqr": "zv_fp_sqr", "fp_add": "zv_fp_add", "fp_sub": "zv_fp_sub",
             "fp_neg": "zv_fp_neg", "sha256_block": "void zv_sha2_block<zv_sha256_params>"}

CENSUS_MAIN = r"""#include <stdio.h>
#include <string.h>
static void hex(zv_u8 *o, const char *s) {
    for (size_t i = 0; i < strlen(s) / 2; i++) sscanf(s + 2 * i, "%2hhx", &o[i]);
}
int main(int argc, char **argv) {
    static zv_u8 pk[48], sig[96], msg[4096];
    hex(pk, argv[2]); hex(sig, argv[3]); hex(msg, argv[4]);
    zv_fp12 f; zv_bls_line l; zv_bls_miller_pair s; zv_fp6 s6;
    memset(&f, 0, sizeof f); memset(&l, 0, sizeof l); memset(&s, 0, sizeof s); memset(&s6, 0, sizeof s6);
    if (!strcmp(argv[1], "verify")) return !zv_bls12_381_verify(pk, 48, sig, 96, msg, strlen(argv[4]) / 2);
    if (!strcmp(argv[1], "zv_fp12_mul")) zv_fp12_mul(&f, &f, &f);
    if (!strcmp(argv[1], "zv_fp12_sqr")) zv_fp12_sqr(&f, &f);
    if (!strcmp(argv[1], "zv_fp6_mul")) zv_fp6_mul(&s6, &s6, &s6);
    if (!strcmp(argv[1], "zv_fp12_mul_by_line")) zv_fp12_mul_by_line(&f, &l);
    if (!strcmp(argv[1], "zv_fp12_cyclotomic_sqr")) zv_fp12_cyclotomic_sqr(&f, &f);
    if (!strcmp(argv[1], "zv_bls_miller_double")) zv_bls_miller_double(&s, &l);
    /* print the results so the compiler keeps the calls */
    printf("%u\n", f.c0.c0.c0.v[0] ^ s6.c0.c0.v[0] ^ l.c0.c0.v[0] ^ s.tx.c0.v[0]);
    return 0;
}
"""
#: Straight-line routines whose SASS (with their out-of-line callees) is compared with
#: their leaf census.
CHECKED = ["zv_fp12_mul", "zv_fp12_sqr", "zv_fp6_mul", "zv_fp12_mul_by_line", "zv_fp12_cyclotomic_sqr",
           "zv_bls_miller_double"]
OVERHEAD_FROM = "zv_fp12_mul"

_CALL = re.compile(r"CALL\.\S+\s+`\(([^)`]+)\)")


def sass_by_function(sass: str) -> tuple[dict[str, Counter], dict[str, Counter]]:
    """From nvdisasm text: routine (mangled name, the kernel's prefix dropped) -> opcode
    histogram of its own SASS (NOPs excluded), and routine -> Counter of the routines its
    CALL instructions name."""
    out: dict[str, Counter] = {}
    calls: dict[str, Counter] = {}
    for label, instrs in kernels.by_label(sass).items():
        name = label.rsplit("$", 1)[-1]
        out.setdefault(name, Counter()).update(kernels.histogram(instrs))
        for i in instrs:
            if c := _CALL.search(i.text):
                calls.setdefault(name, Counter())[c.group(1).rsplit("$", 1)[-1]] += 1
    return out, calls


def dynamic_count(name: str, sass: dict[str, Counter], calls: dict[str, Counter]) -> int:
    """SASS instructions one call of the straight-line routine ``name`` executes: its own
    plus, recursively, those of the routines it calls (by the CALLs in its SASS)."""
    return sum(sass[name].values()) + sum(n * dynamic_count(callee, sass, calls)
                                          for callee, n in calls.get(name, Counter()).items())


def leaf_costs(work: Path) -> dict[str, Counter]:
    """SASS opcode histogram of each leaf operation (its kernel minus the copy kernel)."""
    code = kernels.includes("bls12_381.cuh") + "".join(
        f"ZV_KERNEL void zv_leaf_{name}(zv_fp *r, const zv_fp *a, const zv_fp *b) {{ {body} }}\n"
        for name, body in LEAF_KERNELS.items())
    cubin, _, _ = cached_build(work, "bls_leaves", lambda c: kernels.compile_text(code, "bls_leaves", c))
    sass = {kernels.demangled(k): v for k, v in sass_by_function(kernels.nvdisasm_sass(cubin))[0].items()}
    base = sass["zv_leaf_copy"]
    out = {}
    for name in LEAF_KERNELS:
        if name != "copy":
            c = Counter(sass[f"zv_leaf_{name}"])
            c.subtract(base)
            out[name] = +c  # drop the (non-positive) baseline remainders
    return out


def census_program(work: Path) -> Path:
    """The census program (bls12_381.cuh and :data:`CENSUS_MAIN`, built for the host with
    ``g++ -pg -fno-inline``), built into ``work`` unless there.  Raises CalledProcessError
    (its ``stderr`` the compiler's) when the kernel source no longer builds for the host."""
    exe = work / "bls_census"
    if not exe.exists():
        (work / "bls_census.cu").write_text(kernels.includes("bls12_381.cuh") + CENSUS_MAIN)
        subprocess.run(["g++", "-x", "c++", "-std=c++17", "-O1", "-pg", "-fno-inline", "-fno-strict-aliasing",
                        *HOST_HEADERS, *(f"-I{d}" for d in kernels.include_dirs()), "-o", str(exe),
                        str(work / "bls_census.cu")], check=True, capture_output=True)
    return exe


def census(work: Path, mode: str, item) -> Counter:
    """Calls of each leaf in one run of ``mode`` on the host (-pg -fno-inline build)."""
    exe = census_program(work)
    subprocess.run([str(exe), mode, item.public_key.hex(), item.signature.hex(), item.message.hex()], cwd=work,
                   check=(mode != "verify"), capture_output=True)
    flat = subprocess.run(["gprof", "-b", "-p", str(exe), str(work / "gmon.out")], capture_output=True, text=True,
                          check=True).stdout
    calls: Counter = Counter()
    for line in flat.splitlines():
        parts = line.split()
        if len(parts) >= 7 and parts[3].isdigit():
            calls[" ".join(parts[6:]).split("(")[0]] += int(parts[3])
    return Counter({leaf: calls.get(host, 0) for leaf, host in LEAF_HOST.items()})


def add_arguments(ap) -> None:
    ap.add_argument("--efficiency", type=float, default=0.5,
                    help="leaves: assumed fraction of the issue/IMAD bound reached (BLS12-381)")


def predict(scheme_ids: list[str], args, work: Path, prov: dict) -> None:
    [item] = kat.sign_items("bls12-381", 1, seed=1, msg_len=32)
    cubin, log, compile_s = build_unit(work, UNIT)
    entries = ptxas.parse(log)
    mangled, calls = sass_by_function(kernels.nvdisasm_sass(cubin))
    funcs = {kernels.demangled(k): v for k, v in mangled.items()}
    dynamic = {kernels.demangled(k): dynamic_count(k, mangled, calls) for k in mangled}
    leaves = leaf_costs(work)
    per_verify = census(work, "verify", item)
    checked = {name: census(work, name, item) for name in CHECKED}

    leaf_n = {k: sum(v.values()) for k, v in leaves.items()}
    leaf_imad = {k: sum(n for op, n in v.items() if op.startswith("IMAD")) for k, v in leaves.items()}

    def leaf_sum(c: Counter, table: dict[str, int]) -> int:
        return sum(c[k] * table[k] for k in c)

    ratios = {}
    for name in CHECKED:
        if name in dynamic and leaf_sum(checked[name], leaf_n):
            ratios[name] = (dynamic[name], leaf_sum(checked[name], leaf_n),
                            dynamic[name] / leaf_sum(checked[name], leaf_n))
    overhead = ratios[OVERHEAD_FROM][2]
    field = {k: v for k, v in per_verify.items() if k != "sha256_block"}
    insns = leaf_sum(Counter(field), leaf_n) * overhead + per_verify["sha256_block"] * leaf_n["sha256_block"]
    imads = leaf_sum(per_verify, leaf_imad)
    issue_rate = H200.sms * H200.issue_lanes_per_sm_clock * H200.clock_hz / insns
    imad_rate = H200.sms * H200.int32_lanes_per_sm_clock * H200.clock_hz / imads
    bound = min(issue_rate, imad_rate)
    predicted = bound * args.efficiency
    entry = next((e for e in entries if e.entry == "zv_verify_bls12_381"), None)

    lines = [
        "# BLS12-381 verify kernel on an H200 — a PREDICTION from SASS, not a measurement",
        "",
        "Method `leaves` of `scripts/gpu_model` (scripts/lib/gpu_model/bls12_381.py's docstring); nothing here ran",
        f"on a GPU.  {ptxas.version()}; kernel sources sha256 `{sources_digest()[:16]}`.",
        "",
        f"## ptxas (sm_90, `{' '.join(ptxas.NVCC_FLAGS)}`, compiled in {compile_s:.0f} s)",
        "",
    ]
    if entry:
        lines.append(f"zv_verify_bls12_381: **{entry.registers} registers**, stack frame {entry.stack_bytes} B, "
                     f"spill stores {entry.spill_store_bytes} B, spill loads {entry.spill_load_bytes} B.")
    frames = re.findall(r"Function properties for (\S+)\n\s*(\d+) bytes stack frame, (\d+) bytes spill stores, "
                        r"(\d+) bytes spill loads", log)
    lines += ["", "| out-of-line routine | own SASS instructions | stack frame B | spill st B | spill ld B |",
              "|---|---:|---:|---:|---:|"]
    for name, st, ss, sl in frames:
        d = kernels.demangled(name)
        lines.append(f"| {d} | {sum(funcs.get(d, Counter()).values())} | {st} | {ss} | {sl} |")
    lines += [
        "", "## Leaf costs (SASS instructions, operand loads/stores subtracted)", "",
        "| leaf | SASS | of which IMAD* | calls per verify (host census) |", "|---|---:|---:|---:|",
    ]
    lines += [f"| {k} | {leaf_n[k]} | {leaf_imad[k]} | {per_verify[k]} |" for k in LEAF_KERNELS if k != "copy"]
    lines += [
        "", "## Overhead: out-of-line SASS over leaf census × leaf cost (straight-line routines)", "",
        "| routine | SASS (incl. out-of-line callees) | leaves × cost | ratio |", "|---|---:|---:|---:|",
    ]
    lines += [f"| {n} | {a} | {b} | {r:.2f} |" for n, (a, b, r) in ratios.items()]
    lines += [
        "",
        "## Per verify and the predicted rate",
        "",
        f"- SASS instructions per verify ≈ {insns / 1e6:.1f} M (field leaves × {OVERHEAD_FROM} overhead "
        f"{overhead:.2f}, plus {per_verify['sha256_block']} SHA-256 blocks); IMAD* ≈ {imads / 1e6:.1f} M.",
        f"- Issue bound: {H200.sms} SMs × {H200.issue_lanes_per_sm_clock} lanes × {H200.clock_hz / 1e9:.2f} GHz / "
        f"instructions = {issue_rate / 1e6:.2f} M verifies/s; IMAD bound ({H200.int32_lanes_per_sm_clock}/SM/clock): "
        f"{imad_rate / 1e6:.2f} M/s.",
        f"- **PREDICTED H200 rate: {predicted / 1e6:.2f} M verifies/s** (the lower bound × assumed "
        f"efficiency {args.efficiency:g}); issue 20's target is 0.25 M/s.",
        "",
        "## ptxas log", "", "```", kernels.relative_log(log).strip(), "```",
    ]
    write(args.out, NAME, lines, None, prov, METHOD)
    print(f"bls12-381: PREDICTED {predicted / 1e6:.2f} M verifies/s", file=sys.stderr)
