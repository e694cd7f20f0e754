"""Kernel sources as the drivers name them, NVIDIA's disassemblers, and SASS listings read
into instructions: what ``scripts/ptxas`` and ``scripts/gpu_model`` share.

No kernel path is written here: compilation units come from
``app.engine.device.registry.sources()`` (by name, the file's stem), headers are found by
file name under ``hostbuild.KERNEL_DIR`` wherever the kernels folder keeps them, and every
compilation goes through ``app.engine.device.ptxas.compile_source`` (the project's nvcc
flags).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import sysconfig
import tempfile
from collections import Counter
from pathlib import Path

from app.engine.device import ptxas, registry
from app.engine.device.hostbuild import KERNEL_DIR

ROOT = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------ sources
def sources() -> dict[str, Path]:
    """Every compilation unit of the registry by name (``"ed25519"`` -> its ``.cu``)."""
    return {p.stem: p for p in registry.sources()}


def source(name: str) -> Path:
    """The compilation unit called ``name``; LookupError naming the known ones otherwise."""
    found = sources()
    if name not in found:
        raise LookupError(f"no kernel source {name!r}; known: {', '.join(sorted(found))}")
    return found[name]


def header(name: str) -> Path:
    """The one kernel file called ``name`` (``"bls12_381_fp.cuh"``) under the kernels folder."""
    found = sorted(KERNEL_DIR.rglob(name))
    if len(found) != 1:
        raise LookupError(f"expected one kernel file {name!r} under {rel(KERNEL_DIR)}, found {len(found)}")
    return found[0]


def include_dirs() -> list[Path]:
    """Every folder under the kernels folder that holds kernel sources or headers: ``-I``
    flags for code built outside the drivers (a profiling build of a header)."""
    return sorted({p.parent for p in KERNEL_DIR.rglob("*.cu*")})


def rel(path: Path) -> str:
    """``path`` relative to the repository (as printed in result files)."""
    try:
        return Path(path).resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


def includes(*headers: str) -> str:
    """``#include`` lines naming each header by its absolute path (found by :func:`header`),
    so probe kernels written to a temporary folder compile wherever the headers live."""
    return "".join(f'#include "{header(h)}"\n' for h in headers)


def relative_log(log: str) -> str:
    """A compiler log with the repository's absolute paths made relative."""
    return log.replace(f"{ROOT}/", "")


# ------------------------------------------------------------------ compiling
def compile_unit(path: Path, defines: dict[str, str | int] | None = None, timeout: float = 3600,
                 cubin: Path | None = None) -> ptxas.CompileResult:
    """``ptxas.compile_source`` of ``path``, with ``defines`` set first (through a wrapper
    that defines them and includes the source by its absolute path, so its own includes
    resolve as in the shipped build).  Never raises for a compile error."""
    if not defines:
        return ptxas.compile_source(path, timeout=timeout, cubin=cubin)
    with tempfile.TemporaryDirectory() as tmp:
        wrapper = Path(tmp) / path.name
        wrapper.write_text("".join(f"#define {k} {v}\n" for k, v in defines.items()) + f'#include "{path}"\n')
        res = ptxas.compile_source(wrapper, timeout=timeout, cubin=cubin)
    return dataclasses.replace(res, source=path.name)


def compile_text(code: str, name: str, cubin: Path, timeout: float = 3600) -> ptxas.CompileResult:
    """Compile kernel source text (a probe) to ``cubin``; raises RuntimeError on failure."""
    src = cubin.with_name(f"{name}.cu")
    src.write_text(code)
    res = ptxas.compile_source(src, timeout=timeout, cubin=cubin)
    if not res.ok:
        raise RuntimeError(f"nvcc failed on {name}.cu:\n{relative_log(res.log)[-3000:]}")
    return res


# ------------------------------------------------------------------ NVIDIA's tools
def tool(name: str) -> str | None:
    """``cuobjdump`` or ``nvdisasm``: ``$CUOBJDUMP`` / ``$NVDISASM``, PATH,
    /usr/local/cuda/bin, or the pip wheels nvidia-cuda-cuobjdump / nvidia-cuda-nvdisasm
    (the ``model`` extra of pyproject.toml)."""
    env = os.environ.get(name.upper())
    if env and Path(env).is_file():
        return env
    found = shutil.which(name) or shutil.which(name, path="/usr/local/cuda/bin")
    if found:
        return found
    wheel_roots = [Path(sysconfig.get_paths()["purelib"]) / "nvidia"]
    try:
        import nvidia  # the namespace package of NVIDIA's CUDA wheels

        wheel_roots += [Path(p) for p in nvidia.__path__]
    except ImportError:
        pass
    for base in wheel_roots:
        for cand in sorted(base.glob(f"cu*/bin/{name}")):
            return str(cand)
    return None


def _disassemble(name: str, args: list[str]) -> str:
    exe = tool(name)
    if exe is None:
        raise RuntimeError(f"{name} not found (pip install '.[model]', or put CUDA's bin on PATH)")
    env = dict(os.environ)  # cuobjdump runs nvdisasm, which the wheels put beside it
    env["PATH"] = f"{Path(exe).parent}{os.pathsep}{env.get('PATH', '')}"
    proc = subprocess.run([exe, *args], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{name} failed: {proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return proc.stdout


# ------------------------------------------------------------------ SASS
@dataclasses.dataclass(frozen=True)
class Instr:
    """One SASS instruction: its address, opcode with modifiers (``IMAD.WIDE.U32``) and its
    whole text up to the ``;`` (guard predicate included, ``@!P0 BRA 0x1c0``)."""

    address: int
    opcode: str
    text: str


_INSTR = re.compile(r"^\s*/\*(?P<addr>[0-9a-f]{4,})\*/\s+(?P<text>(?:@!?U?P\w+\s+)?(?P<op>[A-Z][A-Z0-9_.]*)[^;]*?)\s*;")
_FUNCTION = re.compile(r"Function : (\S+)")
_LABEL = re.compile(r"^([A-Za-z_$][\w$]*):\s*$")  # a routine; local labels start with '.'


def instructions(sass: str) -> list[Instr]:
    """Every instruction line of a cuobjdump or nvdisasm listing, in order."""
    return [Instr(int(m["addr"], 16), m["op"], m["text"]) for line in sass.splitlines() if (m := _INSTR.match(line))]


def by_function(sass: str) -> dict[str, list[Instr]]:
    """``cuobjdump -sass`` text split at its ``Function : <name>`` headers: every entry
    point's whole code (the out-of-line routines it calls included)."""
    out: dict[str, list[Instr]] = {}
    current: list[Instr] | None = None
    for line in sass.splitlines():
        if m := _FUNCTION.search(line):
            current = out.setdefault(m.group(1), [])
        elif current is not None and (m := _INSTR.match(line)):
            current.append(Instr(int(m["addr"], 16), m["op"], m["text"]))
    return out


def by_label(sass: str) -> dict[str, list[Instr]]:
    """``nvdisasm`` text split at its routine labels: each kernel (``zv_x:``) and each
    out-of-line routine inside one (``$zv_x$_Z10zv_fp6_mulP6zv_fp6...:``, one copy per
    kernel that calls it), without the code of the routines it calls."""
    out: dict[str, list[Instr]] = {}
    current: list[Instr] | None = None
    for line in sass.splitlines():
        if m := _LABEL.match(line):
            current = out.setdefault(m.group(1), [])
        elif line.lstrip().startswith(".section"):
            current = None
        elif current is not None and (m := _INSTR.match(line)):
            current.append(Instr(int(m["addr"], 16), m["op"], m["text"]))
    return out


def cuobjdump_sass(cubin: Path, function: str | None = None) -> str:
    """``cuobjdump -sass`` of ``cubin`` (of one ``function`` when given)."""
    return _disassemble("cuobjdump", ["-sass", *(["-fun", function] if function else []), str(cubin)])


def nvdisasm_sass(cubin: Path) -> str:
    """``nvdisasm`` of ``cubin``: code labelled per kernel and per out-of-line routine."""
    return _disassemble("nvdisasm", [str(cubin)])


def histogram(instrs: list[Instr]) -> Counter:
    """Opcode (with modifiers) -> count, NOP padding excluded."""
    ops = Counter(i.opcode for i in instrs)
    ops.pop("NOP", None)
    return ops


def demangled(name: str) -> str:
    """``zv_fp6_mul`` from ``_Z10zv_fp6_mulP6zv_fp6PKS_S2_`` or ``$kernel$_Z10zv_fp6_mul...``
    (the plain name for ``extern "C"`` kernels)."""
    name = name.rsplit("$", 1)[-1]
    m = re.match(r"_Z(\d+)", name)
    return name[len(m.group(0)):len(m.group(0)) + int(m.group(1))] if m else name
