"""A kernel device (:class:`app.engine.device.ops.Device`) whose launches run the service's
PTX under GPGPU-Sim, so :mod:`app.engine.device.ops` drives it exactly as it drives CUDA.

Buffers live on the host; launches are recorded, and at :meth:`SimDevice.get` (or when a
launch names another module: one simulator process loads one PTX module) the recorded
launches run as one program of ``harness.cu`` under the simulator, with every buffer they
name uploaded before and read back after.  Launch geometry is the CUDA backend's
(:meth:`app.engine.device.cudadev.CupyDevice.launch`): the block the caller asks for (the
registry's), a grid of ceil(threads / block) blocks capped, there at multiprocessors ×
``BLOCKS_PER_SM``, here at ``max_grid``: every kernel loops grid- or chunk-stride, so a small
cap makes a small sample reach what a GPU reaches only with huge batches (a block's second
chunk of Ed25519 or secp256k1 items, which reuses its shared arrays).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import struct
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from app.core.errors import KernelLaunchError
from app.engine.device import prebuilt
from app.engine.device.registry import KernelSource
from scripts.lib.gpusim.build import Simulator, cache_root

HERE = Path(__file__).resolve().parent
HARNESS = HERE / "harness.cu"
PTXAS_CACHED = HERE / "ptxas_cached"
#: PTX target the modules are built for (what the service ships as PTX: prebuilt.targets()).
PTX_TARGET = "compute_90"
#: Seconds one simulator process may run before it counts as hung (functional mode; a timing
#: run of a full wave is one process of up to hours: TIMING_RUN_TIMEOUT).
RUN_TIMEOUT = 1800.0
TIMING_RUN_TIMEOUT = 4 * 3600.0

_ENTRY = re.compile(rb"^\.visible \.entry (\w+)\(", re.M)


def ptx_of(source: KernelSource) -> Path:
    """The NVRTC PTX of ``source`` exactly as the service builds it (:func:`prebuilt.build_nvrtc`,
    kept in the kernel cache, so a second run compiles nothing)."""
    return prebuilt.build_nvrtc(source, PTX_TARGET)


def entries_of(ptx: Path) -> list[str]:
    """The ``.visible .entry`` names of a PTX file, in file order."""
    return [m.decode() for m in _ENTRY.findall(ptx.read_bytes())]


@dataclass
class Buffer:
    size: int
    data: np.ndarray | None = None  # None: never written (uninitialised on the device)


@dataclass
class Launch:
    entry: str
    grid: int
    block: int
    args: tuple


@dataclass
class RunStats:
    """What the simulator processes of one device cost: ``processes`` runs, ``wall_s`` their
    wall seconds in all (start-up included), ``kernel_s`` the seconds inside launches."""

    processes: int = 0
    wall_s: float = 0.0
    kernel_s: float = 0.0
    launches: list[tuple[str, str, float]] = field(default_factory=list)  # (module, entry, seconds)


class SimDevice:
    """:class:`app.engine.device.ops.Device` over GPGPU-Sim (see the module doc).

    ``modules`` maps a compilation unit's name to the PTX file its launches load (default:
    :func:`ptx_of`); a test swaps in a broken copy of one that way.  Raises
    :class:`KernelLaunchError` from :meth:`get`/:meth:`sync` when the simulator fails, with
    the tail of its log.
    """

    name = "gpusim"

    def __init__(self, sim: Simulator, *, max_grid: int = 2, modules: dict[str, Path] | None = None,
                 keep_logs: Path | None = None, timing: TimingConfig | None = None):
        self.sim = sim
        self.max_grid = max_grid
        self.modules = dict(modules or {})
        self.keep_logs = keep_logs
        self.timing = timing
        self.run_timeout = RUN_TIMEOUT if timing is None else TIMING_RUN_TIMEOUT
        self.last_log = ""  # the last simulator process's stdout and stderr
        self.stats = RunStats()
        self._bufs: list[Buffer] = []
        self._pending: list[Launch] = []
        self._pending_module: Path | None = None

    # ------------------------------------------------------------------ Device
    def put(self, a: np.ndarray) -> int:
        data = np.ascontiguousarray(a).view(np.uint8).reshape(-1).copy()
        self._bufs.append(Buffer(int(data.size), data))
        return len(self._bufs) - 1

    def put_columns(self, arrays: list[np.ndarray]) -> list[int]:
        return [self.put(a) for a in arrays]

    def alloc(self, nbytes: int) -> int:
        self._bufs.append(Buffer(max(1, int(nbytes))))
        return len(self._bufs) - 1

    def get(self, buf: int, nbytes: int) -> np.ndarray:
        self.sync()
        b = self._bufs[buf]
        if b.data is None:
            raise KernelLaunchError(f"buffer {buf} was read before any launch wrote it", field="buffer")
        return b.data[:nbytes].copy()

    def launch(self, source: KernelSource, entry: str, threads: int, args: tuple, *,
               block: int = 256, one_block: bool = False) -> None:
        if threads <= 0 and not one_block:
            return
        module = self.module(source)
        if self._pending_module not in (None, module):
            self.sync()
        grid = 1 if one_block else max(1, min(-(-threads // block), self.max_grid))
        self._pending.append(Launch(entry, grid, block, args))
        self._pending_module = module

    def sync(self) -> None:
        if self._pending:
            module, launches = self._pending_module, self._pending
            self._pending, self._pending_module = [], None
            assert module is not None
            self._run(module, launches)

    # ------------------------------------------------------------------ the simulator
    def module(self, source: KernelSource) -> Path:
        if source.name not in self.modules:
            self.modules[source.name] = ptx_of(source)
        return self.modules[source.name]

    def _program(self, entries: list[str], launches: list[Launch]) -> tuple[bytes, list[int]]:
        used = sorted({a for ln in launches for a in ln.args if isinstance(a, int) and not isinstance(a, np.integer)})
        index = {b: i for i, b in enumerate(used)}
        out = [b"ZVSIMP01", struct.pack("<I", len(used))]
        for b in used:
            buf = self._bufs[b]
            out.append(struct.pack("<QB", buf.size, buf.data is not None))
            if buf.data is not None:
                out.append(buf.data.tobytes())
        out.append(struct.pack("<I", len(launches)))
        for ln in launches:
            if ln.entry not in entries:
                raise KernelLaunchError(f"{ln.entry} is not an entry of the module", field=ln.entry)
            out.append(struct.pack("<IIII", entries.index(ln.entry), ln.grid, ln.block, len(ln.args)))
            for a in ln.args:
                if isinstance(a, np.uint32):
                    out.append(struct.pack("<BQ", 1, int(a)))
                elif isinstance(a, np.uint64):
                    out.append(struct.pack("<BQ", 2, int(a)))
                elif isinstance(a, int):
                    out.append(struct.pack("<BQ", 0, index[a]))
                else:
                    raise KernelLaunchError(f"argument {a!r} of {ln.entry} is neither a buffer nor np.uint32/64",
                                            field=ln.entry)
        return b"".join(out), used

    def _run(self, module: Path, launches: list[Launch]) -> None:
        entries = entries_of(module)
        harness = harness_for(self.sim, entries)
        program, used = self._program(entries, launches)
        with tempfile.TemporaryDirectory(prefix="zvsim-") as tmp:
            work = Path(tmp)
            prepare_run_dir(self.sim, work, self.timing)
            (work / "program.bin").write_bytes(program)
            t0 = time.perf_counter()
            try:
                tk = run_toolkit(self.sim)
                proc = subprocess.run(
                    ["bash", "-c", f'source "{self.sim.home}/env.sh" && export CUDA_INSTALL_PATH="{tk}"'
                     f' PTXAS_CUDA_INSTALL_PATH="{tk}" && exec "{harness}" program.bin output.bin'],
                    cwd=work, env=run_env(self.sim, module), capture_output=True, text=True, timeout=self.run_timeout)
            except subprocess.TimeoutExpired as exc:
                raise KernelLaunchError(f"the simulator ran past {self.run_timeout:.0f} s on {module.name}") from exc
            wall = time.perf_counter() - t0
            log = proc.stdout + proc.stderr
            self.last_log = log
            if self.keep_logs is not None:
                self.keep_logs.mkdir(parents=True, exist_ok=True)
                (self.keep_logs / f"run{self.stats.processes:03d}-{module.stem}.log").write_text(log)
            if proc.returncode != 0 or not (work / "output.bin").is_file():
                raise KernelLaunchError(f"the simulator failed on {module.name} (rc {proc.returncode}):\n"
                                        f"{_tail(log)}")
            raw = (work / "output.bin").read_bytes()
        pos = 0
        for b in used:
            size = self._bufs[b].size
            self._bufs[b].data = np.frombuffer(raw, dtype=np.uint8, count=size, offset=pos).copy()
            pos += size
        self.stats.processes += 1
        self.stats.wall_s += wall
        for m in re.finditer(r"^ZVSIM launch \d+ (\w+) \S+ ([0-9.]+)$", proc.stdout, re.M):
            self.stats.kernel_s += float(m.group(2))
            self.stats.launches.append((module.stem.split("-")[0], m.group(1), float(m.group(2))))


def _tail(log: str, lines: int = 40) -> str:
    keep = [ln for ln in log.splitlines() if ln.strip()]
    return "\n".join(keep[-lines:])


# ------------------------------------------------------------------ run set-up
def run_toolkit(sim: Simulator) -> Path:
    """The toolkit folder a run names as ``CUDA_INSTALL_PATH``: the shared folder's shims
    (built into ``tk118/``) with ``ptxas`` behind :data:`PTXAS_CACHED`."""
    tk = sim.home / "tkrun"
    if (tk / "bin" / "ptxas").resolve() != PTXAS_CACHED:  # absent, or made from another checkout
        shutil.rmtree(tk, ignore_errors=True)
        (tk / "bin").mkdir(parents=True)
        for name in ("cuobjdump", "cuobjdump.real", "nvcc"):
            (tk / "bin" / name).symlink_to(sim.toolkit / "bin" / name)
        (tk / "bin" / "ptxas").symlink_to(PTXAS_CACHED)
        (tk / "include").symlink_to(sim.toolkit / "include")
    return tk


def ptxas_env(src: Path, cuda: Path) -> dict[str, str]:
    """What :data:`PTXAS_CACHED` needs: the shared folder's ptxas shim and the cache folder."""
    return {"CUDA_HOME": str(cuda), "ZVSIM_PTXAS": str(src / "ptxas.shim"),
            "ZVSIM_PTXAS_CACHE": str(cache_root() / "ptxinfo")}


def run_env(sim: Simulator, module: Path) -> dict[str, str]:
    return {**os.environ, **ptxas_env(sim.src, sim.cuda), "ZVSIM_PTX": str(module)}


def warm_ptxinfo(src: Path, cuda: Path, ptx: Path) -> None:
    """Run the simulator's register count step for ``ptx`` now (the same command it runs at
    start-up, :data:`PTXAS_CACHED`), so that its first process finds the answer kept; the
    script does this while the simulator builds.  Raises CalledProcessError when ptxas fails."""
    subprocess.run([str(PTXAS_CACHED), f"--gpu-name=sm_{PTX_TARGET.split('_')[1]}", "-v", str(ptx),
                    "--output-file", "/dev/null"], env={**os.environ, **ptxas_env(src, cuda)},
                   capture_output=True, check=True)


@dataclass(frozen=True)
class TimingConfig:
    """A run in GPGPU-Sim's timing mode: the snapshot's configuration ``config`` (a folder of
    configs/tested-cfgs/) with ``options`` appended (a later option overrides the file's)."""

    config: str
    options: tuple[str, ...] = ()


def prepare_run_dir(sim: Simulator, work: Path, timing: TimingConfig | None = None) -> None:
    """The simulator's configuration in ``work``: :data:`build.CONFIG` in functional mode
    (``-gpgpu_ptx_sim_mode 1``: warps in lockstep, no timing model), or ``timing``'s."""
    folder = sim.config_dir() if timing is None else sim.config_dir().parent / timing.config
    for p in folder.iterdir():
        if p.is_file():
            shutil.copy(p, work / p.name)
    with open(work / "gpgpusim.config", "a") as f:
        if timing is None:
            f.write("\n# scripts/gpusim: functional simulation only\n-gpgpu_ptx_sim_mode 1\n")
        else:
            f.write("\n# scripts/gpusim --timing\n-gpgpu_ptx_sim_mode 0\n" + "".join(f"{o}\n" for o in timing.options))


def harness_for(sim: Simulator, entries: list[str]) -> Path:
    """The harness binary with stubs for ``entries``, built once with the CUDA 13 nvcc
    (``-cudart shared``, so the simulator's libcudart is the one it loads) and kept in the
    cache by the digest of the harness source, the entry names and the toolkit."""
    h = hashlib.sha256(HARNESS.read_bytes() + "\n".join(entries).encode() + str(sim.cuda).encode())
    out = cache_root() / "harness" / h.hexdigest()[:16] / "harness"
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    (out.parent / "entries.h").write_text("".join(f"ZV_ENTRY({e})\n" for e in entries))
    tmp = out.with_suffix(".tmp")
    proc = subprocess.run([str(sim.cuda / "bin" / "nvcc"), "-std=c++17", "-gencode=arch=compute_90,code=compute_90",
                           "-cudart", "shared", f"-I{out.parent}", "-o", str(tmp), str(HARNESS)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise KernelLaunchError(f"nvcc failed on the simulator harness:\n{proc.stderr[-3000:]}")
    tmp.rename(out)
    return out
