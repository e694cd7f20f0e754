"""The SLH-DSA kernel (app/engine/kernels/schemes/slh_dsa.cu), host build, against pqcrypto.

Every verdict is compared with pqcrypto (PQClean; app.engine.reference.reference), the library of the
CPU backend, on all 12 parameter sets: a pool of valid signatures (contexts of 0, 1 and 255
bytes; messages of 0, 33 and 300 bytes) signed once and cached (tests/slh_dsa_cases.py), and
mutations of it reaching every part of pk, msg, ctx and sig, wrong lengths, and 256-byte
contexts.  The ACVP sigVer vectors (internal interface) are checked both ways: the pure entry
point under the project's rule (tests/test_vectors_acvp_slh_dsa.py) and the kernel's
internal-interface hook against the source's verdicts.  scripts/agreement --scheme slh-dsa runs the
comparison at full size; the sm_90 build is checked by tests/test_kernels_nvcc.py.
"""

from __future__ import annotations

import ctypes
import os
import random
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pytest

from app.core.batch import Batch
from app.core.schemes import SCHEMES
from app.engine.backends.kernel_host import KernelHostBackend
from app.engine.device import hostbuild, registry
from app.vectors import RULE_SLH_INTERNAL, _acvp_slh_dsa, from_json
from tests.oracles.slh_dsa import PARAMS, slh_verify
from tests.slh_dsa_cases import (
    MUTANT_KINDS,
    SLH_IDS,
    kernel_verdicts,
    mutants,
    reference_verdicts,
    sign_pool,
    verify_internal,
)

# The timeout covers signing the pool on a loaded machine (the first test to use it pays).
pytestmark = [pytest.mark.skipif(hostbuild.compiler() is None, reason="no C++ compiler"),
              pytest.mark.timeout(900)]

POOL = 3  # signatures per set: one per pool context / message length


@pytest.fixture(scope="module")
def lib():
    lib = hostbuild.load("slh_dsa")
    yield lib
    # Bounds checks (ZV_CHECK) compiled in by the suite's ZAPVERIFY_KERNEL_VERIFY=1.
    assert hostbuild.verify_failures(lib) in (0, None)


def _sign(sid: str) -> list:
    return sign_pool(sid, POOL)


@pytest.fixture(scope="module")
def pools() -> dict[str, list]:
    """Three valid items per set, signed in parallel on first use and cached on disk (up to
    ~2 s per signature; the timeout marks below allow for a loaded machine)."""
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 1) as ex:
        return dict(zip(SLH_IDS, ex.map(_sign, SLH_IDS)))


def assert_agrees(lib, items, expect: bool | None = None) -> list[bool]:
    got, want = kernel_verdicts(lib, items), reference_verdicts(items)
    bad = [(i, items[i].scheme, len(items[i].context), want[i], got[i]) for i in range(len(items)) if got[i] != want[i]]
    assert not bad, f"{len(bad)} disagreements with pqcrypto, first: {bad[:5]}"
    if expect is not None:
        assert all(v == expect for v in want), "the case does not test what it says"
    return got


def test_sets_and_entry_points_follow_the_scheme_table(lib):
    assert SLH_IDS == sorted(SLH_IDS, key=lambda s: SCHEMES[s].code) and len(SLH_IDS) == 12
    for sid in SLH_IDS:
        k = registry.verify_kernel(SCHEMES[sid])
        assert k is not None and k.source.name == "slh_dsa" and (k.block, k.lanes) == (32, 32)
        assert hasattr(lib, k.entry)
        assert PARAMS[sid].sig_len == SCHEMES[sid].sig_len and 2 * PARAMS[sid].n == SCHEMES[sid].pk_len


@pytest.mark.parametrize("sid", SLH_IDS)
def test_valid_and_mutated_agree_with_pqcrypto(lib, pools, sid):
    valid = pools[sid]
    assert [len(it.context) for it in valid] == [0, 1, 255]
    assert all(assert_agrees(lib, valid, expect=True))
    rng = random.Random(f"slh/{sid}")
    cases = [m for it in valid for m in mutants(it, rng)]
    assert {kind for kind, _ in cases} == set(MUTANT_KINDS)  # every part of pk, msg, ctx, sig
    got = assert_agrees(lib, [m for _, m in cases], expect=False)
    assert not any(got)


def test_oracle_agrees_on_the_pool(pools):
    """The pure-Python FIPS 205 oracle accepts the pool too (a third implementation)."""
    for sid in ("slh-dsa-sha2-192s", "slh-dsa-shake-128s"):
        it = pools[sid][1]
        assert slh_verify(sid, it.message, it.signature, it.context, it.public_key)


def test_mixed_batch_keeps_item_order(lib, pools):
    """Valid and invalid items interleaved in one call: each verdict lands at its index."""
    sid = "slh-dsa-sha2-128s"
    it = pools[sid][0]  # empty context
    flips = [dict(mutants(it, random.Random(i)))["sig.R"] for i in range(3)]
    items = [it, flips[0], it, flips[1], flips[2], it]
    assert kernel_verdicts(lib, items) == [True, False, True, False, False, True]


def test_kernel_host_backend_serves_every_set(pools):
    backend = KernelHostBackend()
    state = backend.availability()
    assert all(state[sid] == "ready" for sid in SLH_IDS), {s: state[s] for s in SLH_IDS}
    for sid in ("slh-dsa-sha2-128f", "slh-dsa-shake-256s"):
        it = pools[sid][1]
        bad = dict(mutants(it, random.Random(3)))["sig.fors.sk"]
        batch = Batch.from_items(SCHEMES[sid], [it.public_key] * 2, [it.message] * 2,
                                 [it.signature, bad.signature], ctx=it.context)
        assert backend.run(batch).verdicts.tolist() == [True, False]
        _r = backend.run(batch, commit=True)
        verdicts, leaves, root = _r.verdicts, _r.leaves, _r.root
        assert verdicts.tolist() == [True, False] and leaves.shape == (2, 32) and len(root) == 32


def test_acvp_vectors_pure_entry_and_internal_hook(lib, vectors_root):
    """ACVP SLH-DSA sigVer (internal interface): the pure entry point gives pqcrypto's
    verdict — False for every vector, the rule RULE_SLH_INTERNAL — and the kernel's
    internal-interface hook gives exactly the source's testPassed."""
    records = list(_acvp_slh_dsa(vectors_root))
    assert len(records) == 108
    kas = [from_json(r) for r in records]
    items = [ka.item for ka in kas]
    got = assert_agrees(lib, items)
    assert got == [ka.expected for ka in kas] and not any(got)
    internal = [verify_internal(lib, it.scheme, it.public_key, it.message, it.signature) for it in items]
    source_ok = [r.get("rule") == RULE_SLH_INTERNAL for r in records]
    assert internal == source_ok and sum(internal) == 36


def test_internal_hook_refuses_wrong_lengths(lib, pools):
    it = pools["slh-dsa-sha2-128f"][0]
    assert not verify_internal(lib, it.scheme, it.public_key, it.message, it.signature[:-1])
    assert not verify_internal(lib, it.scheme, it.public_key + b"\0", it.message, it.signature)


def test_compression_counts_match_fips205_cost(pools):
    """The stats build counts compressions: SHA2-192s's SHA-512 work is exactly the
    midstate, H_msg and MGF1, k·a FORS H's, d·h' XMSS H's and the multi-block T_l's."""
    from app.engine.device.hostbuild import KERNEL_DIR, load_code

    stats_lib = load_code('#define ZV_SLH_STATS 1\n#include "schemes/slh_dsa.cu"\n', "slh_dsa_stats", [KERNEL_DIR])
    sid, p = "slh-dsa-sha2-192s", PARAMS["slh-dsa-sha2-192s"]
    it = pools[sid][2]
    stats = np.ctypeslib.as_array((ctypes.c_uint64 * 6).in_dll(stats_lib, "zv_slh_stats"))
    stats[:] = 0
    assert kernel_verdicts(stats_lib, [it]) == [True]
    hmsg = (3 * p.n + 2 + len(it.context) + len(it.message) + 17 + 127) // 128
    mgf1 = (2 * p.n + 64 + 4 + 17 + 127) // 128
    t_fors = (22 + p.k * p.n + 17 + 127) // 128
    t_wots = (22 + p.len * p.n + 17 + 127) // 128
    assert stats[1] == 1 + hmsg + mgf1 + p.k * p.a + t_fors + p.d * (t_wots + p.hp)
    assert stats[2] == 0 and stats[0] > p.k  # F is SHA-256; no Keccak in a SHA2 set
    assert stats[3] < stats[0] and stats[4] <= stats[1]  # critical path ≤ total work
