"""GPGPU-Sim's timing mode on one verify kernel: a SIMULATED second opinion beside the model's
PREDICTED rates (scripts/gpu_model), written by ``scripts/gpusim --timing``.

How: the snapshot's newest configuration (:data:`CONFIG`, an Ampere SM of compute capability
8.6) cut to one SM, with ``-gpgpu_occupancy_sm_number 90`` so the service's sm_90 PTX is
accepted, runs one full wave of the kernel: as many blocks as that SM holds at once (its
limits read from the configuration, the kernel's registers and shared memory from ptxas),
each block's items valid and generated fresh (one batch, one launch).  From the simulator's
statistics of that launch: cycles per verify (the wave's cycles over its items), warp
instructions per cycle, issue-slot use (warp instructions over cycles × schedulers), the
single-lane share (issued warp instructions with one active thread over all issued), and
the cycles its schedulers issued nothing, by reason.  The verdicts are checked too (every
item valid), so a timing run is also an agreement run.

A wave too long to simulate whole (the ML-DSA thread kernel while its warps ran one lane at
a time: ~15 k simulated thread instructions per second here for 564 M, about ten hours) is
*sampled*: ``max_cycles`` stops the timing run after that many cycles (GPGPU-Sim's
``-gpgpu_max_cycle``), every figure above is the window's, and the cycles per verify are
extrapolated at the window's rate, using the wave's thread instructions counted by a
functional run of the same items (which also checks the verdicts).  The window is the start
of the kernel, so a later phase that runs faster or slower than the window is not seen.

Its limits (said in the record): GPGPU-Sim models PTX, not the SASS the GPU runs (ptxas's
scheduling, register allocation and instruction selection are not modelled; a PTX
instruction may be several SASS ones or none), an Ampere SM rather than Hopper's, and its
latencies are the configuration's; so a simulated rate is a direction and a size of gap,
not a measurement.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from app.core.errors import KernelLaunchError
from app.engine.device import ops, ptxas
from app.engine.device.registry import VerifyKernel
from app.engine.reference import kat
from app.engine.verify.grouping import batch_of, group_items
from scripts.lib.gpusim.build import Simulator
from scripts.lib.gpusim.device import PTX_TARGET, PTXAS_CACHED, SimDevice, TimingConfig, ptx_of, ptxas_env

#: The newest configuration of the snapshot's configs/tested-cfgs/ (RTX 3070, sm_86).
CONFIG = "SM86_RTX3070"
#: One SM (so a wave is that SM's resident blocks), and sm_90 PTX accepted.
OPTIONS = ("-gpgpu_n_clusters 1", "-gpgpu_n_cores_per_cluster 1", "-gpgpu_occupancy_sm_number 90")
#: The kernels the record holds (scheme families of scripts/lib/gpusim/check.py).
FAMILIES = ("ed25519", "secp256k1", "p256", "bip340", "ml-dsa-65", "ml-dsa-65-block", "slh-dsa-sha2-128f")
#: H200 SXM, the machine the predictions are for (scripts/lib/gpu_model.H200).
H200_SMS, H200_CLOCK_HZ = 132, 1.98e9


@dataclass(frozen=True)
class SmLimits:
    """One SM of a GPGPU-Sim configuration: threads, registers, shared memory and blocks it
    holds at once, its schedulers and its core clock."""

    threads: int
    registers: int
    shared_bytes: int
    blocks: int
    schedulers: int
    clock_hz: float

    def resident_blocks(self, block: int, registers: int, shared_bytes: int) -> int:
        """Blocks of ``block`` threads resident at once (registers allocated per warp in units
        of 256, as GPGPU-Sim and the hardware do; at least 1)."""
        warps = -(-block // 32)
        regs_per_warp = -(-max(1, registers) * 32 // 256) * 256
        fit = [self.blocks, self.threads // (warps * 32), self.registers // (regs_per_warp * warps)]
        if shared_bytes:
            fit.append(self.shared_bytes // shared_bytes)
        return max(1, min(fit))


def config_options(path: Path) -> dict[str, str]:
    """``-option value`` lines of a gpgpusim.config (the last of a repeated option wins)."""
    out = {}
    for line in path.read_text().splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2 and parts[0].startswith("-") and not line.startswith("#"):
            out[parts[0]] = parts[1].split("#")[0].strip()
    return out


def sm_limits(config_file: Path) -> SmLimits:
    o = config_options(config_file)
    threads = int(o["-gpgpu_shader_core_pipeline"].split(":")[0])
    return SmLimits(threads=threads, registers=int(o["-gpgpu_shader_registers"]),
                    shared_bytes=int(o["-gpgpu_shmem_size"]), blocks=int(o["-gpgpu_shader_cta"]),
                    schedulers=int(o["-gpgpu_num_sched_per_core"]),
                    clock_hz=float(o["-gpgpu_clock_domains"].split(":")[0]) * 1e6)


def usage(sim: Simulator, ptx: Path, entry: str) -> ptxas.EntryUsage:
    """Registers and shared memory of ``entry`` as the simulator's own ptxas step reports them."""
    proc = subprocess.run([str(PTXAS_CACHED), f"--gpu-name=sm_{PTX_TARGET.split('_')[1]}", "-v", str(ptx),
                           "--output-file", "/dev/null"], env={**os.environ, **ptxas_env(sim.src, sim.cuda)},
                          capture_output=True, text=True, check=True)
    for u in ptxas.parse(proc.stderr + proc.stdout):
        if u.entry == entry:
            return u
    raise RuntimeError(f"ptxas reported no {entry}")


_STAT = re.compile(r"^(gpu_sim_cycle|gpu_sim_insn|gpgpu_n_tot_w_icount|gpu_tot_issued_cta) = (\d+)\s*$", re.M)
_DISTRO = re.compile(r"^Stall:(\d+)\tW0_Idle:(\d+)\tW0_Scoreboard:(\d+)((?:\tW\d+:\d+)+)", re.M)
_CTA = re.compile(r"CTA/core = (\d+), limited by:(.*)$", re.M)
_FUNCTIONAL_INSN = re.compile(r"Done functional simulation \((\d+) instructions simulated\)")
#: What GPGPU-Sim prints when -gpgpu_max_cycle ends a kernel (and the process) early.
_BREAK = "break due to reaching the maximum cycles"


def parse_stats(log: str) -> dict[str, Any]:
    """The last kernel's statistics in a timing-mode log (raises RuntimeError when absent)."""
    stats = {k: int(v) for k, v in _STAT.findall(log)}
    distro = _DISTRO.findall(log)
    if "gpu_sim_cycle" not in stats or not distro:
        raise RuntimeError("the simulator printed no timing statistics (not in timing mode?)")
    stall, idle, scoreboard, rest = distro[-1]
    by_lanes = {int(a): int(b) for a, b in re.findall(r"W(\d+):(\d+)", rest)}
    cta = _CTA.findall(log)
    return {**stats, "stall": int(stall), "w0_idle": int(idle), "w0_scoreboard": int(scoreboard),
            "issued_by_active_lanes": by_lanes,
            "cta_per_core": int(cta[-1][0]) if cta else None, "cta_limited_by": cta[-1][1].strip() if cta else ""}


def functional_instructions(log: str) -> int:
    """Thread instructions of the last kernel of a functional-mode log (raises RuntimeError
    when absent)."""
    hits = _FUNCTIONAL_INSN.findall(log)
    if not hits:
        raise RuntimeError("the simulator printed no functional instruction count")
    return int(hits[-1])


@dataclass
class Timing:
    """One kernel's timing run (see the module doc)."""

    family: str
    entry: str
    items: int
    blocks: int
    block: int
    registers: int
    shared_bytes: int
    cycles: int = 0
    thread_instructions: int = 0
    warp_instructions: int = 0
    issued_by_active_lanes: dict[int, int] = field(default_factory=dict)
    stall: int = 0
    w0_idle: int = 0
    w0_scoreboard: int = 0
    cta_per_core: int | None = None
    cta_limited_by: str = ""
    agreed: bool = False
    wall_s: float = 0.0
    error: str = ""
    #: Set when the run was sampled: the window's cycle limit, and the whole wave's thread
    #: instructions (from a functional run of the same items).
    max_cycles: int | None = None
    wave_instructions: int = 0

    @property
    def sampled(self) -> bool:
        return self.max_cycles is not None

    def wave_cycles(self) -> float:
        """The wave's cycles: simulated, or for a sampled run extrapolated at the window's
        thread instructions per cycle."""
        if not self.sampled:
            return float(self.cycles)
        return self.cycles * self.wave_instructions / self.thread_instructions if self.thread_instructions else 0.0

    @property
    def issued(self) -> int:
        return sum(self.issued_by_active_lanes.values())

    def single_lane_share(self) -> float:
        return self.issued_by_active_lanes.get(1, 0) / self.issued if self.issued else 0.0

    def mean_active_lanes(self) -> float:
        return (sum(k * v for k, v in self.issued_by_active_lanes.items()) / self.issued) if self.issued else 0.0


def wave_items(family: str, kernel: VerifyKernel, blocks: int) -> list:
    """Valid items for ``blocks`` blocks: one per thread, or one per block (lanes = block)."""
    scheme = family.removesuffix("-block")
    n = blocks if kernel.lanes > 1 else blocks * kernel.block
    return kat.sign_items(scheme, n, seed=90, msg_len=32)


def run(sim: Simulator, family: str, kernel: VerifyKernel, *, blocks: int | None = None,
        keep_logs: Path | None = None, max_cycles: int | None = None) -> Timing:
    """One full wave of ``kernel`` (or ``blocks`` blocks) on one SM in timing mode; with
    ``max_cycles``, sampled when the wave runs longer (see the module doc)."""
    t0 = time.perf_counter()
    options = OPTIONS if max_cycles is None else (*OPTIONS, f"-gpgpu_max_cycle {max_cycles}")
    limits = sm_limits(sim.config_dir().parent / CONFIG / "gpgpusim.config")
    ptx = ptx_of(kernel.source)
    u = usage(sim, ptx, kernel.entry)
    wave = limits.resident_blocks(kernel.block, u.registers, u.shared_bytes)
    nblocks = blocks or wave
    items = wave_items(family, kernel, nblocks)
    res = Timing(family, kernel.entry, len(items), nblocks, kernel.block, u.registers, u.shared_bytes)
    keys = [key for key in group_items(items) if key is not None]
    if len(keys) != 1:
        raise RuntimeError(f"{family}: the wave's items make {len(keys)} batches, not one")
    batch = batch_of(keys[0], items)
    if max_cycles is not None:
        fdev = SimDevice(sim, max_grid=nblocks, keep_logs=None if keep_logs is None else keep_logs / "functional")
        res.agreed = bool(np.all(ops.verify_batch(fdev, kernel, batch)))
        res.wave_instructions = functional_instructions(fdev.last_log)
    dev = SimDevice(sim, max_grid=nblocks, keep_logs=keep_logs, timing=TimingConfig(CONFIG, options))
    try:
        res.agreed = bool(np.all(ops.verify_batch(dev, kernel, batch)))
    except KernelLaunchError:
        if max_cycles is None or _BREAK not in dev.last_log:
            raise
        res.max_cycles = max_cycles  # the window ended before the wave: sampled
    stats = parse_stats(dev.last_log)
    res.cycles, res.thread_instructions = stats["gpu_sim_cycle"], stats["gpu_sim_insn"]
    res.warp_instructions = stats.get("gpgpu_n_tot_w_icount", 0)
    res.issued_by_active_lanes = stats["issued_by_active_lanes"]
    res.stall, res.w0_idle, res.w0_scoreboard = stats["stall"], stats["w0_idle"], stats["w0_scoreboard"]
    res.cta_per_core, res.cta_limited_by = stats["cta_per_core"], stats["cta_limited_by"]
    res.wall_s = time.perf_counter() - t0
    return res


# ------------------------------------------------------------------ the model's predictions
def predicted_h200_rate(results: Path, family: str) -> float | None:
    """The model's PREDICTED H200 verifies/s for ``family``'s kernel, from scripts/gpu_model's
    records (gpu_model.json, ml_dsa_sass.json, slh_dsa_prediction.json), or None."""
    import json

    scheme, variant = (family.removesuffix("-block"), "block") if family.endswith("-block") else (family, "thread")
    try:
        if scheme.startswith("ml-dsa-"):
            return float(json.loads((results / "ml_dsa_sass.json").read_text())["sets"][scheme][variant]
                         ["predicted_h200_verifies_per_s"])
        if scheme.startswith("slh-dsa-"):
            sets = json.loads((results / "slh_dsa_prediction.json").read_text())["sets"]
            return next(float(s["predicted_per_s"]) for s in sets if s["scheme"] == scheme)
        rows = json.loads((results / "gpu_model.json").read_text())["rows"]
        return next(float(r["predicted_kernel_rate"]) for r in rows if r["scheme"] == scheme)
    except (OSError, KeyError, StopIteration, ValueError):
        return None


def row(t: Timing, limits: SmLimits, predicted_h200: float | None) -> dict[str, Any]:
    """The record's row: simulated figures, and the prediction scaled to the same SM and clock
    (per SM and per cycle: H200's rate / (132 SMs × 1.98 GHz) × the config's clock)."""
    cyc_per_verify = t.wave_cycles() / t.items if t.items else 0.0
    sim_sm_rate = limits.clock_hz / cyc_per_verify if cyc_per_verify else 0.0
    pred_sm_rate = predicted_h200 / (H200_SMS * H200_CLOCK_HZ) * limits.clock_hz if predicted_h200 else None
    return {
        "family": t.family, "entry": t.entry, "items": t.items, "blocks": t.blocks, "block": t.block,
        "registers": t.registers, "shared_bytes": t.shared_bytes, "cta_per_core": t.cta_per_core,
        "cta_limited_by": t.cta_limited_by, "agreed": t.agreed,
        "cycles": t.cycles, "cycles_per_verify": round(cyc_per_verify, 1),
        "warp_ipc": round(t.warp_instructions / t.cycles, 3) if t.cycles else 0.0,
        "thread_ipc": round(t.thread_instructions / t.cycles, 2) if t.cycles else 0.0,
        "issue_slot_use": round(t.warp_instructions / (t.cycles * limits.schedulers), 3) if t.cycles else 0.0,
        "single_lane_share": round(t.single_lane_share(), 4), "mean_active_lanes": round(t.mean_active_lanes(), 2),
        "stall_cycles": t.stall, "idle_cycles": t.w0_idle, "scoreboard_cycles": t.w0_scoreboard,
        "simulated_verifies_per_s_per_sm": round(sim_sm_rate),
        "predicted_verifies_per_s_per_sm": None if pred_sm_rate is None else round(pred_sm_rate),
        "simulated_over_predicted": None if not pred_sm_rate else round(sim_sm_rate / pred_sm_rate, 3),
        "predicted_h200_verifies_per_s": predicted_h200,
        "simulated_carried_to_h200_verifies_per_s": round(sim_sm_rate / limits.clock_hz * H200_SMS * H200_CLOCK_HZ),
        "wall_s": round(t.wall_s, 1), "error": t.error,
        "sampled": None if not t.sampled else {
            "max_cycles": t.max_cycles, "window_thread_instructions": t.thread_instructions,
            "wave_thread_instructions": t.wave_instructions,
            "window_share": round(t.thread_instructions / t.wave_instructions, 4) if t.wave_instructions else 0.0},
    }


LIMITS_TEXT = (
    "GPGPU-Sim models PTX, not the SASS a GPU runs: ptxas's scheduling, register allocation and instruction "
    "selection are not modelled (a PTX instruction may be several SASS instructions or none), the SM is an Ampere "
    "one (compute capability 8.6, the snapshot's newest configuration) rather than Hopper's, and the latencies are "
    "the configuration's.  A simulated rate is therefore a direction and the size of a gap, not a measurement; the "
    "carried-to-H200 column only scales per SM and per clock (132 SMs × 1.98 GHz), as the model's own column is "
    "scaled down to this SM.")


def markdown(data: dict[str, Any]) -> str:
    """bench/results/gpusim_timing.md (written by scripts/gpusim --timing, never by hand)."""
    from bench import provenance

    md = ["# SIMULATED cycles per verify in GPGPU-Sim's timing mode, beside the PREDICTED rates "
          "(written by scripts/gpusim --timing)", "",
          provenance.markdown_line(data["provenance"], "SIMULATION", "GPGPU-Sim's timing mode, below") + "  Every "
          "rate below is SIMULATED or PREDICTED, none measured on a GPU.", "",
          f"Command: `{data['command']}`.  Configuration {data['config']} with "
          + ", ".join(f"`{o}`" for o in data["options"]) + f" (one SM, {data['limits']['schedulers']} schedulers, "
          f"{data['limits']['clock_hz'] / 1e6:.0f} MHz); one full wave: the SM's resident blocks of valid items, one "
          "launch.  Every rate here is SIMULATED (verifies/s per SM at this clock) or PREDICTED (scripts/gpu_model, "
          "H200, scaled to one SM and this clock).", "",
          "| kernel | items (blocks × block) | regs | cycles / verify | warp IPC | issue-slot use | "
          "single-lane share | mean active lanes | SIMULATED /s/SM | PREDICTED /s/SM | sim ÷ pred | "
          "SIMULATED carried to H200 /s | "
          "PREDICTED H200 /s | verdicts |",
          "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in data["rows"]:
        if r.get("error"):
            md.append(f"| {r['entry']} ({r['family']}) | — | — | — | — | — | — | — | — | — | — | — | — | "
                      f"ERROR: {r['error'][:200]} |")
            continue
        pred = "—" if r["predicted_verifies_per_s_per_sm"] is None else f"{r['predicted_verifies_per_s_per_sm']:,}"
        ratio = "—" if r["simulated_over_predicted"] is None else f"{r['simulated_over_predicted']:.2f}"
        h200 = "—" if r["predicted_h200_verifies_per_s"] is None else f"{r['predicted_h200_verifies_per_s']:,.0f}"
        cycles = f"≈{r['cycles_per_verify']:,.0f} (sampled)" if r.get("sampled") else f"{r['cycles_per_verify']:,.0f}"
        md.append(f"| {r['entry']} ({r['family']}) | {r['items']} ({r['blocks']} × {r['block']}) | {r['registers']} | "
                  f"{cycles} | "
                  f"{r['warp_ipc']:.2f} | {r['issue_slot_use']:.1%} | "
                  f"{r['single_lane_share']:.1%} | {r['mean_active_lanes']:.1f} | "
                  f"{r['simulated_verifies_per_s_per_sm']:,} | {pred} | {ratio} | "
                  f"{r['simulated_carried_to_h200_verifies_per_s']:,} | {h200} | "
                  f"{'all valid accepted' if r['agreed'] else 'WRONG'} |")
    sampled = [r for r in data["rows"] if r.get("sampled") and not r.get("error")]
    if sampled:
        md += ["", "**Sampled rows** (the wave ran past `--max-cycles`; GPGPU-Sim's `-gpgpu_max_cycle`): "
               + "; ".join(f"{r['entry']}: its first {r['sampled']['max_cycles']:,} cycles ran "
                           f"{r['sampled']['window_thread_instructions']:,} of the wave's "
                           f"{r['sampled']['wave_thread_instructions']:,} thread instructions "
                           f"({r['sampled']['window_share']:.1%})" for r in sampled)
               + ".  The wave's instructions are counted by a functional run of the same items, which also checked "
               "their verdicts; cycles per verify are extrapolated at the window's instructions per cycle, and every "
               "other figure of the row is the window's.  The window is the kernel's start, so a later phase running "
               "at another rate is not seen (docs/kernels.md says how far this moved the ML-DSA block kernel)."]
    md += ["", "Rows are kept across runs (`--timing FAMILIES` replaces those families' rows); each row's commit: "
           + ", ".join(f"{r['family']} `{str(r.get('commit', '?'))[:12]}`" for r in data["rows"]) + ".",
           "", "Scheduler cycles that issued nothing (summed over the SM's schedulers; GPGPU-Sim's \"Warp Occupancy "
           "Distribution\"): *stall* = the pipeline could not take an issued instruction, *idle* = no warp ready, "
           "*scoreboard* = every ready warp waiting on an operand.", "",
           "| kernel | cycles | stall | idle | scoreboard | resident blocks (simulator; limited by) | wall s |",
           "|---|---:|---:|---:|---:|---|---:|"]
    for r in data["rows"]:
        if not r.get("error"):
            md.append(f"| {r['entry']} | {r['cycles']:,} | {r['stall_cycles']:,} | {r['idle_cycles']:,} | "
                      f"{r['scoreboard_cycles']:,} | {r['cta_per_core']} ({r['cta_limited_by'] or '—'}) | "
                      f"{r['wall_s']:.0f} |")
    md += ["", "**Limits of the method.** " + LIMITS_TEXT, ""]
    if data.get("not_run"):
        md += ["Not run in this record: " + ", ".join(data["not_run"]) + ".", ""]
    return "\n".join(md)
