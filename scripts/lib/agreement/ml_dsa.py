"""``scripts/agreement --scheme ml-dsa``: zv_verify_ml_dsa_<level> (host build, called as
tests/test_kernel_ml_dsa.py calls it) against OpenSSL through ``cryptography`` (the CPU
backend's reference), per parameter set ML-DSA-44/65/87.  ``--kernel block`` runs the block
kernel zv_verify_ml_dsa_block_<level> instead (one 128-thread block per signature, 128
fibers with real barriers in the host build), into ml_dsa_block_agreement.{json,md};
``--kernel cpu`` the CPU backend's own verify (app/engine/backends/native_ml_dsa.py, the best
code path this CPU runs) into ml_dsa_cpu_agreement.{json,md}, and ``--kernel cpu-portable``
its build with the vector code compiled out into ml_dsa_cpu_portable_agreement.{json,md}.

Per chunk of CHUNK valid items (kat.sign_items: one key, random 0-200 byte messages, contexts
of 0, 1, 254 and 255 bytes in turn by chunk): as many mutated ones, every kind of
tests/oracles/ml_dsa_model.MUTANT_KINDS in turn (bit flips of pk, msg, sig and ctx, z at /
over / just under the bound and at γ1, each malformed hint encoding and a well-formed moved
hint), plus the chunk's first item under a 256-byte context and with pk and sig one byte
short and long.  For the kernels, every group with one context also goes through
app.engine.device.ops on the host device (the kernel-host backend's path), which must give
the same verdicts.
"""

from __future__ import annotations

import ctypes
import random
import time
from dataclasses import replace

from app.core.schemes import SCHEMES
from app.engine.backends import native_ml_dsa
from app.engine.device import registry
from app.engine.reference import kat
from scripts.lib.agreement import CheckFailures, Chunk, Tally, compare, compare_launched, host_library, kernel_via_ops
from tests.oracles import ml_dsa_model as m

SCHEME = "ml-dsa"
TITLE = "ML-DSA kernel (host build) vs OpenSSL"
RESULTS = "ml_dsa_agreement"
KERNEL = "zv_verify_ml_dsa_<level> (host build; one-context groups through app.engine.device.ops too)"
#: Per kernel (registry.VERIFY_VARIANTS): (TITLE, RESULTS, KERNEL).
RUNS = {
    "thread": (TITLE, RESULTS, KERNEL),
    "block": ("ML-DSA block kernel (host build, 128 fibers per block) vs OpenSSL", "ml_dsa_block_agreement",
              "zv_verify_ml_dsa_block_<level> (host build: one block of 128 fibers with real barriers per item; "
              "one-context groups through app.engine.device.ops too)"),
    "cpu": ("ML-DSA CPU verify (native_ml_dsa, best vector path) vs OpenSSL", "ml_dsa_cpu_agreement",
            "the CPU backend's own verify, app/engine/backends/native_ml_dsa.cpp (its best code path on this "
            "CPU; ZV_CHECK bounds checks on)"),
    "cpu-portable": ("ML-DSA CPU verify (native_ml_dsa, no-AVX build) vs OpenSSL", "ml_dsa_cpu_portable_agreement",
                     "the CPU backend's own verify built with -DZV_MLDSA_PORTABLE (vector code compiled out; "
                     "ZV_CHECK bounds checks on)"),
}
#: The CPU runs (``--kernel``): the defines of their build.
CPU_BUILDS = {"cpu": (), "cpu-portable": ("ZV_MLDSA_PORTABLE",)}
OPTIONS = ("kernel",)
REFERENCE, REFERENCE_SHORT = "OpenSSL (cryptography)", "OpenSSL"
VERSIONS = ("cryptography",)
SETS = [s for s in SCHEMES if s.startswith("ml-dsa-")]
DEFAULTS = {"valid": 100_000, "mutated": 100_000}
CHUNK = 500
VALID_KINDS = ("valid",)
CONTEXTS = (0, 1, 254, 255)


def add_arguments(ap) -> None:
    ap.add_argument("--kernel", choices=tuple(RUNS), default="thread",
                    help="which ML-DSA verify: the kernel with one thread or one block per signature, or the "
                         "CPU backend's own (best vector path, or the no-AVX build)")


def configure(args) -> None:
    global TITLE, RESULTS, KERNEL
    TITLE, RESULTS, KERNEL = RUNS[args.kernel]


def prepare(args) -> None:
    if args.kernel in CPU_BUILDS:
        _cpu_verifier(args.kernel)
    else:
        host_library(SETS[0])  # one source for the three sets


_CPU: dict[str, native_ml_dsa.MlDsaVerifier] = {}


def _cpu_verifier(kernel: str) -> native_ml_dsa.MlDsaVerifier:
    """The CPU verify of the ``--kernel`` run ``kernel`` (built once, loaded once per process)."""
    if kernel not in _CPU:
        _CPU[kernel] = native_ml_dsa.MlDsaVerifier(ctypes.CDLL(str(native_ml_dsa.build(CPU_BUILDS[kernel]))))
    return _CPU[kernel]


def run_chunk(chunk: Chunk) -> Tally:
    scheme = SCHEMES[chunk.set_id]
    rng = random.Random(f"ml-dsa-agreement/{chunk.set_id}/{chunk.seed}/{chunk.index}")
    ctx = bytes(rng.randbytes(CONTEXTS[chunk.index % len(CONTEXTS)]))
    t0 = time.perf_counter()
    valid = kat.sign_items(scheme.id, chunk.counts["valid"], seed=100_000 * chunk.seed + chunk.index, context=ctx)
    sign_s = time.perf_counter() - t0
    groups: dict[str, list] = {"valid": valid}
    n = chunk.counts["mutated"]
    for j in range(n):
        kind = m.MUTANT_KINDS[(chunk.index * n + j) % len(m.MUTANT_KINDS)]
        groups.setdefault(kind, []).append(m.mutant(valid[j % len(valid)], kind, rng))
    it = valid[0]
    groups["length_or_ctx256"] = [replace(it, context=bytes(256)), replace(it, public_key=it.public_key[:-1]),
                                  replace(it, public_key=it.public_key + b"\0"),
                                  replace(it, signature=it.signature[:-1]),
                                  replace(it, signature=it.signature + b"\0")]
    kernel = chunk.options.get("kernel", "thread")
    tally = Tally()
    tally.count(chunk.set_id, "valid", sign_s=sign_s)
    if kernel in CPU_BUILDS:
        # Every kind in one call, shuffled, as a served batch mixes them: the CPU verify hashes
        # across groups of 4 or 8 items, so valid and invalid items share its Keccak lanes.
        cpu = _cpu_verifier(kernel)
        order = [it for items in groups.values() for it in items]
        rng.shuffle(order)
        with CheckFailures(tally, chunk.set_id, cpu.lib):
            compare_launched(tally, chunk.set_id, groups, lambda its: m.cpu_verdicts(cpu, its), m.openssl_verdicts,
                             order=order)
        return tally
    lib = host_library(scheme.id)
    row = registry.VERIFY_VARIANTS[scheme.id][kernel]
    with CheckFailures(tally, chunk.set_id, lib):
        for kind, items in groups.items():
            got, _ = compare(tally, chunk.set_id, kind, items, lambda its: m.kernel_verdicts(lib, its, kernel),
                             m.openssl_verdicts)
            if kind != "length_or_ctx256" and len({x.context for x in items}) == 1:
                via_ops = kernel_via_ops(scheme.id, items, ctx=items[0].context, kernel=row)
                tally.count(chunk.set_id, kind, ops_path_disagreements=sum(a != b for a, b in zip(via_ops, got)))
    return tally
