"""What a simulator run found, as lines, a JSON record and bench/results/gpusim.md."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from bench import provenance
from scripts.lib.gpusim import build
from scripts.lib.gpusim.check import Result


def control_ok(r: Result) -> bool:
    """The negative control passes when the broken kernel was caught."""
    return not r.error and r.items > 0 and r.disagreements > 0


def passed(results: list[Result]) -> bool:
    """Every family agreed and the control (where run) disagreed."""
    return bool(results) and all(control_ok(r) if r.family == "control" else r.agreed for r in results)


def verdict(r: Result) -> str:
    if r.error:
        return "ERROR"
    if r.family == "control":
        return "caught (as it must be)" if control_ok(r) else "NOT CAUGHT"
    return "agrees" if r.agreed else "DISAGREES"


def per_item(r: Result) -> str:
    return f"{r.kernel_s / r.items:.3f}" if r.items else "—"


def line(r: Result) -> str:
    text = (f"gpusim: {r.family:<18} {verdict(r):<22} {r.items:>5} items, {r.disagreements} disagreements, "
            f"{r.processes} processes, {r.wall_s:.1f} s wall, {per_item(r)} s per item in kernels")
    if r.error:
        text += f"\n  {r.error[-1500:]}"
    elif r.first:
        text += "\n  first: " + "; ".join(r.first[:5])
    return text


def as_dict(r: Result) -> dict[str, Any]:
    return {**asdict(r), "verdict": verdict(r)}


def simulator_info(sim: build.Simulator) -> dict[str, Any]:
    return {"home": str(sim.home), "config": build.CONFIG, "mode": "functional (-gpgpu_ptx_sim_mode 1)",
            "built_seconds": round(sim.seconds, 1), "toolkit": build.toolkit_release(sim.cuda)}


def entries_run(data: dict[str, Any]) -> list[str]:
    """Every entry point a run's families launched (sorted), the negative control's aside."""
    return sorted({e for f in data["families"] if f["family"] != "control" for e in f.get("entries", [])})


def markdown(data: dict[str, Any]) -> str:
    """The result page (written by scripts/gpusim, never by hand)."""
    sim = data["simulator"]
    built = f"simulator built in {sim['built_seconds']:.0f} s" if sim["built_seconds"] else "simulator cached"
    md = ["# The kernels' PTX under GPGPU-Sim against the CPU (written by scripts/gpusim)", "",
          provenance.markdown_line(data["provenance"]), "",
          f"Sample `{data['sample']}`; GPGPU-Sim {sim['config']}, {sim['mode']}; PTX by NVRTC for compute_90 as the "
          f"service builds it; harness compiled with {sim['toolkit']}.  Whole run {data['seconds']:.0f} s "
          f"({built}).  "
          f"Overall: **{'PASS' if data['passed'] else 'FAIL'}**.", "",
          f"Command: `{data.get('command', 'scripts/gpusim')}`"
          + ("" if any(f["family"] == "control" for f in data["families"]) else
             " (the negative control skipped here: CI runs it in tests/test_gpusim.py)") + ".", "",
          "| family | kernel | items | disagreements | verdict | processes | wall s | s per item (in kernels) |",
          "|---|---|---:|---:|---|---:|---:|---:|"]
    for f in data["families"]:
        per = f"{f['kernel_s'] / f['items']:.3f}" if f["items"] else "—"
        md.append(f"| {f['family']} | {f['kernel']} | {f['items']} | {f['disagreements']} | {f['verdict']} | "
                  f"{f['processes']} | {f['wall_s']:.1f} | {per} |")
    ran = entries_run(data)
    md += ["", f"Entry points run under the simulator ({len(ran)}, the negative control's not counted): "
           + ", ".join(f"`{e}`" for e in ran) + ".",
           "", "An item is a signature, a message hashed, or (merkle) a whole tree.", "",
           "Per family (samples, and anything odd):", ""]
    for f in data["families"]:
        notes = "; ".join(f["notes"]) or "—"
        md.append(f"- **{f['family']}**: {notes}" + (f"; first disagreements: {'; '.join(f['first'][:5])}"
                                                     if f["first"] else "")
                  + (f"; error: `{f['error'][:300]}`" if f["error"] else ""))
    md += ["", "Agreement means every verdict equals the CPU reference's (app/engine/reference/reference.py) and "
           "every leaf and root equals app/engine/commit/merkle.py's; hash digests equal hashlib's.  The "
           "control must *disagree*: it is a copy of ed25519.cu without the barrier after the block's batched "
           "inversion.  What the simulator shows and what it cannot: docs/kernels.md, \"Device code without a "
           "GPU\".", ""]
    return "\n".join(md)
