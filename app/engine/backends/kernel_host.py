"""The ``kernel-host`` backend: the GPU kernel sources, built by g++, run on the CPU.

Slow (one thread, portable C), but it runs exactly the code the GPU runs, so
``zapverify check-vectors --backend kernel-host`` and the tests check kernel logic against
the reference libraries on machines without a GPU.  Needs a C++ compiler (``$CXX``, g++).
"""

from __future__ import annotations

from app.engine.backends.kernel import KernelBackend
from app.engine.device import hostbuild
from app.engine.device.hostlib import HostDevice


class KernelHostBackend(KernelBackend):
    """Kernel sources on the host (see module doc); ``name`` is ``"kernel-host"``."""

    name = "kernel-host"

    def _make_device(self) -> HostDevice:
        if hostbuild.compiler() is None:
            raise RuntimeError("no C++ compiler (set CXX or install g++)")
        return HostDevice()
