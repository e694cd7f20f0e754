"""Method ``products`` of scripts/gpu_model: PREDICTED H200 rates of the BLS12-381 aggregate
shapes (bls12_381_aggregate.cu, chained by app/engine/device/ops.py) and of the single
CoreVerify kernel beside them, from one SASS price per Fp product and the host build's counts;
writes bench/results/bls_aggregate_gpu.md and .json.

 1. Leaf SASS costs: the ``leaves`` method's probe kernels (scripts/lib/gpu_model/bls12_381.py,
    leaf_costs: one zv_fp_mul, zv_fp_sqr, zv_fp_add, zv_fp_sub, zv_fp_neg or SHA-256 block
    each, the operand copy subtracted).
 2. The field mix of a single verify: gprof's leaf call counts of zv_bls12_381_verify on one
    valid item (the ``leaves`` census), priced by the leaf costs and divided by its Fp
    products (mul + sqr): SASS instructions (and IMAD*) per Fp product *with its share of
    additions, subtractions and negations*.
 3. Overhead (moves, calls, stack traffic of tower temporaries): zv_fp12_mul compiled in a
    probe unit of its own, its SASS with that of every out-of-line routine its CALLs reach,
    over its leaf census × leaf cost (the ``leaves`` method measures the same ratio inside the
    whole bls12_381 unit, half an hour of nvcc on two cores; the probe takes a minute).
 4. Counts per shape: the host build with zv_port.cuh's operation counts (-DZV_COUNT_OPS)
    runs the very launches of ops.verify_aggregates / ops.verify_bls_rlc / ops.verify_batch on
    valid items: ZV_OP_BLS_FP_MUL (every Fp product or square), SHA-256 blocks, Miller loops,
    final exponentiations — FastAggregateVerify at several key counts, AggregateVerify at
    several pair counts, an RLC batch of 256 (groups of 64) and single CoreVerify of the same
    items.
 5. SASS instructions per item = Fp products × (instructions per product, 2) × overhead (3)
    + SHA-256 blocks × block cost.  Issue and IMAD bounds as in ``leaves``; the PREDICTION is
    the lower bound × the same assumed efficiency (--efficiency).  Assumed, not measured: that
    every shape has the single verify's mix of additions per product (the same tower, curve
    and pairing code) and that enough items run to fill the GPU (the per-key and per-pair
    launches are one thread each, the per-item launches a small share of the work).
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from app.core.batch import AggregateItem, Batch
from app.core.schemes import SCHEMES
from app.engine.device import hostbuild, ops, registry
from app.engine.device.hostbuild import sources_digest
from app.engine.device.hostlib import HostDevice
from app.engine.reference import kat
from scripts.lib import kernels
from scripts.lib.gpu_model import H200, cached_build, write
from scripts.lib.gpu_model import bls12_381 as leaves_method

#: Not a scheme family: the aggregate shapes of the bls12-381 kernels (SCHEME_FAMILIES).
FAMILIES = ("bls12-381-aggregate",)
SCHEME_FAMILIES = ("bls12-381",)
NAME = "bls_aggregate_gpu"
METHOD = ("products: Fp products per item counted by the -DZV_COUNT_OPS host build running ops' launches, × SASS "
          "per Fp product (leaf probes priced by a single verify's gprof leaf mix) × the zv_fp12_mul probe's "
          "overhead, against the issue and IMAD bounds × an assumed efficiency; scripts/lib/gpu_model/bls_aggregate.py")
#: Key counts of the FastAggregateVerify rows (512: about a mainnet attestation committee;
#: 2048: the largest, bls_aggregate_max_keys) and pair counts of the AggregateVerify rows.
FAST_KEYS = (1, 2, 8, 64, 512, 2048)
AGGREGATE_PAIRS = (1, 2, 8, 64)
RLC_ITEMS = 256
#: The probe of the overhead ratio: zv_fp12_mul alone (out of line, with its callees).
OVERHEAD_PROBE = "ZV_KERNEL void zv_probe_fp12_mul(zv_fp12 *r, const zv_fp12 *a, const zv_fp12 *b) " \
                 "{ zv_fp12_mul(r, a, b); }\n"


class CountingDevice(HostDevice):
    """The host device, its libraries built with -DZV_COUNT_OPS (one per source, shared by the
    process).  Every library a measurement may touch is loaded up front (``sources``), so a
    count taken before a run covers it: a library loaded mid-run would bring the counts of
    its earlier use in this process."""

    def __init__(self, sources=()) -> None:
        super().__init__()
        self.libs: dict[str, Any] = {}
        for source in sources:
            self._lib(source)

    def _lib(self, source):
        lib = self.libs.get(source.name)
        if lib is None:
            lib = self.libs[source.name] = hostbuild.load_code(
                source.path.read_text(), f"{source.name}_counted", [source.directory], defines=["ZV_COUNT_OPS"])
        return lib

    def function(self, source, entry):
        fn = getattr(self._lib(source), entry)
        fn.restype = None
        return fn

    def totals(self) -> Counter:
        names = hostbuild.op_names()
        out: Counter = Counter()
        for lib in self.libs.values():
            counts = hostbuild.op_counts(lib)
            if counts is not None:
                out.update({name: counts[0][i] + counts[1][i] for i, name in enumerate(names)})
        return out


def counted(dev: CountingDevice, run, items: int) -> tuple[dict[str, float], Any]:
    """Per-item operation counts of ``run(dev)`` over ``items`` items, and what it returned."""
    before = dev.totals()
    result = run(dev)
    after = dev.totals()
    return {k: (after[k] - before[k]) / items for k in after}, result


def shape_counts(fast_keys=FAST_KEYS, aggregate_pairs=AGGREGATE_PAIRS, rlc_items: int = RLC_ITEMS) -> list[dict]:
    """One row per shape: its per-item counts (ZV_OP_*), keys per item, and whether every
    verdict was true (the items are valid); the last two rows are the RLC batch of
    ``rlc_items`` and single CoreVerify of the same items."""
    from scripts.lib.agreement.bls12_381_aggregate import Signers

    dev = CountingDevice([registry.BLS_AGGREGATE, registry.VERIFY_KERNELS["bls12-381"].source])
    s = Signers("gpu-model-aggregates")
    r = 0x73EDA753299D7D483339D80809A1D80553BDA402FFFE5BFEFFFFFFFF00000001  # group order (RFC 9380 §8.8.1)
    sks = [s.key() for _ in range(max(tuple(fast_keys) + tuple(aggregate_pairs)))]
    pks = [s.pk(k) for k in sks]
    m = s.rng.randbytes(32)
    rows = []
    for n in fast_keys:
        item = AggregateItem("fast_aggregate", tuple(pks[:n]), (m,), s.sig([(sum(sks[:n]) % r, m)]))
        c, v = counted(dev, lambda d, it=item: ops.verify_aggregates(d, [it, it]), 2)
        rows.append({"shape": "FastAggregateVerify", "keys": n, "counts": c, "ok": bool(v.all())})
    for n in aggregate_pairs:
        msgs = tuple(s.rng.randbytes(32) for _ in range(n))
        item = AggregateItem("aggregate", tuple(pks[:n]), msgs, s.sig(list(zip(sks[:n], msgs))))
        c, v = counted(dev, lambda d, it=item: ops.verify_aggregates(d, [it, it]), 2)
        rows.append({"shape": "AggregateVerify", "keys": n, "counts": c, "ok": bool(v.all())})
    items = kat.sign_items("bls12-381", rlc_items, seed=4041, msg_len=32)
    batch = Batch.from_items(SCHEMES["bls12-381"], [it.public_key for it in items], [it.message for it in items],
                             [it.signature for it in items])
    kernel = registry.VERIFY_KERNELS["bls12-381"]
    c, res = counted(dev, lambda d: ops.verify_bls_rlc(d, kernel, batch), rlc_items)
    rows.append({"shape": "batch CoreVerify by RLC (groups of 64)", "keys": 1, "counts": c,
                 "ok": bool(res[0].all()) and res[1].failed_groups == 0})
    c, v = counted(dev, lambda d: ops.verify_batch(d, kernel, batch), rlc_items)
    rows.append({"shape": "single CoreVerify (zv_verify_bls12_381)", "keys": 1, "counts": c, "ok": bool(v.all())})
    return rows


def price(work: Path) -> dict[str, float]:
    """SASS instructions and IMAD* per Fp product (with the single verify's share of additions,
    subtractions and negations), the overhead ratio, and the SHA-256 block's cost."""
    leaves = leaves_method.leaf_costs(work)
    leaf_n = {k: sum(v.values()) for k, v in leaves.items()}
    leaf_imad = {k: sum(n for op, n in v.items() if op.startswith("IMAD")) for k, v in leaves.items()}
    [item] = kat.sign_items("bls12-381", 1, seed=1, msg_len=32)
    mix = leaves_method.census(work, "verify", item)
    field = [k for k in mix if k != "sha256_block"]
    products = mix["fp_mul"] + mix["fp_sqr"]
    code = kernels.includes("bls12_381.cuh") + OVERHEAD_PROBE
    cubin, _, secs = cached_build(work, "bls_fp12_mul_probe",
                                  lambda c: kernels.compile_text(code, "bls_fp12_mul_probe", c))
    mangled, calls = leaves_method.sass_by_function(kernels.nvdisasm_sass(cubin))
    name = next(k for k in mangled if kernels.demangled(k) == leaves_method.OVERHEAD_FROM)
    dynamic = leaves_method.dynamic_count(name, mangled, calls)
    probe = leaves_method.census(work, leaves_method.OVERHEAD_FROM, item)
    overhead = dynamic / sum(probe[k] * leaf_n[k] for k in probe)
    return {"insns_per_product": sum(mix[k] * leaf_n[k] for k in field) / products,
            "imad_per_product": sum(mix[k] * leaf_imad[k] for k in field) / products,
            "overhead": overhead, "sha256_block": leaf_n["sha256_block"],
            "sha256_block_imad": leaf_imad["sha256_block"], "fp_mul": leaf_n["fp_mul"], "fp_sqr": leaf_n["fp_sqr"],
            "fp12_mul_sass": dynamic, "probe_nvcc_seconds": secs}


def add_arguments(ap) -> None:
    """None of its own: --efficiency is the ``leaves`` method's (one assumption for both)."""


def predict(scheme_ids: list[str], args, work: Path, prov: dict) -> None:
    p = price(work)
    rows = shape_counts()
    eff = args.efficiency
    for row in rows:
        c = row["counts"]
        products, blocks = c.get("ZV_OP_BLS_FP_MUL", 0.0), c.get("ZV_OP_SHA256_BLOCK", 0.0)
        insns = products * p["insns_per_product"] * p["overhead"] + blocks * p["sha256_block"]
        imads = products * p["imad_per_product"] + blocks * p["sha256_block_imad"]
        bound = min(H200.sms * H200.issue_lanes_per_sm_clock * H200.clock_hz / insns,
                    H200.sms * H200.int32_lanes_per_sm_clock * H200.clock_hz / imads)
        row.update(products=products, sha256_blocks=blocks, miller_loops=c.get("ZV_OP_BLS_MILLER_LOOP", 0.0),
                   final_exps=c.get("ZV_OP_BLS_FINAL_EXP", 0.0), insns=insns, bound=bound, predicted=bound * eff)
    single = rows[-1]
    lines = [
        "# BLS12-381 aggregate shapes on an H200 — PREDICTIONS from SASS and host-build counts, not measurements",
        "",
        "Method `products` of `scripts/gpu_model --scheme bls12-381-aggregate`",
        "(scripts/lib/gpu_model/bls_aggregate.py's docstring); nothing here ran on a GPU.",
        f"Kernel sources sha256 `{sources_digest()[:16]}`.",
        "",
        "## Price of one Fp product",
        "",
        f"- Leaf SASS (probe kernels): fp_mul {p['fp_mul']}, fp_sqr {p['fp_sqr']}, SHA-256 block "
        f"{p['sha256_block']} instructions.",
        f"- With a single verify's share of additions, subtractions and negations (gprof census): "
        f"{p['insns_per_product']:.0f} SASS instructions and {p['imad_per_product']:.0f} IMAD* per Fp product.",
        f"- Overhead of zv_fp12_mul in its own probe unit (SASS through its CALLs, {p['fp12_mul_sass']:.0f}, over "
        f"leaf census × cost): **{p['overhead']:.2f}**.",
        f"- Assumed efficiency: {eff:g} of the lower of the issue bound ({H200.sms} SMs × "
        f"{H200.issue_lanes_per_sm_clock} lanes × {H200.clock_hz / 1e9:.2f} GHz) and the IMAD bound "
        f"({H200.int32_lanes_per_sm_clock}/SM/clock).",
        "",
        "## Per item (valid items; counts from the -DZV_COUNT_OPS host build running ops' launches)",
        "",
        "| shape | keys | Miller loops | final exps | Fp products | SHA-256 blocks | SASS instr. (M) "
        "| PREDICTED items/s | PREDICTED keys/s | work vs single CoreVerify |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(f"| {row['shape']} | {row['keys']} | {row['miller_loops']:.4g} | {row['final_exps']:.4g} | "
                     f"{row['products']:,.0f} | {row['sha256_blocks']:,.0f} | {row['insns'] / 1e6:.2f} | "
                     f"{row['predicted']:,.0f} | {row['predicted'] * row['keys']:,.0f} | "
                     f"{row['products'] / single['products']:.3f} |")
    fast = [r for r in rows if r["shape"] == "FastAggregateVerify"]
    agg = [r for r in rows if r["shape"] == "AggregateVerify"]
    fits = {}
    for label, rs in (("FastAggregateVerify per key", fast), ("AggregateVerify per pair", agg)):
        slope, icpt = np.polyfit([r["keys"] for r in rs], [r["products"] for r in rs], 1)
        fits[label] = {"fp_products_fixed": icpt, "fp_products_per": slope,
                       "predicted_per_second": H200.sms * H200.issue_lanes_per_sm_clock * H200.clock_hz * eff
                       / (slope * p["insns_per_product"] * p["overhead"])}
    rlc = rows[-2]
    fa, av = fits["FastAggregateVerify per key"], fits["AggregateVerify per pair"]
    lines += [
        "",
        "## As functions of the key or pair count (least squares over the rows above)",
        "",
        f"- FastAggregateVerify with n keys: Fp products ≈ {fa['fp_products_fixed']:,.0f}"
        f" + {fa['fp_products_per']:,.0f}·n (KeyValidate and one tree addition per "
        f"key; the rest is one hash to G2, two Miller loops and one final exponentiation per item): PREDICTED "
        f"≤ {fa['predicted_per_second']:,.0f} keys/s at large n (issue bound × "
        f"efficiency).",
        f"- AggregateVerify with n pairs: Fp products ≈ {av['fp_products_fixed']:,.0f} + "
        f"{av['fp_products_per']:,.0f}·n (KeyValidate, a hash to G2 and a Miller loop "
        f"per pair): PREDICTED ≤ {av['predicted_per_second']:,.0f} pairs/s at large n.",
        f"- RLC batch: {rlc['products'] / single['products']:.3f} × the Fp products of single CoreVerify per item "
        f"(PREDICTED {rlc['predicted']:,.0f} against {single['predicted']:,.0f} items/s); Miller loops "
        f"{rlc['miller_loops']:.3f} and final exponentiations {rlc['final_exps']:.4f} per item against "
        f"{single['miller_loops']:.0f} and {single['final_exps']:.0f}.",
        "",
        "Every verdict of the counted runs was true: " + ("yes." if all(r["ok"] for r in rows) else "**NO**."),
    ]
    data = {"price": p, "efficiency": eff, "machine": H200.name,
            "rows": [{k: v for k, v in r.items() if k != "counts"} | {"counts": r["counts"]} for r in rows],
            "fits": fits}
    write(args.out, NAME, lines, data, prov, METHOD)
    print(f"bls12-381 aggregates: PREDICTED FastAggregateVerify ≤ "
          f"{fits['FastAggregateVerify per key']['predicted_per_second'] / 1e6:.2f} M keys/s", file=sys.stderr)
    if not all(r["ok"] for r in rows):
        raise RuntimeError("a counted run of valid items gave a false verdict")
