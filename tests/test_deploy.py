"""The deployment files (Docker does not run here; tests/system runs the same settings on
loopback): compose's shape, nginx's rules, the images' hardening, and one set of settings."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from app.config import Settings
from app.core.schemes import SCHEMES
from tests.system.cluster import DEPLOY, ROOT, Nginx, load_env_file, nginx_binary, render_nginx_conf

COMPOSE = yaml.safe_load((ROOT / "compose.yaml").read_text())
NGINX = (DEPLOY / "nginx.conf").read_text()
READYZ = "http://127.0.0.1:8000/readyz"


def directive(name: str, text: str = NGINX) -> list[str]:
    return re.findall(rf"^\s*{name}\s+([^;]*);", text, flags=re.M)


def test_compose_runs_two_replicas_behind_nginx_with_postgres():
    svc = COMPOSE["services"]
    v, gpu, lb, db = svc["verifier"], svc["verifier-gpu"], svc["nginx"], svc["postgres"]
    assert v["deploy"]["replicas"] == 2 and v["env_file"] == "deploy/verifier.env"
    assert v["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert READYZ in " ".join(v["healthcheck"]["test"])
    assert v["environment"]["ZAPVERIFY_DATABASE_URL"].startswith("postgresql://") and "@postgres:5432/" in \
        v["environment"]["ZAPVERIFY_DATABASE_URL"]
    assert "./deploy/nginx.conf:/etc/nginx/nginx.conf:ro" in lb["volumes"]
    assert lb["depends_on"]["verifier"]["condition"] == "service_healthy"
    assert any(vol.endswith(":/var/lib/postgresql/data") for vol in db["volumes"]) and "pg_isready" in \
        " ".join(db["healthcheck"]["test"])
    # the gpu profile: CUDA image, a GPU reservation, in the same upstream pool
    assert gpu["profiles"] == ["gpu"] and gpu["build"]["dockerfile"] == "Dockerfile.cuda"
    dev = gpu["deploy"]["resources"]["reservations"]["devices"][0]
    assert dev["driver"] == "nvidia" and dev["capabilities"] == ["gpu"]
    assert "verifier" in gpu["networks"]["default"]["aliases"] and READYZ in " ".join(gpu["healthcheck"]["test"])
    # nginx waits for the CPU replicas only (Compose v1 has no optional dependency); the GPU
    # ones join the pool through nginx's re-resolving of "verifier"
    assert "profiles" not in v and set(lb["depends_on"]) == {"verifier"}
    assert re.search(r"^\s*server\s+verifier:8000\s.*\bresolve\b", NGINX, re.M)


def test_replicas_have_shared_memory_for_the_largest_cpu_batch():
    # Each uvicorn worker's CPU backend may keep one segment as large as its largest batch, and
    # takes a new one only where /dev/shm stays half free (shared_columns), so the replicas'
    # /dev/shm holds that batch once per worker twice over.  Docker's 64 MiB default holds no
    # 4096-item SLH-DSA-SHAKE-256f batch (204 MB) at all.
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    workers = int(load_env_file(DEPLOY / "verifier.env")["ZAPVERIFY_WORKERS"])
    scheme = SCHEMES["slh-dsa-shake-256f"]
    largest = 4096 * (scheme.pk_len + scheme.sig_len + 64)
    for name in ("verifier", "verifier-gpu"):
        size = str(COMPOSE["services"][name]["shm_size"]).lower().rstrip("b")
        shm = int(size[:-1]) * units[size[-1]] if size[-1] in units else int(size)
        assert shm >= 2 * workers * largest, name


def test_nginx_balances_upgrades_websockets_and_retries_only_what_is_safe():
    assert re.search(r"^\s*least_conn;", NGINX, re.M)
    server = directive("server", NGINX.split("upstream zapverify")[1].split("}")[0])
    assert len(server) == 1 and "max_fails=" in server[0] and "fail_timeout=" in server[0]
    ws = NGINX.split("location /v1/ws/")[1].split("}")[0]
    assert "proxy_set_header Upgrade $http_upgrade" in ws and "proxy_set_header Connection $connection_upgrade" in ws
    nxt = directive("proxy_next_upstream")
    assert nxt and "non_idempotent" not in nxt[0] and "error" in nxt[0]


def test_one_body_limit_for_nginx_and_the_app():
    size = directive("client_max_body_size")[0]
    m = re.fullmatch(r"(\d+)([km]?)", size)
    nginx_bytes = int(m.group(1)) * {"": 1, "k": 1024, "m": 1024 ** 2}[m.group(2)]
    env = load_env_file(DEPLOY / "verifier.env")
    assert int(env["ZAPVERIFY_MAX_BODY_BYTES"]) == nginx_bytes


def test_verifier_env_is_valid_settings(monkeypatch):
    env = load_env_file(DEPLOY / "verifier.env")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    s = Settings(_env_file=None)
    assert s.listen_when_ready and s.receipts and s.database_wait_seconds > 0 and s.workers == 2
    assert s.uma_pool_bytes == int(env["ZAP_UMA_POOL_BYTES"])


def test_loopback_copy_of_nginx_conf(tmp_path):
    text = render_nginx_conf(NGINX, listen_port=18080, upstream_ports=[18001, 18002], scratch=tmp_path)
    assert directive("listen", text) == ["127.0.0.1:18080"] and "resolver" not in text
    servers = directive("server", text.split("upstream zapverify")[1].split("}")[0])
    assert servers == ["127.0.0.1:18001 max_fails=1 fail_timeout=5s", "127.0.0.1:18002 max_fails=1 fail_timeout=5s"]
    # everything else is the deployed file's
    untagged = [line for line in NGINX.splitlines() if "zv:" not in line]
    assert all(line in text.splitlines() for line in untagged)
    with pytest.raises(ValueError):
        render_nginx_conf(NGINX.replace("# zv:listen", ""), listen_port=1, upstream_ports=[2], scratch=tmp_path)
    if nginx_binary():
        conf = tmp_path / "nginx.conf"
        conf.write_text(text)
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
            (tmp_path / kind).mkdir()
        Nginx(conf, tmp_path, tmp_path / "nginx.log").check()  # nginx -t accepts it


def stages(path: Path) -> list[str]:
    return re.split(r"^FROM\s", path.read_text(), flags=re.M)[1:]


@pytest.mark.parametrize("name", ["Dockerfile", "Dockerfile.cuda"])
def test_images_run_unprivileged_with_a_readiness_healthcheck(name):
    final = stages(ROOT / name)[-1]
    user = re.findall(r"^USER\s+(\S+)", final, re.M)
    assert user and user[-1] not in ("root", "0")
    assert READYZ in "".join(re.findall(r"^HEALTHCHECK.*(?:\n\s+.*)*", final, re.M))
    assert not re.search(r"build-essential|\bgcc\b|\bg\+\+|-devel\b", final)
    assert "COPY --from=build" in final


def test_cuda_image_is_the_python_base_with_cupy_and_the_cuda_wheels():
    """No nvidia/cuda base: CuPy, the CUDA runtime and NVRTC come as pip wheels on the CPU
    image's Python base, so both images build from the same PYTHON_IMAGE argument."""
    text = (ROOT / "Dockerfile.cuda").read_text()
    base = re.findall(r"^ARG PYTHON_IMAGE=(\S+)", (ROOT / "Dockerfile").read_text(), re.M)
    assert re.findall(r"^ARG PYTHON_IMAGE=(\S+)", text, re.M) == base
    assert re.findall(r"^FROM\s+(\S+)", text, re.M) == ["${PYTHON_IMAGE}"] * 3
    assert not [line for line in text.splitlines() if "nvidia/cuda" in line and not line.startswith("#")]
    kernels, first, final = stages(ROOT / "Dockerfile.cuda")
    assert ".[postgres,cuda]" in first and "${CUDA_WHEELS}" in first
    wheels = re.search(r'^ARG CUDA_WHEELS="([^"]+)"', first, re.M).group(1)
    assert re.fullmatch(r"cuda-toolkit\[[a-z,]+\]==13\.\*", wheels)
    assert {"cudart", "nvrtc"} <= set(wheels.split("[")[1].split("]")[0].split(","))
    assert re.search(r'cuda = \["cupy-cuda13x', (ROOT / "pyproject.toml").read_text())
    assert "CUPY_CACHE_DIR=" in final and "nvrtc.getVersion()" in final


def test_cuda_image_ships_the_kernels_its_kernel_stage_compiles():
    """The kernels stage builds every service kernel with NVRTC alone (prebuilt.build_all)
    from the kernel sources and the standard-library modules that drive it; the final stage
    ships them where prebuilt.shipped_dir() looks (tests/containers checks the files)."""
    kernels, _, final = stages(ROOT / "Dockerfile.cuda")
    assert kernels.startswith("${PYTHON_IMAGE} AS kernels") and "prebuilt.build_all(Path('/kernels'))" in kernels
    assert re.search(r'^ARG NVRTC_WHEEL="nvidia-cuda-nvrtc==13\.\*"', kernels, re.M)
    copied = [c.split()[:-1] for c in re.findall(r"^COPY (.+)$", kernels, re.M)]
    assert "app/engine/kernels" in sum(copied, []) and "app/cli.py" not in sum(copied, [])
    assert "COPY --from=kernels /kernels /opt/zapverify/kernels" in final
    assert "ZAPVERIFY_KERNEL_PREBUILT=/opt/zapverify/kernels" in final


@pytest.mark.parametrize("name", ["Dockerfile", "Dockerfile.cuda"])
def test_images_prebuild_the_native_loops_in_the_build_stage(name):
    *_, build, final = stages(ROOT / name)
    assert "native.prebuild('/opt/zapverify/native')" in build and "g++" in build
    assert "ZAPVERIFY_NATIVE_DIR=/opt/zapverify/native" in final and "COPY --from=build /opt/zapverify" in final


OVERRIDE = ROOT / "tests" / "containers" / "compose.standins.yaml"


def service_ports(config: dict) -> dict[str, tuple]:
    """Service -> (container ports it publishes, ports it exposes) of a compose config, read
    alike from compose.yaml's short syntax and from `docker-compose config`'s long one."""
    out = {}
    for name, svc in config["services"].items():
        published = sorted(str(p.get("target")) if isinstance(p, dict) else str(p).rsplit(":", 1)[-1]
                           for p in svc.get("ports", []))
        out[name] = (published, sorted(str(p) for p in svc.get("expose", [])))
    return out


def test_standins_override_keeps_the_services_and_ports_of_compose_yaml():
    """scripts/container_test runs compose.yaml with this override: it may swap images and
    build arguments only, for every service, so what it tests is the users' deployment."""
    over = yaml.safe_load(OVERRIDE.read_text())
    assert set(over["services"]) == set(COMPOSE["services"])
    assert set(over) == {"services"}
    for name, svc in over["services"].items():
        assert set(svc) <= {"image", "build"}, (name, set(svc))
        assert set(svc.get("build", {})) <= {"args"}, name
    # the stand-ins serve on the ports the deployment uses: nginx runs deploy/nginx.conf
    # (mounted by compose.yaml), PostgreSQL listens where the replicas' URL points
    standins = ROOT / "tests" / "containers" / "standins"
    db_port = re.search(r"@postgres:(\d+)/", COMPOSE["x-verifier"]["environment"]["ZAPVERIFY_DATABASE_URL"]).group(1)
    assert re.findall(r"^EXPOSE\s+(\d+)", (standins / "postgres.Dockerfile").read_text(), re.M) == [db_port]
    assert service_ports(COMPOSE)["nginx"][0] == [directive("listen")[0]]
    # and compose itself, when installed, merges the two into the same services and ports
    exe = shutil.which("docker-compose")
    if exe:
        def config(*files: Path) -> dict:
            args = [a for f in files for a in ("-f", str(f))]
            out = subprocess.run([exe, *args, "config"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                                 env={**os.environ, "ZAPVERIFY_HTTP_PORT": "8080"})
            assert out.returncode == 0, out.stderr
            return yaml.safe_load(out.stdout)

        assert service_ports(config(ROOT / "compose.yaml", OVERRIDE)) == service_ports(config(ROOT / "compose.yaml"))


def test_container_figures_in_the_readme_are_the_scripts():
    """scripts/container_test writes bench/results/containers.md and the same tables into
    the README's marked block (tests/containers/report.py); the rest of the README stays."""
    from tests.containers.report import IMAGES, render, splice

    measured = {f"size_{k}": "123456789" for k, _, _ in IMAGES} | {f"build_s_{k}": "7" for k, _, _ in IMAGES}
    measured |= {"ready_s_cuda_nogpu": "9.4", "ready_s_stack": "51", "tests_s": "100", "script_s": "900",
                 "docker": "20.10", "compose": "1.29.2"}
    report = render(measured, {"restart_ready_s": 48.0})
    assert "| `zapverify:cuda` | " in report and "| 123 MB | 7 s |" in report and "| 9.4 |" in report
    readme = (ROOT / "README.md").read_text()
    spliced = splice(readme, report)
    assert "| 48.0 |" in spliced and spliced.count("<!-- containers.md: begin") == 1
    head, tail = readme.split("<!-- containers.md: begin")[0], readme.split("<!-- containers.md: end -->")[1]
    assert spliced.startswith(head) and spliced.endswith(tail)
    with pytest.raises(ValueError):
        splice("no markers", report)
