"""Shared fixtures: one started engine per session, the external vector folder, caches."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VECTORS = ROOT.parent / "shared" / "vectors"

# Generated known answers and host-built kernels are cached between runs (git-ignored).
os.environ.setdefault("ZAPVERIFY_KAT_CACHE", str(ROOT / ".cache" / "kat"))
os.environ.setdefault("ZAPVERIFY_KERNEL_CACHE", str(ROOT / ".cache" / "kernels"))
os.environ.setdefault("ZAPVERIFY_DATA_DIR", str(ROOT / ".cache" / "data"))

needs_vectors = pytest.mark.skipif(not VECTORS.is_dir(), reason="../shared/vectors is absent")


@pytest.fixture(scope="session")
def engine():
    from app.engine.dispatch import Engine, EngineConfig

    eng = Engine(EngineConfig(backend="cpu"))
    eng.start()
    assert eng.ready
    yield eng
    eng.close()


@pytest.fixture(scope="session")
def vectors_root() -> Path:
    if not VECTORS.is_dir():
        pytest.skip("../shared/vectors is absent")
    return VECTORS
