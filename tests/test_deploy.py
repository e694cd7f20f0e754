"""The deployment files (Docker does not run here; tests/system runs the same settings on
loopback): compose's shape, nginx's rules, the images' hardening, and one set of settings."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from app.config import Settings
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
    assert "profiles" not in v and lb["depends_on"]["verifier-gpu"]["required"] is False


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


def test_cuda_image_has_cupy_and_the_headers_nvrtc_needs():
    first, final = stages(ROOT / "Dockerfile.cuda")
    assert re.search(r"nvidia/cuda:13[\d.]*-runtime", (ROOT / "Dockerfile.cuda").read_text())
    assert ".[postgres,cuda]" in first
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'cuda = \["cupy-cuda13x', pyproject)
    assert "cuda-cudart-dev-" in final and "CUDA_PATH=/usr/local/cuda" in final
