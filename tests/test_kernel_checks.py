"""The host build's bounds checks (ZV_CHECK in zv_port.cuh, on under ZAPVERIFY_KERNEL_VERIFY=1)."""

from __future__ import annotations

import ctypes

import pytest

from app.engine.device import hostbuild

pytestmark = pytest.mark.skipif(hostbuild.compiler() is None, reason="no C++ compiler")

SRC = r"""
#include "zv_port.cuh"
ZV_KERNEL void zv_check_below(zv_u32 v, zv_u32 bound) { ZV_CHECK(v < bound); }
"""


def test_failed_checks_are_counted_in_verify_builds(monkeypatch):
    monkeypatch.setenv("ZAPVERIFY_KERNEL_VERIFY", "1")
    lib = hostbuild.load_code(SRC, "check_on")
    lib.zv_check_below(ctypes.c_uint32(3), ctypes.c_uint32(4))
    assert hostbuild.verify_failures(lib) == 0
    lib.zv_check_below(ctypes.c_uint32(5), ctypes.c_uint32(4))
    assert hostbuild.verify_failures(lib) == 1


def test_checks_compile_to_nothing_otherwise(monkeypatch):
    monkeypatch.setenv("ZAPVERIFY_KERNEL_VERIFY", "0")
    lib = hostbuild.load_code(SRC, "check_off")
    lib.zv_check_below(ctypes.c_uint32(5), ctypes.c_uint32(4))
    assert hostbuild.verify_failures(lib) is None


def test_the_suite_runs_kernels_with_checks_on():
    assert hostbuild.verify_checks()
