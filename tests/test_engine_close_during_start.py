"""An engine closed while its start-up self-test runs (issue 39: "once it logged a spurious
'self-test of secp256k1 failed'").  The app runs the self-test in a thread; a server stopped
during it, or one whose port was taken (uvicorn runs the life span's start, fails to bind,
then runs its end), closed the backends under the running checks, which then failed with
"RuntimeError: cannot schedule new futures after shutdown" and were logged as failed
self-tests (and a CPU reference failure), or went on to start new worker pools after the close.
Now the start-up stops at its next step, quietly, not ready."""

from __future__ import annotations

import logging
import multiprocessing
import threading

from fastapi.testclient import TestClient

from app.config import Settings
from app.engine.runtime import Runtime
from app.engine.verify import selftest
from app.engine.verify.engine import Engine, EngineConfig
from app.main import create_app


def test_a_check_failed_by_the_close_is_no_failed_self_test(monkeypatch, caplog):
    eng = Engine(EngineConfig(backend="cpu"))
    real, seen = selftest.check_scheme, []

    def check(backend, kas):
        seen.append(kas[0].item.scheme)
        if len(seen) < 2:
            return real(backend, kas)
        eng.close()  # the server stops while the second scheme's check runs: it fails as it did
        return False, "RuntimeError: cannot schedule new futures after shutdown"

    monkeypatch.setattr(selftest, "check_scheme", check)
    with caplog.at_level(logging.INFO, logger="zapverify.engine"):
        eng.start()
    assert len(seen) == 2  # no scheme checked after the close
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    assert "start-up abandoned" in caplog.text
    assert not eng.ready
    assert all(False not in r.selftest.values() and not r.failures for r in eng.routes.values())
    eng.start()  # a closed engine does not start
    assert len(seen) == 2 and not eng.ready


def test_an_app_closed_during_its_start_up_self_test_logs_no_failure_and_leaves_no_workers(caplog):
    before = {p.pid for p in multiprocessing.active_children()}
    eng = Engine(EngineConfig(backend="cpu"))
    with caplog.at_level(logging.INFO, logger="zapverify.engine"):
        with TestClient(create_app(Settings(receipts=False), runtime=Runtime(eng))):
            pass  # closed at once: the start-up thread is warming up or checking
        for t in [t for t in threading.enumerate() if t.name == "zv-engine-start"]:
            t.join(60)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    assert not eng.ready
    # No worker pool started after the close (it would outlive the app: nothing closes it).
    assert {p.pid for p in multiprocessing.active_children()} <= before
