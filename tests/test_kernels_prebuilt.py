"""Kernels compiled ahead of time (app/engine/kernels/prebuilt.py): a second start compiles nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from app import cli
from app.engine.kernels import prebuilt
from app.engine.kernels.registry import KernelSource

TOY = KernelSource("toy", Path(__file__).resolve().parent / "kernels")


class RecordingCupy:
    """Just enough of CuPy to see how a module was loaded."""

    def __init__(self, cuda_version: int):
        self.cuda = SimpleNamespace(runtime=SimpleNamespace(runtimeGetVersion=lambda: cuda_version))
        self.loads: list[dict] = []

    def RawModule(self, **kw):  # noqa: N802 (CuPy's name)
        self.loads.append(kw)
        return kw


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ZAPVERIFY_KERNEL_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("ZAPVERIFY_KERNEL_PREBUILT", raising=False)
    monkeypatch.delenv("CUPY_CACHE_DIR", raising=False)
    return tmp_path


def test_a_shipped_fatbin_is_loaded_and_nothing_compiled(cache, monkeypatch):
    shipped = cache / "shipped"
    shipped.mkdir()
    (shipped / (prebuilt.key(TOY, 13) + ".fatbin")).write_bytes(b"fatbin")
    monkeypatch.setenv("ZAPVERIFY_KERNEL_PREBUILT", str(shipped))
    monkeypatch.setattr(prebuilt.subprocess, "run", lambda *a, **k: pytest.fail("compiled"))
    cp = RecordingCupy(13020)
    prebuilt.load_module(cp, TOY, "code", ("-std=c++17",))
    assert cp.loads == [{"path": str(shipped / (prebuilt.key(TOY, 13) + ".fatbin"))}]


def test_another_cuda_major_or_a_changed_source_is_another_key(tmp_path):
    assert prebuilt.key(TOY, 12) != prebuilt.key(TOY, 13)
    for f in TOY.directory.glob("*.cu*"):
        (tmp_path / f.name).write_bytes(f.read_bytes())
    copy = tmp_path / "toy.cu"
    assert prebuilt.key(KernelSource("toy", tmp_path), 13) == prebuilt.key(TOY, 13)
    copy.write_text(TOY.path.read_text() + "\n// edited\n")
    assert prebuilt.key(KernelSource("toy", tmp_path), 13) != prebuilt.key(TOY, 13)


def test_without_nvcc_nvrtc_compiles_into_a_persistent_cache(cache, monkeypatch):
    monkeypatch.setattr(prebuilt, "nvcc", lambda: None)
    cp = RecordingCupy(13000)
    prebuilt.load_module(cp, TOY, "the code", ("-std=c++17",))
    assert cp.loads == [{"code": "the code", "options": ("-std=c++17",)}]
    assert os.environ["CUPY_CACHE_DIR"] == str(cache / "cache" / "nvrtc")


@pytest.mark.skipif(prebuilt.nvcc() is None, reason="no nvcc")
def test_nvcc_builds_once_then_every_start_loads_the_fatbin(cache, monkeypatch):
    major = prebuilt.nvcc_major(prebuilt.nvcc())
    first = RecordingCupy(major * 1000)
    prebuilt.load_module(first, TOY, "code", ())
    built = Path(first.loads[0]["path"])
    assert built.parent == cache / "cache" / "fatbin" and built.stat().st_size > 0
    assert b"sm_90" in built.read_bytes() or built.read_bytes()[:4] == b"\x50\xed\x55\xba"  # fatbin magic
    monkeypatch.setattr(prebuilt.subprocess, "run", lambda *a, **k: pytest.fail("compiled on the second start"))
    monkeypatch.setattr(prebuilt, "nvcc_major", lambda c: major)
    second = RecordingCupy(major * 1000)
    prebuilt.load_module(second, TOY, "code", ())
    assert second.loads == first.loads


def test_build_kernels_without_nvcc_says_so(monkeypatch, capsys):
    monkeypatch.setattr(prebuilt, "nvcc", lambda: None)
    assert cli.main(["build-kernels"]) == 2
    assert "NVRTC" in capsys.readouterr().err


def test_a_second_process_start_runs_no_compiler(tmp_path):
    """The host build's cache, across processes: the second start loads the library the
    first one built (a compiler wrapper counts its calls)."""
    log = tmp_path / "calls"
    wrapper = tmp_path / "cxx"
    wrapper.write_text(f"#!/bin/sh\necho x >> {log}\nexec g++ \"$@\"\n")
    wrapper.chmod(0o755)
    env = {**os.environ, "CXX": str(wrapper), "ZAPVERIFY_KERNEL_CACHE": str(tmp_path / "cache")}
    script = textwrap.dedent("""
        from app.engine.kernels import hostbuild
        hostbuild.load("hash")
    """)
    for _ in range(2):
        subprocess.run([sys.executable, "-c", script], env=env, check=True, cwd=Path(__file__).resolve().parents[1])
    assert log.read_text().count("x") == 1
