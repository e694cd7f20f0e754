"""Which kernels exist: the tables the kernel-host and CUDA backends discover schemes from.

A signature family has GPU kernels when its source file ``<source>.cu`` is present; its
verify entry point has the one shape of the kernel contract (see ``zv_verify_<family>`` in
docs/kernels.md and :func:`app.engine.device.ops.verify`).  Adding a family
is adding its .cu/.cuh files and, if its names differ from the defaults, one row here.
Rows are looked up by scheme id first, then by family, so a family whose parameter sets
need separate entry points (SLH-DSA's sha2/shake variants share key and signature sizes)
can name one per scheme.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from app.core.schemes import Scheme
from app.engine.device.hostbuild import KERNEL_DIR

#: Where the compilation units of the service live (docs/kernels.md "Layout and names").
SCHEMES_DIR = KERNEL_DIR / "schemes"
HASHES_DIR = KERNEL_DIR / "hashes"


@dataclass(frozen=True)
class KernelSource:
    """One compilation unit: ``<directory>/<name>.cu``; its quoted includes are found in
    ``directory`` or by their path from :data:`KERNEL_DIR`.  A variant of a unit (another
    register cap, :func:`cap_variants`) has a ``variant`` name and the compiler ``options``
    that make it; the shipped build has neither."""

    name: str
    directory: Path
    options: tuple[str, ...] = ()
    variant: str = ""

    @property
    def path(self) -> Path:
        return self.directory / f"{self.name}.cu"

    def exists(self) -> bool:
        return self.path.is_file()


@dataclass(frozen=True)
class VerifyKernel:
    """A verify entry point.  ``block`` is the GPU block size (threads); heavy curve code
    runs best with fewer threads per block than the hash kernels.  ``lanes`` is threads per
    item: 1 for a thread per signature, ``block`` for a block per signature (SLH-DSA)."""

    source: KernelSource
    entry: str
    block: int = 128
    lanes: int = 1


def _family(name: str, block: int = 128) -> VerifyKernel:
    return VerifyKernel(KernelSource(name, SCHEMES_DIR), f"zv_verify_{name}", block)


#: Verify kernels by scheme id or family; a row counts only while its .cu file exists.
VERIFY_KERNELS: dict[str, VerifyKernel] = {
    "ed25519": _family("ed25519"),
    "secp256k1": _family("secp256k1"),
    "p256": _family("p256"),
    "bip340": _family("bip340"),
    # One entry point per FIPS 204 parameter set (sizes and loop bounds are compile-time).
    **{f"ml-dsa-{level}": VerifyKernel(KernelSource("ml_dsa", SCHEMES_DIR), f"zv_verify_ml_dsa_{level}")
       for level in (44, 65, 87)},
    # SLH-DSA: one entry per parameter set (slh_dsa.cu), one 32-thread block per signature.
    **{f"slh-dsa-{h}-{lvl}": VerifyKernel(KernelSource("slh_dsa", SCHEMES_DIR), f"zv_verify_slh_dsa_{h}_{lvl}", 32, 32)
       for h in ("sha2", "shake") for lvl in ("128s", "128f", "192s", "192f", "256s", "256f")},
    # One thread per verify at 255 registers (bls12_381.cuh): 8 warps fill an SM, so blocks
    # of 64 let 4 resident blocks share it and a batch's last wave is finer-grained.
    "bls12-381": _family("bls12_381", block=64),
}

#: Schemes with more than one verify kernel: scheme id -> {variant: row}, the default (the row
#: of VERIFY_KERNELS) first.  A kernel backend serves each such scheme with one of them: the
#: one its ``kernel_variant`` setting forces, else the fastest measured by the engine's
#: start-up calibration (app/engine/verify/calibrate.py ``choose_variant``), else the default.
#: ML-DSA: one thread per signature, or one block of 128 threads per signature (ml_dsa.cuh,
#: "one block per signature").
VERIFY_VARIANTS: dict[str, dict[str, VerifyKernel]] = {
    f"ml-dsa-{level}": {
        "thread": VERIFY_KERNELS[f"ml-dsa-{level}"],
        "block": VerifyKernel(KernelSource("ml_dsa", SCHEMES_DIR), f"zv_verify_ml_dsa_block_{level}", 128, 128),
    }
    for level in (44, 65, 87)
}



@dataclass(frozen=True)
class RegisterCap:
    """The register caps of one unit that are compared, by ``scripts/ptxas`` (resource use)
    and ``scripts/gpu_check`` (rates on a GPU), docs/kernels.md "Register caps".

    ``macro`` is the source's own cap (``-D<macro>=<cap>``; the source applies it with
    ``__maxnreg__``, 0 = uncapped); None means the unit has none and a cap is the
    compiler's ``--maxrregcount``.  ``shipped`` is the cap of the shipped build (0 =
    uncapped), ``caps`` every cap compared, the shipped one included.
    """

    macro: str | None
    shipped: int
    caps: tuple[int, ...]

    def options(self, cap: int) -> tuple[str, ...]:
        """Compiler options of the build at ``cap`` (none for the shipped cap)."""
        if cap == self.shipped:
            return ()
        if self.macro is not None:
            return (f"-D{self.macro}={cap}",)
        return (f"--maxrregcount={cap}",) if cap else ()


#: Register caps compared per compilation unit (by file stem).
REGISTER_CAPS: dict[str, RegisterCap] = {
    "ed25519": RegisterCap("ZV_ED25519_MAX_REGISTERS", 168, (0, 128, 168)),
    "secp256k1": RegisterCap("ZV_SECP256K1_MAX_REGISTERS", 168, (0, 128, 168)),
    "p256": RegisterCap("ZV_P256_MAX_REGISTERS", 168, (0, 128, 168)),
    "bip340": RegisterCap("ZV_BIP340_MAX_REGISTERS", 168, (0, 128, 168)),
    "ml_dsa": RegisterCap("ZV_MLDSA_MAX_REGISTERS", 0, (0, 128, 168)),
    "bls12_381": RegisterCap(None, 0, (0, 128)),
}


def cap_variants(source: KernelSource) -> list[KernelSource]:
    """The builds of ``source`` at every cap of :data:`REGISTER_CAPS` other than the
    shipped one (variant ``regs<cap>``, ``regs0`` uncapped); none for a unit without caps."""
    caps = REGISTER_CAPS.get(source.name)
    if caps is None:
        return []
    return [KernelSource(source.name, source.directory, caps.options(cap), f"regs{cap}")
            for cap in caps.caps if cap != caps.shipped]


HASH = KernelSource("hash", HASHES_DIR)
MERKLE = KernelSource("merkle", HASHES_DIR)
#: BLS12-381 aggregate shapes and batch CoreVerify by random linear combination (issue 40):
#: not a verify kernel of the contract's shape, chained by app/engine/device/ops.py instead.
BLS_AGGREGATE = KernelSource("bls12_381_aggregate", SCHEMES_DIR)
#: Its entry points, all of which must build for a backend to declare ``aggregates``.
BLS_AGGREGATE_ENTRIES = ("zv_bls_agg_key_validate", "zv_bls_agg_key_sum", "zv_bls_agg_hash", "zv_bls_agg_items",
                         "zv_bls_agg_miller", "zv_bls_agg_final", "zv_bls_rlc_prepare", "zv_bls_rlc_group_sig")

#: Batch hash kernels of hash.cu: name -> (entry point, digest bytes; None = XOF, caller's length).
HASH_KERNELS: dict[str, tuple[str, int | None]] = {
    "sha256": ("zv_sha256_batch", 32),
    "sha512": ("zv_sha512_batch", 64),
    "sha3-256": ("zv_sha3_256_batch", 32),
    "sha3-512": ("zv_sha3_512_batch", 64),
    "shake128": ("zv_shake128_batch", None),
    "shake256": ("zv_shake256_batch", None),
}


def verify_kernel(scheme: Scheme, table: dict[str, VerifyKernel] | None = None) -> VerifyKernel | None:
    """The verify kernel of ``scheme`` (by id, then family) if its source file exists, else None."""
    table = VERIFY_KERNELS if table is None else table
    row = table.get(scheme.id) or table.get(scheme.family)
    return row if row is not None and row.source.exists() else None


def service_sources() -> list[KernelSource]:
    """The compilation units the service loads (every verify kernel's, the hash and Merkle
    kernels'), not test harnesses such as bls12_381_parts.cu; what build-kernels ships."""
    return [s for s in dict.fromkeys([*(row.source for row in VERIFY_KERNELS.values()), HASH, MERKLE, BLS_AGGREGATE])
            if s.exists()]


def sources(directory: Path = KERNEL_DIR) -> list[Path]:
    """Every compilation unit (``*.cu``) in ``directory`` and its subfolders, sorted by path."""
    return sorted(directory.rglob("*.cu"))
