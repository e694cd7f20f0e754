"""CPU backend: the fixed pool policy and chunk sizes, and the same verdicts whatever the pool
kind, chunking or worker count."""

import functools
import time

import pytest

from app.core.batch import Batch
from app.core.schemes import SCHEMES
from app.engine.backends import cpu_policy, native
from app.engine.backends.cpu import CpuBackend
from app.engine.backends.cpu_policy import CHUNK_SECONDS, CLAIM_SECONDS, TAIL_PIECES, chunk_bounds
from app.engine.reference import kat, reference


def _batch(scheme_id, items):
    return Batch.from_items(SCHEMES[scheme_id], [i.public_key for i in items], [i.message for i in items],
                            [i.signature for i in items], ctx=items[0].context)


@pytest.mark.parametrize("parallelism", ["thread", "process"])
def test_pool_kinds_agree(parallelism):
    rng = __import__("random").Random(3)
    items = kat.sign_items("ed25519", 20, seed=1)
    items = items + [kat.mutate(i, rng) for i in items]
    want = [True] * 20 + [False] * 20
    backend = CpuBackend(workers=2, chunk=3, parallelism=parallelism)
    try:
        assert backend.run(_batch("ed25519", items)).verdicts.tolist() == want
    finally:
        backend.close()


def test_single_worker_and_empty_batch():
    backend = CpuBackend(workers=1)
    items = kat.sign_items("secp256k1", 3, seed=2)
    assert backend.run(_batch("secp256k1", items)).verdicts.tolist() == [True] * 3
    empty = Batch.from_items(SCHEMES["ed25519"], [], [], [])
    assert backend.run(empty).verdicts.shape == (0,)


def test_each_family_runs_on_its_documented_pool_unless_one_is_forced():
    # The policy docs/architecture.md ("CPU backend") states, with bench/results/cpu_engine.md
    # as its evidence: the native loops on threads, every Python-loop chunk on processes.
    assert cpu_policy.POOL_KIND == {"ed25519": "thread", "secp256k1": "thread", "p256": "process", "bip340": "thread",
                                    "bls12-381": "thread", "ml-dsa": "thread", "slh-dsa": "process"}
    assert {s.family for s in SCHEMES.values()} == set(cpu_policy.POOL_KIND)  # a row for every family
    assert {f for f, kind in cpu_policy.POOL_KIND.items() if kind == "thread"} == native.FAMILIES
    auto, python_loop = CpuBackend(workers=2), CpuBackend(workers=2, use_native=False)
    for scheme in SCHEMES.values():
        # A thread row holds only where the chunk runs in the native loop (built here, not off).
        want = cpu_policy.POOL_KIND[scheme.family] if auto.native_family(scheme) else "process"
        assert auto.pool_kind(scheme) == want
        assert python_loop.pool_kind(scheme) == "process"
        for forced in ("thread", "process"):
            assert CpuBackend(workers=2, parallelism=forced).pool_kind(scheme) == forced
    if native.loops() is not None:
        assert auto.pool_kind(SCHEMES["ed25519"]) == auto.pool_kind(SCHEMES["secp256k1"]) == "thread"
        assert auto.pool_kind(SCHEMES["ml-dsa-44"]) == "thread"
    if native.loops() is not None and native.loops().bls is not None:  # blst's loop: threads
        assert auto.pool_kind(SCHEMES["bls12-381"]) == "thread"
    assert auto.pool_kind(SCHEMES["p256"]) == "process"
    with pytest.raises(KeyError):
        cpu_policy.pool_kind("ecdsa-p256", True)  # a family the registry does not have


def test_a_chunk_is_its_pool_kinds_seconds_of_the_per_item_cost():
    ml, slh = SCHEMES["p256"], SCHEMES["slh-dsa-sha2-128f"]
    auto, threads = CpuBackend(workers=2), CpuBackend(workers=2, parallelism="thread")
    assert auto.chunk_items(ml) == threads.chunk_items(ml) == cpu_policy.DEFAULT_CHUNK  # not measured yet
    for backend in (auto, threads):
        backend.item_seconds.update({"p256": 1e-4, "slh-dsa-sha2-128f": 2.5e-4})
    assert (auto.chunk_items(ml), auto.chunk_items(slh)) == (1000, 400)  # 100 ms on processes
    assert (threads.chunk_items(ml), threads.chunk_items(slh)) == (40, 16)  # 4 ms on threads
    assert auto.claim_items(ml, 4096) == 20  # 2 ms, the smallest claim of a shared batch
    assert cpu_policy.chunk_items(1e-9, "thread") == cpu_policy.MAX_CHUNK
    assert cpu_policy.chunk_items(10.0, "process") == 1  # an item costlier than a chunk: one a chunk
    # The cost is each batch's worker CPU seconds per item, averaged with COST_WEIGHT of the newest.
    assert cpu_policy.item_cost(None, 100, 1.0) == pytest.approx(0.01)
    assert cpu_policy.item_cost(0.01, 100, 2.0) == pytest.approx(0.01 + cpu_policy.COST_WEIGHT * 0.01)


def test_the_cost_is_the_workers_cpu_time_not_the_wait_behind_other_batches():
    """A batch that queued behind other work learns the cost a quiet one does: learned from
    wall time, the cost grew with concurrency and the chunks shrank until dispatch was the
    work (Ed25519 ×4096 at 16 concurrent requests served 0.5× of one; issue 48)."""
    import threading

    items = kat.sign_items("ed25519", 64, seed=9)
    backend = CpuBackend(workers=2, parallelism="thread")
    try:
        if not backend.native_family(SCHEMES["ed25519"]):
            pytest.skip("no native loops here")
        backend.run(_batch("ed25519", items))
        quiet = backend.item_seconds.pop("ed25519")
        release = threading.Event()
        blockers = [backend._executor(False).submit(release.wait, 5) for _ in range(2)]  # both threads busy
        threading.Timer(0.5, release.set).start()
        t0 = time.perf_counter()
        backend.run(_batch("ed25519", items))  # waits ~0.5 s for a thread: ~8 ms of wall per item
        assert time.perf_counter() - t0 >= 0.45 and all(b.result() for b in blockers)
        assert backend.item_seconds["ed25519"] < max(20 * quiet, 2e-3)
    finally:
        backend.close()


def test_close_leaves_no_worker_process():
    import multiprocessing

    backend = CpuBackend(workers=2, parallelism="process")
    items = kat.sign_items("ed25519", 4, seed=1)
    assert backend.run(_batch("ed25519", items)).verdicts.all()
    assert multiprocessing.active_children()
    backend.close()
    assert multiprocessing.active_children() == []


@pytest.mark.parametrize("parallelism", ["auto", "process"])
@pytest.mark.parametrize("scheme_id", ["ed25519", "secp256k1", "bip340"])
def test_native_loops_agree_with_the_python_loop(scheme_id, parallelism):
    rng = __import__("random").Random(4)
    items = kat.sign_items(scheme_id, 30, seed=3)
    items = items + [kat.mutate(i, rng) for i in items]
    items = [i for i in items if len(i.public_key) == len(items[0].public_key) and len(i.signature) == 64]
    batch = _batch(scheme_id, items)
    fast = CpuBackend(workers=2, chunk=7, parallelism=parallelism)
    slow = CpuBackend(workers=2, chunk=7, parallelism="thread", use_native=False)
    try:
        if parallelism == "auto" and fast.native_family(SCHEMES[scheme_id]):
            assert fast.pool_kind(SCHEMES[scheme_id]) == "thread"
        got, want = fast.run(batch), slow.run(batch)
        assert got.verdicts.tolist() == want.verdicts.tolist()
        assert True in got.verdicts.tolist() and False in got.verdicts.tolist()
        assert (got.leaves == want.leaves).all()
    finally:
        fast.close()
        slow.close()


def test_chunk_is_sized_from_the_measured_cost():
    backend = CpuBackend(workers=2)
    scheme = SCHEMES["ed25519"]
    assert backend.chunk_items(scheme) == 64  # not measured yet
    items = kat.sign_items("ed25519", 40, seed=8)
    try:
        backend.run(_batch("ed25519", items))
        cost = backend.item_seconds["ed25519"]
        assert 1e-6 < cost < 0.05
        assert backend.chunk_items(scheme) == max(1, min(4096, int(CHUNK_SECONDS["thread"] / cost)))
        assert CpuBackend(chunk=5).chunk_items(scheme) == 5  # a configured size wins
        assert backend.claim_items(scheme, 4096) == max(1, int(CLAIM_SECONDS / cost))
        assert CpuBackend(workers=2, chunk=5).claim_items(scheme, 4096) == 5
        assert CpuBackend(workers=2).claim_items(scheme, 4096) == 1  # not measured yet
        # Never above an equal share: 800 items with claims of at least 1000 would go to one worker.
        assert CpuBackend(workers=2, chunk=1000).claim_items(scheme, 800) == 400
    finally:
        backend.close()


def _releases_gil(fn, args: tuple, seconds: float = 0.02, switch_seconds: float = 0.1) -> bool:
    """Whether ``fn(*args)`` releases the GIL while it runs, measured: a helper thread counts,
    yielding the GIL after each count, while this thread calls ``fn`` for ``seconds`` (at least
    once) under a switch interval longer than that, so this thread gives the GIL up only where
    the library releases it, however busy the machine.  A GIL-holding call can still let the
    helper in once per hand-off some other thread forces; a releasing one lets it count
    hundreds of times, so 10 counts mean "released"."""
    import sys
    import threading

    state = {"count": 0, "measuring": False, "stop": False}
    started = threading.Event()

    def spin() -> None:
        started.set()
        while not state["stop"]:
            if state["measuring"]:
                state["count"] += 1
            time.sleep(0)  # hand the GIL back at once when the caller wants it

    old = sys.getswitchinterval()
    sys.setswitchinterval(switch_seconds)  # before the helper starts: its every wait uses it
    helper = threading.Thread(target=spin, daemon=True)
    try:
        helper.start()
        started.wait()
        state["measuring"] = True
        t0 = time.perf_counter()
        fn(*args)
        while time.perf_counter() - t0 < seconds:
            fn(*args)
        state["measuring"] = False
    finally:
        state["stop"] = True
        sys.setswitchinterval(old)
        helper.join()
    return state["count"] >= 10


def test_releases_gil_records_what_each_library_does():
    """RELEASES_GIL decides nothing (the pool policy is fixed), but bench/cpu_engine.py prints
    it and docs/architecture.md reasons with it: a library update that changes it is noticed here."""
    def holds(n):  # pure Python: never lets another thread run under a long switch interval
        return sum(range(n))

    assert not _releases_gil(holds, (200_000,))
    assert _releases_gil(time.sleep, (0.002,))
    answers = kat.known_answers()
    measured: dict[str, bool] = {}
    for scheme in SCHEMES.values():
        if scheme.family in measured or not answers.get(scheme.id):
            continue
        it = answers[scheme.id][0].item
        args = (it.public_key, it.message, it.signature, it.context)
        fn = functools.partial(reference.verifier(scheme), **scheme.verifier_options(it))
        # A "no" can come from a helper thread the OS did not run in time, a "yes" only from
        # a released GIL: ask up to three times.
        measured[scheme.family] = any(_releases_gil(fn, args) for _ in range(3))
    assert measured == reference.RELEASES_GIL


def test_process_workers_ignore_ctrl_c_so_the_server_shuts_them_down_in_order():
    """Ctrl-C goes to the whole process group; a worker that died of it mid-chunk would lose
    the chunk and print a traceback, so the workers leave SIGINT to the server."""
    import os
    import signal

    # The workers must ignore SIGINT by themselves: a parent started with SIGINT ignored
    # (a background job, some CI runners) would hand that on to them and hide the point.
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    backend = CpuBackend(workers=1, parallelism="process")
    try:
        pool = backend._executor(True)
        signal.signal(signal.SIGINT, before)
        pid = pool.submit(os.getpid).result()
        os.kill(pid, signal.SIGINT)
        time.sleep(0.2)
        assert pool.submit(os.getpid).result(timeout=30) == pid  # the same worker, alive
    finally:
        signal.signal(signal.SIGINT, before)
        backend.close()


def test_process_workers_leave_when_the_server_is_killed_outright():
    """A SIGKILLed server cannot shut its pool down; workers left behind would hold its
    shared memory (shared_columns.py) for ever."""
    import os
    import signal
    import subprocess
    import sys

    server = subprocess.Popen(
        [sys.executable, "-c", "from app.engine.backends.cpu import CpuBackend\n"
         "import os, sys, time\n"
         "pool = CpuBackend(workers=2, parallelism='process')._executor(True)\n"
         "print(*sorted({pool.submit(os.getpid).result() for _ in range(8)} | set(pool._processes)), flush=True)\n"
         "time.sleep(120)\n"],
        stdout=subprocess.PIPE, text=True)
    try:
        workers = [int(p) for p in server.stdout.readline().split()]
        assert len(workers) == 2
        os.kill(server.pid, signal.SIGKILL)
        server.wait(timeout=10)

        def alive(pid: int) -> bool:  # a zombie (exited, not yet reaped by its new parent) is gone
            try:
                return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
            except FileNotFoundError:
                return False

        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(alive(p) for p in workers):
            time.sleep(0.2)
        assert not any(alive(p) for p in workers)
    finally:
        server.kill()
        server.stdout.close()


@pytest.mark.parametrize("n,full,workers", [(4096, 366, 2), (4096, 73, 2), (733, 366, 2), (512, 366, 2), (64, 366, 2),
                                            (16, 366, 2), (4096, 440, 16), (8000, 440, 16), (100, 48, 1), (7, 1, 4),
                                            (3, 5, 4), (1, 1, 1), (10_000, 7, 3), (2726, 5, 2), (3997, 4, 16),
                                            (17957, 7, 8), (17, 1000, 16)])
def test_chunk_bounds_cover_the_batch_and_cut_only_the_last_round(n, full, workers):
    bounds = chunk_bounds(n, full, workers)
    assert bounds[0][0] == 0 and bounds[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))  # in order, no gap, no overlap
    sizes = [hi - lo for lo, hi in bounds]
    share = -(-n // workers)
    assert all(0 < s <= min(full, share) for s in sizes)
    if workers == 1:
        assert sizes[:-1] == [min(full, n)] * (len(sizes) - 1)  # equal chunks, one after another
    elif n <= workers * full:
        # One round: an equal share per worker (sizes differ by one at most), no more dispatch.
        assert len(bounds) == min(n, workers) and max(sizes) - min(sizes) <= 1
    else:
        # Full chunks, then the last round's worth (more than workers - 1 full chunks, at most
        # workers) in TAIL_PIECES chunks per worker: no core is left finishing a full chunk
        # while the others wait.
        k = next(i for i, s in enumerate(sizes) if s != full or n - bounds[i][0] <= workers * full)
        tail = sizes[k:]
        assert sizes[:k] == [full] * k
        assert (workers - 1) * full < sum(tail) <= workers * full
        assert len(tail) == min(sum(tail), workers * TAIL_PIECES) and max(tail) - min(tail) <= 1
        assert max(tail) <= -(-full // TAIL_PIECES)


def test_a_batch_runs_in_its_chunk_bounds(monkeypatch):
    import app.engine.backends.cpu_worker as cpu_worker

    seen = []
    real = cpu_worker.native_range
    monkeypatch.setattr(cpu_worker, "native_range",
                        lambda b, lo, hi, *rest: seen.append((lo, hi)) or real(b, lo, hi, *rest))
    items = kat.sign_items("ed25519", 50, seed=5)
    backend = CpuBackend(workers=2, chunk=8, parallelism="thread")
    try:
        if not backend.native_family(SCHEMES["ed25519"]):
            pytest.skip("no native loops here")
        assert backend.run(_batch("ed25519", items)).verdicts.all()
    finally:
        backend.close()
    assert sorted(seen) == chunk_bounds(50, 8, 2)


@pytest.mark.parametrize(("done", "n", "want"), [
    ([], 5, [(0, 5)]),
    ([(0, 5)], 5, []),
    ([(3, 5), (0, 1)], 5, [(1, 3)]),
    ([(0, 2), (4, 6)], 9, [(2, 4), (6, 9)]),
])
def test_the_ranges_no_worker_did_are_found(done, n, want):
    from app.engine.backends.cpu import _missing

    assert _missing(done, n) == want


def test_concurrent_batches_share_the_process_pool_and_keep_their_own_verdicts():
    from concurrent.futures import ThreadPoolExecutor

    rng = __import__("random").Random(11)
    good = kat.sign_items("ml-dsa-44", 30, seed=4)
    batches = [_batch("ml-dsa-44", [kat.mutate(it, rng) if k % 5 == s else it for k, it in enumerate(good)])
               for s in range(4)]
    backend = CpuBackend(workers=2, parallelism="process")
    try:
        with ThreadPoolExecutor(4) as ex:  # four batches in flight at once, each in its own segment
            got = [r.verdicts for r in ex.map(backend.run, batches)]
    finally:
        backend.close()
    assert [v.tolist() for v in got] == [[k % 5 != s for k in range(30)] for s in range(4)]


def test_a_pool_whose_worker_died_is_replaced_and_the_batch_still_verified():
    import os
    import signal

    items = kat.sign_items("ml-dsa-44", 12, seed=6)
    backend = CpuBackend(workers=2, parallelism="process")
    try:
        assert backend.run(_batch("ml-dsa-44", items)).verdicts.all()
        old = backend._procs
        assert old is not None
        os.kill(next(iter(old._processes)), signal.SIGKILL)  # as the OOM killer would
        time.sleep(0.5)  # the pool notices and breaks
        assert backend.run(_batch("ml-dsa-44", items)).verdicts.all()
        assert backend._procs is not None and backend._procs is not old
        assert backend.run(_batch("ml-dsa-44", items)).verdicts.all()  # and the next batch runs on the new pool
    finally:
        backend.close()


def test_a_failed_submit_waits_for_the_tasks_already_made_before_the_segment_is_reused():
    from concurrent.futures import Future

    import app.engine.backends.cpu as cpu

    items = kat.sign_items("ml-dsa-44", 8, seed=7)
    backend = CpuBackend(workers=2, parallelism="process")
    try:
        backend.run(_batch("ml-dsa-44", items))  # pool started, a segment kept
        pool = backend._procs
        made: list[Future] = []

        class OneSubmit(cpu._ProcessPool):  # the pool, failing its second submit of a batch
            def __init__(self):  # a view of the running pool, not a new one
                self.claim_lock = pool.claim_lock

            def submit(self, fn, *args, **kwargs):
                if made:
                    raise RuntimeError("cannot schedule new futures after shutdown")
                made.append(pool.submit(fn, *args, **kwargs))
                return made[-1]

        with pytest.raises(RuntimeError, match="cannot schedule"):
            backend._on_processes(OneSubmit(), _batch("ml-dsa-44", items), [(0, 4), (4, 8)], False)
        assert made and made[0].done()  # waited for before the segment went back
        assert backend._segments.idle_bytes() > 0
    finally:
        backend.close()


def test_a_batch_that_breaks_its_retry_pool_too_is_a_503_not_a_500(monkeypatch):
    from concurrent.futures.process import BrokenProcessPool

    from app.core.errors import BackendUnavailable

    items = kat.sign_items("ml-dsa-44", 4, seed=8)
    backend = CpuBackend(workers=2, parallelism="process")
    pools = []

    def dies(ex, batch, bounds, use_native):
        pools.append(ex)
        raise BrokenProcessPool("a worker died")

    monkeypatch.setattr(backend, "_on_processes", dies)
    try:
        with pytest.raises(BackendUnavailable, match="twice") as err:
            backend.run(_batch("ml-dsa-44", items))
        assert err.value.status == 503
        assert len(pools) == 2 and pools[0] is not pools[1]  # the retry ran on a new pool
        assert backend._procs is None  # and that one is dropped too: the next batch starts another
    finally:
        backend.close()
