"""Stats: counters, the per-second window, ingest frames, recent requests, listeners and
the merge of several workers' exports."""

from __future__ import annotations

from dataclasses import replace

from app.engine.stats import RecentRequest, Stats


class Clock:
    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


class Recorder:
    def __init__(self):
        self.batches, self.frames = [], []

    def batch(self, *args):
        self.batches.append(args)

    def frame(self, *args):
        self.frames.append(args)


def request(batch_id: str, t: float, count: int = 4) -> RecentRequest:
    return RecentRequest(batch_id=batch_id, time=t, count=count, valid=count - 1, schemes={"ed25519": count},
                         backends={"ed25519": "cpu"}, elapsed_ms=1.5, source="http", receipt=f"/v1/receipts/{batch_id}")


def test_counters_rate_and_series():
    clock = Clock()
    st = Stats(window=60, clock=clock)
    st.record("ed25519", "cpu", 10, 7, 0.01)
    clock.t += 2
    st.record("ed25519", "cpu", 5, 5, 0.01)
    st.record("ed25519", "cuda", 5, 0, 0.01)
    clock.t += 1
    snap = st.snapshot(rate_seconds=10)["schemes"]["ed25519"]
    assert (snap["items"], snap["valid"], snap["invalid"], snap["batches"]) == (20, 12, 8, 3)
    assert snap["backends"] == {"cpu": 15, "cuda": 5}
    assert snap["series"] == [[3, 10], [1, 10]]  # [seconds ago, items]
    assert snap["rate_per_second"] == 20 / 3  # uptime (3 s) is shorter than the 10 s window
    clock.t += 100  # everything has left the 60 s window
    assert st.snapshot()["schemes"]["ed25519"]["series"] == []


def test_ingest_frames_and_recent_requests():
    st = Stats(recent=3, clock=Clock())
    for outcome in ("accepted", "accepted", "bad_magic"):
        st.record_frame("tcp", outcome)
    st.record_frame("udp", "too_large")
    for i in range(5):
        st.record_request(request(f"b{i}", 100.0 + i))
    snap = st.snapshot()
    assert snap["ingest"] == {"tcp": {"accepted": 2, "bad_magic": 1}, "udp": {"too_large": 1}}
    assert [r["batch_id"] for r in snap["recent"]] == ["b4", "b3", "b2"]  # newest first, at most 3
    assert snap["recent"][0]["receipt"] == "/v1/receipts/b4" and snap["workers"] == 1


def test_listeners_see_every_batch_and_frame_once():
    st = Stats(clock=Clock())
    rec = Recorder()
    st.add_listener(rec)
    st.add_listener(rec)  # a second subscription of the same listener is ignored
    st.record("bls12-381", "cpu", 3, 2, 0.5)
    st.record_frame("ws", "accepted")
    assert rec.batches == [("bls12-381", "cpu", 3, 2, 0.5)] and rec.frames == [("ws", "accepted")]
    st.remove_listener(rec)
    st.record("bls12-381", "cpu", 1, 1, 0.1)
    assert len(rec.batches) == 1


def test_a_failing_listener_does_not_fail_the_batch():
    class Broken:
        def batch(self, *a):
            raise RuntimeError("boom")

        def frame(self, *a):
            raise RuntimeError("boom")

    st = Stats(clock=Clock())
    st.add_listener(Broken())
    st.record("ed25519", "cpu", 1, 1, 0.0)
    st.record_frame("tcp", "accepted")
    assert st.snapshot()["schemes"]["ed25519"]["items"] == 1


def test_snapshot_adds_up_the_exports_of_other_workers():
    clock = Clock()
    me, other = Stats(window=60, clock=clock), Stats(window=60, clock=Clock(990.0))
    me.record("ed25519", "cpu", 4, 2, 0.1)
    me.record_request(request("mine", 200.0))
    other.record("ed25519", "cpu", 6, 6, 0.2)  # at second 990: 10 s before mine
    other.record("ml-dsa-44", "cpu", 2, 1, 0.3)
    other.record_frame("tcp", "accepted")
    other.record_request(request("theirs", 300.0))
    me.set_peers(lambda: [other.export()])
    snap = me.snapshot(rate_seconds=5)
    ed = snap["schemes"]["ed25519"]
    assert (ed["items"], ed["valid"], ed["batches"]) == (10, 8, 2)
    assert ed["series"] == [[10, 6], [0, 4]]
    assert ed["rate_per_second"] == 4 / 5  # the other worker's items are older than 5 s
    assert snap["schemes"]["ml-dsa-44"]["items"] == 2 and snap["ingest"] == {"tcp": {"accepted": 1}}
    assert [r["batch_id"] for r in snap["recent"]] == ["theirs", "mine"]
    assert snap["workers"] == 2 and snap["uptime_seconds"] == 10.0  # since the older worker started
    me.set_peers(lambda: (_ for _ in ()).throw(OSError("unreadable")))
    assert me.snapshot()["workers"] == 1  # a peer that cannot be read is left out


def test_latency_percentiles_of_the_last_requests_per_source_and_merged():
    clock = Clock()
    me, other = Stats(window=60, clock=clock, latency=100), Stats(window=60, clock=clock)
    for ms in range(1, 101):  # 1..100 ms over http
        me.record_request(replace(request(f"h{ms}", 100.0), elapsed_ms=float(ms)))
    other.record_request(replace(request("w", 100.0), elapsed_ms=7.0, source="ws"))
    me.set_peers(lambda: [other.export()])
    lat = me.snapshot()["latency"]
    assert lat["http"] == {"count": 100, "p50_ms": 50.0, "p99_ms": 99.0, "max_ms": 100.0}  # nearest rank
    assert lat["ws"] == {"count": 1, "p50_ms": 7.0, "p99_ms": 7.0, "max_ms": 7.0}
    assert lat["all"]["count"] == 101 and lat["all"]["max_ms"] == 100.0
    me.record_request(replace(request("slow", 100.0), elapsed_ms=5000.0))
    assert me.snapshot()["latency"]["http"]["count"] == 100  # the last 100 of this process only
    assert me.snapshot()["latency"]["http"]["max_ms"] == 5000.0
    clock.t += 61  # older than the window: gone
    me.set_peers(lambda: [{k: v for k, v in other.export().items() if k != "latency"}])  # an older peer: none
    assert me.snapshot()["latency"] == {}
