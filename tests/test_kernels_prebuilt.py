"""Kernels compiled ahead of time (app/engine/device/prebuilt.py): a second start compiles nothing."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from app import cli
from app.core.errors import KernelBuildError
from app.engine.device import nvrtc, prebuilt, registry
from app.engine.device.registry import KernelSource

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
    (shipped / prebuilt.fatbin_file(prebuilt.key(TOY, 13))).write_bytes(b"fatbin")
    monkeypatch.setenv("ZAPVERIFY_KERNEL_PREBUILT", str(shipped))
    monkeypatch.setattr(prebuilt.subprocess, "run", lambda *a, **k: pytest.fail("compiled"))
    cp = RecordingCupy(13020)
    _, origin = prebuilt.load_module(cp, TOY)
    name = prebuilt.fatbin_file(prebuilt.key(TOY, 13))
    assert cp.loads == [{"path": str(shipped / name)}]
    assert origin == f"prebuilt:{name}"
    # one that must not compile loads it just the same
    assert prebuilt.load_module(RecordingCupy(13020), TOY, compile=False)[1] == origin


def test_another_cuda_major_or_a_changed_source_is_another_key(tmp_path):
    assert prebuilt.key(TOY, 12) != prebuilt.key(TOY, 13)
    for f in TOY.directory.glob("*.cu*"):
        (tmp_path / f.name).write_bytes(f.read_bytes())
    copy = tmp_path / "toy.cu"
    assert prebuilt.key(KernelSource("toy", tmp_path), 13) == prebuilt.key(TOY, 13)
    copy.write_text(TOY.path.read_text() + "\n// edited\n")
    assert prebuilt.key(KernelSource("toy", tmp_path), 13) != prebuilt.key(TOY, 13)


NVRTC_LOAD = {"code": prebuilt.source_text(TOY), "options": prebuilt.nvrtc_options(TOY)}


def test_without_nvcc_nvrtc_compiles_into_a_persistent_cache(cache, monkeypatch):
    monkeypatch.setattr(prebuilt, "nvcc", lambda: None)
    cp = RecordingCupy(13000)
    assert prebuilt.load_module(cp, TOY)[1] == "nvrtc"
    assert cp.loads == [NVRTC_LOAD]
    assert os.environ["CUPY_CACHE_DIR"] == str(cache / "cache" / "nvrtc")


def test_a_load_that_must_not_compile_says_what_is_missing(cache, monkeypatch):
    """gpu_check on a lent GPU: no module of this digest -> an error naming the key, and
    neither nvcc nor NVRTC is started."""
    monkeypatch.setattr(prebuilt.subprocess, "run", lambda *a, **k: pytest.fail("ran nvcc"))
    cp = RecordingCupy(13000)
    with pytest.raises(KernelBuildError, match=prebuilt.key(TOY, 13)):
        prebuilt.load_module(cp, TOY, (9, 0), compile=False)
    assert cp.loads == []


def _fake_nvcc(monkeypatch, run):
    monkeypatch.setattr(prebuilt, "nvcc", lambda: "nvcc")
    monkeypatch.setattr(prebuilt, "nvcc_major", lambda c: 13)
    monkeypatch.setattr(prebuilt.subprocess, "run", run)


def test_a_failing_nvcc_falls_back_to_nvrtc(cache, monkeypatch):
    _fake_nvcc(monkeypatch, lambda cmd, **k: SimpleNamespace(returncode=1, stderr="error: ptxas died\n", stdout=""))
    cp = RecordingCupy(13000)
    _, origin = prebuilt.load_module(cp, TOY)
    assert cp.loads == [NVRTC_LOAD]
    assert origin.startswith("nvrtc (nvcc failed: nvcc failed on toy.cu")


def test_an_nvcc_past_its_timeout_falls_back_to_nvrtc(cache, monkeypatch):
    seen = {}

    def run(cmd, **kw):
        seen["timeout"] = kw.get("timeout")
        raise subprocess.TimeoutExpired(cmd, kw.get("timeout"))

    _fake_nvcc(monkeypatch, run)
    cp = RecordingCupy(13000)
    _, origin = prebuilt.load_module(cp, TOY)
    assert seen["timeout"] == prebuilt.NVCC_TIMEOUT
    assert cp.loads == [NVRTC_LOAD] and "ran past" in origin


def test_a_register_cap_variant_is_its_own_module_with_its_own_options(cache, monkeypatch):
    """A variant's key differs from the shipped build's, and its options reach nvcc and
    NVRTC; the table gives every capped unit its caps other than the shipped one."""
    capped = KernelSource("toy", TOY.directory, ("-DZV_TOY_MAX_REGISTERS=128",), "regs128")
    assert prebuilt.key(capped, 13) != prebuilt.key(TOY, 13) and ".regs128-" in prebuilt.key(capped, 13)
    assert prebuilt.nvrtc_options(capped)[-1] == "-DZV_TOY_MAX_REGISTERS=128"
    cmds = []

    def run(cmd, **kw):
        cmds.append(cmd)
        Path(cmd[cmd.index("-o") + 1]).write_bytes(b"fatbin")
        return SimpleNamespace(returncode=0, stderr="", stdout="")

    _fake_nvcc(monkeypatch, run)
    _, origin = prebuilt.load_module(RecordingCupy(13000), capped)
    assert "-DZV_TOY_MAX_REGISTERS=128" in cmds[0] and origin.startswith("nvcc:toy.regs128-")
    ed = registry.VERIFY_KERNELS["ed25519"].source
    assert [(v.variant, v.options) for v in registry.cap_variants(ed)] == [
        ("regs0", ("-DZV_ED25519_MAX_REGISTERS=0",)), ("regs128", ("-DZV_ED25519_MAX_REGISTERS=128",))]
    bls = registry.VERIFY_KERNELS["bls12-381"].source
    assert [(v.variant, v.options) for v in registry.cap_variants(bls)] == [("regs128", ("--maxrregcount=128",))]
    assert registry.cap_variants(registry.HASH) == []


@pytest.mark.skipif(prebuilt.nvcc() is None, reason="no nvcc")
def test_nvcc_builds_once_then_every_start_loads_the_fatbin(cache, monkeypatch):
    major = prebuilt.nvcc_major(prebuilt.nvcc())
    first = RecordingCupy(major * 1000)
    assert prebuilt.load_module(first, TOY)[1].startswith("nvcc:")
    built = Path(first.loads[0]["path"])
    assert built.parent == cache / "cache" / "fatbin" and built.stat().st_size > 0
    assert b"sm_90" in built.read_bytes() or built.read_bytes()[:4] == b"\x50\xed\x55\xba"  # fatbin magic
    monkeypatch.setattr(prebuilt.subprocess, "run", lambda *a, **k: pytest.fail("compiled on the second start"))
    monkeypatch.setattr(prebuilt, "nvcc_major", lambda c: major)
    second = RecordingCupy(major * 1000)
    assert prebuilt.load_module(second, TOY)[1].startswith("cache:")
    assert second.loads == first.loads


def test_build_kernels_without_nvcc_or_nvrtc_says_so(monkeypatch, capsys):
    monkeypatch.setattr(prebuilt, "nvcc", lambda: None)
    monkeypatch.setattr(nvrtc, "available", lambda: False)
    assert cli.main(["build-kernels"]) == 2
    assert "NVRTC" in capsys.readouterr().err


def _elf_arch(cubin: bytes) -> int:
    """The SM version a CUDA ELF was built for (e_machine EM_CUDA, arch in e_flags bits 8-15)."""
    assert cubin[:4] == b"\x7fELF" and struct.unpack_from("<H", cubin, 18)[0] == 190
    return (struct.unpack_from("<I", cubin, 48)[0] >> 8) & 0xFF


@pytest.mark.skipif(not nvrtc.available(), reason="no libnvrtc (the test extra installs NVIDIA's wheel)")
def test_build_kernels_with_nvrtc_ships_cubins_and_ptx_that_later_starts_load(cache, monkeypatch, capsys):
    """The CUDA image's path: no nvcc, NVRTC compiles SASS for sm_80 and sm_90 and PTX for
    newer GPUs; a start on each GPU generation then loads the right file and compiles nothing."""
    shipped = cache / "shipped"
    monkeypatch.setattr(prebuilt, "nvcc", lambda: None)
    monkeypatch.setattr(registry, "service_sources", lambda: [TOY])
    assert cli.main(["build-kernels", "--out", str(shipped)]) == 0
    assert "toy.cu -> " in capsys.readouterr().out
    major = nvrtc.version()[0]
    stem = prebuilt.key(TOY, major)
    assert sorted(p.name for p in shipped.iterdir()) == sorted(
        [f"{stem}.sm_80.cubin", f"{stem}.sm_90.cubin", f"{stem}.compute_90.ptx"])
    # built by root in an image, loaded by the service's own user
    assert all(p.stat().st_mode & 0o777 == 0o644 for p in shipped.iterdir())
    assert _elf_arch((shipped / f"{stem}.sm_80.cubin").read_bytes()) == 80
    assert _elf_arch((shipped / f"{stem}.sm_90.cubin").read_bytes()) == 90
    ptx = (shipped / f"{stem}.compute_90.ptx").read_text()
    assert ".target sm_90" in ptx and ".entry zv_verify_toy" in ptx

    monkeypatch.setenv("ZAPVERIFY_KERNEL_PREBUILT", str(shipped))
    monkeypatch.setattr(nvrtc, "compile_program", lambda *a, **k: pytest.fail("compiled at start"))
    for cc, name in [((9, 0), f"{stem}.sm_90.cubin"), ((8, 0), f"{stem}.sm_80.cubin"),
                     ((8, 9), f"{stem}.sm_80.cubin"), ((10, 0), f"{stem}.compute_90.ptx"),
                     ((12, 0), f"{stem}.compute_90.ptx")]:
        cp = RecordingCupy(major * 1000)
        prebuilt.load_module(cp, TOY, cc)
        assert cp.loads == [{"path": str(shipped / name)}], cc
    # Older than every shipped arch: CuPy's NVRTC compiles for it (and caches it).
    cp = RecordingCupy(major * 1000)
    prebuilt.load_module(cp, TOY, (7, 5))
    assert cp.loads == [NVRTC_LOAD]
    # Another CUDA major never loads these.
    cp = RecordingCupy((major + 1) * 1000)
    prebuilt.load_module(cp, TOY, (9, 0))
    assert "code" in cp.loads[0]


@pytest.mark.skipif(not nvrtc.available(), reason="no libnvrtc (the test extra installs NVIDIA's wheel)")
def test_kernels_built_for_other_archs_are_found_for_the_gpus_they_serve(cache, monkeypatch):
    """`build-kernels --arch 90`: an H100/H200 start loads its cubin, a newer GPU the PTX,
    an A100 (no SASS of its family, PTX too new for it) compiles with NVRTC."""
    shipped = cache / "shipped"
    monkeypatch.setattr(prebuilt, "nvcc", lambda: None)
    monkeypatch.setattr(registry, "service_sources", lambda: [TOY])
    assert cli.main(["build-kernels", "--out", str(shipped), "--arch", "90"]) == 0
    monkeypatch.setenv("ZAPVERIFY_KERNEL_PREBUILT", str(shipped))
    stem = prebuilt.key(TOY, nvrtc.version()[0])
    assert prebuilt.find(TOY, nvrtc.version()[0], cc=(9, 0)) == shipped / f"{stem}.sm_90.cubin"
    assert prebuilt.find(TOY, nvrtc.version()[0], cc=(10, 0)) == shipped / f"{stem}.compute_90.ptx"
    assert prebuilt.find(TOY, nvrtc.version()[0], cc=(8, 0)) is None


def test_pick_prefers_a_fatbin_then_the_family_cubin_then_ptx(tmp_path):
    stem = "toy-0123-cuda13"
    names = [f"{stem}.sm_80.cubin", f"{stem}.sm_86.cubin", f"{stem}.sm_90.cubin", f"{stem}.compute_90.ptx",
             f"{stem}.compute_80.ptx"]
    paths = [tmp_path / n for n in names]
    assert prebuilt.pick(paths, stem, (8, 9)) == tmp_path / f"{stem}.sm_86.cubin"
    assert prebuilt.pick(paths, stem, (8, 0)) == tmp_path / f"{stem}.sm_80.cubin"
    assert prebuilt.pick(paths, stem, (12, 0)) == tmp_path / f"{stem}.compute_90.ptx"
    assert prebuilt.pick(paths, stem, (7, 5)) is None
    fat = tmp_path / f"{stem}-sm80_90.fatbin"
    assert prebuilt.pick([*paths, fat], stem, (9, 0)) == fat
    assert prebuilt.pick([fat], stem, None) == fat and prebuilt.pick(paths, stem, None) is None
    assert prebuilt.pick([tmp_path / f"{stem}-sm90.fatbin"], stem, (8, 6)) is None  # its PTX is too new


def test_a_nvrtc_error_names_the_source_and_target(tmp_path):
    if not nvrtc.available():
        pytest.skip("no libnvrtc")
    with pytest.raises(nvrtc.NvrtcError, match=r"bad\.cu for sm_90"):
        nvrtc.compile_program("this is not C++", "bad.cu", ("-std=c++17",), "sm_90")


def test_a_second_process_start_runs_no_compiler(tmp_path):
    """The host build's cache, across processes: the second start loads the library the
    first one built (a compiler wrapper counts its calls)."""
    log = tmp_path / "calls"
    wrapper = tmp_path / "cxx"
    wrapper.write_text(f"#!/bin/sh\necho x >> {log}\nexec g++ \"$@\"\n")
    wrapper.chmod(0o755)
    env = {**os.environ, "CXX": str(wrapper), "ZAPVERIFY_KERNEL_CACHE": str(tmp_path / "cache")}
    script = textwrap.dedent("""
        from app.engine.device import hostbuild
        hostbuild.load("hash")
    """)
    for _ in range(2):
        subprocess.run([sys.executable, "-c", script], env=env, check=True, cwd=Path(__file__).resolve().parents[1])
    assert log.read_text().count("x") == 1
