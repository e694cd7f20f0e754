"""The simulator, built once from ``../shared/gpusim`` into a cache folder keyed by its inputs.

The shared folder's ``build.sh`` builds GPGPU-Sim with its own patch; then the patches of
:data:`PATCHES` (fixes of simulator bugs this project found, each saying which) are applied
and the tree is rebuilt (``make`` recompiles only what they touch).  The inputs are every
file of the shared folder (source snapshot, patch, shims, build.sh), these patches and the
CUDA toolkit's version; their digest names the folder, so a later run, or CI with a
warm cache, reuses the build, and a changed patch or toolkit builds anew beside it.
A build is complete when its ``ready`` file exists (written last), so an interrupted build
is redone rather than half used.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

#: Debian packages the simulator's build needs (build.sh installs them too, without apt-get
#: update; scripts/apt_install fetches the lists first on a fresh machine).
PACKAGES = ("bison", "flex", "xutils-dev", "zlib1g-dev", "patch", "unzip", "git", "make", "g++")
#: Our fixes to the simulator, applied after the shared folder's patch, in name order.
PATCHES = Path(__file__).resolve().parent / "patches"
#: The GPGPU-Sim configuration every run uses (from the snapshot's configs/tested-cfgs/).
CONFIG = "SM75_RTX2060"


class SimBuildError(RuntimeError):
    """The simulator could not be built or found (the message says what failed)."""


def shared_dir(root: Path) -> Path:
    """``$ZAPVERIFY_GPUSIM_SRC`` or ``../shared/gpusim`` beside the checkout at ``root``."""
    return Path(os.environ.get("ZAPVERIFY_GPUSIM_SRC", root.parent / "shared" / "gpusim"))


def cache_root() -> Path:
    """``$ZAPVERIFY_GPUSIM_CACHE`` or ~/.cache/zapverify/gpusim."""
    return Path(os.environ.get("ZAPVERIFY_GPUSIM_CACHE", Path.home() / ".cache" / "zapverify" / "gpusim"))


def cuda_home() -> Path:
    """The CUDA 13 toolkit: ``$CUDA_HOME``, else ``/usr/local/cuda`` when it holds nvcc, else
    the folder above the ``nvcc`` on the PATH (``/usr/local/bin/nvcc`` may be a wrapper script,
    which is why /usr/local/cuda is asked first)."""
    if os.environ.get("CUDA_HOME"):
        return Path(os.environ["CUDA_HOME"])
    for cand in (Path("/usr/local/cuda"),):
        if (cand / "bin" / "nvcc").is_file():
            return cand.resolve()
    found = shutil.which("nvcc")
    if found is None:
        raise SimBuildError("no nvcc on the PATH and no CUDA_HOME: the simulator's harness needs the CUDA 13 toolkit")
    return Path(found).resolve().parents[1]


def toolkit_version(home: Path) -> str:
    """The last line of ``nvcc --version`` (part of the cache key; raises :class:`SimBuildError`
    when nvcc does not run)."""
    try:
        out = subprocess.run([str(home / "bin" / "nvcc"), "--version"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise SimBuildError(f"{home}/bin/nvcc --version failed: {exc}") from exc
    return out.stdout.strip().splitlines()[-1]


def toolkit_release(home: Path) -> str:
    """The toolkit's "release X.Y, VX.Y.Z" (what a report names)."""
    out = subprocess.run([str(home / "bin" / "nvcc"), "--version"], capture_output=True, text=True, check=True)
    return next((ln.strip() for ln in out.stdout.splitlines() if "release" in ln), "unknown")


def inputs_digest(src: Path, home: Path) -> str:
    """SHA-256 (hex, 16 digits) of every file of ``src`` and of :data:`PATCHES` (name and
    bytes, sorted) and the toolkit's version."""
    h = hashlib.sha256()
    for folder in (src, PATCHES):
        for p in sorted(q for q in folder.rglob("*") if q.is_file()):
            h.update(folder.name.encode() + b"/" + p.relative_to(folder).as_posix().encode() + b"\0")
            h.update(hashlib.sha256(p.read_bytes()).digest())
    h.update(toolkit_version(home).encode())
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class Simulator:
    """A built simulator: ``home`` holds ``tk118/`` (its toolkit shims), ``gpgpu-sim/`` (its
    libcudart.so) and ``env.sh``; ``cuda`` is the CUDA 13 toolkit, ``src`` the shared folder
    it was built from; ``seconds`` is what the build took now (0 when cached)."""

    home: Path
    cuda: Path
    seconds: float
    src: Path

    @property
    def toolkit(self) -> Path:
        return self.home / "tk118"

    def libcudart(self) -> Path:
        hits = sorted((self.home / "gpgpu-sim" / "lib").glob("*/*/release/libcudart.so"))
        if not hits:
            raise SimBuildError(f"no libcudart.so under {self.home}/gpgpu-sim/lib")
        return hits[0]

    def config_dir(self) -> Path:
        return self.home / "gpgpu-sim" / "configs" / "tested-cfgs" / CONFIG


def _missing_packages() -> list[str]:
    missing = []
    for pkg in PACKAGES:
        r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg], capture_output=True, text=True)
        if "install ok installed" not in r.stdout:
            missing.append(pkg)
    return missing


def _apply_patches(dest: Path, env: dict[str, str]) -> None:
    tree = dest / "gpgpu-sim"
    patches = sorted(PATCHES.glob("*.patch"))
    for p in patches:
        r = subprocess.run(["patch", "-s", "-p1", "-i", str(p)], cwd=tree, capture_output=True, text=True)
        if r.returncode != 0:
            raise SimBuildError(f"{p.name} does not apply to the simulator's tree:\n{r.stdout}{r.stderr}")
    if patches:
        make = (f'export CUDA_INSTALL_PATH="{dest}/tk118"; set +u; source setup_environment release >/dev/null; '
                f'make -j{os.cpu_count() or 2} >"{dest}/build-patches.log" 2>&1')
        r = subprocess.run(["bash", "-c", make], cwd=tree, env=env, capture_output=True, text=True)
        if r.returncode != 0:
            raise SimBuildError(f"the rebuild after {', '.join(p.name for p in patches)} failed; "
                                f"see {dest}/build-patches.log")


def ensure(root: Path, *, log=print) -> Simulator:
    """The simulator for the inputs under :func:`shared_dir`, built now when the cache has
    none (about four minutes on two cores, measured 228–297 s: ``make -j2``, the rebuild after
    :data:`PATCHES`, Debian packages and three PyPI wheels).

    Raises :class:`SimBuildError` when the shared folder is absent or the build fails (its
    log is kept in the build folder).
    """
    src = shared_dir(root)
    if not (src / "build.sh").is_file():
        raise SimBuildError(f"no simulator sources at {src} (set ZAPVERIFY_GPUSIM_SRC)")
    home = cuda_home()
    dest = cache_root() / inputs_digest(src, home)
    if (dest / "ready").is_file():
        return Simulator(dest, home, 0.0, src)
    missing = _missing_packages()
    if missing and subprocess.run([str(root / "scripts" / "apt_install"), "scripts/gpusim", *missing]).returncode:
        raise SimBuildError(f"the Debian packages {', '.join(missing)} could not be installed (see above)")
    t0 = time.perf_counter()
    log(f"gpusim: building the simulator into {dest} (cold cache)")
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    env = {**os.environ, "CUDA_HOME": str(home)}
    proc = subprocess.run(["bash", str(src / "build.sh"), str(dest)], env=env, capture_output=True, text=True)
    (dest / "build-script.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise SimBuildError(f"build.sh failed (rc {proc.returncode}); see {dest}/build-script.log and "
                            f"{dest}/build.log:\n{(proc.stdout + proc.stderr)[-2000:]}")
    _apply_patches(dest, env)
    sim = Simulator(dest, home, time.perf_counter() - t0, src)
    sim.libcudart()  # raises when the build made none
    # The downloaded wheels go (the toolkit files were copied out of them); the build tree
    # stays (about 450 MB, 185 MB of it object files), so a patch rebuilds only what it touches.
    shutil.rmtree(dest / "wheels", ignore_errors=True)
    shutil.rmtree(dest / "whl", ignore_errors=True)
    (dest / "ready").write_text(f"{sim.seconds:.1f}\n")
    log(f"gpusim: built in {sim.seconds:.0f} s")
    return sim
