"""create_app's start-up: waiting for the database, and (for a load balancer without
active health checks) accepting connections only once the self-test passed."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

import app.engine.runtime as runtime_mod
from app.config import Settings
from app.core.errors import NotReady, StoreUnavailable
from app.engine.receipts.open import open_store
from app.engine.runtime import Runtime
from app.engine.verify.engine import Engine, EngineConfig
from app.main import create_app


def test_listen_when_ready_finishes_the_selftest_before_serving(tmp_path):
    eng = Engine(EngineConfig(backend="cpu", cpu_workers=1))
    assert not eng.ready
    with TestClient(create_app(Settings(data_dir=tmp_path, receipts=False, listen_when_ready=True),
                                    runtime=Runtime(eng))) as c:
        assert eng.ready  # start-up returned only after the self-test: uvicorn binds after start-up
        assert c.get("/readyz").status_code == 200


def test_listen_when_ready_refuses_to_start_when_the_selftest_fails(tmp_path, monkeypatch):
    eng = Engine(EngineConfig(backend="cpu", cpu_workers=1))
    monkeypatch.setattr(eng, "start", lambda: None)  # a self-test that leaves the engine not ready
    with pytest.raises(NotReady):
        with TestClient(create_app(Settings(data_dir=tmp_path, receipts=False, listen_when_ready=True),
                                    runtime=Runtime(eng))):
            pass


def test_start_up_waits_for_the_database(tmp_path, monkeypatch, engine):
    attempts = []

    def flaky(url, **kw):
        attempts.append(url)
        if len(attempts) < 2:
            raise StoreUnavailable("connection refused")
        return open_store(url, **kw)

    monkeypatch.setattr(runtime_mod, "open_store", flaky)
    settings = Settings(data_dir=tmp_path, database_wait_seconds=30)
    with TestClient(create_app(settings, runtime=Runtime(engine))) as c:
        assert c.get("/v1/receipts").status_code == 200
    assert len(attempts) == 2


def test_without_a_wait_an_unreachable_database_stops_the_start(tmp_path, monkeypatch, engine):
    def down(url, **kw):
        raise StoreUnavailable("connection refused")

    monkeypatch.setattr(runtime_mod, "open_store", down)
    with pytest.raises(StoreUnavailable):
        with TestClient(create_app(Settings(data_dir=tmp_path), runtime=Runtime(engine))):
            pass
