"""ML-DSA's block kernel beside the thread kernel: the host build's block emulation (fibers
with real barriers, zv_port.cuh ZV_BLOCK_RUN), a barrier deleted from a copy of the source,
and how a kernel backend chooses between the two kernels (forced, measured, fallback).

The verdicts of both kernels against OpenSSL on generated items, mutants and the Wycheproof
files are in tests/test_kernel_ml_dsa.py (every test there runs on both kernels).
"""

from __future__ import annotations

import ctypes
import re
import time
from dataclasses import replace

import numpy as np
import pytest

from app.core.batch import Batch
from app.core.result import Result
from app.core.schemes import SCHEMES
from app.engine.backends.base import Backend, Capabilities
from app.engine.backends.cuda import CudaBackend
from app.engine.backends.kernel_host import KernelHostBackend
from app.engine.device import hostbuild, registry
from app.engine.reference import kat
from app.engine.verify import calibrate
from app.engine.verify.engine import Engine, EngineConfig
from app.engine.verify.status import engine_status
from tests.fake_cupy import FakeCupy
from tests.oracles.ml_dsa_model import kernel_verdicts, openssl_verdicts
from tests.toy_scheme import BROKEN, NO_SHADOW, TOY, TOY_ALL, ToyCpu, toy_answers

pytestmark = pytest.mark.skipif(hostbuild.compiler() is None, reason="no C++ compiler")

SCHEMES_DIR = hostbuild.KERNEL_DIR / "schemes"


# ------------------------------------------------------------------ the block emulation
BLOCK_PROBE = """
#include "zv_port.cuh"
/* out[t] = what thread t reads of its neighbour's slot after (or without) a barrier. */
ZV_KERNEL void zv_probe_block(zv_u32 lanes, int sync, zv_u32 *out) {
    ZV_SHARED zv_u32 slot[64];
    for (int i = 0; i < 64; i++) slot[i] = 0;
    ZV_BLOCK_RUN(lanes, {
        zv_u32 t = (zv_u32)ZV_BLOCK_TID;
        slot[t] = 10 + t * t;
        if (sync) ZV_SYNC();
        out[t] = slot[(t + 1) % ZV_BLOCK_NTHREADS] + 1000 * (zv_u32)ZV_BLOCK_NTHREADS;
    });
}
/* Thread 0 alone reaches a barrier: divergent barriers, which the emulation reports. */
ZV_KERNEL void zv_probe_divergent(zv_u32 lanes) {
    ZV_BLOCK_RUN(lanes, { if (ZV_BLOCK_TID == 0) ZV_SYNC(); });
}
/* Warp barriers: each thread of the first warp writes `steps` values in turn, each read by
 * its warp neighbour after a warp barrier (or without one); the other warps go straight to
 * the block barrier and then read what the first warp's thread 0 last wrote.  order[k] is
 * the thread that ran k-th between barriers (the fibers' schedule). */
ZV_KERNEL void zv_probe_warp(zv_u32 lanes, int steps, int sync, zv_u32 *out, zv_u32 *order) {
    ZV_SHARED zv_u32 slot[ZV_WARP_SIZE];
    ZV_SHARED zv_u32 ran;
    for (int i = 0; i < ZV_WARP_SIZE; i++) slot[i] = 0;
    ran = 0;
    ZV_BLOCK_RUN(lanes, {
        zv_u32 t = (zv_u32)ZV_BLOCK_TID;
        zv_u32 got = 0;
        if (t < ZV_WARP_SIZE) {
            for (int k = 0; k < steps; k++) {
                slot[t] = 100 * (k + 1) + t;
                order[ran++] = t;
                if (sync) ZV_SYNC_WARP();
                got += slot[(t + 1) % ZV_WARP_SIZE];
                if (sync) ZV_SYNC_WARP();
            }
        } else {
            order[ran++] = t;
        }
        ZV_SYNC();
        out[t] = t < ZV_WARP_SIZE ? got : slot[0];
    });
}
/* Half the first warp reaches a warp barrier: divergent, which the emulation reports. */
ZV_KERNEL void zv_probe_warp_divergent(zv_u32 lanes) {
    ZV_BLOCK_RUN(lanes, { if (ZV_BLOCK_TID < ZV_WARP_SIZE / 2) ZV_SYNC_WARP(); });
}
"""


@pytest.fixture(scope="module")
def probe():
    return hostbuild.load_code(BLOCK_PROBE, "block_probe")


def _run_probe(lib, lanes: int, sync: bool) -> list[int]:
    out = np.zeros(lanes, np.uint32)
    lib.zv_probe_block(ctypes.c_uint32(lanes), ctypes.c_int(int(sync)), ctypes.c_void_p(out.ctypes.data))
    return out.tolist()


def test_each_fiber_has_its_thread_id_and_sees_the_block_shared_state_after_a_barrier(probe):
    for lanes in (1, 7, 32):
        assert _run_probe(probe, lanes, True) == [10 + ((t + 1) % lanes) ** 2 + 1000 * lanes for t in range(lanes)]


def test_without_the_barrier_a_thread_reads_what_its_neighbour_has_not_written(probe):
    got = _run_probe(probe, 32, False)
    # Fibers run alone between barriers, in order: the last one sees every other write.
    assert got == [1000 * 32] * 31 + [10 + 32000]


@pytest.mark.parametrize("entry", ["zv_probe_divergent", "zv_probe_warp_divergent"])
def test_divergent_barriers_fail_a_bound_check(probe, entry):
    if hostbuild.verify_failures(probe) is None:
        pytest.skip("built without ZV_CHECK")
    before = hostbuild.verify_failures(probe)
    getattr(probe, entry)(ctypes.c_uint32(64))
    assert hostbuild.verify_failures(probe) == before + 1


def _run_warp_probe(lib, lanes: int, steps: int, sync: bool) -> tuple[list[int], list[int]]:
    out, order = np.zeros(lanes, np.uint32), np.zeros(32 * steps + lanes - 32, np.uint32)
    lib.zv_probe_warp(ctypes.c_uint32(lanes), ctypes.c_int(steps), ctypes.c_int(int(sync)),
                      ctypes.c_void_p(out.ctypes.data), ctypes.c_void_p(order.ctypes.data))
    return out.tolist(), order.tolist()


def test_a_warp_barrier_orders_its_warp_and_leaves_the_other_warps_at_the_block_barrier(probe):
    out, order = _run_warp_probe(probe, 128, 3, True)
    # Every step's value from the neighbour, after the warp barrier.
    assert out[:32] == [sum(100 * k + (t + 1) % 32 for k in (1, 2, 3)) for t in range(32)]
    assert out[32:] == [300] * 96  # the first warp's last step, after the block barrier
    # The first warp takes all its steps (its fibers in turn at each) before any other warp
    # is resumed: a warp's step switches its 32 fibers, not the block's 128.
    assert order == list(range(32)) * 3 + list(range(32, 128))


def test_without_the_warp_barrier_a_thread_reads_what_its_neighbour_has_not_written(probe):
    out, _ = _run_warp_probe(probe, 64, 1, False)
    # Fibers run alone to the block barrier, in order: only the warp's last one reads a write.
    assert out[:32] == [0] * 31 + [100]


# ------------------------------------------------------------------ a barrier deleted
def _block_barriers(src: str) -> list[int]:
    """Offsets of the ZV_SYNC() calls inside zv_mldsa_verify_block."""
    start = src.index("ZV_HD int zv_mldsa_verify_block(")
    end = src.index("ZV_HD void zv_mldsa_verify_batch_block(")
    return [m.start() for m in re.finditer(r"ZV_SYNC\(\);", src) if start < m.start() < end]


#: Barriers whose deletion must change verdicts, by the text just before them: after the
#: decoding, after an NTT layer, after the pointwise products, after an NTT^-1 layer, after
#: the w1 packing.  (Others are invisible to a fiber order that runs thread 0 first: the hint
#: check's, whose writer is thread 0, and the one after ExpandA, whose late sums still add up
#: mod q — the GPU could lose them to the race.)
MUST_MATTER = ("zv_mldsa_sample_in_ball<P>(b->poly[L + K], ct);",
               "zv_mldsa_ntt_butterfly(b->poly[x / HALF], lg, (int)(x % HALF));",
               "b->poly[L + x / N][x % N]));\n    }",
               "zv_mldsa_invntt_butterfly(b->acc[x / HALF], lg, (int)(x % HALF));",
               "out[k] = (zv_u8)(bits >> (8 * k));\n    }")


def _build_copy(tmp_path, src: str, name: str):
    (tmp_path / "schemes").mkdir(exist_ok=True)
    (tmp_path / "schemes" / "ml_dsa.cuh").write_text(src)
    return hostbuild.load_code((SCHEMES_DIR / "ml_dsa.cu").read_text(), name, [tmp_path])


@pytest.fixture(scope="module")
def items():
    valid = kat.sign_items("ml-dsa-44", 4, seed=21)
    return valid + [replace(valid[0], message=valid[0].message + b"!")]


@pytest.mark.parametrize("before", MUST_MATTER, ids=("decode", "ntt", "pointwise", "invntt", "w1"))
def test_a_deleted_barrier_gives_wrong_verdicts(tmp_path, items, before):
    src = (SCHEMES_DIR / "ml_dsa.cuh").read_text()
    [at] = [b for b in _block_barriers(src) if src[:b].rstrip().endswith(before)]
    want = openssl_verdicts(items)
    assert want == [True] * 4 + [False]
    intact = _build_copy(tmp_path, src, "ml_dsa_copy")
    assert kernel_verdicts(intact, items, "block") == want  # the copy itself is sound
    broken = _build_copy(tmp_path, src[:at] + "/* barrier deleted */" + src[at + len("ZV_SYNC();"):], "ml_dsa_nosync")
    assert kernel_verdicts(broken, items, "block") != want


#: The block sponge's two warp barriers per round (keccak.cuh, "one sponge per block"), by
#: the text just before them: after θ's D, after the χ lanes.
SPONGE_BARRIERS = ("s->d[t] = cl ^ zv_rotl64(cr, 1);\n        }", "s->a[(round + 1) & 1][t] = out;\n        }")


@pytest.mark.parametrize("before", SPONGE_BARRIERS, ids=("theta", "chi"))
def test_a_deleted_barrier_of_the_block_sponge_gives_wrong_verdicts(tmp_path, items, before):
    """tr, μ and c̃′ are hashed by 25 fibers of the first warp together: a round step
    without its warp barrier reads lanes the others have not written, and valid signatures
    fail."""
    src = (hostbuild.KERNEL_DIR / "hashes" / "keccak.cuh").read_text()
    at = src.index(before) + len(before)
    assert src[at:].lstrip().startswith("ZV_SYNC_WARP();")
    at = src.index("ZV_SYNC_WARP();", at)
    (tmp_path / "hashes").mkdir()
    (tmp_path / "hashes" / "keccak.cuh").write_text(src[:at] + "/* barrier deleted */"
                                                    + src[at + len("ZV_SYNC_WARP();"):])
    broken = hostbuild.load_code((SCHEMES_DIR / "ml_dsa.cu").read_text(), "ml_dsa_sponge_nosync", [tmp_path])
    assert kernel_verdicts(broken, items, "block") != openssl_verdicts(items)
    assert kernel_verdicts(broken, items, "thread") == openssl_verdicts(items)  # one thread needs no barrier


# ------------------------------------------------------------------ choosing a kernel
def test_the_registry_has_both_kernels_per_parameter_set():
    for level in (44, 65, 87):
        rows = registry.VERIFY_VARIANTS[f"ml-dsa-{level}"]
        assert list(rows) == ["thread", "block"]
        assert rows["thread"] == registry.VERIFY_KERNELS[f"ml-dsa-{level}"] and rows["thread"].lanes == 1
        assert (rows["block"].entry, rows["block"].block, rows["block"].lanes) == \
            (f"zv_verify_ml_dsa_block_{level}", 128, 128)


def _batch(items, scheme_id="ml-dsa-44") -> Batch:
    return Batch.from_items(SCHEMES[scheme_id], [it.public_key for it in items], [it.message for it in items],
                            [it.signature for it in items])


def test_auto_offers_both_kernels_and_serves_with_the_thread_kernel_until_measured(items):
    b = KernelHostBackend()
    assert b.capabilities().variants == {f"ml-dsa-{lv}": ("thread", "block") for lv in (44, 65, 87)}
    assert b.variant("ml-dsa-44") == "thread" and b.kernel(SCHEMES["ml-dsa-44"]).entry == "zv_verify_ml_dsa_44"
    b.choose_variant("ml-dsa-44", "block")
    assert b.kernel(SCHEMES["ml-dsa-44"]).entry == "zv_verify_ml_dsa_block_44"
    assert b.run(_batch(items)).verdicts.tolist() == [True] * 4 + [False]
    with pytest.raises(Exception, match="no kernel variant 'warp'"):
        b.choose_variant("ml-dsa-44", "warp")
    assert b.variant("ml-dsa-44") == "block" and b.variant("ed25519") is None


def test_a_forced_variant_serves_every_parameter_set_and_leaves_nothing_to_measure(items):
    first = KernelHostBackend(kernel_variant="block")  # a batch before anything else asked
    assert first.run(_batch(items)).verdicts.tolist() == [True] * 4 + [False]
    assert first.variant("ml-dsa-44") == "block"
    b = KernelHostBackend(kernel_variant="block")
    assert b.capabilities().variants == {}
    assert b.capabilities().device is not None and b.capabilities().device["kernel_variants"]["ml-dsa-44"] == "block"
    assert {lv: b.variant(f"ml-dsa-{lv}") for lv in (44, 65, 87)} == {44: "block", 65: "block", 87: "block"}
    assert b.info()["kernel_variants"]["ml-dsa-87"] == "block"
    assert b.run(_batch(items)).verdicts.tolist() == [True] * 4 + [False]


@pytest.fixture
def toy_kat(monkeypatch):
    answers = toy_answers()
    monkeypatch.setattr(kat, "known_answers", lambda: answers)
    return answers


def _toy_engine(backend: Backend) -> Engine:
    eng = Engine(EngineConfig(calibrate=True, calibrate_seconds=0.004, **NO_SHADOW), backends=[backend, ToyCpu()])
    eng.start()
    return eng


def test_calibration_measures_each_variant_and_keeps_the_backend_on_its_choice(toy_kat):
    cuda = CudaBackend(cupy=FakeCupy(), kernels=TOY_ALL, variants={"ed25519": {"a": TOY, "b": TOY}})
    assert cuda.capabilities().variants == {"ed25519": ("a", "b")}
    eng = _toy_engine(cuda)
    chosen = eng.routes["ed25519"].kernel["cuda"]
    assert chosen in ("a", "b") and cuda.variant("ed25519") == chosen
    assert eng.routes["ed25519"].rates["cuda"] > 0 and "cuda" in eng.routes["ed25519"].crossover
    assert all(not r.kernel for s, r in eng.routes.items() if s != "ed25519")
    assert engine_status(eng)["schemes"]["ed25519"]["kernel"] == {"cuda": chosen}


def test_a_variant_that_does_not_build_falls_back_to_the_default(toy_kat):
    auto = CudaBackend(cupy=FakeCupy(), kernels=TOY_ALL, variants={"ed25519": {"a": TOY, "b": BROKEN}})
    assert auto.capabilities().variants == {}  # one that builds: nothing to choose
    eng = _toy_engine(auto)
    assert auto.variant("ed25519") == "a" and not eng.routes["ed25519"].kernel
    forced = CudaBackend(cupy=FakeCupy(), kernels=TOY_ALL, variants={"ed25519": {"a": TOY, "b": BROKEN}},
                         kernel_variant="b")
    assert forced.capabilities().variants == {} and forced.variant("ed25519") == "a"


class Timed(Backend):
    """A backend whose per-item cost depends on its chosen variant (seconds per item), and
    whose variant ``"fails"`` raises when run."""

    name = "timed"

    def __init__(self, cost: dict[str, float]):
        self.cost, self.chosen = cost, ""

    def capabilities(self) -> Capabilities:
        return Capabilities(schemes={}, variants={"ml-dsa-44": tuple(self.cost)})

    def choose_variant(self, scheme_id: str, variant: str) -> None:
        self.chosen = variant

    def run(self, batch, *, commit: bool = False) -> Result:
        if self.chosen == "fails":
            raise RuntimeError("launch failed")
        time.sleep(len(batch) * self.cost[self.chosen])
        return Result.of(self.name, np.ones(len(batch), bool))


@pytest.mark.parametrize("cost,want", [({"thread": 2e-5, "block": 2e-6}, "block"),
                                       ({"thread": 2e-6, "block": 2e-5}, "thread"),
                                       ({"fails": 0.0, "block": 2e-6}, "block")])
def test_choose_variant_keeps_the_lowest_measured_cost_and_skips_a_failing_one(items, cost, want):
    backend = Timed(cost)
    tiled = calibrate.tiler(items)
    variant, _, per = calibrate.choose_variant(backend, "ml-dsa-44", tuple(cost), tiled, 0.2)
    assert variant == want and backend.chosen == want
    assert per < 1e-5


def test_choose_variant_raises_when_no_variant_runs_and_leaves_the_first(items):
    backend = Timed({"fails": 0.0})
    with pytest.raises(RuntimeError, match="no kernel variant"):
        calibrate.choose_variant(backend, "ml-dsa-44", ("fails",), calibrate.tiler(items), 0.05)
    assert backend.chosen == "fails"
