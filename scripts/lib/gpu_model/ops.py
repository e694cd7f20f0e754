"""Method ``ops`` of scripts/gpu_model: PREDICTED H200 rates of the kernels built from the
primitives zv_port.cuh counts (Ed25519, secp256k1 ECDSA, P-256, BIP-340); writes bench/results/gpu_model.md and .json.

  1. The family's verify kernel (app/engine/device/registry.py) and the Merkle kernels are
     compiled with nvcc for sm_90; ptxas gives registers, stack, spills and shared memory,
     hence the resident warps per SM at the registry's block size; ``cuobjdump -sass``
     gives each entry point's static instruction mix by class.
  2. Each counted primitive of zv_port.cuh's ZV_OP_ list (field products, squarings,
     additions, Montgomery products, SHA-2 and Keccak blocks) is compiled in probe kernels
     that apply it once and twice back to back; the difference of their SASS is the
     primitive's instructions by class.
  3. The host build of the kernel (g++, -DZV_COUNT_OPS) runs a sample of generated valid
     items and counts every primitive per verify, apart from those run by one thread of a
     block (ZV_BLOCK_SERIAL: the chunk's batched inversion), which on the GPU cost a whole
     warp instruction for one lane.
  4. Warp instructions per item = Σ per-thread counts × SASS / 32 + Σ serial counts × SASS,
     times (1 + RESIDUAL) for what no primitive counts (control flow, loads, table
     selects).  Cycles per warp instruction on one SM sub-partition (SMSP): the larger of
     the issue bound (one instruction per cycle) and the pipe bounds (ISSUE_CYCLES below).
  5. Kernel rate = SMs × 4 SMSPs × clock × EFFICIENCY / cycles per item.  End to end, the
     pipelined backend overlaps the host-to-device copy of batch k+1 and the copy back of
     k−1 with the kernels of k (one copy engine each way), so the end-to-end rate is the
     least of the kernel rate (verify + Merkle leaves + tree), the H2D rate and the D2H
     rate at the assumed PCIe bandwidth; the serial rate (no overlap) is shown beside it.
"""

from __future__ import annotations

import ctypes
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from app.core.schemes import SCHEMES
from app.engine.device import hostbuild, occupancy, ptxas, registry
from app.engine.reference import kat
from app.engine.verify.grouping import batch_of, group_items
from scripts.lib import kernels
from scripts.lib.gpu_model import H200, build_unit, cached_build, write

FAMILIES = ("ed25519", "secp256k1", "p256", "bip340")
NAME = "gpu_model"
METHOD = ("ops: SASS of each counted primitive (probe kernels) × its count per verify in the -DZV_COUNT_OPS "
          "host build, through an issue and pipe model of one SM sub-partition; scripts/lib/gpu_model/ops.py")

#: Cycles one warp instruction occupies its pipe on an SMSP: 32 lanes over the SMSP's share of
#: the SM's 32-bit integer lanes (16 per clock: 2 cycles); IMAD.WIDE writes 64 bits and is
#: taken at half that rate.
_INT32_CYCLES = 32 * H200.smsps_per_sm / H200.int32_lanes_per_sm_clock
ISSUE_CYCLES = {"imad_wide": 2 * _INT32_CYCLES, "imad": _INT32_CYCLES, "alu": _INT32_CYCLES}
#: Fraction of the bound the SMs are assumed to reach (dependent carry chains need several
#: warps per SMSP to hide latency; below 3 resident warps per SMSP it is scaled down).
EFFICIENCY = 0.8
#: Instructions per verify that no counted primitive accounts for, as a fraction (assumed).
RESIDUAL = 0.15
#: The targets of the performance issue (items/s, end to end).
TARGETS = {"ed25519": 15e6, "secp256k1": 10e6}

CLASSES = ("imad_wide", "imad", "alu", "mem", "ctrl", "other")
ALU_OPS = ("IADD3", "LOP3", "SHF", "ISETP", "SEL", "PRMT", "LEA", "IABS", "MOV", "IMNMX", "FLO",
           "POPC", "BMSK", "SGXT", "ISCADD", "I2I", "P2R", "R2P", "PLOP3", "VIADD", "IADD", "VIMNMX")
MEM_OPS = ("LD", "ST", "ATOM", "RED", "LDG", "STG", "LDS", "STS", "LDL", "STL", "LDC", "ULDC", "LDSM")
CTRL_OPS = ("BRA", "EXIT", "BSYNC", "BSSY", "CALL", "RET", "BAR", "WARPSYNC", "BREAK", "JMP", "YIELD",
            "BPT", "S2R", "CS2R", "S2UR", "VOTE", "SHFL")


def classify(opcode: str) -> str | None:
    """The issue class of a SASS opcode (None: a NOP, never issued as work)."""
    base = opcode.split(".")[0]
    if base == "NOP":
        return None
    if opcode.startswith("IMAD.WIDE"):
        return "imad_wide"
    if base in ("IMAD", "IMADSP", "IMUL"):
        return "imad"
    if base.lstrip("U") in ALU_OPS:
        return "alu"
    if base in MEM_OPS or base.startswith(("LD", "ST")):
        return "mem"
    if base in CTRL_OPS:
        return "ctrl"
    return "other"


def sass_mix(sass: str) -> dict[str, dict[str, int]]:
    """Static instruction counts by class per function of a ``cuobjdump -sass`` listing."""
    mix: dict[str, dict[str, int]] = {}
    for name, instrs in kernels.by_function(sass).items():
        counts = mix[name] = dict.fromkeys(CLASSES, 0)
        for i in instrs:
            if cls := classify(i.opcode):
                counts[cls] += 1
    return mix


# ------------------------------------------------------------------ probes of the primitives
#: ZV_OP name -> (header, operand type, one application to x (y is a second operand)).
PROBES: dict[str, tuple[str, str, str]] = {
    "ZV_OP_FE25519_MUL": ("fe25519.cuh", "zv_ed_fe", "zv_ed_fe_mul(&x, &x, &y);"),
    "ZV_OP_FE25519_SQ": ("fe25519.cuh", "zv_ed_fe", "zv_ed_fe_sq(&x, &x);"),
    "ZV_OP_FE25519_ADD": ("fe25519.cuh", "zv_ed_fe", "zv_ed_fe_add(&x, &x, &y);"),
    "ZV_OP_FE25519_SUB": ("fe25519.cuh", "zv_ed_fe", "zv_ed_fe_sub(&x, &x, &y);"),
    "ZV_OP_K1_FE_MUL": ("secp256k1_field.cuh", "zv_k1_fe", "zv_k1_fe_mul(&x, &x, &y);"),
    "ZV_OP_K1_FE_SQR": ("secp256k1_field.cuh", "zv_k1_fe", "zv_k1_fe_sqr(&x, &x);"),
    "ZV_OP_K1_FE_ADD": ("secp256k1_field.cuh", "zv_k1_fe", "zv_k1_fe_add(&x, &x, &y);"),
    "ZV_OP_K1_FE_SUB": ("secp256k1_field.cuh", "zv_k1_fe", "zv_k1_fe_sub(&x, &x, &y);"),
    "ZV_OP_K1_FE_MUL_INT": ("secp256k1_field.cuh", "zv_k1_fe", "zv_k1_fe_mul_int(&x, &x, 3u);"),
    "ZV_OP_K1_SC_MONT_MUL": ("secp256k1_scalar.cuh", "zv_k1_sc", "zv_k1_sc_mont_mul(&x, x.v, y.v);"),
    "ZV_OP_P256_FE_MUL": ("p256_field.cuh", "zv_p256_fe", "zv_p256_fe_mul(&x, &x, &y);"),
    "ZV_OP_P256_FE_SQR": ("p256_field.cuh", "zv_p256_fe", "zv_p256_fe_sqr(&x, &x);"),
    "ZV_OP_P256_FE_ADD": ("p256_field.cuh", "zv_p256_fe", "zv_p256_fe_add(&x, &x, &y);"),
    "ZV_OP_P256_FE_SUB": ("p256_field.cuh", "zv_p256_fe", "zv_p256_fe_sub(&x, &x, &y);"),
    "ZV_OP_P256_SC_MONT_MUL": ("p256_scalar.cuh", "zv_p256_sc", "zv_p256_sc_mont_mul(&x, x.v, y.v);"),
    "ZV_OP_SHA256_BLOCK": ("sha2.cuh", "zv_probe_w16", "zv_sha256_block(x.v, (const zv_u8 *)y.v);"),
    "ZV_OP_SHA512_BLOCK": ("sha2.cuh", "zv_probe_d16", "zv_sha512_block(x.d, (const zv_u8 *)y.d);"),
    "ZV_OP_KECCAK_F1600": ("keccak.cuh", "zv_probe_d25", "zv_keccak_f1600(x.d);"),
}

#: ZV_OP counters that count events, not one primitive the model can price: BLS12-381's base
#: field products and squarings together, Miller loops, their pairs, final exponentiations
#: and the products inside pairings (the random-linear-combination batch is judged by them,
#: docs/kernels.md).  The BLS12-381 model prices its kernels from SASS instead (bls12_381.py).
EVENTS = frozenset({"ZV_OP_BLS_FP_MUL", "ZV_OP_BLS_MILLER_LOOP", "ZV_OP_BLS_MILLER_PAIR", "ZV_OP_BLS_FINAL_EXP",
                    "ZV_OP_BLS_PAIRING_FP_MUL"})


def probe_source(ops: list[str]) -> str:
    """Kernels applying each primitive of ``ops`` once (``probe_<op>_1``) and twice (``_2``)."""
    lines = [kernels.includes("zv_port.cuh", *sorted({PROBES[o][0] for o in ops})).rstrip("\n"),
             "typedef struct { zv_u32 v[16]; } zv_probe_w16;",
             "typedef struct { zv_u64 d[16]; } zv_probe_d16;",
             "typedef struct { zv_u64 d[25]; } zv_probe_d25;"]
    for op in ops:
        _, typ, call = PROBES[op]
        for k in (1, 2):
            lines.append(f'extern "C" __global__ void probe_{op}_{k}({typ} *io, const {typ} *in) {{')
            lines.append(f"    {typ} x = io[threadIdx.x], y = in[threadIdx.x];")
            lines += [f"    {call}"] * k
            lines.append("    io[threadIdx.x] = x;\n}")
    return "\n".join(lines) + "\n"


def primitive_costs(work: Path) -> dict[str, dict[str, int]]:
    """SASS instructions by class of one application of every probed primitive."""
    ops = list(PROBES)
    cubin, _, _ = cached_build(work, "zv_probes", lambda c: kernels.compile_text(probe_source(ops), "zv_probes", c))
    mix = sass_mix(kernels.cuobjdump_sass(cubin))
    return {op: {c: max(0, mix[f"probe_{op}_2"][c] - mix[f"probe_{op}_1"][c]) for c in CLASSES} for op in ops}


# ------------------------------------------------------------------ counts from the host build
def sample_batch(scheme_id: str, n: int):
    """The largest batch of ``n`` generated valid items (one key shape)."""
    items = [ka.item for ka in kat.generate(scheme_id, n, 0, seed=3)]
    groups = {k: idx for k, idx in group_items(items).items() if k is not None}
    key, idx = max(groups.items(), key=lambda kv: len(kv[1]))
    return batch_of(key, [items[i] for i in idx])


def _columns(batch) -> list[np.ndarray]:
    return [np.ascontiguousarray(a).reshape(-1).view(np.uint8) for a in
            (batch.pks, batch.sigs, batch.msgs, batch.offsets.astype(np.uint64))]


def _call_contract(fn, batch) -> np.ndarray:
    """Run a kernel-contract entry point of a host library over ``batch``."""
    cols = _columns(batch)
    ctx = np.frombuffer(bytes(batch.ctx) or b"\0", dtype=np.uint8)
    out = np.zeros(len(batch), dtype=np.uint8)
    p = ctypes.c_void_p
    fn.restype = None
    fn(p(cols[0].ctypes.data), ctypes.c_uint32(batch.pks.shape[1]), p(cols[1].ctypes.data),
       ctypes.c_uint32(batch.sigs.shape[1]), p(cols[2].ctypes.data), p(cols[3].ctypes.data),
       p(ctx.ctypes.data), ctypes.c_uint32(len(batch.ctx)), ctypes.c_uint32(batch.options),
       ctypes.c_uint64(len(batch)), p(out.ctypes.data))
    return out


def counted_library(source: registry.KernelSource):
    """The host build of ``source`` with zv_port.cuh's operation counts on."""
    return hostbuild.load_code(source.path.read_text(), f"{source.name}_counted", [source.directory],
                               defines=["ZV_COUNT_OPS"])


def _per_item(before: list[int], after: list[int], n: int) -> dict[str, float]:
    return {name: (after[i] - before[i]) / n for i, name in enumerate(hostbuild.op_names())}


def verify_counts(kernel: registry.VerifyKernel, batch) -> tuple[dict[str, float], dict[str, float], int]:
    """Per-verify primitive counts (per thread, serial) of ``kernel`` on ``batch``, and how
    many of the items the host build found valid."""
    lib = counted_library(kernel.source)
    before = hostbuild.op_counts(lib)
    verdicts = _call_contract(getattr(lib, kernel.entry), batch)
    after = hostbuild.op_counts(lib)
    n = len(batch)
    return _per_item(before[0], after[0], n), _per_item(before[1], after[1], n), int(verdicts.sum())


def merkle_counts(batch) -> dict[str, float]:
    """Per-item primitive counts of the Merkle leaves (host build) and of the tree (two
    SHA-256 blocks per node, n − 1 nodes: merkle.cuh)."""
    lib = counted_library(registry.MERKLE)
    before = hostbuild.op_counts(lib)[0]
    cols = _columns(batch)
    verdicts = np.ones(len(batch), dtype=np.uint8)
    leaves = np.zeros(32 * len(batch), dtype=np.uint8)
    p = ctypes.c_void_p
    lib.zv_merkle_leaves.restype = None
    lib.zv_merkle_leaves(ctypes.c_uint32(batch.scheme.code),
                         p(cols[0].ctypes.data), ctypes.c_uint32(batch.pks.shape[1]),
                         p(cols[1].ctypes.data), ctypes.c_uint32(batch.sigs.shape[1]),
                         p(cols[2].ctypes.data), p(cols[3].ctypes.data), p(verdicts.ctypes.data),
                         ctypes.c_uint64(len(batch)), p(leaves.ctypes.data))
    out = _per_item(before, hostbuild.op_counts(lib)[0], len(batch))
    out["ZV_OP_SHA256_BLOCK"] += 2.0 * (len(batch) - 1) / len(batch)
    return out


# ------------------------------------------------------------------ the model
@dataclass
class Compiled:
    registers: int = 0
    stack: int = 0
    spills: int = 0
    smem: int = 0
    seconds: float = 0.0
    static_mix: dict[str, int] = field(default_factory=dict)


def compile_kernel(source: registry.KernelSource, entry: str, work: Path) -> Compiled:
    cubin, log, seconds = build_unit(work, source.name)
    usage = {e.entry: e for e in ptxas.parse(log)}[entry]
    smem = 0
    block = log[log.find(f"Compiling entry function '{entry}'"):]
    if m := re.search(r"(\d+) bytes smem", block):
        smem = int(m.group(1))
    return Compiled(usage.registers, usage.stack_bytes, usage.spill_store_bytes + usage.spill_load_bytes, smem,
                    seconds, sass_mix(kernels.cuobjdump_sass(cubin)).get(entry, {}))


def resident_warps(c: Compiled, block: int) -> int:
    """Warps per SM at ``block`` threads per block (app/engine/device/occupancy.py)."""
    return occupancy.blocks_per_sm(c.registers, block, c.smem) * -(-block // 32)


def warp_instructions(par: dict[str, float], ser: dict[str, float],
                      costs: dict[str, dict[str, int]]) -> dict[str, float]:
    """Warp instructions per item by class (see the module doc, step 4)."""
    out = dict.fromkeys(CLASSES, 0.0)
    for op, cost in costs.items():
        for c in CLASSES:
            out[c] += (par.get(op, 0.0) / 32 + ser.get(op, 0.0)) * cost[c] * (1 + RESIDUAL)
    return out


def cycles(wi: dict[str, float]) -> float:
    """SMSP cycles for warp-instruction counts ``wi``: issue bound or the busiest pipe."""
    fma = wi["imad_wide"] * ISSUE_CYCLES["imad_wide"] + wi["imad"] * ISSUE_CYCLES["imad"]
    return max(sum(wi.values()), fma, wi["alu"] * ISSUE_CYCLES["alu"])


def rate(cyc_per_item: float, warps_per_sm: int) -> float:
    """PREDICTED items/s of the whole GPU at ``cyc_per_item`` SMSP cycles per item."""
    eff = EFFICIENCY * min(1.0, warps_per_sm / H200.smsps_per_sm / 3)
    return H200.sms * H200.smsps_per_sm * H200.clock_hz * eff / cyc_per_item if cyc_per_item else 0.0


def model_kernel(scheme_id: str, kernel: registry.VerifyKernel, n: int, costs, work: Path) -> dict:
    comp = compile_kernel(kernel.source, kernel.entry, work)
    batch = sample_batch(scheme_id, n)
    par, ser, valid = verify_counts(kernel, batch)
    warps = resident_warps(comp, kernel.block)
    wi = warp_instructions(par, ser, costs)
    cyc = cycles(wi)
    row = {"scheme": scheme_id, "source": kernels.rel(kernel.source.path), "entry": kernel.entry,
           "block": kernel.block, "registers": comp.registers, "stack_bytes": comp.stack, "spill_bytes": comp.spills,
           "smem_bytes": comp.smem, "nvcc_seconds": comp.seconds, "warps_per_sm": warps,
           "static_sass": comp.static_mix, "sample_items": len(batch), "sample_valid": valid,
           "target": TARGETS.get(scheme_id)}
    if not cyc:
        # A kernel built only from primitives the ZV_OP list does not count: no prediction.
        return {**row, "predicted_end_to_end": None}
    k_rate = rate(cyc, warps)
    merkle = merkle_counts(batch)
    m_comp = compile_kernel(registry.MERKLE, "zv_merkle_leaves", work)
    m_wi = warp_instructions(merkle, {}, costs)
    m_rate = rate(cycles(m_wi), resident_warps(m_comp, 256))
    msg_bytes = float(batch.offsets[-1]) / len(batch)
    h2d = batch.pks.shape[1] + batch.sigs.shape[1] + 8 + msg_bytes
    d2h = 1 + 32
    device = 1 / (1 / k_rate + 1 / m_rate)
    h2d_rate, d2h_rate = H200.pcie_bytes_per_s / h2d, H200.pcie_bytes_per_s / d2h
    return {
        **row,
        "ops_per_verify": {k: round(v, 2) for k, v in par.items() if v},
        "serial_ops_per_verify": {k: round(v, 3) for k, v in ser.items() if v},
        "warp_instructions_per_item": {k: round(v, 2) for k, v in wi.items()},
        "thread_instructions_per_verify": round(sum(wi.values()) * 32),
        "cycles_per_item_per_smsp": round(cyc, 2),
        "predicted_kernel_rate": k_rate, "predicted_leaves_rate": m_rate, "predicted_device_rate": device,
        "h2d_bytes_per_item": h2d, "d2h_bytes_per_item": d2h,
        "predicted_pcie_rate": min(h2d_rate, d2h_rate),
        "predicted_end_to_end": min(device, h2d_rate, d2h_rate),
        "predicted_serial": 1 / (1 / device + 1 / h2d_rate + 1 / d2h_rate),
    }


def _m(v: float) -> str:
    return f"{v / 1e6:.1f} M/s"


def markdown(rows: list[dict], costs: dict, nvcc_version: str) -> list[str]:
    """The report's lines, title first (the provenance line goes under it)."""
    out = ["# PREDICTED H200 verify rates from counted primitives (scripts/gpu_model, method ops)", "",
           "**Every rate here is a PREDICTION** from SASS and the host build's operation counts, not a",
           "measurement (no GPU has run this code).  Method: scripts/lib/gpu_model/ops.py's docstring.",
           f"Assumptions: {H200.name}, {H200.sms} SMs × {H200.smsps_per_sm} SMSPs at {H200.clock_hz / 1e9:.2f} GHz; "
           "one warp instruction issued per SMSP per cycle; IMAD "
           f"{ISSUE_CYCLES['imad']:g} and IMAD.WIDE {ISSUE_CYCLES['imad_wide']:g} pipe cycles per warp instruction, "
           f"ALU operations {ISSUE_CYCLES['alu']:g}; {EFFICIENCY:.0%} of that bound reached with ≥ 3 warps per SMSP; "
           f"+{RESIDUAL:.0%} instructions for what no counted primitive covers; PCIe Gen5 ×16 at "
           f"{H200.pcie_bytes_per_s / 1e9:.0f} GB/s effective per direction, copies overlapped with kernels "
           "(pipelined backend).", "",
           f"Compiler: {nvcc_version}, `-arch={ptxas.ARCH}`.", "",
           "| scheme | regs | warps/SM | thread instr / verify | PREDICTED kernel | + leaves & tree | PCIe | "
           "PREDICTED end to end (pipelined) | serial | target |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        tgt = r["target"]
        if r["predicted_end_to_end"] is None:
            out.append(f"| {r['scheme']} | {r['registers']} | {r['warps_per_sm']} | — | not predicted: no counted "
                       "primitive (add its ZV_OP and probe) | | | | | |")
            continue
        verdict = "" if not tgt else (" ✓" if r["predicted_end_to_end"] >= tgt else " ✗")
        out.append(f"| {r['scheme']} | {r['registers']} | {r['warps_per_sm']} | "
                   f"{r['thread_instructions_per_verify']:,} | {_m(r['predicted_kernel_rate'])} | "
                   f"{_m(r['predicted_device_rate'])} | {_m(r['predicted_pcie_rate'])} | "
                   f"**{_m(r['predicted_end_to_end'])}** (predicted) | {_m(r['predicted_serial'])} | "
                   f"{_m(tgt) if tgt else '—'}{verdict} |")
    out += ["", "## Per kernel", ""]
    for r in rows:
        if r["predicted_end_to_end"] is None:
            out += [f"### {r['scheme']} ({r['source']} / {r['entry']})", "",
                    f"- ptxas: {r['registers']} registers, {r['stack_bytes']} B stack, {r['spill_bytes']} B spills; "
                    f"static SASS by class: {r['static_sass']}", "- no counted primitive: rate not predicted", ""]
            continue
        out += [f"### {r['scheme']} ({r['source']} / {r['entry']}, block {r['block']})", "",
                f"- ptxas: {r['registers']} registers, {r['stack_bytes']} B stack, {r['spill_bytes']} B spills, "
                f"{r['smem_bytes']} B shared; {r['warps_per_sm']} warps per SM (nvcc {r['nvcc_seconds']:.0f} s).",
                f"- static SASS of the entry point by class: {r['static_sass']}",
                f"- host build over {r['sample_items']} generated valid items ({r['sample_valid']} valid there): "
                f"primitives per verify {r['ops_per_verify']}; run once per block chunk (per item) "
                f"{r['serial_ops_per_verify'] or 'none'}",
                f"- warp instructions per item by class: {r['warp_instructions_per_item']}; "
                f"{r['cycles_per_item_per_smsp']} SMSP cycles per item",
                f"- bytes per item: {r['h2d_bytes_per_item']:.0f} to the device, {r['d2h_bytes_per_item']} back "
                "(verdict and leaf)", ""]
        tgt = r["target"]
        if tgt and r["predicted_end_to_end"] < tgt:
            lim = min(("kernel", r["predicted_kernel_rate"]), ("leaves", r["predicted_leaves_rate"]),
                      ("PCIe", r["predicted_pcie_rate"]), key=lambda kv: kv[1])
            out += [f"Below the target of {_m(tgt)}: the predicted limit is the {lim[0]} "
                    f"({_m(lim[1])}); see the instruction mix above.", ""]
    out += ["## Primitives (SASS instructions of one application, by class)", "",
            "| primitive | " + " | ".join(CLASSES) + " |", "|---|" + "---|" * len(CLASSES)]
    for op, cost in costs.items():
        out.append(f"| {op} | " + " | ".join(str(cost[c]) for c in CLASSES) + " |")
    return out


def add_arguments(ap) -> None:
    ap.add_argument("--items", type=int, default=256, help="ops: generated items per scheme for the host counts")


def predict(scheme_ids: list[str], args, work: Path, prov: dict) -> None:
    """Model every scheme of ``scheme_ids`` (one row per distinct kernel) and write the report."""
    if kernels.tool("cuobjdump") is None:
        raise RuntimeError("cuobjdump is needed (pip install '.[model]')")
    costs = primitive_costs(work)
    rows, seen = [], set()
    for sid in scheme_ids:
        k = registry.verify_kernel(SCHEMES[sid])
        if k is None or (k.source, k.entry) in seen:
            continue
        seen.add((k.source, k.entry))
        print(f"ops: modelling {sid} ({kernels.rel(k.source.path)})", file=sys.stderr)
        rows.append(model_kernel(sid, k, args.items, costs, work))
    write(args.out, NAME, markdown(rows, costs, ptxas.version()), {"rows": rows, "primitives": costs}, prov, METHOD)
    for r in rows:
        if r["predicted_end_to_end"] is not None:
            print(f"{r['scheme']}: PREDICTED {_m(r['predicted_end_to_end'])} end to end", file=sys.stderr)
