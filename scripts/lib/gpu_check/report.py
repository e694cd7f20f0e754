"""The GPU check's Markdown report and verdict, rebuilt from the journal's records
(scripts/lib/gpu_check/steps.py lists the record kinds) after every step, so the report on
disk is always that of everything done so far.

Measured rates are put next to the PREDICTED ones of ``bench/results/`` (their files name
the method): ``gpu_model.json`` (Ed25519, secp256k1: kernel and end to end),
``ml_dsa_sass.json`` and ``slh_dsa_prediction.json`` (kernel).
"""

from __future__ import annotations

import json
from pathlib import Path

from bench import provenance

RESULTS = Path(__file__).resolve().parents[3] / "bench" / "results"


def predictions(results: Path = RESULTS) -> dict[str, dict[str, float]]:
    """PREDICTED H200 rates per scheme (verifies/s): ``kernel`` and, where modelled,
    ``end_to_end``, with ``source`` naming the file.  Files that are missing are skipped."""
    out: dict[str, dict] = {}

    def load(name: str):
        p = results / name
        return json.loads(p.read_text()) if p.is_file() else None

    if (gm := load("gpu_model.json")) is not None:
        for r in gm.get("rows", []):
            out[r["scheme"]] = {"kernel": r.get("predicted_kernel_rate"), "end_to_end": r.get("predicted_end_to_end"),
                                "source": "gpu_model.json"}
    if (ml := load("ml_dsa_sass.json")) is not None:
        for sid, r in ml.get("sets", {}).items():
            out[sid] = {"kernel": r.get("predicted_h200_verifies_per_s"), "source": "ml_dsa_sass.json"}
    if (slh := load("slh_dsa_prediction.json")) is not None:
        for r in slh.get("sets", []):
            out[r["scheme"]] = {"kernel": r.get("predicted_per_s"), "source": "slh_dsa_prediction.json"}
    return out


def problems(records: list[dict]) -> list[str]:
    """Everything that went wrong so far, one line each (empty: all passed)."""
    out = []
    for r in records:
        kind, step = r.get("kind"), r.get("step", "?")
        if kind == "step" and r["status"] not in ("ok", "skipped"):
            last = (r.get("stderr_tail") or [""])[-1]
            out.append(f"step {step}: {r['status']} after {r['seconds']:.0f} s" + (f" ({last[:160]})" if last else ""))
        elif kind == "error":
            out.append(f"step {step}: {r['error'].strip().splitlines()[-1][:200]}")
        elif kind == "build" and not r["ok"]:
            out.append(f"build failed: {r['source']} {r['entry']}: {r.get('error', '')[:160]}")
        elif kind == "check" and (r.get("failed") or r.get("roots_bad")):
            what = " ".join(str(r[k]) for k in ("file", "scheme") if r.get(k)) or r["what"]
            out.append(f"{what}: {r['failed']} of {r['checked']} {r['what']} differ"
                       + (f", {r['roots_bad']} roots differ" if r.get("roots_bad") else ""))
        elif kind == "rate" and (r.get("verdicts_ok") is False or r.get("root_ok") is False):
            out.append(f"{r['row']} at {r['items']} items: verdicts ok {r.get('verdicts_ok')}, "
                       f"root ok {r.get('root_ok')}")
        elif kind == "pipeline" and not (r["verdicts_ok"] and r["same_as_one_launch"] and r["root_ok"]):
            out.append(f"pipeline {r['scheme']}: results differ from the expected or one-launch ones")
        elif kind == "engine" and r.get("status") == "run" and not (
                r["ready"] and r["hybrid"]["verdicts_ok"] and r["pool"]["verdicts_ok"]):
            out.append("engine path: not ready or verdicts differ")
        elif kind == "engine" and r.get("status") == "run" and not r["hybrid"].get("device_used"):
            out.append(f"engine path: the device backend did not take part ({r['hybrid']['backend']})")
    return out


def _rate(v: float | None) -> str:
    if not v:
        return "–"
    return f"{v / 1e6:.2f} M" if v >= 1e6 else (f"{v / 1e3:.1f} k" if v >= 1e3 else f"{v:.0f}")


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a and b else "–"


def render(records: list[dict]) -> str:
    """The whole report of ``records`` (Markdown)."""
    run = next((r for r in records if r.get("kind") == "run"), {})
    dev = next((r for r in records if r.get("kind") == "device"), {})
    env = next((r for r in records if r.get("kind") == "env"), {})
    steps = [r for r in records if r.get("kind") == "step"]
    end = next((r for r in records if r.get("kind") in ("end", "stopped")), None)
    probs = problems(records)
    planned = run.get("plan", [])
    done = {r["step"] for r in steps}
    left = [s for s in planned if s not in done]
    if probs:
        verdict = "FAIL"
    elif left:
        verdict = "INCOMPLETE"
    else:
        verdict = "PASS"
    md = [f"# GPU check — {dev.get('name', '(no device yet)')} ({run.get('backend', '?')})", ""]
    if run.get("provenance"):
        md += [provenance.markdown_line(run["provenance"]), ""]
    md += [f"- verdict: **{verdict}**" + (f" ({end['kind']}: {end.get('reason', '')})" if end and
                                           end["kind"] == "stopped" else ""),
           f"- cap {run.get('cap', '?')} s; steps done {len(steps)} of {len(planned)}"
           + (f"; not run: {', '.join(left)}" if left else ""),
           f"- kernel sources sha256 `{str(run.get('kernel_sources_sha256', ''))[:16]}`; "
           f"data commit `{run.get('data_commit', '?')}`"]
    md += [f"  - {p}" for p in probs]
    md += ["", "## Steps", "", "| step | status | seconds |", "|---|---|---|"]
    md += [f"| {r['step']} | {r['status']} | {r['seconds']:.1f} |" for r in steps]
    md += ["", "## Environment", ""]
    md += [f"- device: {json.dumps({k: v for k, v in dev.items() if k not in ('t', 'step', 'kind')})}"]
    if env:
        smi = env.get("smi", {})
        md += [f"- driver {smi.get('Driver Version', '?')}, CUDA (driver) {smi.get('CUDA Version', '?')}; "
               f"toolchain {json.dumps(env.get('toolchain'))}; python {json.dumps(env.get('python'))}",
               f"- clocks: {json.dumps(smi.get('Clocks'))}; max {json.dumps(smi.get('Max Clocks'))}",
               f"- PCIe: {json.dumps(smi.get('PCI', {}).get('GPU Link Info'))}",
               f"- memory: {json.dumps(smi.get('FB Memory Usage'))}"]
    builds = [r for r in records if r.get("kind") == "build"]
    if builds:
        md += ["", "## Builds", "", "| source | entry | build | ok | registers | local B | module from |",
               "|---|---|---|---|---|---|---|"]
        seen = set()
        for r in builds:
            key = (r["source"], r["entry"], r.get("variant"))
            if key in seen:
                continue
            seen.add(key)
            md.append(f"| {r['source']} | {r['entry']} | {_build_label(r)} | "
                      f"{'yes' if r['ok'] else 'NO'} | {r.get('num_regs', '')} | {r.get('local_size_bytes', '')} | "
                      f"{r.get('origin', '')} |")
    checks = [r for r in records if r.get("kind") == "check"]
    if checks:
        md += ["", "## Correctness", "", "| check | scheme | file | checked | failed | roots ok | roots bad |",
               "|---|---|---|---|---|---|---|"]
        md += [f"| {r['what']} | {r.get('scheme', '')} | {r.get('file', '')} | {r['checked']} | {r['failed']} | "
               f"{r.get('roots_ok', '')} | {r.get('roots_bad', '')} |" for r in checks]
    md += _measured_vs_predicted(records)
    rates = [r for r in records if r.get("kind") == "rate"]
    if rates:
        md += ["", "## Every timed batch", "", "| row | items | items/s | clock | runs | verdicts ok | root ok |",
               "|---|---|---|---|---|---|---|"]
        for r in rates:
            note = r.get("skipped") or r.get("unavailable")
            md.append(f"| {r['row']} | {r['items']} | {note or _rate(r.get('items_per_second'))} | "
                      f"{r.get('clock', '')} | {r.get('runs', '')} | {r.get('verdicts_ok', '')} | "
                      f"{r.get('root_ok', '')} |")
    md += _bls_batches(records)
    md += _kernel_variants(records)
    md += _register_caps(records)
    md += _gpu_over_cpu(rates)
    for r in records:
        if r.get("kind") == "engine":
            md += ["", f"Engine path: {json.dumps({k: v for k, v in r.items() if k not in ('t', 'kind')})[:1500]}"]
    md += ["", "Kernel rows: device events around device-resident work. End-to-end and pipelined rows: wall "
           "time from pinned host memory to verdicts, leaves and root back on the host. Each: the median "
           "of the runs after one warm-up. Every timed batch's verdicts are checked; end-to-end batches' "
           "device roots are compared with hashlib's. Predicted rates are PREDICTIONS from SASS "
           "(bench/results/, each file names its method), not measurements."]
    return "\n".join(md) + "\n"


def _measured_vs_predicted(records: list[dict]) -> list[str]:
    # the first round's rows (saturating batches), not the later size sweep's
    rates = {r["row"]: r for r in records if r.get("kind") == "rate" and r.get("items_per_second")
             and str(r.get("step", "")).startswith("time:")}
    pipes = {r["scheme"]: r for r in records if r.get("kind") == "pipeline"}
    schemes = sorted({r["row"].split()[1] for r in rates.values() if r["row"].startswith("verify ")
                      and r["row"].endswith("(kernel)") and "msgs" not in r["row"]} | set(pipes))
    if not schemes:
        return []
    pred = predictions()
    out = ["", "## Measured and PREDICTED (verifies/s)", "",
           "| scheme | kernel | predicted kernel | measured/predicted | end to end | predicted end to end "
           "| pipelined | one launch | pipelined/one launch |",
           "|---|---|---|---|---|---|---|---|---|"]
    for sid in schemes:
        k = rates.get(f"verify {sid} (kernel)", {}).get("items_per_second")
        e = rates.get(f"verify+commit {sid} (end to end)", {}).get("items_per_second")
        p = pred.get(sid, {})
        pipe = pipes.get(sid, {})
        out.append(f"| {sid} | {_rate(k)} | {_rate(p.get('kernel'))} | {_ratio(k, p.get('kernel'))} | {_rate(e)} | "
                   f"{_rate(p.get('end_to_end'))} | {_rate(pipe.get('pipelined_items_per_second'))} | "
                   f"{_rate(pipe.get('one_launch_items_per_second'))} | "
                   f"{_ratio(pipe.get('pipelined_items_per_second'), pipe.get('one_launch_items_per_second'))} |")
    return out


def _bls_batches(records: list[dict]) -> list[str]:
    """The ``bls`` records: what each checked BLS12-381 RLC batch did (groups, failed groups,
    items whose verdict came from a single verify)."""
    rows = [r for r in records if r.get("kind") == "bls"]
    if not rows:
        return []
    md = ["", "## BLS12-381 batches by random linear combination", "",
          "| batch | group | items | groups | failed groups | single verifies |", "|---|---:|---:|---:|---:|---:|"]
    md += [f"| {r['batch']} | {r['group']} | {r['items']} | {r['groups']} | {r['failed_groups']} | {r['singles']} |"
           for r in rows]
    return md


def _build_label(r: dict) -> str:
    return r.get("variant", "shipped") + (f" ({' '.join(r['options'])})" if r.get("options") else "")


def _register_caps(records: list[dict]) -> list[str]:
    """The ``caps`` steps' rows: each build's registers, local bytes and rate, against the
    shipped build of the same scheme on the same batch."""
    rows = [r for r in records if r.get("kind") == "rate" and r.get("variant") and r.get("items_per_second")]
    if not rows:
        return []
    regs = {(r["step"].split(":", 1)[-1], r.get("variant")): r for r in records
            if r.get("kind") == "build" and str(r.get("step", "")).startswith("caps:")}
    shipped = {r["step"]: r["items_per_second"] for r in rows if r["variant"] == "shipped"}
    out = ["", "## Register caps (kernel only, same batch per scheme)", "",
           "| scheme | build | registers | local B | items | verifies/s | over shipped |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        sid = r["step"].split(":", 1)[-1]
        b = regs.get((sid, r["variant"]), {})
        v = r["items_per_second"]
        out.append(f"| {sid} | {_build_label(r)} | {b.get('num_regs', '')} | {b.get('local_size_bytes', '')} | "
                   f"{r['items']} | {_rate(v)} | {_ratio(v, shipped.get(r['step']))} |")
    return out


def _kernel_variants(records: list[dict]) -> list[str]:
    """The ``variants`` steps: each kernel of a scheme with several, its vector check, and
    its rate on the batch every kernel of that scheme ran, against the first kernel's."""
    checks = {(r["scheme"], r["kernel_variant"]): r for r in records
              if r.get("kind") == "check" and r.get("what") == "kernel variant"}
    rows = [r for r in records if r.get("kind") == "rate" and r.get("kernel_variant")]
    if not checks and not rows:
        return []
    first: dict[str, float] = {}
    for r in rows:
        first.setdefault(r["step"], r.get("items_per_second") or 0.0)
    out = ["", "## Kernel variants (vectors first; then kernel only, same batch per scheme)", "",
           "| scheme | kernel | vectors checked | failed | items | verdicts ok | verifies/s | over the first |",
           "|---|---|---|---|---|---|---|---|"]
    for (sid, name), c in checks.items():
        r = next((x for x in rows if x["step"] == f"variants:{sid}" and x["kernel_variant"] == name), {})
        v = r.get("items_per_second")
        out.append(f"| {sid} | {name} | {c['checked']} | {c['failed']} | {r.get('items', '')} | "
                   f"{r.get('verdicts_ok', '')} | {_rate(v)} | {_ratio(v, first.get(r.get('step', '')))} |")
    return out


def _gpu_over_cpu(rates: list[dict]) -> list[str]:
    gpu = {r["message_bytes"]: r for r in rates if r.get("message_bytes") and r["row"].endswith("(kernel)")}
    cpu = {r["message_bytes"]: r for r in rates if r.get("message_bytes") and "(cpu backend" in r["row"]}
    if not gpu:
        return []
    out = ["", "## Ed25519: GPU over CPU", "", "| message bytes | kernel /s | CPU backend /s | GPU/CPU |",
           "|---|---|---|---|"]
    for size in sorted(gpu):
        g, c = gpu[size].get("items_per_second"), cpu.get(size, {}).get("items_per_second")
        out.append(f"| {size} | {_rate(g)} | {cpu.get(size, {}).get('unavailable') or _rate(c)} | {_ratio(g, c)} |")
    return out
