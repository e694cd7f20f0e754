"""The families run under the simulator, their samples, and the comparison with the CPU.

A family's check feeds its sample through :mod:`app.engine.device.ops` on a
:class:`~scripts.lib.gpusim.device.SimDevice` (the CUDA backend's calls, launch geometry and
column layout) and compares every output with the CPU: verdicts with the CPU reference
(:func:`app.engine.reference.reference.verifier`) and with the known answer's expected
verdict, leaves and roots with :mod:`app.engine.commit.merkle`, digests with hashlib.
Samples are fixed (seeded), so a run is repeatable and CI checks the same items each time.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from app.core.schemes import SCHEMES
from app.engine.commit import merkle
from app.engine.device import ops, registry
from app.engine.reference import kat
from app.engine.reference.reference import verifier
from app.engine.verify.grouping import batch_of, group_items
from scripts.lib.gpusim.device import SimDevice


@dataclass(frozen=True)
class Sample:
    """How much of each family a run checks.  ``generated`` is (valid, mutated) items signed
    fresh for the schemes in it, on top of the shipped known answers (two valid, two
    mutated per scheme); ``slh_dsa`` the SLH-DSA sets run; ``trees`` the Merkle sizes, each
    with the levels' tail limit its root is built with."""

    name: str
    generated: dict[str, tuple[int, int]]
    schemes: tuple[str, ...]
    trees: tuple[tuple[int, int], ...]
    hash_messages: int
    max_grid: int = 2
    #: Families beyond the schemes' verify kernels (:data:`EXTRA_FAMILIES`).
    extra: tuple[str, ...] = ()
    #: Schemes checked on one valid and one mutated known answer only (the slowest to simulate).
    one_pair: tuple[str, ...] = ()


_ALL_SLH = tuple(s for s in SCHEMES if s.startswith("slh-dsa-"))


def variant_families() -> dict[str, tuple[str, registry.VerifyKernel]]:
    """A family per verify kernel that is not its scheme's default (registry.VERIFY_VARIANTS):
    ``<scheme>-<variant>`` (``ml-dsa-65-block``) -> (scheme id, kernel)."""
    return {f"{sid}-{name}": (sid, k) for sid, variants in registry.VERIFY_VARIANTS.items()
            for name, k in variants.items() if k is not registry.VERIFY_KERNELS.get(sid) and k.source.exists()}


def family_kernel(family: str) -> tuple[str, registry.VerifyKernel | None]:
    """The scheme id and verify kernel a scheme family checks: a scheme's default kernel, or
    a variant's (:func:`variant_families`); (family, None) when it has none."""
    if family in (variants := variant_families()):
        return variants[family]
    return family, registry.verify_kernel(SCHEMES[family]) if family in SCHEMES else None


_ML_DSA = tuple(f"ml-dsa-{level}{kind}" for kind in ("", "-block") for level in (44, 65, 87))

#: Every shipped entry point (scripts/ptxas's record less the test-only bls12_381_parts.cu):
#: Ed25519, secp256k1, P-256 and BIP-340 past one block's chunk with the grid capped at two
#: blocks (so both blocks run, one of them a second chunk, and the last warp is partial),
#: every ML-DSA set under both kernels, every SLH-DSA set, BLS12-381 and its aggregate and
#: RLC kernels.
FULL = Sample(
    "full",
    generated={"ed25519": (140, 140), "secp256k1": (140, 140), "p256": (140, 140), "bip340": (140, 140)},
    schemes=("ed25519", "secp256k1", "p256", "bip340", *_ML_DSA, *_ALL_SLH, "bls12-381"),
    trees=((1, ops.TAIL_MAX), (2, ops.TAIL_MAX), (3, ops.TAIL_MAX), (1023, ops.TAIL_MAX), (1024, ops.TAIL_MAX),
           (1023, 64), (1024, 64)),
    hash_messages=300,
    extra=("bls12-381-aggregate",),
)
#: What CI runs (.ci/run): an entry point of every verify family — the shipped known answers of
#: Ed25519 (plus two warps of generated items, the last partial), secp256k1, P-256, BIP-340,
#: ML-DSA-44 under both kernels and SLH-DSA-SHA2-128f; one valid and one mutated known answer
#: of SLH-DSA-SHAKE-128f and BLS12-381 (a BLS verify takes ~50 s under the simulator, a
#: SHAKE-128f one ~20 s) — plus trees that take the tail alone and the levels then the tail,
#: and hash messages over two blocks.  The BLS aggregate shapes are left to the full sample.
CI = Sample(
    "ci",
    generated={"ed25519": (30, 29)},
    schemes=("ed25519", "secp256k1", "p256", "bip340", "ml-dsa-44", "ml-dsa-44-block", "slh-dsa-sha2-128f",
             "slh-dsa-shake-128f", "bls12-381"),
    trees=((1, ops.TAIL_MAX), (3, ops.TAIL_MAX), (1024, ops.TAIL_MAX), (1023, 64)),
    hash_messages=260,
    one_pair=("slh-dsa-shake-128f", "bls12-381"),
)
SAMPLES = {s.name: s for s in (CI, FULL)}


@dataclass
class Result:
    """One family's outcome: ``items`` compared, ``disagreements`` (with the first few
    named), the simulator's ``processes`` and seconds (wall in all, inside launches)."""

    family: str
    kernel: str
    items: int = 0
    disagreements: int = 0
    first: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    processes: int = 0
    wall_s: float = 0.0
    kernel_s: float = 0.0
    error: str = ""
    #: The entry points the simulator ran for it, in first-launch order.
    entries: list[str] = field(default_factory=list)

    def disagree(self, what: str) -> None:
        self.disagreements += 1
        if len(self.first) < 10:
            self.first.append(what)

    @property
    def agreed(self) -> bool:
        return not self.error and self.items > 0 and self.disagreements == 0


def _measured(result: Result, dev: SimDevice, t0: float) -> Result:
    result.processes = dev.stats.processes
    result.entries = list(dict.fromkeys(entry for _, entry, _ in dev.stats.launches))
    result.kernel_s = dev.stats.kernel_s
    result.wall_s = time.perf_counter() - t0
    return result


# ------------------------------------------------------------------ families
def check_hashes(make: Callable[[], SimDevice], sample: Sample) -> Result:
    """The six batch hash kernels (hash.cu) on messages of 0 .. 2 × the largest rate + 1
    bytes (every padding boundary of SHA-2 and Keccak), against hashlib."""
    dev, t0 = make(), time.perf_counter()
    res = Result("hash", "hash.cu: " + ", ".join(e for e, _ in registry.HASH_KERNELS.values()))
    rng = random.Random("gpusim/hash")
    lens = [*range(0, 170), 200, 255, 256, 300, 1000][: sample.hash_messages]
    lens += [rng.randrange(1200) for _ in range(sample.hash_messages - len(lens))]
    msgs = [rng.randbytes(n) for n in lens]
    data, offsets = ops.pack_messages(msgs)
    d_msgs, d_off = dev.put(data), dev.put(offsets)
    xof_len = 200  # more than one squeeze block of either SHAKE rate
    outs = {algo: ops.hash_buffer(dev, algo, d_msgs, d_off, len(msgs), xof_len if size is None else None)
            for algo, (_, size) in registry.HASH_KERNELS.items()}
    for algo, buf in outs.items():
        size = ops.digest_size(algo, xof_len if registry.HASH_KERNELS[algo][1] is None else None)
        got = dev.get(buf, size * len(msgs)).reshape(len(msgs), size)
        for m, g in zip(msgs, got):
            h = hashlib.new(algo.replace("-", "_"), m)
            want = h.digest(size) if algo.startswith("shake") else h.digest()  # type: ignore[call-arg]
            res.items += 1
            if g.tobytes() != want:
                res.disagree(f"{algo} of {len(m)} bytes")
    return _measured(res, dev, t0)


def check_merkle(make: Callable[[], SimDevice], sample: Sample) -> Result:
    """RFC 6962 roots (merkle.cu: the levels, then one block's tail) of random leaves,
    against app/engine/commit/merkle.py."""
    dev, t0 = make(), time.perf_counter()
    res = Result("merkle", "merkle.cu: zv_merkle_level, zv_merkle_tail")
    rng = np.random.default_rng(6962)
    for n, tail_max in sample.trees:
        leaves = rng.integers(0, 256, size=(n, 32), dtype=np.uint8)
        res.items += 1
        if ops.root(dev, leaves, tail_max=tail_max) != merkle.root(leaves):
            res.disagree(f"root of {n} leaves (tail above {tail_max})")
    res.notes.append("trees: " + ", ".join(f"{n}" + ("" if t == ops.TAIL_MAX else f" (levels above {t})")
                                            for n, t in sample.trees))
    return _measured(res, dev, t0)


def scheme_sample(scheme: str, sample: Sample) -> list[kat.KnownAnswer]:
    """The shipped known answers of ``scheme`` (the first valid and the first mutated one only
    where the sample's ``one_pair`` names it) and the sample's generated ones (seeded): valid
    items under one key in one form (so they make one batch, which is what reaches a block's
    second chunk; the known answers carry the other key forms and options) and one-bit
    mutations of them (:func:`kat.mutate`)."""
    kas = list(kat.known_answers()[scheme])
    if scheme in sample.one_pair:
        kas = [next(ka for ka in kas if ka.expected), next(ka for ka in kas if not ka.expected)]
    valid, mutated = sample.generated.get(scheme, (0, 0))
    if valid:
        items = kat.sign_items(scheme, valid, seed=35)
        rng = random.Random(f"gpusim/{scheme}")
        kas += [kat.KnownAnswer(it, True, f"{scheme}/gpusim/valid/{i}") for i, it in enumerate(items)]
        kas += [kat.KnownAnswer(kat.mutate(items[i % valid], rng), False, f"{scheme}/gpusim/mutated/{i}")
                for i in range(mutated)]
    return kas


def check_scheme(make: Callable[[], SimDevice], sample: Sample, family: str) -> Result:
    """A scheme family's sample (:func:`family_kernel`: a scheme's default kernel or a variant)
    through :func:`ops.verify_and_commit` (its verify kernel, then the leaves and root on the
    device, as the CUDA backend commits a batch), one batch per group of items that share a
    batch (grouping.py); verdicts against the CPU reference and the known answers, leaves and
    root against merkle.py."""
    scheme, kernel = family_kernel(family)
    res = Result(family, "—" if kernel is None else f"{kernel.source.name}.cu: {kernel.entry}")
    if kernel is None:
        res.error = "no device kernel"
        return res
    dev, t0 = make(), time.perf_counter()
    kas = scheme_sample(scheme, sample)
    cpu = verifier(SCHEMES[scheme])
    sizes = []
    for key, idx in group_items([ka.item for ka in kas]).items():
        if key is None:
            continue
        items = [kas[i] for i in idx]
        want = np.array([cpu(ka.item.public_key, ka.item.message, ka.item.signature, ka.item.context,
                             **SCHEMES[scheme].verifier_options(ka.item)) for ka in items], dtype=bool)
        expected = np.array([ka.expected for ka in items], dtype=bool)
        if not np.array_equal(want, expected):  # our own answers wrong: say so, it is not the device's fault
            res.notes.append(f"CPU reference and known answers differ on {int(np.sum(want != expected))} items")
        batch = batch_of(key, [ka.item for ka in items])
        got, leaves, root = ops.verify_and_commit(dev, kernel, batch)
        sizes.append(len(items))
        res.items += len(items)
        for j in np.flatnonzero(got != want):
            res.disagree(f"{items[j].id}: device {bool(got[j])}, CPU {bool(want[j])}")
        want_leaves = merkle.batch_leaves(batch, want)
        bad_leaves = int(np.sum(np.any(leaves != want_leaves, axis=1)))
        if bad_leaves:
            res.disagree(f"{bad_leaves} leaves of a batch of {len(items)}")
        if root != merkle.root(want_leaves):
            res.disagree(f"root of a batch of {len(items)}")
    valid = sum(ka.expected for ka in kas)
    res.notes.append(f"batches of {', '.join(map(str, sizes))} items ({valid} valid); block {kernel.block}, "
                     f"{kernel.lanes} thread(s) per item, grid ≤ {dev.max_grid}")
    return _measured(res, dev, t0)


def aggregate_sample() -> tuple[list, list]:
    """The BLS12-381 aggregate family's items, small because a pairing takes tens of seconds
    under the simulator: (aggregate items, bls12-381 items of one RLC batch).  Aggregates:
    FastAggregateVerify of 5 keys (three rounds of the tree key sum, one key unpaired in the
    first), the same with another signer's key in the middle, with the identity key, no keys
    with the infinity signature under both variants (true only under ``eth``), AggregateVerify
    of 2 pairs.  RLC: 2 valid items, then an invalid one (another message), in groups of 2, so
    one group passes and the other fails and falls back to the single-verify kernel."""
    from app.core.batch import G2_INFINITY, AggregateItem
    from scripts.lib.agreement.bls12_381_aggregate import IDENTITY_PK, Signers

    s = Signers("gpusim-aggregates")
    sks = [s.key() for _ in range(5)]
    pks = tuple(s.pk(k) for k in sks)
    m = s.rng.randbytes(32)
    fsig = s.sig([(k, m) for k in sks])
    msgs = (s.rng.randbytes(32), s.rng.randbytes(32))
    items = [AggregateItem("fast_aggregate", pks, (m,), fsig),
             AggregateItem("fast_aggregate", pks[:2] + (s.pk(s.key()),) + pks[3:], (m,), fsig),
             AggregateItem("fast_aggregate", pks[:2] + (IDENTITY_PK,), (m,), fsig),
             AggregateItem("fast_aggregate", (), (m,), G2_INFINITY, "eth"),
             AggregateItem("fast_aggregate", (), (m,), G2_INFINITY),
             AggregateItem("aggregate", pks[:2], msgs, s.sig(list(zip(sks[:2], msgs))))]
    valid = kat.sign_items("bls12-381", 3, seed=36, msg_len=32)
    return items, [valid[0], valid[1], replace(valid[2], message=valid[2].message + b"!")]


def check_bls_aggregates(make: Callable[[], SimDevice], sample: Sample) -> Result:
    """bls12_381_aggregate.cu through :func:`ops.verify_aggregates` (KeyValidate per key, the
    tree key sum, hash to G2, the per-item rules, Miller loops per pair, product and final
    exponentiation) and :func:`ops.verify_bls_rlc` (groups of 2, a failed group verified by
    the single-verify kernel), on :func:`aggregate_sample`; verdicts against the CPU
    reference (app/engine/reference/bls_aggregate.py, reference.verify_bls12_381)."""
    from app.core.batch import Batch
    from app.engine.reference import bls_aggregate
    from app.engine.reference.reference import verify_bls12_381

    res = Result("bls12-381-aggregate", f"{registry.BLS_AGGREGATE.name}.cu: {len(registry.BLS_AGGREGATE_ENTRIES)} "
                 "entry points, + zv_verify_bls12_381 for a failed RLC group")
    dev, t0 = make(), time.perf_counter()
    items, rlc = aggregate_sample()
    want = [bls_aggregate.verify_item(it) for it in items]
    got = ops.verify_aggregates(dev, items)
    res.items += len(items)
    for j in np.flatnonzero(got != np.array(want)):
        res.disagree(f"aggregate item {j} ({items[j].mode}, {len(items[j].public_keys)} keys, {items[j].variant}): "
                     f"device {bool(got[j])}, CPU {want[j]}")
    batch = Batch.from_items(SCHEMES["bls12-381"], [it.public_key for it in rlc], [it.message for it in rlc],
                             [it.signature for it in rlc])
    want_rlc = [verify_bls12_381(it.public_key, it.message, it.signature) for it in rlc]
    verdicts, report = ops.verify_bls_rlc(dev, registry.VERIFY_KERNELS["bls12-381"], batch, group=2)
    res.items += len(rlc)
    for j in np.flatnonzero(np.asarray(verdicts) != np.array(want_rlc)):
        res.disagree(f"RLC item {j}: device {bool(verdicts[j])}, CPU {want_rlc[j]}")
    if (report.groups, report.failed_groups, report.singles) != (2, 1, 1):
        res.disagree(f"RLC groups {report.groups}, failed {report.failed_groups}, singles {report.singles} "
                     "(expected 2, 1, 1)")
    res.notes.append(f"{len(items)} aggregate items ({sum(want)} valid; FastAggregateVerify of 5 keys: 3 tree "
                     f"rounds), an RLC batch of {len(rlc)} in groups of 2 (one failed, verified alone); block "
                     f"{ops.BLS_BLOCK}, grid ≤ {dev.max_grid}")
    return _measured(res, dev, t0)


#: Families that are not a scheme's verify kernel, and their checks.
EXTRA_FAMILIES: dict[str, Callable[[Callable[[], SimDevice], Sample], Result]] = {
    "bls12-381-aggregate": check_bls_aggregates,
}


def families(sample: Sample) -> list[str]:
    """The families a sample checks, cheapest first."""
    return ["hash", "merkle", *sample.schemes, *sample.extra]


def known_families() -> list[str]:
    """Every family ``scripts/gpusim --families`` takes: the hash and Merkle kernels, each
    scheme with a device kernel, the extra families and the negative control."""
    return ["hash", "merkle", *(s for s in SCHEMES if registry.verify_kernel(SCHEMES[s]) is not None),
            *variant_families(), *EXTRA_FAMILIES, "control"]


def run_family(family: str, sample: Sample, make: Callable[[], SimDevice]) -> Result:
    """One family's check; a simulator failure is the family's error, not the run's end."""
    try:
        if family == "hash":
            return check_hashes(make, sample)
        if family == "merkle":
            return check_merkle(make, sample)
        if family in EXTRA_FAMILIES:
            return EXTRA_FAMILIES[family](make, sample)
        return check_scheme(make, sample, family)
    except Exception as exc:  # the simulator's log tail is in the message
        return Result(family, "", error=f"{type(exc).__name__}: {exc}")


# ------------------------------------------------------------------ the negative control
#: The barrier the control removes (ed25519.cu): the one after the block's batched
#: inversion, so threads past the first warp read their Z before warp 0 has inverted it.
#: On the host build ZV_SYNC is empty, so there the broken copy still passes: only a run
#: of concurrent warps can tell the difference.
CONTROL_BARRIER = ("zv_ed_fe_block_batch_invert(zs, prefix, (int)count, tops, tops_prefix);\n        ZV_SYNC();",
                   "zv_ed_fe_block_batch_invert(zs, prefix, (int)count, tops, tops_prefix);\n"
                   "        /* ZV_SYNC() removed by scripts/gpusim's negative control */")
#: Valid items of the control's one batch: more than one warp of the block has items.
CONTROL_ITEMS = 64


def control_text(text: str) -> str:
    """``text`` (ed25519.cu) without :data:`CONTROL_BARRIER`; raises ValueError when it does
    not hold that barrier exactly once (the control must move with the source)."""
    before, after = CONTROL_BARRIER
    if text.count(before) != 1:
        raise ValueError("ed25519.cu no longer has the barrier the negative control removes")
    return text.replace(before, after)


def broken_ed25519(out_dir: Path) -> Path:
    """A copy of ed25519.cu without :data:`CONTROL_BARRIER`, compiled to PTX by NVRTC like the
    shipped one; returns the PTX file.  Raises ValueError when the source no longer has that
    barrier (the control must move with it)."""
    from app.engine.device import prebuilt
    from app.engine.device.registry import KernelSource

    source = registry.VERIFY_KERNELS["ed25519"].source
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / source.path.name).write_text(control_text(source.path.read_text()))
    return prebuilt.build_nvrtc(KernelSource(source.name, out_dir), "compute_90", out_dir=out_dir)


def check_control(make: Callable[..., SimDevice], work: Path) -> Result:
    """The negative control: :func:`broken_ed25519` on :data:`CONTROL_ITEMS` valid items.  It
    *passes* when the simulator finds disagreements (``Result.disagreements`` > 0)."""
    kernel = registry.VERIFY_KERNELS["ed25519"]
    res = Result("control", f"ed25519.cu without the barrier after the batched inversion: {kernel.entry}")
    t0 = time.perf_counter()
    try:
        dev = make(modules={"ed25519": broken_ed25519(work)})
        items = kat.sign_items("ed25519", CONTROL_ITEMS, seed=35, msg_len=32)
        batch = batch_of(("ed25519", 32, b"", (False, False)), items)
        got = ops.verify_batch(dev, kernel, batch)
    except Exception as exc:
        res.error = f"{type(exc).__name__}: {exc}"
        return res
    res.items = len(items)
    for j in np.flatnonzero(~got):
        res.disagree(f"item {j} (warp {j // 32}): device False, CPU True")
    res.notes.append(f"{int(np.sum(~got[:32]))} of warp 0's and {int(np.sum(~got[32:]))} of the other warps' "
                     "valid items answered False")
    return _measured(res, dev, t0)
