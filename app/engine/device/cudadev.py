"""The CUDA device: the kernel sources compiled by NVRTC through ``cupy.RawModule``.

An :class:`app.engine.device.ops.Device` on one GPU.  Everything it queues goes on a
stream of its own, so batches never serialise behind other CuPy work in the process.

Modules are loaded lazily (the first time one of their entry points is asked for) from a
fatbin compiled ahead of time where one exists or nvcc can make one, else compiled by
NVRTC into a persistent cache (:mod:`app.engine.device.prebuilt`).  CuPy keys its NVRTC
cache on the source text and options only, not on included headers, so the text handed
to NVRTC starts with a digest of every kernel source: editing a header rebuilds every
module that might include it.

Transfers (docs/architecture.md, "Memory"), by ``transfer``:
  ``"copy"``       (default) the columns of a batch (keys, signatures, message offsets,
                   message bytes, context) are packed into one page-locked staging buffer,
                   each at a 256-byte boundary, and copied to device memory in one
                   asynchronous transfer (:meth:`CupyDevice.put_columns`); the kernels then
                   read device memory with vector-width loads.  Staging buffers are a ring of
                   two, reused once the copy out of them is complete (an event per buffer), so
                   packing batch k+1 overlaps the copy of batch k;
  ``"auto"``       a host array in page-locked memory (the UMA pool) is read by the kernels
                   in place through its device alias (zero-copy); any other array is staged
                   in page-locked memory and copied to the device asynchronously;
  ``"zero-copy"``  every array is read in place (pageable ones after staging).
Reading in place crosses PCIe on every load the kernels make (an Ed25519 verify reads its
key and R several times); a copy crosses it once per byte, so copy is the default and
zero-copy is kept for memory a batch cannot be copied out of fast enough.
``scripts/gpu_check`` times the modes side by side from pinned memory.

Errors: a failed compile raises :class:`app.core.errors.KernelBuildError`; a launch refused by
the driver, or an error of queued work seen at the next :meth:`CupyDevice.get` /
:meth:`CupyDevice.sync`, raises :class:`app.core.errors.KernelLaunchError` naming the entry
point.  The engine answers both by re-running the batch on the CPU.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
import time
from collections.abc import Iterator
from typing import Any, Literal

import numpy as np

from app.core.errors import BackendUnavailable, KernelBuildError, KernelLaunchError
from app.engine.device import prebuilt
from app.engine.device.registry import KernelSource

Transfer = Literal["auto", "zero-copy", "copy"]

#: cudaMemoryType values (CUDA runtime API) of memory a kernel may read in place.
_DEVICE_READABLE = {1, 2, 3}  # host (page-locked), device, managed
#: Blocks per multiprocessor a grid-stride launch asks for at most.
BLOCKS_PER_SM = 32
#: Alignment of each column in a staging buffer and on the device: keeps every column
#: 16-byte aligned for the kernels' vector loads (zv_load_item) and sector-aligned.
COLUMN_ALIGN = 256
#: Staging buffers in the ring (double buffering).
STAGING_BUFFERS = 2


def column_layout(sizes: list[int]) -> tuple[list[int], int]:
    """Offsets of columns of ``sizes`` bytes packed at :data:`COLUMN_ALIGN` boundaries, and
    the total bytes (at least one)."""
    offsets, pos = [], 0
    for n in sizes:
        offsets.append(pos)
        pos += -(-max(1, n) // COLUMN_ALIGN) * COLUMN_ALIGN
    return offsets, max(1, pos)


def import_cupy():
    """Import CuPy; raises :class:`BackendUnavailable` when it is missing or finds no GPU."""
    try:
        cp = importlib.import_module("cupy")
    except Exception as exc:  # ImportError, or a CUDA library that fails to load
        raise BackendUnavailable(f"CuPy cannot be imported: {exc}", field="backend") from exc
    try:
        count = cp.cuda.runtime.getDeviceCount()
    except Exception as exc:
        raise BackendUnavailable(f"no usable CUDA driver: {exc}", field="backend") from exc
    if count < 1:
        raise BackendUnavailable("no CUDA device", field="backend")
    return cp


class CupyDevice:
    """A :class:`app.engine.device.ops.Device` on CUDA GPU ``device_id``.

    Args:
        cupy: the CuPy module (tests pass a stand-in); imported when None.
        device_id: the GPU ordinal.
        transfer: see the module doc.
        compile: whether a module with no compiled file may be built here (nvcc or NVRTC);
            False (``scripts/gpu_check`` on a lent GPU) makes such a load a
            :class:`KernelBuildError`.

    :attr:`origins` says where each loaded module came from (:func:`prebuilt.load_module`).
    Not thread-safe: one caller at a time (the CUDA backend holds a lock around a batch).
    """

    name = "cuda"

    def __init__(self, cupy: Any = None, device_id: int = 0, transfer: Transfer = "copy", *,
                 compile: bool = True):
        if transfer not in ("auto", "zero-copy", "copy"):
            raise ValueError(f"transfer must be auto, zero-copy or copy, not {transfer!r}")
        self.cp = cupy if cupy is not None else import_cupy()
        self.device_id = device_id
        self.transfer: Transfer = transfer
        self._device = self.cp.cuda.Device(device_id)
        props = self.cp.cuda.runtime.getDeviceProperties(device_id)
        name = props.get("name", b"")
        self.device_name = name.decode(errors="replace") if isinstance(name, bytes) else str(name)
        self.compute_capability = (int(props.get("major", 0)), int(props.get("minor", 0)))
        self.multiprocessors = int(props.get("multiProcessorCount", 1)) or 1
        self.memory_bytes = int(props.get("totalGlobalMem", 0))
        with self._device:
            self.stream = self.cp.cuda.Stream(non_blocking=True)
        self._lock = threading.Lock()
        self.compile = compile
        self._modules: dict[KernelSource, Any] = {}
        self.origins: dict[KernelSource, str] = {}
        self._functions: dict[tuple[KernelSource, str], Any] = {}
        # per stream (by id): host buffers its queued copies still read, freed once the host
        # has waited for that stream (other streams may still be copying theirs)
        self._pending: dict[int, list[Any]] = {}
        # ring of page-locked staging buffers, each with the event of the last copy out of it
        self._staging: list[tuple[np.ndarray, Any]] = []
        self._staging_next = 0
        self._streams: list[Any] = [self.stream]  # for pipelined work (:meth:`streams`)

    # ------------------------------------------------------------------ compilation
    def function(self, source: KernelSource, entry: str) -> Any:
        """The compiled entry point (a ``cupy.RawKernel``); compiles its module on first use.

        Raises :class:`KernelBuildError` with the compiler's log when NVRTC fails or the
        module has no such entry point.
        """
        key = (source, entry)
        with self._lock:
            fn = self._functions.get(key)
            if fn is not None:
                return fn
            try:
                with self._device:
                    mod = self._modules.get(source)
                    if mod is None:
                        mod, self.origins[source] = prebuilt.load_module(self.cp, source, self.compute_capability,
                                                                         compile=self.compile)
                    fn = mod.get_function(entry)
                    self._modules[source] = mod
            except Exception as exc:
                raise KernelBuildError(f"loading {source.name}.cu / {entry} failed: {exc}", field=entry) from exc
            self._functions[key] = fn
            return fn

    def attributes(self, source: KernelSource, entry: str) -> dict[str, int]:
        """Registers, local (stack) bytes, static shared bytes and the largest block of a
        compiled entry point, as the driver reports them."""
        fn = self.function(source, entry)
        out = {}
        for attr in ("num_regs", "local_size_bytes", "shared_size_bytes", "max_threads_per_block"):
            try:
                out[attr] = int(getattr(fn, attr))
            except Exception:  # an attribute this CuPy does not expose
                pass
        return out

    # ------------------------------------------------------------------ memory
    def _pinned(self, nbytes: int) -> np.ndarray:
        mem = self.cp.cuda.alloc_pinned_memory(max(1, nbytes))
        return np.frombuffer(mem, dtype=np.uint8, count=max(1, nbytes))

    def pinned_copy(self, a: np.ndarray) -> np.ndarray:
        """A copy of ``a`` in page-locked host memory (as the UMA pool hands out), same
        shape and dtype; the kernels read it in place unless ``transfer`` is ``copy``."""
        a = np.ascontiguousarray(a)
        out = self._pinned(a.nbytes)[:a.nbytes].view(a.dtype).reshape(a.shape)
        out[...] = a
        return out

    def _device_pointer(self, a: np.ndarray) -> int | None:
        """The device address of host array ``a`` if the GPU can read it in place
        (page-locked or managed memory), else None."""
        if a.nbytes == 0:
            return None
        try:
            attrs = self.cp.cuda.runtime.pointerGetAttributes(a.ctypes.data)
        except Exception:
            return None  # unregistered memory on drivers that report it as an error
        if int(attrs.type) not in _DEVICE_READABLE:
            return None
        return int(attrs.devicePointer) or a.ctypes.data

    def _alias(self, ptr: int, a: np.ndarray) -> Any:
        """A device array over the bytes of ``a`` at device address ``ptr`` (keeps ``a`` alive)."""
        mem = self.cp.cuda.UnownedMemory(ptr, a.nbytes, a, self.device_id)
        return self.cp.ndarray((a.nbytes,), dtype=np.uint8, memptr=self.cp.cuda.MemoryPointer(mem, 0))

    def put(self, a: np.ndarray) -> Any:
        flat = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
        try:
            with self._device:
                if flat.nbytes == 0:
                    return self.alloc(1)
                ptr = self._device_pointer(flat)
                if ptr is not None and self.transfer != "copy":
                    return self._alias(ptr, flat)  # pool memory: read in place
                src = flat
                if ptr is None:  # pageable: stage in page-locked memory (async copies need it)
                    src = self._pinned(flat.nbytes)
                    src[:] = flat
                    if self.transfer == "zero-copy":
                        return self._alias(self._device_pointer(src) or src.ctypes.data, src)
                with self.stream:
                    buf = self.cp.empty(flat.nbytes, dtype=np.uint8)
                    buf.set(src, stream=self.stream)
                self._pending.setdefault(id(self.stream), []).append(src)  # queued: keep it alive
                return buf
        except KernelLaunchError:
            raise
        except Exception as exc:
            raise KernelLaunchError(f"host-to-device transfer of {flat.nbytes} bytes failed: {exc}") from exc

    def _staging_buffer(self, nbytes: int) -> np.ndarray:
        """The next staging buffer of the ring, at least ``nbytes`` long, once the copy that
        last read it is complete (grown by doubling when too small)."""
        k = self._staging_next
        self._staging_next = (k + 1) % STAGING_BUFFERS
        if k < len(self._staging):
            buf, done = self._staging[k]
            if done is not None:
                done.synchronize()
            if buf.nbytes >= nbytes:
                return buf
        buf = self._pinned(max(nbytes, 2 * (self._staging[k][0].nbytes if k < len(self._staging) else 0)))
        if k < len(self._staging):
            self._staging[k] = (buf, None)
        else:
            self._staging.append((buf, None))
        return buf

    def put_columns(self, arrays: list[np.ndarray]) -> list[Any]:
        """Device buffers holding the bytes of each C-contiguous array of ``arrays``.

        In ``copy`` mode the arrays are packed into one staging buffer (see the module doc)
        and cross PCIe in one asynchronous copy; each returned buffer is a view of one
        device allocation, starting at a :data:`COLUMN_ALIGN` boundary.  Otherwise each
        array goes through :meth:`put`.  Raises :class:`KernelLaunchError` when the
        allocation or the copy fails.
        """
        flats = [np.ascontiguousarray(a).reshape(-1).view(np.uint8) for a in arrays]
        if self.transfer != "copy":
            return [self.put(f) for f in flats]
        offsets, total = column_layout([f.nbytes for f in flats])
        try:
            with self._device:
                stage = self._staging_buffer(total)
                for off, f in zip(offsets, flats):
                    stage[off:off + f.nbytes] = f
                with self.stream:
                    dev = self.cp.empty(total, dtype=np.uint8)
                    dev.set(stage[:total], stream=self.stream)
                    done = self.cp.cuda.Event()
                    done.record(self.stream)
                k = (self._staging_next - 1) % STAGING_BUFFERS
                self._staging[k] = (self._staging[k][0], done)
                return [dev[off:off + max(1, f.nbytes)] for off, f in zip(offsets, flats)]
        except KernelLaunchError:
            raise
        except Exception as exc:
            raise KernelLaunchError(f"host-to-device copy of {total} bytes of columns failed: {exc}") from exc

    def alloc(self, nbytes: int) -> Any:
        try:
            with self._device, self.stream:
                return self.cp.empty(max(1, int(nbytes)), dtype=np.uint8)
        except Exception as exc:
            raise KernelLaunchError(f"device allocation of {nbytes} bytes failed: {exc}") from exc

    def staged(self) -> int:
        """Host staging buffers still held for copies queued on any stream (released when
        the host has waited for their stream: :meth:`get` on it, or :meth:`sync`)."""
        return sum(len(bufs) for bufs in self._pending.values())

    def _copy_back(self, buf: Any, nbytes: int, out: np.ndarray) -> None:
        """Queue the copy of the first ``nbytes`` of ``buf`` into page-locked ``out`` on the
        current stream.  Non-blocking: CuPy's default (``blocking=True``) would make the
        host wait for the stream after every copy, serialising the pipeline's chunks."""
        buf[:nbytes].get(stream=self.stream, out=out[:nbytes], blocking=False)

    def get(self, buf: Any, nbytes: int) -> np.ndarray:
        """The first ``nbytes`` of ``buf`` in a fresh page-locked ``uint8[nbytes]`` array:
        a non-blocking copy on the current stream, valid once the host has synchronised that
        stream, which this does before returning (work queued on other streams is not waited
        for).  Raises :class:`KernelLaunchError` when the copy, or work queued before it,
        failed."""
        out = self._pinned(nbytes)
        stream = self.stream
        try:
            with self._device:
                if nbytes:
                    self._copy_back(buf, nbytes, out)
                stream.synchronize()
        except Exception as exc:
            raise KernelLaunchError(f"device work failed (seen copying {nbytes} bytes back): {exc}") from exc
        finally:
            self._pending.pop(id(stream), None)  # this stream's copies in are done
        return out[:nbytes]

    # ------------------------------------------------------------------ launches
    def launch(self, source: KernelSource, entry: str, threads: int, args: tuple, *,
               block: int = 256, one_block: bool = False) -> None:
        fn = self.function(source, entry)
        if threads <= 0 and not one_block:
            return
        # Registers per thread cap the block size (65536 per block on sm_90); every kernel
        # loops grid- or block-stride, so a smaller block only means more iterations.
        limit = int(getattr(fn, "max_threads_per_block", block) or block)
        if block > limit:
            block = max(32, limit - limit % 32)
        grid = 1 if one_block else max(1, min(-(-threads // block), self.multiprocessors * BLOCKS_PER_SM))
        try:
            with self._device, self.stream:
                fn((grid,), (block,), args)
        except Exception as exc:
            raise KernelLaunchError(f"launch of {entry} ({grid}x{block}) failed: {exc}", field=entry) from exc

    def sync(self) -> None:
        try:
            with self._device:
                for s in self._streams:
                    s.synchronize()
        except Exception as exc:
            raise KernelLaunchError(f"device work failed: {exc}") from exc
        finally:
            self._pending.clear()  # every stream's copies in are done

    # ------------------------------------------------------------------ streams (pipelining)
    def streams(self, count: int) -> list[Any]:
        """``count`` streams of this device (the first is the default :attr:`stream`),
        created once and reused; :meth:`sync` waits for all of them."""
        with self._device:
            while len(self._streams) < count:
                self._streams.append(self.cp.cuda.Stream(non_blocking=True))
        return self._streams[:count]

    @contextlib.contextmanager
    def on(self, stream: Any) -> Iterator[None]:
        """Queue the work of the ``with`` block (copies, launches, allocations) on ``stream``."""
        saved, self.stream = self.stream, stream
        try:
            yield
        finally:
            self.stream = saved

    def record(self) -> Any:
        """An event recorded on the current stream (marks the work queued so far)."""
        with self._device:
            ev = self.cp.cuda.Event()
            ev.record(self.stream)
            return ev

    def wait(self, event: Any) -> None:
        """Make the current stream wait for ``event`` (work of another stream) on the GPU."""
        with self._device:
            self.stream.wait_event(event)

    def pinned(self, nbytes: int) -> np.ndarray:
        """A page-locked host ``uint8`` buffer of ``nbytes`` (destination of :meth:`get_async`)."""
        return self._pinned(nbytes)[:nbytes]

    def get_async(self, buf: Any, nbytes: int, out: np.ndarray) -> None:
        """Queue the copy of the first ``nbytes`` of ``buf`` into ``out`` (page-locked, from
        :meth:`pinned`; ``uint8``, at least ``nbytes`` long) on the current stream, without
        the host waiting: ``out`` holds the bytes only once that stream is synchronised
        (:meth:`sync`, or an event recorded on it after the copy).  Raises
        :class:`KernelLaunchError` when the copy cannot be queued."""
        if not nbytes:
            return
        try:
            with self._device:
                self._copy_back(buf, nbytes, out)
        except Exception as exc:
            raise KernelLaunchError(f"queueing a device-to-host copy of {nbytes} bytes failed: {exc}") from exc

    @contextlib.contextmanager
    def timer(self) -> Iterator[dict[str, float]]:
        """Time the work queued inside the ``with`` block with device events; the yielded
        dict gets ``seconds`` (device time between the events) and ``wall_seconds``."""
        out: dict[str, float] = {}
        with self._device:
            start, end = self.cp.cuda.Event(), self.cp.cuda.Event()
            t0 = time.perf_counter()
            start.record(self.stream)
            yield out
            end.record(self.stream)
            end.synchronize()
            out["wall_seconds"] = time.perf_counter() - t0
            out["seconds"] = self.cp.cuda.get_elapsed_time(start, end) / 1000.0

    def info(self) -> dict:
        """The GPU this device runs on, for /v1/status and the GPU check report."""
        return {"name": self.device_name, "device_id": self.device_id,
                "compute_capability": ".".join(map(str, self.compute_capability)),
                "multiprocessors": self.multiprocessors, "memory_bytes": self.memory_bytes,
                "transfer": self.transfer,
                "modules": {s.name + (f".{s.variant}" if s.variant else ""): o for s, o in self.origins.items()}}
