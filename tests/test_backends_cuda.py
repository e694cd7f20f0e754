"""CUDA backend control flow, with the host build standing in for the GPU (tests/fake_cupy.py).

The backend's own code runs for real — NVRTC source text and options, transfers, launch
shapes, error checks — and so do the kernels (compiled by g++ from that same text).  The
toy scheme (tests/kernels/toy.cu, tests/toy_scheme.py) gives the engine a kernel whose
verdicts it can check before the real signature kernels exist.
"""

import numpy as np
import pytest

from app.core.batch import Batch
from app.core.errors import BackendUnavailable, KernelBuildError, KernelLaunchError
from app.core.schemes import SCHEMES
from app.engine.backends.cuda import CudaBackend
from app.engine.backends.factory import accelerated_backends
from app.engine.commit import merkle
from app.engine.device import hostbuild, ops, registry
from app.engine.device.cudadev import CupyDevice
from app.engine.reference import kat
from app.engine.runtime import Runtime
from app.engine.verify.calibrate import NEVER, crossover
from app.engine.verify.engine import Engine, EngineConfig
from app.engine.verify.grouping import batch_of, group_items
from app.engine.verify.status import engine_status
from tests.fake_cupy import FakeCupy
from tests.toy_scheme import ABSENT, BROKEN, NO_SHADOW, TOY, TOY_ALL, ToyCpu, toy_answers, toy_items, toy_valid

pytestmark = pytest.mark.skipif(hostbuild.compiler() is None, reason="no C++ compiler")


@pytest.fixture
def toy_kat(monkeypatch):
    answers = toy_answers()
    monkeypatch.setattr(kat, "known_answers", lambda: answers)
    return answers


def toy_engine(fake, **config):
    config.setdefault("calibrate", False)  # measured crossovers would make routing depend on timing
    cpu = ToyCpu()
    eng = Engine(EngineConfig(**{**NO_SHADOW, **config}), backends=[CudaBackend(cupy=fake, kernels=TOY_ALL), cpu])
    eng.start()
    return eng, cpu


def toy_batch(scheme_id="ed25519", n=10, seed=0, bad=(1, 4)):
    items = toy_items(scheme_id, n, seed)
    for i in bad:
        if i < n:
            items[i] = kat.Item(scheme_id, items[i].public_key, items[i].message + b"x", items[i].signature)
    [(key, idx)] = group_items(items).items()
    return batch_of(key, items)


def truth(batch):
    return [toy_valid(batch.pks[i].tobytes(), batch.message(i), batch.sigs[i].tobytes(), batch.ctx, batch.options)
            for i in range(len(batch))]


# ------------------------------------------------------------------ discovery and builds
def test_schemes_are_discovered_from_the_table_by_source_presence():
    fake = FakeCupy()
    b = CudaBackend(cupy=fake, kernels={"ed25519": TOY, "secp256k1": ABSENT, "ml-dsa-44": BROKEN})
    avail = b.availability()
    assert avail["ed25519"] == "ready"
    assert avail["secp256k1"] == "no kernel" and avail["bls12-381"] == "no kernel"
    assert avail["ml-dsa-44"].startswith("build failed") and "no_such_function" in avail["ml-dsa-44"]
    assert b.schemes() == frozenset({"ed25519"})
    info = b.info()
    assert info["available"] and info["device"]["compute_capability"] == "9.0" and info["merkle"] == "ready"
    # NVRTC got the .cu text led by the digest of every kernel source (CuPy's cache key).
    assert all(first.startswith("// zapverify kernel sources ") for first in fake.modules)


def test_scheme_without_a_ready_kernel_is_refused_clearly():
    b = CudaBackend(cupy=FakeCupy(), kernels={"ed25519": TOY})
    items = toy_items("secp256k1", 2)
    [(key, idx)] = group_items(items).items()
    with pytest.raises(BackendUnavailable) as e:
        b.run(batch_of(key, items))
    assert "secp256k1" in e.value.message


def test_without_cupy_the_backend_is_unavailable_not_an_error():
    try:
        import cupy  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("CuPy is installed here")
    b = CudaBackend()
    assert b.available() is False and b.schemes() == frozenset()
    assert "CuPy" in b.info()["reason"]
    assert all(state == "no kernel" or state.startswith("unavailable") for state in b.availability().values())
    assert accelerated_backends("auto") == [] and accelerated_backends("cpu") == []
    with pytest.raises(BackendUnavailable):
        Engine(EngineConfig(backend="cuda"), backends=accelerated_backends("cuda"))


# ------------------------------------------------------------------ the GPU path end to end
def test_every_scheme_runs_on_the_device_with_its_merkle_tree(toy_kat):
    fake = FakeCupy()
    eng, cpu = toy_engine(fake)
    assert eng.ready and eng.merkle == {"cuda": "ready"}
    for sid in SCHEMES:
        assert eng.routes[sid].selftest == {"cuda": True, "cpu": True}, sid
    for kas in toy_kat.values():  # contexts, 33/65-byte keys, options: every batch shape
        for key, idx in group_items([ka.item for ka in kas]).items():
            batch = batch_of(key, [kas[i].item for i in idx])
            calls = len(cpu.calls)
            res = eng.run(batch)
            assert res.backend == "cuda" and res.merkle_backend == "cuda" and len(cpu.calls) == calls
            assert res.verdicts.tolist() == [kas[i].expected for i in idx]
            assert np.array_equal(res.leaves, merkle.batch_leaves(batch, res.verdicts))
            assert res.root == merkle.root(res.leaves)
    # One launch per kernel: verify, leaves, tail (small batches never need the level kernel).
    names = [name for name, *_ in fake.launches[-3:]]
    assert names == ["zv_verify_toy", "zv_merkle_leaves", "zv_merkle_tail"]
    assert fake.launches[-1][1] == (1,)  # the tail is one block


def test_mixed_request_root_is_built_on_the_device(toy_kat):
    fake = FakeCupy()
    eng, _ = toy_engine(fake)
    items = [ka.item for s in ("ed25519", "ml-dsa-65", "secp256k1") for ka in toy_kat[s]]
    res = eng.run(items)
    want = [ka.expected for s in ("ed25519", "ml-dsa-65", "secp256k1") for ka in toy_kat[s]]
    assert res.verdicts.tolist() == want and set(res.backends.values()) == {"cuda"}
    leaves = [merkle.leaf_hash(SCHEMES[it.scheme].code, v, it.public_key, it.message, it.signature)
              for it, v in zip(items, want)]
    assert res.root == merkle.root(leaves)
    assert fake.launches[-1][0] == "zv_merkle_tail"


def test_large_batch_uses_the_level_kernel_then_the_tail(toy_kat):
    fake = FakeCupy()
    b = CudaBackend(cupy=fake, kernels=TOY_ALL)
    batch = toy_batch(n=5000, bad=range(0, 5000, 7))
    _r = b.run(batch, commit=True)
    verdicts, root = _r.verdicts, _r.root
    assert verdicts.tolist() == truth(batch)
    assert root == merkle.root(merkle.batch_leaves(batch, verdicts))
    names = [name for name, *_ in fake.launches]
    assert names.count("zv_merkle_level") == 1 and names[-1] == "zv_merkle_tail"
    verify_launch = next(launch for launch in fake.launches if launch[0] == "zv_verify_toy")
    grid, block = verify_launch[1], verify_launch[2]
    assert grid[0] * block[0] >= 5000 and block == (TOY.block,)


def test_block_size_is_lowered_to_what_the_kernel_allows():
    fake = FakeCupy()
    fake.max_threads = {"zv_merkle_tail": 200, "zv_verify_toy": 64}
    b = CudaBackend(cupy=fake, kernels=TOY_ALL)
    batch = toy_batch(n=300)
    _r = b.run(batch, commit=True)
    verdicts, _, root = _r.verdicts, _r.leaves, _r.root
    assert verdicts.tolist() == truth(batch) and root == merkle.root(merkle.batch_leaves(batch, verdicts))
    blocks = {name: block for name, _, block, _ in fake.launches}
    assert blocks["zv_merkle_tail"] == (192,) and blocks["zv_verify_toy"] == (64,)


# ------------------------------------------------------------------ failures go to the CPU
def test_selftest_failure_routes_the_scheme_to_cpu_and_says_so(toy_kat):
    fake = FakeCupy()
    fake.corrupt.add("zv_verify_toy")  # the kernel runs, its verdicts are wrong
    eng, cpu = toy_engine(fake)
    assert eng.routes["ed25519"].selftest["cuda"] is False
    assert "verdicts" in eng.routes["ed25519"].failures["cuda"]
    batch = toy_batch()
    res = eng.run(batch)
    assert res.backend == "cpu" and res.verdicts.tolist() == truth(batch)
    status = engine_status(eng)
    assert status["schemes"]["ed25519"]["backend"] == "cpu"
    assert "cuda" in status["degraded"]["ed25519"] and "ed25519" in eng.degraded()


def test_real_known_answers_fail_a_wrong_kernel():
    # The toy kernel standing in for Ed25519 must fail the real Ed25519 known answers.
    eng = Engine(EngineConfig(cpu_workers=1), backends=[CudaBackend(cupy=FakeCupy(), kernels={"ed25519": TOY})])
    eng.start()
    try:
        assert eng.routes["ed25519"].selftest == {"cuda": False, "cpu": True}
        items = [ka.item for ka in kat.known_answers()["ed25519"]]
        res = eng.run(items)
        assert res.backends == {"ed25519": "cpu"}
        assert res.verdicts.tolist() == [ka.expected for ka in kat.known_answers()["ed25519"]]
    finally:
        eng.close()


def test_launch_error_falls_back_to_cpu_with_right_verdicts(toy_kat):
    fake = FakeCupy()
    eng, cpu = toy_engine(fake)
    batch = toy_batch()
    assert eng.run(batch).backend == "cuda"
    fake.fail_launch.add("zv_verify_toy")
    res = eng.run(batch)
    assert res.backend == "cpu" and res.verdicts.tolist() == truth(batch) and res.merkle_backend == "cpu"
    assert "KernelLaunchError" in eng.routes["ed25519"].failures["cuda"]
    assert eng.backend_for(SCHEMES["ed25519"], 10**6).name == "cpu"  # until restarted
    assert eng.backend_for(SCHEMES["ml-dsa-44"], 10**6).name == "cuda"  # other schemes keep the GPU


def test_asynchronous_fault_seen_at_copy_back_falls_back(toy_kat):
    fake = FakeCupy()
    eng, _ = toy_engine(fake)
    fake.fail_async.add("zv_merkle_leaves")
    batch = toy_batch(seed=3)
    res = eng.run(batch)
    assert res.backend == "cpu" and res.verdicts.tolist() == truth(batch)
    assert res.root == merkle.root(merkle.batch_leaves(batch, res.verdicts))


def test_device_errors_are_kernel_launch_errors():
    fake = FakeCupy()
    dev = CupyDevice(fake)
    fake.fail_async.add("zv_sha256_batch")
    with pytest.raises(KernelLaunchError):
        ops.hash_messages(dev, "sha256", [b"abc"])
    fake.fail_launch.add("zv_sha512_batch")
    with pytest.raises(KernelLaunchError) as e:
        ops.hash_messages(dev, "sha512", [b"abc"])
    assert e.value.field == "zv_sha512_batch"


def test_wrong_merkle_kernel_keeps_roots_on_the_cpu(toy_kat):
    fake = FakeCupy()
    fake.corrupt.add("zv_merkle_tail")
    eng, _ = toy_engine(fake)
    assert eng.merkle["cuda"].startswith("Merkle tree of")
    batch = toy_batch()
    res = eng.run(batch)
    assert res.backend == "cuda" and res.merkle_backend == "cpu"
    assert res.root == merkle.root(merkle.batch_leaves(batch, res.verdicts))


# ------------------------------------------------------------------ crossover
def test_crossover_arithmetic():
    # 2 ms + n·0.1 µs against n·10 µs: the GPU wins from n = ceil(2e-3 / 9.9e-6) = 203.
    assert crossover(fixed_b=2e-3, per_b=1e-7, fixed_c=0.0, per_c=1e-5) == 203
    assert crossover(1e-5, 1e-7, 1e-3, 1e-5) == 1  # faster even for one item
    assert crossover(1e-3, 2e-5, 1e-5, 1e-5) is None  # slower per item: never


def test_configured_crossover_keeps_small_batches_on_cpu(toy_kat):
    eng, _ = toy_engine(FakeCupy(), crossover={"ed25519": 8})
    assert eng.run(toy_batch(n=7)).backend == "cpu"
    assert eng.run(toy_batch(n=8)).backend == "cuda"
    assert engine_status(eng)["schemes"]["ed25519"]["crossover"]["configured"] == 8


def test_measured_crossover_routes_and_is_reported(toy_kat):
    eng, _ = toy_engine(FakeCupy(), calibrate=True, calibrate_seconds=0.004)
    route = eng.routes["ed25519"]
    assert "cuda" in route.crossover and route.rates["cuda"] > 0 and route.rates["cpu"] > 0
    # Routing follows whatever was measured; pin values to check both sides of it.
    route.crossover["cuda"] = 5
    assert eng.run(toy_batch(n=4)).backend == "cpu" and eng.run(toy_batch(n=5)).backend == "cuda"
    route.crossover["cuda"] = None  # never faster than the CPU
    assert eng.crossover(eng.backends[0], SCHEMES["ed25519"]) == NEVER
    assert eng.run(toy_batch(n=50)).backend == "cpu"
    assert engine_status(eng)["schemes"]["ed25519"]["crossover"]["cuda"] is None


def test_cuda_calibrates_at_start_by_default_kernel_host_does_not(toy_kat):
    from app.engine.backends.kernel_host import KernelHostBackend

    assert CudaBackend.calibrate_at_start and not KernelHostBackend.calibrate_at_start
    eng = Engine(EngineConfig(calibrate_seconds=0.002, **NO_SHADOW), backends=[KernelHostBackend(kernels=TOY_ALL),
                                                                               ToyCpu()])
    eng.start()
    assert all(not r.crossover for r in eng.routes.values())


# ------------------------------------------------------------------ hybrid split
def test_hybrid_splits_by_rates_and_joins_in_order(toy_kat):
    fake = FakeCupy()
    eng, cpu = toy_engine(fake, hybrid=True, hybrid_min=16)
    eng.routes["ed25519"].rates = {"cuda": 3.0, "cpu": 1.0}
    assert eng.split_point(eng.backends[0], SCHEMES["ed25519"], 100) == 75
    batch = toy_batch(n=40, bad=(0, 5, 31, 39))
    fake.launches.clear()
    cpu.calls.clear()
    res = eng.run(batch)
    assert res.backend == "cuda+cpu" and res.verdicts.tolist() == truth(batch)
    verify_n = [int(args[9]) for name, _, _, args in fake.launches if name == "zv_verify_toy"]
    assert verify_n == [30] and cpu.calls == [10]
    # The device made its share's leaves beside its verdicts (commit=True); the joined tree's
    # root is the commit step's, on the host.
    assert [name for name, _, _, _ in fake.launches].count("zv_merkle_leaves") == 1
    assert res.merkle_backend == "cpu" and res.root == merkle.root(merkle.batch_leaves(batch, res.verdicts))
    rates = eng.routes["ed25519"].rates  # refined from this batch
    assert rates["cuda"] != 3.0 and rates["cpu"] != 1.0
    # Below hybrid_min the batch is not split.
    assert eng.run(toy_batch(n=15)).backend == "cuda"


def test_hybrid_device_failure_runs_both_parts_on_cpu(toy_kat):
    fake = FakeCupy()
    eng, cpu = toy_engine(fake, hybrid=True, hybrid_min=16)
    eng.routes["ed25519"].rates = {"cuda": 1.0, "cpu": 1.0}
    fake.fail_launch.add("zv_verify_toy")
    batch = toy_batch(n=32, bad=(2, 20))
    cpu.calls.clear()
    res = eng.run(batch)
    assert res.backend == "cpu" and res.verdicts.tolist() == truth(batch)
    assert sorted(cpu.calls) == [16, 16] and res.merkle_backend == "cpu"


def test_batch_slice_rebases_offsets():
    batch = toy_batch(n=6)
    part = batch.slice(2, 5)
    assert len(part) == 3 and part.offsets[0] == 0
    assert [bytes(part.message(i)) for i in range(3)] == [bytes(batch.message(i)) for i in range(2, 5)]
    with pytest.raises(IndexError):
        batch.slice(4, 7)


# ------------------------------------------------------------------ transfers
def pinned_copy(fake, a: np.ndarray) -> np.ndarray:
    buf = fake.cuda.alloc_pinned_memory(max(1, a.nbytes))
    out = np.frombuffer(buf, dtype=a.dtype, count=a.size).reshape(a.shape)
    out[...] = a
    return out


@pytest.mark.parametrize("transfer", ["auto", "copy", "zero-copy"])
def test_transfer_modes_give_the_same_results(transfer):
    fake = FakeCupy()
    b = CudaBackend(cupy=fake, kernels=TOY_ALL, transfer=transfer)
    batch = toy_batch(n=50, bad=(3, 9))
    pool = Batch(batch.scheme, pinned_copy(fake, batch.pks), pinned_copy(fake, batch.sigs),
                 pinned_copy(fake, batch.msgs), pinned_copy(fake, batch.offsets))  # as in the UMA pool
    for src in (batch, pool):
        fake.transfers.clear()
        _r = b.run(src, commit=True)
        verdicts, root = _r.verdicts, _r.root
        assert verdicts.tolist() == truth(batch) and root == merkle.root(merkle.batch_leaves(batch, verdicts))
        copies = [t for t in fake.transfers if t[0] == "h2d"]
        assert all(pinned for _, _, pinned in copies)  # async copies only ever from pinned memory
        if transfer == "copy":
            assert len(copies) == 1  # every column of the batch in one transfer from the staging ring
        elif transfer == "zero-copy" or src is pool:
            assert len(copies) <= 1  # columns read in place (only the small context buffer is staged)
        assert all(pinned for kind, _, pinned in fake.transfers if kind == "d2h")


@pytest.mark.parametrize("scheme_id", ["ed25519", "secp256k1"])
def test_real_kernels_over_copied_columns_give_the_known_answers(scheme_id):
    """The signature kernels themselves (registry table, host build standing in for NVRTC)
    over columns copied in one transfer: known answers across block chunks (> 128 items
    per batch), every column 16-byte aligned for the kernels' vector loads."""
    fake = FakeCupy()
    b = CudaBackend(cupy=fake)  # the default transfer is copy
    kas = kat.generate(scheme_id, 200, 200, seed=5)
    items = [ka.item for ka in kas]
    groups = {k: idx for k, idx in group_items(items).items() if k is not None}
    assert max(len(idx) for idx in groups.values()) > 128
    for key, idx in groups.items():
        batch = batch_of(key, [items[i] for i in idx])
        fake.launches.clear()
        fake.transfers.clear()
        _r = b.run(batch, commit=True)
        verdicts, root = _r.verdicts, _r.root
        assert verdicts.tolist() == [kas[i].expected for i in idx]
        assert root == merkle.root(merkle.batch_leaves(batch, verdicts))
        assert len([t for t in fake.transfers if t[0] == "h2d"]) == 1
        [(_, _, _, args)] = [la for la in fake.launches if la[0].startswith("zv_verify_")]
        columns = [a for a in args[:6] if not isinstance(a, np.generic)]
        assert all(c.data.ctypes.data % 16 == 0 for c in columns)


def test_unknown_transfer_mode_is_refused():
    with pytest.raises(ValueError):
        CupyDevice(FakeCupy(), transfer="dma")


# ------------------------------------------------------------------ shown to operators
def test_failed_gpu_scheme_is_shown_on_readyz_and_status(toy_kat):
    from fastapi.testclient import TestClient

    from app.config import Settings
    from app.main import create_app

    fake = FakeCupy()
    fake.corrupt.add("zv_verify_toy")
    eng, _ = toy_engine(fake)
    with TestClient(create_app(Settings(instance="t"), runtime=Runtime(eng))) as client:
        ready = client.get("/readyz")
        assert ready.status_code == 200  # the CPU serves the scheme: degraded, not down
        assert "verdicts" in ready.json()["degraded"]["ed25519"]["cuda"]
        status = client.get("/v1/status").json()["engine"]
        assert status["schemes"]["ed25519"]["backend"] == "cpu"
        assert status["schemes"]["ed25519"]["selftest"] == {"cuda": False, "cpu": True}
        assert status["devices"]["cuda"]["schemes"]["ed25519"] == "ready"  # built, but failed its answers
        # Its Merkle kernels are checked through a scheme that passed (run with commit=True):
        # none did, so the device commits nothing and says why.
        assert status["merkle"] == {"cuda": "no scheme passed its self-test with valid and invalid known answers "
                                            "to commit"}


def test_settings_reach_the_engine():
    from app.config import Settings

    rt = Runtime.build(Settings(backend="kernel-host", crossover={"ed25519": 7}, hybrid=True, hybrid_min=99,
                                instance="t"))
    eng = rt.engine
    assert [b.name for b in eng.backends] == ["kernel-host", "cpu"]
    assert eng.config.crossover == {"ed25519": 7} and eng.config.hybrid and eng.config.hybrid_min == 99
    rt.close()


def test_a_device_that_must_not_compile_refuses_a_module_it_was_not_given(monkeypatch, tmp_path):
    """gpu_check's device on a lent GPU: no prepared module -> KernelBuildError naming the
    unit, and nothing compiled; a device that may compile says where its module came from."""
    monkeypatch.setenv("ZAPVERIFY_KERNEL_CACHE", str(tmp_path))
    monkeypatch.delenv("ZAPVERIFY_KERNEL_PREBUILT", raising=False)
    fake = FakeCupy()
    dev = CupyDevice(cupy=fake, compile=False)
    with pytest.raises(KernelBuildError, match="compiling was refused"):
        dev.function(registry.MERKLE, "zv_merkle_leaves")
    assert fake.modules == [] and dev.origins == {}
    dev = CupyDevice(cupy=fake)
    dev.function(registry.MERKLE, "zv_merkle_leaves")
    assert dev.origins == {registry.MERKLE: "nvrtc"} and dev.info()["modules"] == {"merkle": "nvrtc"}
