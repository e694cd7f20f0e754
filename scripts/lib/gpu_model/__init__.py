"""The GPU-rate model of ``scripts/gpu_model``: the machine it assumes, the build cache its
methods share, and one way of writing a PREDICTION.

Nothing here runs on a GPU.  Each family's verify kernel is predicted by the method that
fits how its work can be counted (the modules beside this one):

- ``ops``: kernels built from the primitives zv_port.cuh counts (ZV_OP_...: field products,
  SHA-2 and Keccak blocks): SASS of each primitive × its count per verify in the host build,
  through an issue and pipe model of one SM sub-partition (Ed25519, secp256k1);
- ``bls12_381``: SASS of each Fp leaf × its call count in a profiled host build (gprof),
  scaled by the measured overhead of straight-line tower routines, against the issue and
  IMAD bounds;
- ``ml_dsa``: the out-of-line Keccak permutation's SASS × permutations per verify, the rest
  scaled by the host build's time ratio, against the 32-bit integer issue bound;
- ``slh_dsa``: the SASS of each compression primitive × the critical path of compressions
  on a 32-lane block (counted by ``scripts/agreement --scheme slh-dsa``).

Every rate written is labelled a PREDICTION and names its method (provenance line and
table headings).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from app.engine.device import ptxas
from app.engine.device.hostbuild import sources_digest
from bench import provenance
from scripts.lib import kernels

ROOT = kernels.ROOT
RESULTS = ROOT / "bench" / "results"


@dataclass(frozen=True)
class Machine:
    """The GPU the rates are predicted for."""

    name: str
    sms: int
    smsps_per_sm: int  # sub-partitions, one warp scheduler each
    clock_hz: float  # boost clock
    int32_lanes_per_sm_clock: int  # 32-bit integer multiply-add / ALU results per SM per clock
    pcie_bytes_per_s: float  # effective per direction, large pinned-memory copies
    hbm_bytes_per_s: float = 4.8e12  # device memory bandwidth
    shared_bytes_per_sm_clock: int = 128  # 32 banks of 4 bytes

    @property
    def issue_lanes_per_sm_clock(self) -> int:
        """One warp instruction issued per sub-partition per clock, 32 lanes each."""
        return 32 * self.smsps_per_sm

    @property
    def int32_warp_instructions_per_sm_clock(self) -> float:
        return self.int32_lanes_per_sm_clock / 32


#: NVIDIA H200 SXM (GH100): 132 SMs of 4 sub-partitions, 1.98 GHz boost (NVIDIA H200 / H100
#: SXM product specifications); 64 results per clock per SM for 32-bit integer multiply-add
#: and ALU operations (CUDA C++ Programming Guide, arithmetic instruction throughput,
#: compute capability 9.0); PCIe Gen5 ×16: 64 GB/s raw per direction, ~50 GB/s assumed
#: effective (128b/130b coding, TLP headers, DMA set-up).  HBM3e: 4.8 TB/s (NVIDIA H200
#: product specification); shared memory: 32 banks of 4 bytes per clock per SM (CUDA C++
#: Programming Guide, compute capability 9.0, shared memory).  Occupancy limits per SM:
#: app/engine/device/occupancy.py.
H200 = Machine("H200 SXM", sms=132, smsps_per_sm=4, clock_hz=1.98e9, int32_lanes_per_sm_clock=64,
               pcie_bytes_per_s=50e9)


def work_dir(base: Path | None) -> Path:
    """The folder builds are cached in: ``base``, else ``.cache/gpu_model/<sources digest>``
    (a kernel change starts a fresh one, so a rerun after new counts does not recompile)."""
    path = base if base is not None else ROOT / ".cache" / "gpu_model" / sources_digest()[:20]
    path.mkdir(parents=True, exist_ok=True)
    return path


def cached_build(work: Path, name: str, build: Callable[[Path], ptxas.CompileResult]) -> tuple[Path, str, float]:
    """``work/<name>.cubin``, its ptxas log and nvcc seconds: built by ``build(cubin)`` the
    first time (raising RuntimeError when it fails), read back after."""
    cubin, log, secs = work / f"{name}.cubin", work / f"{name}.log", work / f"{name}.secs"
    if not (cubin.is_file() and log.is_file() and secs.is_file()):
        res = build(cubin)
        if not res.ok:
            raise RuntimeError(f"nvcc failed on {name}:\n{kernels.relative_log(res.log)[-3000:]}")
        log.write_text(res.log)
        secs.write_text(f"{res.seconds:.1f}")
    return cubin, log.read_text(), float(secs.read_text())


def build_unit(work: Path, unit: str) -> tuple[Path, str, float]:
    """A compilation unit of the registry, as shipped, through :func:`cached_build`."""
    return cached_build(work, unit, lambda cubin: kernels.compile_unit(kernels.source(unit), cubin=cubin))


def second_opinion(text: str, results: Path = RESULTS) -> list[str]:
    """Lines naming GPGPU-Sim's SIMULATED timing (bench/results/gpusim_timing.json, written by
    ``scripts/gpusim --timing``) of every kernel whose entry point or scheme ``text`` names:
    a prediction is shown beside what the simulator made of the same kernel, or says that it
    has no such opinion (and how far the simulated kernels fell from theirs). No lines where
    there is no timing record at all."""
    try:
        rows = [r for r in json.loads((results / "gpusim_timing.json").read_text())["rows"] if not r.get("error")]
    except (OSError, ValueError, KeyError):
        return []
    mine = [r for r in rows if r["entry"] in text or r["family"].removesuffix("-block") in text]
    if not mine:
        # a sampled row's ratio is an extrapolation from its window (timing.py): not in the spread
        ratios = sorted(r["simulated_over_predicted"] for r in rows
                        if r.get("simulated_over_predicted") and not r.get("sampled"))
        spread = (f": the kernels simulated so far ran at {ratios[0]:.2f}–{ratios[-1]:.2f} of their predictions, "
                  "a direction this one has not been checked against" if ratios else "")
        return ["", "## Second opinion: none", "",
                "No kernel of this record has been run in GPGPU-Sim's timing mode (`scripts/gpusim --timing`; "
                f"`bench/results/gpusim_timing.md` lists those that have), so this prediction stands alone{spread}."]
    lines = ["", "## Second opinion: SIMULATED (GPGPU-Sim timing mode)", "",
             "GPGPU-Sim's timing mode on one SM of its newest configuration (an Ampere SM at 1,132 MHz; it models "
             "PTX, not SASS: a direction and the size of a gap, not a measurement), one full wave (sampled where "
             "said: its first cycles simulated, the rest extrapolated at their rate), from "
             "`bench/results/gpusim_timing.md`; the prediction here scaled to that SM and clock:", ""]
    for r in mine:
        ratio = "—" if r.get("simulated_over_predicted") is None else f"{r['simulated_over_predicted']:.2f}"
        smp = r.get("sampled")
        how = (f"≈{r['cycles_per_verify']:,.0f} cycles per verify per SM, sampled ({smp['window_share']:.1%} of "
               "the wave's instructions simulated, the rest extrapolated)" if smp else
               f"{r['cycles_per_verify']:,.0f} cycles per verify per SM")
        lines.append(f"- `{r['entry']}`: SIMULATED {how} "
                     f"({r['simulated_verifies_per_s_per_sm']:,}/s per SM; carried to an H200 by SMs and clock "
                     f"{r['simulated_carried_to_h200_verifies_per_s'] / 1e6:.2f} M/s), simulated ÷ the prediction "
                     f"of its run {ratio}; single-lane share {r['single_lane_share']:.1%}, issue-slot use "
                     f"{r['issue_slot_use']:.1%} (commit `{r.get('commit', '?')[:12]}`)")
    return lines


def write(out: Path, name: str, markdown: list[str], data: dict | None, prov: dict, method: str) -> None:
    """``out/<name>.md`` (title, the PREDICTION provenance line naming ``method``, the command
    when ``prov`` carries one, then ``markdown``'s remaining lines, then :func:`second_opinion`)
    and, when ``data`` is given, ``out/<name>.json`` with the provenance and method added."""
    title, *body = markdown
    if "PREDICT" not in title:
        raise ValueError(f"a prediction's title must say so: {title!r}")
    out.mkdir(parents=True, exist_ok=True)
    command = ["", f"Command: `{prov['command']}`."] if prov.get("command") else []
    (out / f"{name}.md").write_text("\n".join([title, "", provenance.markdown_line(prov, "PREDICTION", method),
                                               *command, *body, *second_opinion("\n".join(body))]) + "\n")
    if data is not None:
        (out / f"{name}.json").write_text(json.dumps({"provenance": prov, "kind": "PREDICTION", "method": method,
                                                      **data}, indent=1, default=str) + "\n")
