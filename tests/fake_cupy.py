"""A stand-in for the slice of CuPy that app/engine/device/cudadev.py uses, for hosts with no GPU.

``RawModule`` builds the very source text the CUDA device hands NVRTC — with the include
paths from its options — using the host build (g++), and its kernels run through ctypes;
"device" arrays are numpy buffers.  So the CUDA backend's own code (compilation, transfers,
launch shapes, error handling) runs for real, with real kernel results.  Faults can be
injected per entry point:

- ``fail_launch``: the launch itself is refused (as the driver refuses a bad launch);
- ``fail_async``: the launch is accepted but the next synchronisation reports an error
  (as an illegal address does);
- ``corrupt``: the kernel runs and its output buffer (last buffer argument) is damaged;
- ``max_threads``: the largest block an entry point launches with (as registers limit it).

Streams and events are recorded, not simulated: work runs at once, in the order it is
queued, and ``ops`` lists every copy and launch with the stream it was queued on
(``("h2d" | "d2h" | "launch", what, stream id)``) and every time the host waits
(``("sync", "stream", id)``, ``("host-wait", "get" | "event", id)``); ``syncs`` lists every
host wait and ``waits`` every (stream, stream of the awaited event) — enough to check which
work may overlap on a GPU.  ``num_regs`` sets the registers a kernel reports.

Copies back to the host follow CuPy 14's ``ndarray.get(stream, order, out, blocking=True)``:
a blocking get is a host wait on its stream, then the bytes are there.  A non-blocking get
(``blocking=False``) needs a page-locked ``out`` (into pageable memory a copy is not
asynchronous) and models a stream that has not finished yet: ``out`` holds :data:`POISON`
until the host synchronises that stream, or an event recorded on it after the copy, so code
that reads a result before waiting for it sees garbage.  (A stream's sync does not land the
copies of streams it waited for on the GPU: stricter than CUDA, never laxer.)

Like NVRTC, it refuses sources that include a system header (``#include <...>``).
"""

from __future__ import annotations

import ctypes
import re
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from app.engine.device import hostbuild
from app.engine.device.hostlib import c_arg

#: The byte a non-blocking copy back leaves in its destination until its stream is synchronised.
POISON = 0xA5


class CUDADriverError(RuntimeError):
    pass


class CompileException(RuntimeError):
    pass


class FakeArray:
    """A "device" array: a flat uint8 numpy buffer (or a view of host memory for aliases)."""

    def __init__(self, fake: FakeCupy, data: np.ndarray, alias_of=None):
        self.fake, self.data, self.alias_of = fake, data, alias_of

    @property
    def nbytes(self) -> int:
        return self.data.nbytes

    def __getitem__(self, sl) -> FakeArray:
        return FakeArray(self.fake, self.data[sl], self.alias_of)

    def set(self, arr, stream=None) -> None:
        src = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
        self.fake.transfers.append(("h2d", src.nbytes, self.fake.is_pinned(src.ctypes.data)))
        self.fake.ops.append(("h2d", src.nbytes, self.fake.stream_id(stream)))
        self.data[:src.nbytes] = src

    def get(self, stream=None, order="C", out=None, blocking=True):
        fake, sid = self.fake, self.fake.stream_id(stream)
        pinned = out is not None and fake.is_pinned(out.ctypes.data, out.nbytes)
        fake.transfers.append(("d2h", self.data.nbytes, pinned))
        fake.ops.append(("d2h", self.data.nbytes, sid))
        dst = None if out is None else out.reshape(-1).view(np.uint8)
        if blocking:  # CuPy queues the copy, then synchronises the stream on the host
            fake.host_wait("get", sid)
            if dst is None:
                return self.data.copy()
            dst[:] = self.data
            return out
        if not pinned:
            raise ValueError("a non-blocking copy back needs a page-locked out array")
        fake.queue_copy_back(sid, dst, self.data)
        return out


class FakeKernel:
    def __init__(self, fake: FakeCupy, name: str, fn):
        self.fake, self.name, self.fn = fake, name, fn
        self.num_regs, self.local_size_bytes, self.shared_size_bytes = fake.num_regs.get(name, 0), 0, 0
        self.max_threads_per_block = fake.max_threads.get(name, 1024)

    def __call__(self, grid, block, args, *, shared_mem=0):
        assert isinstance(grid, tuple) and isinstance(block, tuple), "grid and block are tuples"
        assert all(isinstance(g, int) and g >= 1 for g in grid) and 1 <= block[0] <= 1024
        self.fake.launches.append((self.name, grid, block, args))
        self.fake.ops.append(("launch", self.name, self.fake.stream_id(None)))
        if block[0] > self.max_threads_per_block:
            raise CUDADriverError(f"CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: {self.name} with {block[0]} threads")
        if self.name in self.fake.fail_launch:
            raise CUDADriverError(f"CUDA_ERROR_LAUNCH_FAILED: {self.name}")
        c_args = []
        for a in args:
            if isinstance(a, FakeArray):
                c_args.append(ctypes.c_void_p(a.data.ctypes.data))
            elif isinstance(a, np.generic):
                c_args.append(c_arg(a))
            else:  # CuPy would guess a width for a Python int; the backend must never rely on it
                raise TypeError(f"kernel argument {a!r} is not a device array or numpy scalar")
        self.fn(*c_args)
        if self.name in self.fake.corrupt:
            out = [a for a in args if isinstance(a, FakeArray)][-1]
            out.data[0] ^= 0x01
        if self.name in self.fake.fail_async:
            self.fake.pending = CUDADriverError(f"CUDA_ERROR_ILLEGAL_ADDRESS after {self.name}")


class FakeCupy:
    """The fake ``cupy`` module object (one per test; faults and records are per instance)."""

    def __init__(self):
        self.fail_launch: set[str] = set()
        self.fail_async: set[str] = set()
        self.corrupt: set[str] = set()
        self.max_threads: dict[str, int] = {}
        self.num_regs: dict[str, int] = {}
        self.launches: list[tuple] = []
        self.ops: list[tuple] = []
        self.syncs: list[tuple] = []
        self.waits: list[tuple[int, int]] = []
        self._stream_stack: list = []
        self._stream_ids = 0
        self.transfers: list[tuple] = []
        self.modules: list[str] = []
        self.pending: Exception | None = None
        self._pinned: list[np.ndarray] = []  # kept alive: addresses are never reused
        # non-blocking copies back not landed yet: (stream id, number, destination, bytes)
        self.copies_in_flight: list[tuple[int, int, np.ndarray, np.ndarray]] = []
        self._copy_seq = 0
        fake = self

        class Stream:
            def __init__(self, non_blocking=False):
                self.non_blocking = non_blocking
                fake._stream_ids += 1
                self.id = fake._stream_ids

            def __enter__(self):
                fake._stream_stack.append(self)
                return self

            def __exit__(self, *exc):
                fake._stream_stack.pop()
                return False

            def synchronize(self):
                fake.syncs.append(("stream", self.id))
                fake.ops.append(("sync", "stream", self.id))
                fake.land_copies_back(self.id)
                fake.check_pending()

            def wait_event(self, event):
                fake.waits.append((self.id, event.stream_id))

        class Event:
            stream_id = 0
            seq = 0  # copies back queued before the record: those with a smaller number

            def record(self, stream=None):
                self.t = time.perf_counter()
                self.stream_id = fake.stream_id(stream)
                self.seq = fake._copy_seq

            def synchronize(self):
                fake.host_wait("event", self.stream_id, before=self.seq)

        class Device:
            def __init__(self, device_id=0):
                self.id = device_id

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

        class UnownedMemory:
            def __init__(self, ptr, size, owner, device_id=None):
                self.ptr, self.size, self.owner = ptr, size, owner

        class MemoryPointer:
            def __init__(self, mem, offset):
                self.mem, self.offset = mem, offset

        runtime = SimpleNamespace(
            getDeviceCount=lambda: 1,
            # CUDA "0.0": no nvcc or fatbin matches it, so modules always come from the
            # NVRTC stand-in below (prebuilt.load_module's last resort).
            runtimeGetVersion=lambda: 0,
            getDeviceProperties=lambda i: {"name": b"fake GPU (host build)", "major": 9, "minor": 0,
                                           "multiProcessorCount": 4, "totalGlobalMem": 1 << 30},
            pointerGetAttributes=lambda ptr: SimpleNamespace(type=1 if fake.is_pinned(ptr) else 0,
                                                             devicePointer=ptr if fake.is_pinned(ptr) else 0,
                                                             hostPointer=ptr, device=0),
        )
        self.cuda = SimpleNamespace(
            Stream=Stream, Event=Event, Device=Device, UnownedMemory=UnownedMemory, MemoryPointer=MemoryPointer,
            runtime=runtime, alloc_pinned_memory=self._alloc_pinned,
            get_elapsed_time=lambda a, b: (b.t - a.t) * 1000.0,
        )

    # ------------------------------------------------------------------ memory
    def _alloc_pinned(self, nbytes: int) -> np.ndarray:
        buf = np.empty(nbytes, dtype=np.uint8)
        self._pinned.append(buf)
        return buf

    def is_pinned(self, ptr: int, nbytes: int = 1) -> bool:
        """Whether the ``nbytes`` at ``ptr`` lie in one page-locked allocation."""
        return any(b.ctypes.data <= ptr and ptr + max(1, nbytes) <= b.ctypes.data + b.nbytes for b in self._pinned)

    # ------------------------------------------------------------------ copies back, host waits
    def queue_copy_back(self, sid: int, dst: np.ndarray, data: np.ndarray) -> None:
        """A non-blocking copy of device ``data`` into ``dst`` on stream ``sid``: the bytes
        are taken now (work runs in queue order), ``dst`` is poisoned until the stream is
        synchronised."""
        self.copies_in_flight.append((sid, self._copy_seq, dst, data.copy()))
        self._copy_seq += 1
        dst[:] = POISON

    def land_copies_back(self, sid: int, before: int | None = None) -> None:
        """The copies back of stream ``sid`` (those numbered below ``before``) are complete."""
        keep = []
        for c in self.copies_in_flight:
            if c[0] == sid and (before is None or c[1] < before):
                c[2][:] = c[3]
            else:
                keep.append(c)
        self.copies_in_flight = keep

    def host_wait(self, what: str, sid: int, before: int | None = None) -> None:
        """The host waits for stream ``sid`` (up to an event when ``before`` is set)."""
        self.syncs.append((what, sid))
        self.ops.append(("host-wait", what, sid))
        self.land_copies_back(sid, before)
        self.check_pending()

    def empty(self, shape, dtype=np.uint8) -> FakeArray:
        assert np.dtype(dtype) == np.uint8
        return FakeArray(self, np.empty(shape, dtype=np.uint8))

    def ndarray(self, shape, dtype=np.uint8, memptr=None) -> FakeArray:
        mem = memptr.mem
        raw = (ctypes.c_uint8 * mem.size).from_address(mem.ptr + memptr.offset)
        return FakeArray(self, np.ctypeslib.as_array(raw), alias_of=mem.owner)

    def stream_id(self, stream=None) -> int:
        """The id of ``stream``, else of the innermost ``with stream:`` (0: the null stream)."""
        if stream is None and self._stream_stack:
            stream = self._stream_stack[-1]
        return getattr(stream, "id", 0)

    def check_pending(self) -> None:
        if self.pending is not None:
            err, self.pending = self.pending, None
            raise err

    # ------------------------------------------------------------------ compilation
    def RawModule(self, code: str, options=()):  # noqa: N802 (CuPy's name)
        dirs = [Path(o.split("=", 1)[1]) for o in options if o.startswith("--include-path=")]
        _refuse_system_headers(code, dirs)
        try:
            lib = hostbuild.load_code(code, "nvrtc_stand_in", dirs)
        except hostbuild.HostBuildError as exc:
            raise CompileException(str(exc)) from exc
        self.modules.append(code.splitlines()[0])
        fake = self

        class Module:
            def get_function(self, name):
                try:
                    fn = getattr(lib, name)
                except AttributeError:
                    raise CUDADriverError(f"CUDA_ERROR_NOT_FOUND: named symbol not found: {name}") from None
                fn.restype = None
                return FakeKernel(fake, name, fn)

        return Module()


def _refuse_system_headers(code: str, dirs: list[Path]) -> None:
    seen: set[str] = set()
    todo = [code]
    while todo:
        text = todo.pop()
        if re.search(r"^\s*#\s*include\s*<", text, re.M):
            raise CompileException("NVRTC has no system headers: found #include <...>")
        for name in re.findall(r'^\s*#\s*include\s*"([^"]+)"', text, re.M):
            if name in seen:
                continue
            seen.add(name)
            path = next((d / name for d in dirs if (d / name).is_file()), None)
            if path is None:
                raise CompileException(f"cannot open source file {name!r} (include paths {dirs})")
            todo.append(path.read_text())
