"""scripts/prepare_gpu_check and the dry-run mode of scripts/gpu_check (host build, no GPU).

gpu_check must run on a GPU host that has numpy and CuPy but none of the web stack or the
signing libraries: the dry run here blocks those imports to prove it.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.engine.device import hostbuild
from bench import provenance

ROOT = Path(__file__).resolve().parents[1]
BLOCKED = ["fastapi", "pydantic", "pydantic_settings", "starlette", "uvicorn", "httpx", "jinja2", "nacl",
           "coincurve", "cryptography", "pqcrypto", "py_arkworks_bls12381", "milagro_bls_binding", "py_ecc",
           "prometheus_client"]

pytestmark = pytest.mark.skipif(hostbuild.compiler() is None, reason="no C++ compiler")


def run_gpu_check(*args: str) -> subprocess.CompletedProcess:
    code = ("import runpy, sys\n"
            f"for m in {BLOCKED!r}:\n    sys.modules[m] = None  # any import of these fails\n"
            f"sys.argv = ['gpu_check', *{list(args)!r}]\n"
            f"runpy.run_path({str(ROOT / 'scripts' / 'gpu_check')!r}, run_name='__main__')\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_check_data")
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "prepare_gpu_check"), "--out", str(out),
                           "--generated", "1", "--schemes", "ed25519,secp256k1"],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    return out


def test_prepared_data_has_what_the_gpu_host_needs(data):
    manifest = json.loads((data / "manifest.json").read_text())
    assert manifest["generated_vectors"] == 2 * 2 and manifest["kernel_sources_sha256"]
    recs = [json.loads(line) for line in (data / "vectors" / "generated.jsonl").read_text().splitlines()]
    assert {r["scheme"] for r in recs} == {"ed25519", "secp256k1"}
    external = (data / "vectors" / "external.jsonl").read_text().splitlines()
    assert all(json.loads(line).get("signature_format", "raw") == "raw" for line in external)  # DER converted
    assert len(external) == manifest["external_vectors"]
    hashes = json.loads((data / "hashes.json").read_text())
    assert len(hashes["messages"]) == 301 and set(hashes["xof"]) == {"shake128", "shake256"}
    bench = [json.loads(line) for line in (data / "bench.jsonl").read_text().splitlines()]
    assert manifest["bench_items"] == len(bench) == 3 * 64
    assert sorted({len(r["message"]) // 2 for r in bench}) == [32, 64, 256]  # hex
    assert {r["scheme"] for r in bench} == {"ed25519"} and all(r["expected"] for r in bench)


def test_dry_run_checks_and_times_without_web_stack_or_signing_libraries(data, tmp_path):
    out = tmp_path / "out"
    proc = run_gpu_check("--backend", "kernel-host", "--data", str(data), "--out", str(out),
                         "--min-log2", "8", "--max-log2", "10", "--reps", "2", "--pipeline-chunk", "64")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "checks: all passed" in proc.stdout and "sha256 64 B" in proc.stdout
    [report] = list(out.glob("gpu_*.json"))
    result = json.loads(report.read_text())
    assert result["ok"] and all(r["ok"] for r in result["compile"]["entries"])
    assert all(r["failed"] == 0 and r["checked"] > 0 for r in result["checks"]["hashes"].values())
    assert result["checks"]["merkle"]["failed"] == 0 and result["checks"]["merkle"]["checked"] >= 38
    assert set(result["timings"]["sha256 64 B"]) == {"256", "512", "1024"}
    assert result["timings"]["merkle leaves+root (ed25519 items, 64 B msgs)"]["1024"]["items_per_second"] > 0
    md = (out / report.name.replace(".json", ".md")).read_text()
    assert md.startswith("# GPU check")
    # provenance: the commit (from git here; from the manifest on a GPU host without git), date, machine
    assert result["provenance"]["commit"] == provenance.parse(md)["commit"] != "unknown"
    assert result["provenance"]["machine"]["cores"] and result["data_manifest"]["commit"]
    for size in (32, 64, 256):  # Ed25519 at fixed message sizes; no pynacl here, so no CPU row
        assert result["timings"][f"verify ed25519 {size} B msgs (kernel)"]["1024"]["items_per_second"] > 0
        [cpu_row] = [r for name, r in result["timings"].items()
                     if name.startswith(f"verify ed25519 {size} B msgs (cpu")]
        assert all("unavailable" in cell for cell in cpu_row.values())
    assert result["gpu_cpu_ratio"] == {f"verify ed25519 {s} B msgs": {} for s in (32, 64, 256)}
    # the pipelined path over three chunks matches the one-launch path and the expected verdicts
    for sid in ("ed25519", "secp256k1"):
        pipe = result["checks"]["pipeline"][sid]
        assert pipe["status"] == "run" and pipe["chunks"] == 3 and pipe["chunk_items"] == 64
        assert pipe["verdicts_ok"] and pipe["same_as_one_launch"]
    # the engine path needs the CPU reference, which a bare GPU host lacks: skipped, saying why
    assert result["checks"]["engine"]["status"].startswith("skipped: the CPU reference")


def test_a_wrong_answer_fails_the_run(data, tmp_path):
    bad = tmp_path / "bad"
    subprocess.run(["cp", "-r", str(data), str(bad)], check=True)
    hashes = json.loads((bad / "hashes.json").read_text())
    hashes["fixed"]["sha256"][64] = "00" * 32
    (bad / "hashes.json").write_text(json.dumps(hashes))
    proc = run_gpu_check("--backend", "kernel-host", "--data", str(bad), "--out", str(tmp_path / "o"),
                         "--min-log2", "8", "--max-log2", "8", "--reps", "1")
    assert proc.returncode == 1 and "sha256: 1 of 301 digests differ" in proc.stdout


def test_missing_data_is_a_clear_error(tmp_path):
    proc = run_gpu_check("--backend", "kernel-host", "--data", str(tmp_path / "none"))
    assert proc.returncode == 2 and "prepare_gpu_check" in proc.stderr
