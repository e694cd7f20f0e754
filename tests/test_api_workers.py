"""The worker exchange: each worker publishes its stats and pool, reads the others' while
they live, and the pools of several workers add up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from types import SimpleNamespace

from app.api import workers
from app.api.workers import WorkerExchange, merge_pools
from app.engine.stats import Stats


def engine(pool: dict | None = None) -> SimpleNamespace:
    return SimpleNamespace(stats=Stats(), pool=SimpleNamespace(stats=lambda: pool) if pool else None)


def pool(in_use: int, cap: int = 1000, acquired: int = 0) -> dict:
    return {"source": "heap", "requested_bytes": cap, "capacity_bytes": cap, "clamped_by": [], "in_use_bytes": in_use,
            "high_water_bytes": in_use, "buffers_in_use": 1 if in_use else 0, "waits_total": 0, "waiting": 0,
            "exhaustions_total": 0, "misuse_total": 0,
            "classes": [{"size_bytes": 256, "slabs": 1, "slots": 4, "in_use": 1, "acquired_total": acquired}],
            "large": {"in_use": 0, "bytes": 0, "acquired_total": 0}}


def test_peers_are_the_other_live_workers_with_fresh_files(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    eng_a, eng_b = engine(pool(100)), engine(pool(50))
    eng_b.stats.record("ed25519", "cpu", 8, 8, 0.01)
    a = WorkerExchange(tmp_path, eng_a, pid=os.getpid())
    b = WorkerExchange(tmp_path, eng_b, pid=os.getppid())  # a process that is alive
    a.publish()
    b.publish()
    (tmp_path / f"{dead.pid}.json").write_text(json.dumps({"pid": dead.pid, "time": time.time(), "stats": {}}))
    (tmp_path / "garbage.json").write_text("{")
    peers = a.peers()
    assert [p["pid"] for p in peers] == [os.getppid()] and peers[0]["pool"]["in_use_bytes"] == 50
    eng_a.stats.set_peers(a.peer_stats)
    snap = eng_a.stats.snapshot()
    assert snap["workers"] == 2 and snap["schemes"]["ed25519"]["items"] == 8
    stale = json.loads((tmp_path / f"{os.getppid()}.json").read_text())
    stale["time"] -= workers.STALE_SECONDS + 1
    (tmp_path / f"{os.getppid()}.json").write_text(json.dumps(stale))
    assert a.peers() == []
    a.withdraw()
    assert not (tmp_path / f"{os.getpid()}.json").exists()


def test_pools_of_several_workers_add_up():
    merged = merge_pools([pool(100, acquired=3), None, pool(50, acquired=4)])
    assert merged["workers"] == 2 and merged["capacity_bytes"] == 2000 and merged["in_use_bytes"] == 150
    assert merged["classes"] == [{"size_bytes": 256, "slabs": 2, "slots": 8, "in_use": 2, "acquired_total": 7}]
    assert merge_pools([None, None]) is None
    assert merge_pools([pool(5)])["workers"] == 1


def test_clear_removes_an_earlier_servers_files(tmp_path):
    d = workers.exchange_dir(str(tmp_path))
    WorkerExchange(d, engine()).publish()
    workers.clear(str(tmp_path))
    assert not d.exists() and workers.exchange_dir(None) is None
