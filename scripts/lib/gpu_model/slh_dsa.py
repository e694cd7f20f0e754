"""Method ``compressions`` of scripts/gpu_model: a PREDICTED H200 rate per SLH-DSA set;
writes bench/results/slh_dsa_prediction.md and .json.

1. Compiles the slh_dsa compilation unit for sm_90 (the project's flags) and reads ptxas's
   registers per entry point (registers, stack and spills are recorded by
   ``scripts/ptxas --kernel slh_dsa``).
2. Disassembles the cubin with nvdisasm and counts the SASS instructions of the three
   out-of-line hash primitives every compression goes through: zv_slh_sha256_compress,
   zv_slh_sha512_compress, zv_slh_keccak_permute (each kernel holds its own copy of the
   subroutines it calls; the largest copy is used).
3. Reads the compressions per verification and their critical path on a 32-lane block from
   bench/results/slh_dsa_agreement.json (``scripts/agreement --scheme slh-dsa``, counting
   build) and predicts the rate:

       warp instructions per signature  W = Σ_kind critical_path[kind] × (SASS[kind] + SASS[hash1])
       signatures per second            = SMs × clock × (32-bit integer warp instructions per clock per SM) / W

   2 warp instructions per clock per SM for 32-bit integer ALU work on sm_90 (64 lanes of
   IADD3 / LOP3 / SHF per SM per clock).  It is a PREDICTION, an upper bound: it assumes
   enough warps in flight to hide latency (checked against the occupancy the registers
   allow), and counts the compression primitives plus, for every compression, the
   instructions of the set's F/H wrapper zv_slh_hash1 (block assembly from the address and
   inputs); the queue and digit sorting, barriers, loads of signature bytes and the
   multi-block streams' own byte loops beyond that are not counted, and idle lanes cost
   nothing beyond the busiest lane.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from app.engine.device import occupancy, ptxas
from scripts.lib import kernels
from scripts.lib.gpu_model import H200, RESULTS, build_unit, write

FAMILIES = ("slh-dsa",)
NAME = "slh_dsa_prediction"
UNIT = "slh_dsa"
METHOD = ("compressions: SASS of each out-of-line compression primitive (+ the set's zv_slh_hash1 wrapper) × "
          "the critical path of compressions on a 32-lane block, against the 32-bit integer issue bound; "
          "scripts/lib/gpu_model/slh_dsa.py")
PRIMITIVES = {"sha256": "zv_slh_sha256_compress", "sha512": "zv_slh_sha512_compress",
              "keccak_f": "zv_slh_keccak_permute"}
KINDS = ("sha256", "sha512", "keccak_f")


def sass_counts(sass: str) -> dict[str, int]:
    """SASS instructions (NOPs included, as listed) per code label of nvdisasm's output:
    kernels (``name:``) and the subroutines inside them (``$kernel$mangled:``)."""
    return {label: len(instrs) for label, instrs in kernels.by_label(sass).items()}


def warps_per_sm(registers: int) -> int:
    """Resident 32-thread blocks (= warps) per SM at ``registers`` per thread."""
    return occupancy.blocks_per_sm(registers, 32)


def compressions(path: Path) -> list[dict]:
    """The sets of slh_dsa_agreement.json that carry compression counts."""
    return [r for r in json.loads(path.read_text())["sets"] if r.get("compressions_per_verify")]


def predict(scheme_ids: list[str], args, work: Path, prov: dict) -> None:
    cubin, log, _ = build_unit(work, UNIT)
    counts = sass_counts(kernels.nvdisasm_sass(cubin))
    prim = {k: max((c for f, c in counts.items() if f.startswith("$") and fn in f), default=None)
            for k, fn in PRIMITIVES.items()}
    by_entry = {e.entry: e for e in ptxas.parse(log)}
    ipc = H200.int32_warp_instructions_per_sm_clock
    out = ["# SLH-DSA on one H200: PREDICTED verification rate per set (not measured)", "",
           f"Method `compressions` of `scripts/gpu_model` from the sm_90 build ({ptxas.version()}) and the",
           "compression counts of `bench/results/slh_dsa_agreement.json`; no GPU ran it, so every rate below",
           "is a **prediction**. Warp instructions per signature W = Σ critical-path compressions × (SASS",
           "instructions of the primitive + of the set's F/H wrapper zv_slh_hash1); rate = "
           f"{H200.sms} SMs × {H200.clock_hz / 1e9:.2f} GHz × {ipc:g} integer warp-instructions per clock per SM / W.",
           "An upper bound: the chain queue, barriers, signature loads, the multi-block streams' byte loops and",
           "latency not hidden by the resident warps are not counted.", "",
           "SASS instructions per primitive (nvdisasm of the out-of-line subroutines): " +
           ", ".join(f"{k} {v if v is not None else 'n/a'}" for k, v in prim.items()) + ".", "",
           "| set | registers | spill bytes (st/ld) | warps/SM | compressions / verify (all lanes) | "
           "critical path (32 lanes) | hash1 SASS | W (warp instr.) | lane use | PREDICTED verifies/s |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    rows = []
    for r in compressions(args.compressions):
        sid = r["scheme"]
        if sid not in scheme_ids:
            continue
        kernel = "zv_verify_" + sid.replace("-", "_")
        e = by_entry.get(kernel)
        per = r["compressions_per_verify"]
        tot, crit = per["total"], per["critical_path_32_lanes"]
        wrap = max((n for f, n in counts.items() if f.startswith(f"${kernel}$") and "zv_slh_hash1" in f),
                   default=None)
        if e is None or wrap is None or any(prim[k] is None for k in crit if crit[k]):
            out.append(f"| {sid} | n/a | | | | | | | | n/a |")
            continue
        w = sum(crit[k] * (prim[k] + wrap) for k in crit if crit[k])
        done = sum(tot[k] * (prim[k] + wrap) for k in tot if tot[k])
        rate = H200.sms * H200.clock_hz * ipc / w

        def fmt(d: dict) -> str:
            return " + ".join(f"{d[k]:,.0f} {k}" for k in KINDS if d[k])

        out.append(f"| {sid} | {e.registers} | {e.spill_store_bytes}/{e.spill_load_bytes} | "
                   f"{warps_per_sm(e.registers)} | {fmt(tot)} | {fmt(crit)} | {wrap} | {w:,.0f} | "
                   f"{done / (32 * w):.0%} | {rate:,.0f} |")
        rows.append({"scheme": sid, "registers": e.registers, "hash1_sass": wrap, "warp_instructions": w,
                     "predicted_per_s": rate})
    out += ["", "Lane use = total compression instructions / (32 × W): the share of the warp's lanes busy "
            "on hash work. Targets (issue 18): SHA2-128f ≥ 1 M/s, SHA2-128s ≥ 3 M/s on one H200."]
    write(args.out, NAME, out, {"sass_per_primitive": prim, "sms": H200.sms, "clock_hz": H200.clock_hz,
                                "sets": rows}, prov, METHOD)
    for row in rows:
        print(f"{row['scheme']}: PREDICTED {row['predicted_per_s']:,.0f} verifies/s", file=sys.stderr)


def add_arguments(ap) -> None:
    ap.add_argument("--compressions", type=Path, default=RESULTS / "slh_dsa_agreement.json",
                    help="compressions: the agreement results with SLH-DSA's compression counts")
