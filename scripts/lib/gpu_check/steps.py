"""The steps of a GPU check, each run in a process of its own (``scripts/gpu_check --step``).

A step prints its records with :func:`journal.emit` as it goes, so what it measured before a
fault or a hang is kept.  Every record has a ``kind``:

- ``env``: versions, clocks, PCIe link and memory (scripts/lib/gpu_check/env.py);
- ``device``: what the device says of itself;
- ``build``: one entry point loaded (the shipped build or a register-cap ``variant``):
  registers, local bytes, how the module was obtained;
- ``check``: a correctness check (hash digests, Merkle roots, one vector file's items of one
  scheme): ``checked``, ``failed`` and what failed;
- ``rate``: one timed batch: ``row`` (what ran), ``items``, ``seconds`` (median), ``runs``,
  ``items_per_second``, ``clock`` (``device`` events or ``wall``), and ``verdicts_ok`` /
  ``root_ok`` where the batch's results were checked;
- ``bls``: what one BLS12-381 aggregate or RLC batch did (groups, failed groups, singles);
- ``pipeline``: the pipelined path against the one-launch path on one batch;
- ``engine``: the engine path (self-test, calibration, hybrid split, pool), or why skipped;
- ``error``: what raised (the step then exits 1).

Batch sizes: ``wave`` is the number of items one full wave of a kernel holds on the device
(app/engine/device/pipeline.py); a "saturating" batch is two full waves at least.
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from app.core.batch import Batch
from app.core.schemes import SCHEMES, option_settings
from app.engine.commit import merkle
from app.engine.device import ops, pipeline, registry
from app.engine.verify.grouping import batch_of, group_items
from app.vectors import open_text, read_jsonl
from scripts.lib.gpu_check import env as envmod
from scripts.lib.gpu_check.journal import emit

ROOT = Path(__file__).resolve().parents[3]
#: Above this many items the Ed25519, secp256k1, P-256 and BIP-340 blocks reuse their shared
#: arrays for a second chunk (ed25519.cu, secp256k1.cu, p256.cu, bip340.cu: 540,672 on an
#: H200 at their register caps); the big checked batch is at least this.
SECOND_CHUNK_ITEMS = 600_000
#: Message sizes (bytes) of the Ed25519 rows; scripts/prepare_gpu_check writes their items.
ED25519_MSG_SIZES = (32, 64, 256)


@dataclass
class Context:
    """What every step gets: the device, the prepared data folder, timed runs per size, the
    largest batch a step may build, and when the step must be done (``time.monotonic()``)."""

    backend: str
    dev: Any
    data: Path
    reps: int
    max_items: int
    deadline: float

    def left(self) -> float:
        return self.deadline - time.monotonic()


def make_device(backend: str) -> Any:
    """The device of ``backend``: ``cuda`` (CuPy on GPU 0, prebuilt modules only: a lent GPU
    compiles nothing), ``fake-cuda`` (the CUDA path over tests/fake_cupy.py, no GPU) or
    ``kernel-host`` (the host build).  Raises what CuPy raises without a GPU."""
    if backend == "cuda":
        from app.engine.device.cudadev import CupyDevice

        return CupyDevice(compile=False)
    if backend == "fake-cuda":
        from app.engine.device.cudadev import CupyDevice
        from tests.fake_cupy import FakeCupy

        return CupyDevice(cupy=FakeCupy())
    from app.engine.device.hostlib import HostDevice

    return HostDevice()


# ------------------------------------------------------------------ data
def records(ctx: Context, scheme: str | None = None, *, files: str = "*.jsonl*") -> dict[str, list]:
    """Known answers per vector file of the prepared data (of ``scheme`` only when given:
    lines are filtered before parsing, so a step reads only its scheme's items)."""
    out = {}
    for path in sorted((ctx.data / "vectors").glob(files)):
        if scheme is None:
            out[path.name] = list(read_jsonl(path))
            continue
        tag = f'"scheme": "{scheme}"'
        with open_text(path) as f:
            lines = [ln for ln in f if tag in ln or f'"scheme":"{scheme}"' in ln]
        tmp = [ka for ka in _parse(lines) if ka.item.scheme == scheme]
        if tmp:
            out[path.name] = tmp
    return out


def _parse(lines: list[str]) -> list:
    from app.vectors import from_json

    return [from_json(json.loads(ln)) for ln in lines if ln.strip()]


def tile(base: Batch, n: int) -> Batch:
    """``n`` items cycling through the items of ``base`` (messages repeated whole)."""
    m = len(base)
    q, r = divmod(n, m)
    idx = np.arange(n) % m
    off = base.offsets.astype(np.uint64)
    period = off[-1]
    lens = np.diff(off)[idx]
    offsets = np.zeros(n + 1, dtype=np.uint64)
    np.cumsum(lens, out=offsets[1:])
    msgs = np.concatenate([np.tile(base.msgs[:int(period)], q), base.msgs[:int(off[r])]])
    return Batch(base.scheme, base.pks[idx], base.sigs[idx], msgs, offsets, base.ctx,
                 **option_settings(base))


def base_batch(kas: list, *, valid_only: bool) -> tuple[Batch, np.ndarray] | None:
    """The largest group of ``kas`` (valid ones only where asked) as a batch, with the
    expected verdicts; None when there is none."""
    kas = [ka for ka in kas if ka.expected or not valid_only]
    groups = [(key, idx) for key, idx in group_items([ka.item for ka in kas]).items() if key is not None]
    if not groups:
        return None
    key, idx = max(groups, key=lambda g: len(g[1]))
    return batch_of(key, [kas[i].item for i in idx]), np.array([kas[i].expected for i in idx], dtype=bool)


def expected_root(batch: Batch, want: np.ndarray) -> bytes:
    """The RFC 6962 root of ``batch`` with verdicts ``want``, by hashlib (app/engine/commit)."""
    return merkle.root(merkle.batch_leaves(batch, want))


# ------------------------------------------------------------------ kernels
def kernel_of(scheme: str) -> registry.VerifyKernel | None:
    return registry.verify_kernel(SCHEMES[scheme])


def scheme_base(ctx: Context, scheme: str, *,
                valid_only: bool) -> tuple[registry.VerifyKernel, tuple[Batch, np.ndarray]]:
    """``scheme``'s kernel and the base batch of its prepared generated items (valid ones
    only where asked) with their expected verdicts; a step without either records an error
    and exits 1."""
    kernel = kernel_of(scheme)
    base = kernel and base_batch([ka for kas in records(ctx, scheme, files="generated.jsonl*").values()
                                  for ka in kas], valid_only=valid_only)
    if kernel is None or base is None:
        which = "valid generated" if valid_only else "generated"
        emit({"kind": "error", "error": f"no kernel or no {which} items for {scheme}"})
        sys.exit(1)
    return kernel, base


def build(ctx: Context, source: registry.KernelSource, entry: str) -> dict:
    """Load ``entry`` of ``source`` and emit its ``build`` record (registers, local bytes,
    how the module was obtained); the record says ``ok`` False and why when it fails."""
    t0 = time.perf_counter()
    rec: dict = {"kind": "build", "source": source.path.name, "entry": entry, "variant": source.variant or "shipped",
                 "options": list(source.options)}
    try:
        ctx.dev.function(source, entry)
        rec["ok"] = True
        rec.update(ctx.dev.attributes(source, entry))
        # CupyDevice says where each module came from (prebuilt / cache / nvcc / NVRTC)
        rec["origin"] = getattr(ctx.dev, "origins", {}).get(source, "host build")
    except Exception as exc:
        rec["ok"], rec["error"] = False, f"{type(exc).__name__}: {exc}"[-2000:]
    rec["seconds"] = round(time.perf_counter() - t0, 3)
    emit(rec)
    return rec


# ------------------------------------------------------------------ timing
def median_time(ctx: Context, step: Callable[[], Any], *, wall: bool, reps: int | None = None) -> tuple[float, int]:
    """One warm-up call of ``step``, then the median of ``reps`` timed calls (fewer when the
    step's time runs short; at least one).  Seconds by device events, or wall."""
    step()
    times = []
    for _ in range(reps or ctx.reps):
        with ctx.dev.timer() as t:
            step()
        times.append(t["wall_seconds"] if wall else t["seconds"])
        if ctx.left() < 3 * max(times):
            break
    return statistics.median(times), len(times)


def rate(row: str, n: int, seconds: float, runs: int, clock: str, **extra) -> dict:
    rec = {"kind": "rate", "row": row, "items": n, "seconds": seconds, "runs": runs, "clock": clock,
           "items_per_second": n / seconds if seconds > 0 else None, **extra}
    emit(rec)
    return rec


def saturating(ctx: Context, kernel: registry.VerifyKernel, waves: int = 2) -> int:
    """Items in ``waves`` full waves of ``kernel`` on this device, capped at ``max_items``."""
    return max(1, min(ctx.max_items, waves * pipeline.wave(ctx.dev, kernel)))


def timed_verify(ctx: Context, kernel: registry.VerifyKernel, batch: Batch) -> tuple[float, int, bool]:
    """Kernel-only time of ``batch`` (already device-resident once put; device events,
    :func:`median_time`), and whether its last run's verdicts were all valid."""
    db = ops.put_batch(ctx.dev, batch)
    got: dict = {}

    def once():
        got["v"] = ops.verify(ctx.dev, kernel, db)

    seconds, runs = median_time(ctx, once, wall=False)
    return seconds, runs, bool(np.all(ctx.dev.get(got["v"], len(batch)) == 1))


def checked_verify(ctx: Context, kernel: registry.VerifyKernel, batch: Batch, want: np.ndarray,
                   row: str, *, transfer: str | None = None, **extra) -> dict:
    """Verify and commit ``batch`` end to end (pinned host memory in, verdicts, leaves and
    root out), timed by wall clock; the verdicts and the device root checked against
    ``want`` and hashlib's root."""
    dev = ctx.dev
    pinned = Batch(batch.scheme, *(dev.pinned_copy(a) if hasattr(dev, "pinned_copy") else a
                                   for a in (batch.pks, batch.sigs, batch.msgs, batch.offsets)),
                   batch.ctx, **option_settings(batch))
    saved = getattr(dev, "transfer", None)
    out: dict = {}

    def once():
        if transfer is not None:
            dev.transfer = transfer
        try:
            out["result"] = ops.verify_and_commit(dev, kernel, pinned)
        finally:
            if transfer is not None:
                dev.transfer = saved

    seconds, runs = median_time(ctx, once, wall=True)
    got, _, root = out["result"]
    return rate(row, len(batch), seconds, runs, "wall", verdicts_ok=bool(np.array_equal(got, want)),
                root_ok=root == expected_root(batch, want), transfer=transfer or saved)


# ------------------------------------------------------------------ steps
def step_env(ctx: Context, scheme: str | None) -> None:
    emit({"kind": "env", "python": envmod.python(), "toolchain": envmod.toolchain(), "smi": envmod.smi()})


def step_device(ctx: Context, scheme: str | None) -> None:
    rec = {"kind": "device", **ctx.dev.info()}
    if ctx.backend != "kernel-host":
        rec["cuda"] = envmod.cuda(ctx.dev.cp)
    emit(rec)


def step_hashes(ctx: Context, scheme: str | None) -> None:
    """The hash kernels against hashlib, the Merkle kernels against RFC 6962 roots."""
    for entry, _ in registry.HASH_KERNELS.values():
        build(ctx, registry.HASH, entry)
    for entry in ("zv_merkle_leaves", "zv_merkle_level", "zv_merkle_tail"):
        build(ctx, registry.MERKLE, entry)
    data = json.loads((ctx.data / "hashes.json").read_text())
    msgs = [bytes.fromhex(m) for m in data["messages"]]
    for algo, want in data["fixed"].items():
        got = ops.hash_messages(ctx.dev, algo, msgs)
        bad = [i for i, (g, w) in enumerate(zip(got, want, strict=True)) if g.tobytes().hex() != w]
        emit({"kind": "check", "what": algo, "checked": len(want), "failed": len(bad), "failures": bad[:20]})
    for algo, by_len in data["xof"].items():
        picked = msgs[::13]
        checked = failed = 0
        for n, want in by_len.items():
            got = ops.hash_messages(ctx.dev, algo, picked, int(n))
            checked += len(want)
            failed += sum(g.tobytes().hex() != w for g, w in zip(got, want, strict=True))
        emit({"kind": "check", "what": algo, "checked": checked, "failed": failed})
    cases = json.loads((ctx.data / "merkle.json").read_text())
    failures = []
    for case in cases:  # the leaves are remade from their seed (scripts/prepare_gpu_check, merkle_leaves)
        data = random.Random(case["seed"]).randbytes(32 * case["n"])
        leaves = np.frombuffer(data, dtype=np.uint8).reshape(case["n"], 32)
        for tail_max in (ops.TAIL_MAX, 1):
            if ops.root(ctx.dev, leaves, tail_max=tail_max).hex() != case["root"]:
                failures.append({"n": case["n"], "tail_max": tail_max})
    emit({"kind": "check", "what": "merkle roots", "checked": 2 * len(cases), "failed": len(failures),
          "failures": failures[:20]})


def step_check(ctx: Context, scheme: str) -> None:
    """Every prepared vector of ``scheme`` (external and generated known answers) through the
    device: verdicts against the expected ones, each batch's device root against hashlib's."""
    kernel = kernel_of(scheme)
    if kernel is None or not build(ctx, kernel.source, kernel.entry)["ok"]:
        emit({"kind": "check", "what": "vectors", "scheme": scheme, "status": "no kernel", "checked": 0, "failed": 0})
        return
    for name, kas in records(ctx, scheme).items():
        rec: dict = {"kind": "check", "what": "vectors", "file": name, "scheme": scheme, "status": "run",
                     "checked": len(kas), "failed": 0, "roots_ok": 0, "roots_bad": 0, "false_as_given": 0,
                     "failures": []}
        for key, idx in group_items([ka.item for ka in kas]).items():
            want = np.array([kas[i].expected for i in idx], dtype=bool)
            if key is None:  # the engine answers False without a backend
                rec["false_as_given"] += len(idx)
                rec["failed"] += int(np.count_nonzero(want))
                continue
            batch = batch_of(key, [kas[i].item for i in idx])
            got, _, root = ops.verify_and_commit(ctx.dev, kernel, batch)
            bad = np.flatnonzero(got != want)
            rec["failed"] += len(bad)
            rec["failures"] += [kas[idx[j]].id for j in bad[:20]]
            rec["roots_ok" if root == expected_root(batch, want) else "roots_bad"] += 1
        emit(rec)


def step_time(ctx: Context, scheme: str) -> None:
    """The first timing round of ``scheme``: one saturating batch (two full waves) of valid
    items, kernel only (device events), end to end from pinned memory (wall; verdicts and
    root checked), then the pipelined path over three chunks against one launch."""
    kernel, base = scheme_base(ctx, scheme, valid_only=True)
    build(ctx, kernel.source, kernel.entry)
    n = saturating(ctx, kernel)
    batch = tile(base[0], n)
    want = np.ones(n, dtype=bool)
    seconds, runs, ok = timed_verify(ctx, kernel, batch)
    rate(f"verify {scheme} (kernel)", n, seconds, runs, "device", verdicts_ok=ok, waves=2)
    checked_verify(ctx, kernel, batch, want, f"verify+commit {scheme} (end to end)")
    pipelined(ctx, kernel, base[0], scheme)


def pipelined(ctx: Context, kernel: registry.VerifyKernel, base: Batch, scheme: str) -> None:
    """The pipelined verify-and-commit of three chunks (two waves each) against the
    one-launch path: same verdicts, leaves and root, all verdicts true; both timed (wall)."""
    wave = pipeline.wave(ctx.dev, kernel)
    plan = pipeline.plan(1, wave)
    n = min(ctx.max_items, 3 * plan.chunk)
    plan = pipeline.Plan(n, min(plan.chunk, -(-n // plan.streams)), plan.streams)
    batch = tile(base, n)
    out: dict = {}
    t_pipe, runs = median_time(ctx, lambda: out.__setitem__("p", pipeline.verify_and_commit(ctx.dev, kernel, batch,
                                                                                            plan)), wall=True)
    t_one, _ = median_time(ctx, lambda: out.__setitem__("o", ops.verify_and_commit(ctx.dev, kernel, batch)),
                           wall=True, reps=runs)
    p, o = out["p"], out["o"]
    emit({"kind": "pipeline", "scheme": scheme, "items": n, "wave_items": wave, "chunk_items": plan.chunk,
          "chunks": len(plan.chunks), "streams": plan.streams, "verdicts_ok": bool(np.all(p[0])),
          "same_as_one_launch": bool(np.array_equal(p[0], o[0]) and np.array_equal(p[1], o[1]) and p[2] == o[2]),
          "root_ok": p[2] == expected_root(batch, np.ones(n, dtype=bool)),
          "pipelined_items_per_second": n / t_pipe, "one_launch_items_per_second": n / t_one, "runs": runs})


def step_big(ctx: Context, scheme: str) -> None:
    """One batch past the point where the blocks reuse their shared arrays for a second
    chunk (:data:`SECOND_CHUNK_ITEMS`), of valid and invalid items, checked against the
    expected verdicts and hashlib's root."""
    kernel, base = scheme_base(ctx, scheme, valid_only=False)
    n = min(ctx.max_items, max(SECOND_CHUNK_ITEMS, 1 << 20))
    batch = tile(base[0], n)
    want = base[1][np.arange(n) % len(base[0])]
    checked_verify(ctx, kernel, batch, want, f"verify+commit {scheme} (big, mixed verdicts)",
                   past_second_chunk=n >= SECOND_CHUNK_ITEMS)


def step_caps(ctx: Context, scheme: str) -> None:
    """Kernel-only rates of ``scheme``'s shipped build and its register-cap variants
    (``registry.cap_variants``) on one batch of valid items large enough for two full waves
    of each; every batch's verdicts checked."""
    kernel, base = scheme_base(ctx, scheme, valid_only=True)
    builds = [kernel] + [replace(kernel, source=v) for v in registry.cap_variants(kernel.source)]
    loaded = [k for k in builds if build(ctx, k.source, k.entry)["ok"]]
    if not loaded:
        emit({"kind": "error", "error": f"no build of {scheme} loaded"})
        sys.exit(1)
    batch = tile(base[0], max(saturating(ctx, k) for k in loaded))
    for k in loaded:
        seconds, runs, ok = timed_verify(ctx, k, batch)
        rate(f"verify {scheme} (kernel, {k.source.variant or 'shipped'})", len(batch), seconds, runs, "device",
             verdicts_ok=ok, variant=k.source.variant or "shipped", options=list(k.source.options))


def step_variants(ctx: Context, scheme: str) -> None:
    """Every kernel of a scheme that has several (``registry.VERIFY_VARIANTS``: ML-DSA's
    thread and block kernels), correctness first: each kernel on every prepared vector of
    the scheme (verdicts against the expected ones; a ``check`` record per kernel), then each
    timed, kernel only (device events), on one and the same batch of valid items (two full
    waves of the kernel that needs more), that batch's verdicts checked — so the first GPU
    run decides between them."""
    rows = registry.VERIFY_VARIANTS.get(scheme)
    if not rows:
        emit({"kind": "error", "error": f"{scheme} has one kernel"})
        sys.exit(1)
    loaded = {name: k for name, k in rows.items() if build(ctx, k.source, k.entry)["ok"]}
    if not loaded:
        emit({"kind": "error", "error": f"no kernel of {scheme} loaded"})
        sys.exit(1)
    vectors = records(ctx, scheme)
    for name, k in loaded.items():
        rec: dict = {"kind": "check", "what": "kernel variant", "scheme": scheme, "kernel_variant": name,
                     "checked": 0, "failed": 0, "failures": []}
        for kas in vectors.values():
            for key, idx in group_items([ka.item for ka in kas]).items():
                if key is None:  # refused before any kernel (lengths): not the kernel's verdict
                    continue
                want = np.array([kas[i].expected for i in idx], dtype=bool)
                got = ops.verify_batch(ctx.dev, k, batch_of(key, [kas[i].item for i in idx]))
                bad = np.flatnonzero(got != want)
                rec["checked"] += len(idx)
                rec["failed"] += len(bad)
                rec["failures"] += [kas[idx[j]].id for j in bad[:20]]
        emit(rec)
    _, base = scheme_base(ctx, scheme, valid_only=True)
    batch = tile(base[0], max(saturating(ctx, k) for k in loaded.values()))
    for name, k in loaded.items():
        seconds, runs, ok = timed_verify(ctx, k, batch)
        rate(f"verify {scheme} (kernel: {name})", len(batch), seconds, runs, "device", verdicts_ok=ok,
             kernel_variant=name, threads_per_item=k.lanes)


def step_sizes(ctx: Context, scheme: str) -> None:
    """Kernel-only rates of ``scheme`` at growing sizes (powers of two from 2^10) while the
    step's time allows, each batch's verdicts checked."""
    kernel, base = scheme_base(ctx, scheme, valid_only=True)
    n, last = 1 << 10, None
    while n <= ctx.max_items:
        if last is not None and last * n / (n // 2) * (ctx.reps + 2) * 2 > ctx.left():
            emit({"kind": "rate", "row": f"verify {scheme} (kernel)", "items": n, "skipped": "step time"})
            break
        seconds, runs, ok = timed_verify(ctx, kernel, tile(base[0], n))
        rate(f"verify {scheme} (kernel)", n, seconds, runs, "device", verdicts_ok=ok)
        last, n = seconds, n * 2


def step_msg_sizes(ctx: Context, scheme: str | None) -> None:
    """Ed25519 at fixed message sizes on the kernel and, where pynacl imports (its wheel
    carried along), on the CPU backend of the same machine: the GPU/CPU ratio per size."""
    kernel = kernel_of("ed25519")
    bench = list(read_jsonl(ctx.data / "bench.jsonl")) if (ctx.data / "bench.jsonl").is_file() else []
    if kernel is None or not bench:
        emit({"kind": "error", "error": "no Ed25519 kernel or no bench.jsonl"})
        sys.exit(1)
    cpu = cpu_backend()
    n = saturating(ctx, kernel)
    for size in ED25519_MSG_SIZES:
        base = base_batch([ka for ka in bench if len(ka.item.message) == size], valid_only=True)
        if base is None:
            continue
        batch = tile(base[0], n)
        seconds, runs, ok = timed_verify(ctx, kernel, batch)
        rate(f"verify ed25519 {size} B msgs (kernel)", n, seconds, runs, "device", message_bytes=size,
             verdicts_ok=ok)
        if cpu is None:
            emit({"kind": "rate", "row": f"verify ed25519 {size} B msgs (cpu backend)", "items": n,
                  "unavailable": "pynacl cannot be imported on this host", "message_bytes": size})
            continue
        cpu.run(tile(base[0], 64))  # warm-up: the pool's workers start on the first batch
        times, verdicts = [], None
        for _ in range(max(1, min(3, ctx.reps))):
            t0 = time.perf_counter()
            verdicts = cpu.run(batch).verdicts
            times.append(time.perf_counter() - t0)
        rate(f"verify ed25519 {size} B msgs (cpu backend, {cpu.workers} cores)", n, statistics.median(times),
             len(times), "wall", message_bytes=size, verdicts_ok=bool(np.all(verdicts)))
    if cpu is not None:
        cpu.close()


def step_hash_rates(ctx: Context, scheme: str | None) -> None:
    """SHA-256, SHA-512, SHAKE256 over 64-byte messages and the Merkle leaves and root, at
    one size of about a million items (capped at ``max_items``), device time."""
    rng = np.random.default_rng(1)
    n = min(ctx.max_items, 1 << 20)
    msgs = ctx.dev.put(rng.integers(0, 256, size=64 * n, dtype=np.uint8))
    offsets = ctx.dev.put(np.arange(n + 1, dtype=np.uint64) * 64)
    for label, algo, out_len in (("sha256 64 B", "sha256", None), ("sha512 64 B", "sha512", None),
                                 ("shake256 64 B -> 32 B", "shake256", 32)):
        seconds, runs = median_time(ctx, lambda a=algo, o=out_len: ops.hash_buffer(ctx.dev, a, msgs, offsets, n, o),
                                    wall=False)
        rate(label, n, seconds, runs, "device")
    s = SCHEMES["ed25519"]
    b = Batch(s, rng.integers(0, 256, (n, 32), dtype=np.uint8), rng.integers(0, 256, (n, 64), dtype=np.uint8),
              rng.integers(0, 256, 64 * n, dtype=np.uint8), np.arange(n + 1, dtype=np.uint64) * 64)
    db = ops.put_batch(ctx.dev, b)
    v = ctx.dev.put(rng.integers(0, 2, n, dtype=np.uint8))
    seconds, runs = median_time(ctx, lambda: ops.merkle_root_buffer(ctx.dev, ops.merkle_leaves(ctx.dev, db, v), n),
                                wall=False)
    rate("merkle leaves+root (ed25519 items, 64 B msgs)", n, seconds, runs, "device")


def cpu_backend():
    """The CPU backend (libsodium and friends on every core), or None where its libraries
    cannot be imported (a GPU host carries no signing library unless a wheel is brought)."""
    try:
        import nacl.bindings  # noqa: F401  (the Ed25519 reference)

        from app.engine.backends.cpu import CpuBackend
    except ImportError:
        return None
    return CpuBackend()


def step_engine(ctx: Context, scheme: str | None) -> None:
    """The engine path on this device: self-test and Merkle check at start, calibration, a
    hybrid split and a batch landed in the page-locked pool.  Skipped (saying why) where the
    CPU reference cannot be imported."""
    try:
        import nacl.bindings  # noqa: F401

        from app.engine.memory.heap import land
        from app.engine.runtime import PoolConfig, Runtime
        from app.engine.verify.engine import EngineConfig
    except ImportError as exc:
        emit({"kind": "engine", "status": f"skipped: the CPU reference or the engine cannot be imported ({exc})"})
        return
    if ctx.backend == "kernel-host":
        from app.engine.backends.kernel_host import KernelHostBackend

        accel: Any = KernelHostBackend()
    else:
        from app.engine.backends.cuda import CudaBackend

        accel = CudaBackend(cupy=ctx.dev.cp) if ctx.backend == "fake-cuda" else CudaBackend()
    kas = [ka for kas in records(ctx, "ed25519", files="generated.jsonl*").values() for ka in kas]
    rt = Runtime.open(EngineConfig(calibrate=True, hybrid=True, hybrid_min=256),
                      PoolConfig(64 << 20, source="pinned" if ctx.backend == "cuda" else "heap"), backends=[accel])
    eng = rt.engine
    try:
        eng.start()
        rec: dict = {"kind": "engine", "status": "run", "ready": eng.ready, "merkle": dict(eng.merkle),
                     "selftest": {sid: dict(r.selftest) for sid, r in eng.routes.items()},
                     "rates": {sid: dict(r.rates) for sid, r in eng.routes.items() if r.rates}}
        base = base_batch(kas, valid_only=False)
        assert base is not None, "no generated Ed25519 items"
        batch = tile(base[0], 4096)
        want = base[1][np.arange(4096) % len(base[0])]
        res = eng.run(batch)
        rec["hybrid"] = {"backend": res.backend, "verdicts_ok": bool(np.array_equal(res.verdicts, want)),
                         "device_used": accel.name in str(res.backend)}
        buf = land(rt.pool, batch.pks.nbytes)
        buf.array[:batch.pks.nbytes] = batch.pks.reshape(-1)
        pooled = Batch(batch.scheme, buf.array[:batch.pks.nbytes].reshape(batch.pks.shape), batch.sigs,
                       batch.msgs, batch.offsets)
        res = eng.run(pooled)
        buf.release()
        rec["pool"] = {"source": str(rt.pool.source) if rt.pool is not None else None,
                       "verdicts_ok": bool(np.array_equal(res.verdicts, want))}
        emit(rec)
    finally:
        rt.close()


# ------------------------------------------------------------------ BLS12-381 aggregates and RLC batches
def bls_records(ctx: Context, name: str) -> list:
    """The prepared BLS known answers ``name`` (bls_aggregate / bls_rlc, scripts/prepare_gpu_check)."""
    path = ctx.data / f"{name}.jsonl.gz"
    return list(read_jsonl(path)) if path.is_file() else []


def bls_entry_wave(ctx: Context, entry: str) -> int:
    """Threads in one full wave of ``entry`` of bls12_381_aggregate.cu (one thread per key,
    message, pair or item), from its registers as :func:`pipeline.wave` counts them."""
    return pipeline.wave(ctx.dev, registry.VerifyKernel(registry.BLS_AGGREGATE, entry, ops.BLS_BLOCK))


def _rlc_batches(kas: list) -> list[tuple[Batch, np.ndarray, list[str]]]:
    """``kas`` as batches of one (key, signature length) each, with expected verdicts and ids;
    items no batch takes (lengths the scheme refuses) are left out (the engine answers False)."""
    out = []
    for key, idx in group_items([ka.item for ka in kas]).items():
        if key is not None:
            out.append((batch_of(key, [kas[i].item for i in idx]), np.array([kas[i].expected for i in idx], dtype=bool),
                        [kas[i].id for i in idx]))
    return out


def step_bls_check(ctx: Context, scheme: str | None) -> None:
    """The aggregate kernels' verdicts on every prepared aggregate item (both variants)
    against the CPU reference's, then RLC batches (valid and invalid items shuffled, groups of
    64 and of 4; and all valid, which must fail no group) against single CoreVerify's."""
    for entry in registry.BLS_AGGREGATE_ENTRIES:
        build(ctx, registry.BLS_AGGREGATE, entry)
    kas = [ka for ka in bls_records(ctx, "bls_aggregate") if ka.source != "gpu_check/timing"]
    if not kas:
        emit({"kind": "error", "error": "no bls_aggregate.jsonl.gz: run scripts/prepare_gpu_check with bls12-381"})
        sys.exit(1)
    got = ops.verify_aggregates(ctx.dev, [ka.item for ka in kas])
    want = np.array([ka.expected for ka in kas], dtype=bool)
    bad = np.flatnonzero(got != want)
    for variant in ("ietf", "eth"):
        sel = [i for i, ka in enumerate(kas) if ka.item.variant == variant]
        emit({"kind": "check", "what": "bls aggregates", "scheme": f"bls12-381 ({variant})", "checked": len(sel),
              "failed": int(np.count_nonzero(got[sel] != want[sel])), "true": int(np.count_nonzero(want[sel])),
              "failures": [kas[i].id for i in bad if kas[i].item.variant == variant][:20]})
    kernel = kernel_of("bls12-381")
    rlc = bls_records(ctx, "bls_rlc")
    if kernel is None or not rlc:
        emit({"kind": "error", "error": "no bls12-381 kernel or no bls_rlc.jsonl.gz"})
        sys.exit(1)
    build(ctx, kernel.source, kernel.entry)
    shuffled = list(rlc)
    random.Random(40).shuffle(shuffled)  # invalid members at every position of the groups
    valid = [ka for ka in rlc if ka.expected]
    for label, kas_, group in (("mixed", shuffled, 64), ("mixed", shuffled, 4), ("valid", valid, 64)):
        for batch, want_, ids in _rlc_batches(kas_):
            verdicts, rep = ops.verify_bls_rlc(ctx.dev, kernel, batch, group=group)
            wrong = np.flatnonzero(np.asarray(verdicts) != want_)
            emit({"kind": "check", "what": f"bls rlc ({label}, groups of {group})", "scheme": "bls12-381",
                  "checked": len(batch), "failed": len(wrong), "failures": [ids[j] for j in wrong[:20]]})
            emit({"kind": "bls", "batch": label, "group": group, "items": len(batch), "groups": rep.groups,
                  "failed_groups": rep.failed_groups, "singles": rep.singles})
            if label == "valid":  # a group of valid items that fails would cost single verifies
                emit({"kind": "check", "what": "bls rlc (valid): groups that fail", "scheme": "bls12-381",
                      "checked": rep.groups, "failed": rep.failed_groups})


def step_bls_time(ctx: Context, scheme: str | None) -> None:
    """One saturating size of each aggregate shape (wall clock, host arrays in and verdicts
    out, every verdict checked): FastAggregateVerify of the prepared wide item (two full waves
    of per-key KeyValidate threads), AggregateVerify (two waves of Miller-loop threads), and a
    bls12-381 batch by random linear combination against the single-verify kernel on the same
    batch (two waves of the RLC per-item threads), side by side."""
    timing = {ka.id: ka.item for ka in bls_records(ctx, "bls_aggregate") if ka.source == "gpu_check/timing"}
    if not timing:
        emit({"kind": "error", "error": "no timing items in bls_aggregate.jsonl.gz"})
        sys.exit(1)
    for name, item in sorted(timing.items()):
        if item.mode == "fast_aggregate":
            keys = len(item.public_keys)
            n = -(-2 * bls_entry_wave(ctx, "zv_bls_agg_key_validate") // keys)
            pairs = 2
        else:
            keys = pairs = len(item.public_keys) + 1
            keys -= 1
            n = -(-2 * bls_entry_wave(ctx, "zv_bls_agg_miller") // pairs)
        n = max(1, min(n, ctx.max_items // max(1, keys)))
        items = [item] * n
        out: dict = {}
        seconds, runs = median_time(ctx, lambda out=out, items=items: out.__setitem__(
            "v", ops.verify_aggregates(ctx.dev, items)), wall=True)
        rate(f"bls12-381 {name} (aggregate kernels, end to end)", n, seconds, runs, "wall",
             verdicts_ok=bool(np.all(out["v"])), keys_per_item=keys, pairs_per_item=pairs,
             keys_per_second=n * keys / seconds if seconds > 0 else None)
    kernel, base = scheme_base(ctx, "bls12-381", valid_only=True)
    wave = max(bls_entry_wave(ctx, "zv_bls_rlc_prepare"), pipeline.wave(ctx.dev, kernel))
    n = max(2, min(ctx.max_items, 2 * wave))
    batch = tile(base[0], n)
    got: dict = {}
    t_rlc, runs = median_time(ctx, lambda: got.__setitem__("r", ops.verify_bls_rlc(ctx.dev, kernel, batch)), wall=True)
    verdicts, rep = got["r"]
    rate("bls12-381 batch by RLC, groups of 64 (end to end)", n, t_rlc, runs, "wall",
         verdicts_ok=bool(np.all(verdicts)), failed_groups=rep.failed_groups)
    t_one, runs = median_time(ctx, lambda: got.__setitem__("s", ops.verify_batch(ctx.dev, kernel, batch)), wall=True,
                              reps=runs)
    rate("bls12-381 batch by single CoreVerify (end to end)", n, t_one, runs, "wall",
         verdicts_ok=bool(np.all(got["s"])), rlc_speedup=t_one / t_rlc if t_rlc > 0 else None)


#: Step name -> (function, whether it takes a scheme).
STEPS: dict[str, tuple[Callable[[Context, Any], None], bool]] = {
    "env": (step_env, False), "device": (step_device, False), "hashes": (step_hashes, False),
    "check": (step_check, True), "time": (step_time, True), "big": (step_big, True), "caps": (step_caps, True),
    "variants": (step_variants, True),
    "sizes": (step_sizes, True), "msg-sizes": (step_msg_sizes, False), "hash-rates": (step_hash_rates, False),
    "engine": (step_engine, False), "bls-batch-check": (step_bls_check, False),
    "bls-batch-time": (step_bls_time, False),
}


def run(name: str, scheme: str | None, ctx_args: dict) -> int:
    """Run one step in this process (the child side of ``scripts/gpu_check --step``); exit
    status 0 when it completed, 1 when it raised (an ``error`` record says what)."""
    fn, _ = STEPS[name]
    try:
        dev = None if name == "env" else make_device(ctx_args["backend"])
        ctx = Context(dev=dev, **ctx_args)
        fn(ctx, scheme)
        return 0
    except SystemExit as exc:
        return int(exc.code or 0)
    except BaseException as exc:
        emit({"kind": "error", "error": f"{type(exc).__name__}: {exc}"[-1500:],
              "traceback": traceback.format_exc()[-3000:]})
        return 1


def scheme_steps(schemes: list[str]) -> Iterator[str]:
    """Which schemes have a kernel source here (the others get no device step)."""
    for sid in schemes:
        if kernel_of(sid) is not None:
            yield sid
