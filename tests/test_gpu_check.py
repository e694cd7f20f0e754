"""scripts/prepare_gpu_check and scripts/gpu_check's dry runs (host build, and the CUDA path
over tests/fake_cupy.py), no GPU.

gpu_check must run on a GPU host that has numpy and CuPy but none of the web stack or the
signing libraries: a sitecustomize on PYTHONPATH blocks those imports in the parent and in
every step process it starts.  What a run has done must survive a kill at any moment, a
hanging step must cost that step only, and every timed verdict is checked.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.engine.device import hostbuild, registry
from bench import provenance

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check"
BLOCKED = ["fastapi", "pydantic", "pydantic_settings", "starlette", "uvicorn", "httpx", "jinja2", "nacl",
           "coincurve", "cryptography", "pqcrypto", "py_arkworks_bls12381", "milagro_bls_binding", "py_ecc",
           "prometheus_client", "cupy"]
SMALL = ["--max-log2", "10", "--reps", "2", "--schemes", "ed25519,secp256k1"]

pytestmark = pytest.mark.skipif(hostbuild.compiler() is None, reason="no C++ compiler")


@pytest.fixture(scope="module")
def bare(tmp_path_factory) -> dict:
    """The environment of a bare GPU host: the web stack and signing libraries (and here,
    CuPy) cannot be imported, in this process's children and theirs."""
    site = tmp_path_factory.mktemp("bare_site")
    (site / "sitecustomize.py").write_text(f"import sys\nfor m in {BLOCKED!r}:\n    sys.modules[m] = None\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")])
    return env


def gpu_check(env: dict, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout,
                          env=env)


def journal(out: Path) -> list[dict]:
    [path] = list(out.glob("gpu_*.jsonl"))
    return [json.loads(line) for line in path.read_text().splitlines()]


def steps_of(recs: list[dict]) -> dict[str, dict]:
    return {r["step"]: r for r in recs if r["kind"] == "step"}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_check_data")
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "prepare_gpu_check"), "--out", str(out),
                           "--generated", "1", "--schemes", "ed25519,secp256k1", "--no-kernels", "--no-wheels"],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    return out


def test_prepared_data_has_what_the_gpu_host_needs(data):
    manifest = json.loads((data / "manifest.json").read_text())
    assert manifest["generated_vectors"] == 2 * 2 and manifest["kernel_sources_sha256"]
    with gzip.open(data / "vectors" / "generated.jsonl.gz", "rt") as f:
        recs = [json.loads(line) for line in f]
    assert {r["scheme"] for r in recs} == {"ed25519", "secp256k1"}
    with gzip.open(data / "vectors" / "external.jsonl.gz", "rt") as f:
        external = f.read().splitlines()
    assert all(json.loads(line).get("signature_format", "raw") == "raw" for line in external)  # DER converted
    assert len(external) == manifest["external_vectors"]
    merkle_cases = json.loads((data / "merkle.json").read_text())
    assert {c["n"] for c in merkle_cases} >= {1, 2, 3, 1025, 65_537} and all(c["seed"] for c in merkle_cases)
    hashes = json.loads((data / "hashes.json").read_text())
    assert len(hashes["messages"]) == 301 and set(hashes["xof"]) == {"shake128", "shake256"}
    bench = [json.loads(line) for line in (data / "bench.jsonl").read_text().splitlines()]
    assert manifest["bench_items"] == len(bench) == 3 * 64
    assert sorted({len(r["message"]) // 2 for r in bench}) == [32, 64, 256]  # hex
    assert {r["scheme"] for r in bench} == {"ed25519"} and all(r["expected"] for r in bench)


def test_dry_run_on_the_host_build_does_every_step_and_checks_every_result(bare, data, tmp_path):
    out = tmp_path / "out"
    proc = gpu_check(bare, "--backend", "kernel-host", "--data", str(data), "--out", str(out), "--cap", "200", *SMALL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    recs = journal(out)
    run = recs[0]
    assert run["kind"] == "run" and recs[-1]["kind"] == "end" and recs[-1]["ok"]
    steps = steps_of(recs)
    assert list(steps) == run["plan"] and all(s["status"] == "ok" for s in steps.values())
    # the order is by value: every scheme's correctness, then one saturating batch each, ...
    assert run["plan"][:7] == ["env", "device", "hashes", "check:ed25519", "check:secp256k1", "time:ed25519",
                               "time:secp256k1"]
    env = next(r for r in recs if r["kind"] == "env")
    assert env["toolchain"]["nvrtc"] and "python" in env["python"]
    builds = [r for r in recs if r["kind"] == "build"]
    assert builds and all(b["ok"] and b["origin"] == "host build" for b in builds)
    checks = [r for r in recs if r["kind"] == "check"]
    assert {c["what"] for c in checks} >= {"sha256", "shake256", "merkle roots", "vectors"}
    assert all(c["failed"] == 0 and c["checked"] > 0 and not c.get("roots_bad") for c in checks)
    rates = [r for r in recs if r["kind"] == "rate" and "items_per_second" in r]
    verify_rows = [r for r in rates if r["row"].startswith("verify")]
    assert verify_rows and all(r["verdicts_ok"] for r in verify_rows)  # every timed verdict checked
    assert all(r["root_ok"] for r in rates if r["row"].startswith("verify+commit"))
    big = [r for r in rates if "(big, mixed verdicts)" in r["row"]]
    assert {r["step"] for r in big} == {"big:ed25519", "big:secp256k1"} and all(r["root_ok"] for r in big)
    pipes = [r for r in recs if r["kind"] == "pipeline"]
    assert {p["scheme"] for p in pipes} == {"ed25519", "secp256k1"}
    assert all(p["same_as_one_launch"] and p["verdicts_ok"] and p["root_ok"] and p["chunks"] >= 2 for p in pipes)
    # the register-cap variants, side by side on one batch per scheme, each checked
    caps = [r for r in rates if str(r["step"]).startswith("caps:")]
    assert {(r["step"], r["variant"]) for r in caps} == {
        (f"caps:{s}", v) for s in ("ed25519", "secp256k1") for v in ("shipped", "regs0", "regs128")}
    assert len({(r["step"], r["items"]) for r in caps}) == 2 and all(r["verdicts_ok"] for r in caps)
    # no pynacl on a bare host: the CPU rows and the engine path say so
    assert any(r.get("unavailable") for r in recs if r["kind"] == "rate")
    assert next(r for r in recs if r["kind"] == "engine")["status"].startswith("skipped")
    md = next(out.glob("gpu_*.md")).read_text()
    assert md.startswith("# GPU check") and "verdict: **PASS**" in md and "## Measured and PREDICTED" in md
    assert "## Register caps" in md and "| ed25519 | regs128 (-DZV_ED25519_MAX_REGISTERS=128) |" in md
    assert provenance.parse(md)["commit"] == run["provenance"]["commit"] != "unknown"


def test_dry_run_on_the_cuda_path_over_a_fake_device_completes_within_its_cap(bare, data, tmp_path):
    out = tmp_path / "out"
    proc = gpu_check(bare, "--backend", "fake-cuda", "--data", str(data), "--out", str(out), "--cap", "120",
                     "--max-log2", "9", "--reps", "1", "--schemes", "ed25519")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    recs = journal(out)
    assert recs[-1]["kind"] == "end" and recs[-1]["ok"] and recs[-1]["seconds"] <= 120
    device = next(r for r in recs if r["kind"] == "device")
    assert device["name"].startswith("fake GPU") and "runtime" in device["cuda"]
    # the fake's CUDA 0.0 matches no prepared module: every one came from (stand-in) NVRTC
    builds = [r for r in recs if r["kind"] == "build"]
    assert builds and all(b["ok"] and b["origin"] == "nvrtc" for b in builds)


def _prepare_module():
    from importlib.machinery import SourceFileLoader
    from importlib.util import module_from_spec, spec_from_loader

    loader = SourceFileLoader("prepare_gpu_check", str(ROOT / "scripts" / "prepare_gpu_check"))
    module = module_from_spec(spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module


def test_prepared_kernels_are_every_service_unit_and_its_caps_and_the_device_command_carries_them():
    prep = _prepare_module()
    builds = prep.kernel_builds()
    assert {s.name for s in builds if not s.variant} == {s.name for s in registry.service_sources()}
    assert {(s.name, s.variant) for s in builds if s.variant} == {
        ("ed25519", "regs0"), ("ed25519", "regs128"), ("secp256k1", "regs0"), ("secp256k1", "regs128"),
        ("p256", "regs0"), ("p256", "regs128"), ("bip340", "regs0"), ("bip340", "regs128"),
        ("ml_dsa", "regs128"), ("ml_dsa", "regs168"),
        ("bls12_381", "regs128")}
    cmd = prep.device_command(ROOT / ".gpu_check_data")
    assert "--target /tmp/site .gpu_check_data/wheels/*.whl && export PYTHONPATH=/tmp/site;" in cmd
    assert cmd.endswith('python3 scripts/gpu_check --backend cuda --data .gpu_check_data --out "$OUT"')


def test_cuda_backend_without_cupy_reaches_the_device_step_and_stops_there(bare, data, tmp_path):
    """What the lender runs imports with CuPy, numpy and the folder only; here CuPy is
    missing, so the run stops at the device step, saying why, with the environment kept."""
    out = tmp_path / "out"
    proc = gpu_check(bare, "--backend", "cuda", "--data", str(data), "--out", str(out), "--cap", "60")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    recs = journal(out)
    steps = steps_of(recs)
    assert steps["env"]["status"] == "ok" and steps["device"]["status"] == "failed"
    assert list(steps) == ["env", "device"]
    error = next(r for r in recs if r["kind"] == "error" and r["step"] == "device")
    assert "CuPy" in error["error"] or "cupy" in error["error"]
    assert recs[-2]["kind"] == "stopped" and "no usable device" in recs[-2]["reason"]


def test_a_hanging_step_costs_that_step_only(bare, data, tmp_path):
    """hashes.json as a FIFO nobody writes: the hashes step blocks reading it, is killed at
    its limit, and every later step still runs."""
    hang = tmp_path / "hang"
    shutil.copytree(data, hang)
    (hang / "hashes.json").unlink()
    os.mkfifo(hang / "hashes.json")
    out = tmp_path / "out"
    proc = gpu_check(bare, "--backend", "kernel-host", "--data", str(hang), "--out", str(out), "--cap", "200",
                     "--step-limit", "20", *SMALL)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    steps = steps_of(journal(out))
    assert steps["hashes"]["status"] == "timeout" and 19 <= steps["hashes"]["seconds"] < 30
    later = [name for name in steps if name not in ("env", "device", "hashes")]
    assert later and all(steps[n]["status"] == "ok" for n in later)
    # the hash kernels were loaded (and recorded) before the step hung
    assert any(r["kind"] == "build" and r["step"] == "hashes" for r in journal(out))
    md = next(out.glob("gpu_*.md")).read_text()
    assert "verdict: **FAIL**" in md and "step hashes: timeout" in md


def test_a_wrong_timed_verdict_fails_the_run(bare, data, tmp_path):
    """A generated item marked valid that is not: the saturating batch is tiled from the
    'valid' items, so its verdicts are not all true and the run says which row."""
    bad = tmp_path / "bad"
    shutil.copytree(data, bad)
    path = bad / "vectors" / "generated.jsonl.gz"
    with gzip.open(path, "rt") as f:
        rows = [json.loads(line) for line in f]
    for r in rows:
        if r["scheme"] == "ed25519":
            r["expected"] = True  # the mutated one too
    with gzip.open(path, "wt") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    proc = gpu_check(bare, "--backend", "kernel-host", "--data", str(bad), "--out", str(out), "--cap", "200", *SMALL)
    assert proc.returncode == 1
    recs = journal(out)
    timed = [r for r in recs if r["kind"] == "rate" and r["step"] == "time:ed25519"]
    assert timed and not any(r["verdicts_ok"] for r in timed)
    assert "verify ed25519 (kernel) at" in next(out.glob("gpu_*.md")).read_text()


def test_a_kill_at_a_random_step_keeps_every_step_done_before_it(bare, data, tmp_path):
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, str(SCRIPT), "--backend", "kernel-host", "--data", str(data),
                             "--out", str(out), "--cap", "200", *SMALL], stdout=subprocess.PIPE, text=True,
                            env=bare, start_new_session=True)
    kill_after = rng.randrange(1, 12)
    done: list[str] = []
    assert proc.stdout is not None
    deadline = time.monotonic() + 200
    for line in proc.stdout:
        if m := re.match(r"^\[\s*[\d.]+s\] (\S+): (\w+) in ", line):
            done.append(m.group(1))
            if len(done) == kill_after:
                os.killpg(proc.pid, signal.SIGKILL)  # the parent and the step it runs, at once
                break
        assert time.monotonic() < deadline
    proc.wait(30)
    recs = journal(out)
    steps = steps_of(recs)
    # every step the run reported done before the kill is in the journal, as done
    names = recs[0]["plan"][:kill_after]
    assert done == names, (seed, done)
    assert all(steps.get(n, {}).get("status") == "ok" for n in names), (seed, kill_after, list(steps))
    assert not any(r["kind"] == "end" for r in recs)
    md = next(out.glob("gpu_*.md")).read_text()
    assert all(f"| {n} | ok |" in md for n in names), (seed, kill_after)


# ------------------------------------------------------------------ BLS12-381 aggregates and RLC batches
@pytest.fixture(scope="module")
def bls_data(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_check_bls")
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "prepare_gpu_check"), "--out", str(out),
                           "--generated", "2", "--schemes", "bls12-381", "--bls-rounds", "1", "--rlc-valid", "12",
                           "--no-kernels", "--no-wheels"], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    return out


def _rows(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as f:
        return [json.loads(line) for line in f]


def test_prepared_bls_answers_cover_both_variants_invalid_members_and_the_timing_items(bls_data):
    from app.vectors import from_json

    manifest = json.loads((bls_data / "manifest.json").read_text())
    agg = _rows(bls_data / "bls_aggregate.jsonl.gz")
    rlc = _rows(bls_data / "bls_rlc.jsonl.gz")
    assert manifest["bls_aggregate_items"] == len(agg) and manifest["bls_rlc_items"] == len(rlc)
    check = [r for r in agg if r["source"] == "gpu_check/check"]
    # the eth variant is carried by the record and read back; the empty-set rule differs by it
    eth = [r for r in check if r.get("variant") == "eth"]
    assert eth and all(from_json(r).item.variant == "eth" for r in eth)
    assert all(from_json(r).item.variant == "ietf" for r in check if "variant" not in r)
    empty_inf = {r.get("variant", "ietf"): r["expected"] for r in check
                 if r["id"].startswith("fast no keys, infinity signature")}
    assert empty_inf == {"ietf": False, "eth": True}
    assert {r["mode"] for r in check} == {"fast_aggregate", "aggregate"}
    assert any(r["expected"] for r in check) and sum(not r["expected"] for r in check) > len(check) // 2
    assert any("identity key" in r["id"] for r in check) and any("at one position" in r["id"] for r in check)
    timing = {r["id"]: r for r in agg if r["source"] == "gpu_check/timing"}
    assert len(timing["fast 512 keys"]["public_keys"]) == 512 and timing["fast 512 keys"]["expected"]
    assert len(timing["aggregate 8 pairs"]["messages"]) == 8 and timing["aggregate 8 pairs"]["expected"]
    assert {r["scheme"] for r in rlc} == {"bls12-381"}
    assert sum(r["expected"] for r in rlc) >= 12 and any(r["id"].startswith("rlc/identity_sig") for r in rlc)
    assert any(not r["expected"] for r in rlc)


def test_dry_run_checks_and_times_the_bls_aggregate_and_rlc_kernels_on_a_bare_host(bare, bls_data, tmp_path):
    out = tmp_path / "out"
    proc = gpu_check(bare, "--backend", "kernel-host", "--data", str(bls_data), "--out", str(out), "--cap", "300",
                     "--max-log2", "6", "--reps", "1", "--schemes", "bls12-381")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    recs = journal(out)
    plan = recs[0]["plan"]
    # correctness of the aggregate shapes before any timing, their timing right after the schemes'
    assert plan.index("bls-batch-check") < plan.index("time:bls12-381") < plan.index("bls-batch-time")
    assert all(s["status"] == "ok" for s in steps_of(recs).values())
    checks = [r for r in recs if r["kind"] == "check" and r["step"] == "bls-batch-check"]
    by = {(r["what"], r["scheme"]): r for r in checks}
    assert by[("bls aggregates", "bls12-381 (ietf)")]["checked"] > 20
    assert by[("bls aggregates", "bls12-381 (eth)")]["checked"] > 10
    assert all(r["failed"] == 0 and r["checked"] > 0 for r in checks)
    rlc = [r for r in recs if r["kind"] == "bls"]
    assert any(r["batch"] == "mixed" and r["failed_groups"] and r["singles"] for r in rlc)  # the fallback ran
    assert all(r["failed_groups"] == 0 for r in rlc if r["batch"] == "valid")
    rows = {r["row"]: r for r in recs if r["kind"] == "rate" and r["step"] == "bls-batch-time"}
    assert set(rows) == {"bls12-381 fast 512 keys (aggregate kernels, end to end)",
                         "bls12-381 aggregate 8 pairs (aggregate kernels, end to end)",
                         "bls12-381 batch by RLC, groups of 64 (end to end)",
                         "bls12-381 batch by single CoreVerify (end to end)"}
    assert all(r["verdicts_ok"] and r["items_per_second"] > 0 for r in rows.values())
    assert rows["bls12-381 fast 512 keys (aggregate kernels, end to end)"]["keys_per_item"] == 512
    assert rows["bls12-381 batch by single CoreVerify (end to end)"]["rlc_speedup"] > 0
    md = next(out.glob("gpu_*.md")).read_text()
    assert "verdict: **PASS**" in md and "| bls12-381 batch by RLC, groups of 64 (end to end) |" in md
    assert "## BLS12-381 batches by random linear combination" in md


def test_a_wrong_bls_aggregate_answer_fails_the_check_and_names_the_item(bls_data, tmp_path, capsys):
    from scripts.lib.gpu_check import steps

    bad = tmp_path / "bad"
    shutil.copytree(bls_data, bad)
    rows = _rows(bad / "bls_aggregate.jsonl.gz")
    flipped = next(r for r in rows if r.get("variant") == "eth" and r["source"] == "gpu_check/check")
    flipped["expected"] = not flipped["expected"]
    with gzip.open(bad / "bls_aggregate.jsonl.gz", "wt") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))
    assert steps.run("bls-batch-check", None, {"backend": "kernel-host", "data": bad, "reps": 1, "max_items": 64,
                                               "deadline": time.monotonic() + 200}) == 0
    recs = [json.loads(line[line.index("{"):])
            for line in capsys.readouterr().out.splitlines() if '"kind"' in line]
    eth = next(r for r in recs if r.get("what") == "bls aggregates" and r["scheme"] == "bls12-381 (eth)")
    assert eth["failed"] == 1 and eth["failures"] == [flipped["id"]]
    ietf = next(r for r in recs if r.get("what") == "bls aggregates" and r["scheme"] == "bls12-381 (ietf)")
    assert ietf["failed"] == 0


@pytest.fixture(scope="module")
def ml_dsa_data(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_check_ml_dsa")
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "prepare_gpu_check"), "--out", str(out),
                           "--generated", "2", "--schemes", "ml-dsa-44", "--no-kernels", "--no-wheels"],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    return out


def test_the_variants_step_checks_both_ml_dsa_kernels_then_times_them_on_one_batch(bare, ml_dsa_data):
    """scripts/gpu_check's ``variants:ml-dsa-44`` step on the host build: each kernel on the
    scheme's vectors first (none failed), then both timed on the same batch, verdicts checked;
    the report puts them side by side.  It is planned for every scheme with two kernels."""
    from scripts.lib.gpu_check import journal as journal_mod
    from scripts.lib.gpu_check import report

    assert ("variants", "ml-dsa-44") in _plan(["ml-dsa-44", "ed25519"])
    proc = gpu_check(bare, "--step", "variants", "--scheme", "ml-dsa-44", "--backend", "kernel-host",
                     "--data", str(ml_dsa_data), "--max-log2", "6", "--reps", "1", "--step-seconds", "200")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    recs = [json.loads(line[len(journal_mod.MARK):]) for line in proc.stdout.splitlines()
            if line.startswith(journal_mod.MARK)]
    checks = {r["kernel_variant"]: r for r in recs if r["kind"] == "check"}
    assert set(checks) == {"thread", "block"}
    assert all(c["checked"] >= 4 and c["failed"] == 0 for c in checks.values())
    rates = {r["kernel_variant"]: r for r in recs if r["kind"] == "rate"}
    assert set(rates) == {"thread", "block"} and rates["thread"]["items"] == rates["block"]["items"] > 0
    assert all(r["verdicts_ok"] for r in rates.values())
    for r in recs:
        r["step"] = "variants:ml-dsa-44"
    md = "\n".join(report._kernel_variants(recs))
    assert "## Kernel variants" in md and "| ml-dsa-44 | block |" in md and "| ml-dsa-44 | thread |" in md


def _plan(schemes: list[str]) -> list[tuple[str, str | None]]:
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.SourceFileLoader("gpu_check_script", str(SCRIPT))
    spec = importlib.util.spec_from_loader("gpu_check_script", loader)
    assert spec is not None
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod.plan(schemes)
