"""The deployment files (Docker does not run here; tests/system runs the same settings on
loopback): compose's shape and its secure defaults, nginx's rules and its TLS example, the
secrets helper, the images' hardening, and one set of settings."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from app.config import Settings
from app.core.schemes import SCHEMES
from tests.system.cluster import (
    DEPLOY,
    ROOT,
    Nginx,
    load_env_file,
    make_tls_files,
    nginx_binary,
    nginx_scratch,
    render_nginx_conf,
)

COMPOSE_TEXT = (ROOT / "compose.yaml").read_text()
COMPOSE = yaml.safe_load(COMPOSE_TEXT)
NGINX = (DEPLOY / "nginx.conf").read_text()
NGINX_TLS = (DEPLOY / "nginx-tls.conf").read_text()
READYZ = "http://127.0.0.1:8000/readyz"
SECRETS_HELPER = ROOT / "scripts" / "compose_secrets"
#: What scripts/compose_secrets puts in compose.env: the variables compose.yaml requires.
SECRETS_ENV = {"ZAPVERIFY_DB_PASSWORD": "0f1e2d3c4b5a69788796a5b4c3d2e1f0",
               "ZAPVERIFY_API_KEYS_SECRET": "./deploy/secrets/api_keys"}
KEYS_IN_CONTAINER = "/run/secrets/zapverify_api_keys"


class MissingVariable(Exception):
    def __init__(self, name: str, message: str):
        super().__init__(f"{name}: {message}")
        self.name, self.message = name, message


_VARIABLE = re.compile(r"\$(?:(?P<escaped>\$)|(?P<bare>[A-Za-z_][A-Za-z0-9_]*)|"
                       r"\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>[^}]*))?\})")


def interpolate(value, env: dict[str, str]):
    """``value`` (a parsed compose file or a part of it) with the variables substituted as
    Compose does (``$$``, ``$VAR``, ``${VAR}``, ``${VAR:-default}``, ``${VAR-default}``,
    ``${VAR:?error}``, ``${VAR?error}``, ``${VAR:+alt}``): where no compose binary runs,
    this is what `docker compose config` would make of compose.yaml.  Raises
    :class:`MissingVariable` where compose would refuse to start."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def one(m: re.Match) -> str:
        if m.group("escaped"):
            return "$"
        name = m.group("bare") or m.group("name")
        op, arg, got = m.group("op"), m.group("arg") or "", env.get(name)
        unset_or_empty = got is None or (got == "" and op and op.startswith(":"))
        if op in (":-", "-"):
            return arg if unset_or_empty else got
        if op in (":?", "?"):
            if unset_or_empty:
                raise MissingVariable(name, arg)
            return got
        if op in (":+", "+"):
            return "" if unset_or_empty else arg
        return got or ""

    return _VARIABLE.sub(one, value)


def compose_config(env: dict[str, str]) -> dict:
    return interpolate(COMPOSE, env)


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
    assert v["environment"]["ZAPVERIFY_API_KEYS_FILE"] == KEYS_IN_CONTAINER and v["secrets"] == ["zapverify_api_keys"]
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


# ------------------------------------------------------------------ secure by default
def test_compose_refuses_to_start_without_api_keys_or_a_database_password():
    """Each of the two secrets missing or empty stops compose with a message that says how
    to make it; no default password is left anywhere."""
    for missing in SECRETS_ENV:
        for env in ({k: v for k, v in SECRETS_ENV.items() if k != missing}, {**SECRETS_ENV, missing: ""}):
            with pytest.raises(MissingVariable) as refused:
                compose_config(env)
            assert refused.value.name == missing
            assert "scripts/compose_secrets" in refused.value.message
            assert "--env-file deploy/secrets/compose.env" in refused.value.message
    assert not re.search(r"\$\{ZAPVERIFY_DB_PASSWORD(?!:\?)", COMPOSE_TEXT), "a use of the password that may default"
    assert not re.search(r"\$\{ZAPVERIFY_API_KEYS_SECRET(?!:\?)", COMPOSE_TEXT)
    cfg = compose_config(SECRETS_ENV)
    password = SECRETS_ENV["ZAPVERIFY_DB_PASSWORD"]
    for name in ("verifier", "verifier-gpu"):  # both replica kinds (the YAML anchor)
        svc = cfg["services"][name]
        assert svc["environment"]["ZAPVERIFY_API_KEYS_FILE"] == KEYS_IN_CONTAINER
        assert svc["secrets"] == ["zapverify_api_keys"]
        assert svc["environment"]["ZAPVERIFY_DATABASE_URL"] == f"postgresql://zapverify:{password}@postgres:5432/zapverify"
    assert cfg["services"]["postgres"]["environment"]["POSTGRES_PASSWORD"] == password
    assert cfg["secrets"] == {"zapverify_api_keys": {"file": SECRETS_ENV["ZAPVERIFY_API_KEYS_SECRET"]}}
    # a key file the replicas mount at KEYS_IN_CONTAINER is what the server reads there
    assert KEYS_IN_CONTAINER.rsplit("/", 1)[1] in cfg["secrets"]


def test_only_nginx_is_published_and_on_loopback_unless_told_otherwise():
    cfg = compose_config(SECRETS_ENV)
    assert cfg["services"]["nginx"]["ports"] == ["127.0.0.1:8080:8080"]
    wide = compose_config({**SECRETS_ENV, "ZAPVERIFY_BIND": "0.0.0.0", "ZAPVERIFY_HTTP_PORT": "80"})
    assert wide["services"]["nginx"]["ports"] == ["0.0.0.0:80:8080"]
    # the replicas and PostgreSQL are reached on compose's network only
    assert [n for n, svc in cfg["services"].items() if "ports" in svc] == ["nginx"]


def _compose_cli() -> list[str] | None:
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True,
                                                 timeout=30).returncode == 0:
        return ["docker", "compose"]
    exe = shutil.which("docker-compose")
    return [exe] if exe else None


def test_compose_itself_refuses_without_the_secrets_and_binds_loopback(tmp_path):
    """The same with the compose binary, where one is installed (scripts/container_test
    installs one; `config` needs no daemon)."""
    cli = _compose_cli()
    if cli is None:
        pytest.skip("no docker compose / docker-compose here: the static checks above stand in")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZAPVERIFY_")}
    out = subprocess.run([*cli, "-f", "compose.yaml", "config"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode != 0 and "scripts/compose_secrets" in out.stderr, out.stderr
    subprocess.run([str(SECRETS_HELPER), "--dir", str(tmp_path)], check=True, capture_output=True, timeout=30)
    out = subprocess.run([*cli, "--env-file", str(tmp_path / "compose.env"), "-f", "compose.yaml", "config"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    (port,) = yaml.safe_load(out.stdout)["services"]["nginx"]["ports"]
    assert port.get("host_ip") == "127.0.0.1" if isinstance(port, dict) else port.startswith("127.0.0.1:")


def _run_helper(*args: str, script: Path = SECRETS_HELPER) -> subprocess.CompletedProcess:
    return subprocess.run([str(script), *args], capture_output=True, text=True, timeout=30)


def test_compose_secrets_writes_a_key_digest_and_a_password(tmp_path):
    """scripts/compose_secrets: the key on stdout once and nowhere else, its digest in a keys
    file the server accepts, a password fit for the database URL, files private where they
    hold a secret."""
    d = tmp_path / "secrets"
    out = _run_helper("--dir", str(d))
    assert out.returncode == 0, out.stderr
    key = out.stdout.strip()
    assert out.stdout == key + "\n" and re.fullmatch(r"zv_[A-Za-z0-9_-]{43}", key)
    assert key not in out.stderr and "--env-file" in out.stderr
    keys_text = (d / "api_keys").read_text()
    assert key not in keys_text
    from app.api.security import KeyRing, load_keys

    keys = load_keys(Settings(_env_file=None, api_keys_file=d / "api_keys"))
    assert [(k.name, sorted(k.scopes)) for k in keys] == [("admin", ["admin", "receipts", "verify"])]
    assert keys[0].digest == hashlib.sha256(key.encode()).digest() and KeyRing(keys).lookup(key) is keys[0]
    env = load_env_file(d / "compose.env")
    assert set(env) == set(SECRETS_ENV)
    assert re.fullmatch(r"[0-9a-f]{48}", env["ZAPVERIFY_DB_PASSWORD"])  # URL-safe as it is
    assert env["ZAPVERIFY_API_KEYS_SECRET"] == str(d / "api_keys")  # outside the checkout: absolute
    mode = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (d, d / "api_keys", d / "compose.env")}
    # the replicas (uid 10001) read the mounted keys file; the password is the owner's alone
    assert mode == {"secrets": 0o700, "api_keys": 0o644, "compose.env": 0o600}
    # compose.yaml accepts what it wrote
    assert compose_config(env)["secrets"]["zapverify_api_keys"]["file"] == str(d / "api_keys")

    # a second run keeps the key unless told; --force makes a new one and keeps the password
    again = _run_helper("--dir", str(d))
    assert again.returncode == 1 and "--force" in again.stderr and again.stdout == ""
    forced = _run_helper("--dir", str(d), "--force")
    assert forced.returncode == 0 and forced.stdout.strip() != key
    assert load_env_file(d / "compose.env")["ZAPVERIFY_DB_PASSWORD"] == env["ZAPVERIFY_DB_PASSWORD"]
    assert KeyRing(load_keys(Settings(_env_file=None, api_keys_file=d / "api_keys"))).lookup(key) is None
    # --add: one more key, narrower, same file; names stay distinct; scopes are checked
    added = _run_helper("--dir", str(d), "--add", "client", "--scopes", "verify+receipts")
    assert added.returncode == 0, added.stderr
    ring = KeyRing(load_keys(Settings(_env_file=None, api_keys_file=d / "api_keys")))
    assert ring.lookup(added.stdout.strip()).scopes == {"verify", "receipts"}
    assert ring.lookup(forced.stdout.strip()).name == "admin"
    assert _run_helper("--dir", str(d), "--add", "client").returncode == 1
    assert _run_helper("--dir", str(d), "--add", "x", "--scopes", "verify+root").returncode == 1
    assert _run_helper("--dir", str(d), "--add", "a:b").returncode == 1


def test_compose_secrets_default_is_deploy_secrets_relative_to_the_checkout(tmp_path):
    """Run from a copy (the default writes into its checkout): deploy/secrets/, named in
    compose.env relative to compose.yaml's directory, where compose resolves it."""
    (tmp_path / "scripts").mkdir()
    copy = tmp_path / "scripts" / "compose_secrets"
    shutil.copy2(SECRETS_HELPER, copy)
    out = _run_helper(script=copy)
    assert out.returncode == 0, out.stderr
    env = load_env_file(tmp_path / "deploy" / "secrets" / "compose.env")
    assert env["ZAPVERIFY_API_KEYS_SECRET"] == "./deploy/secrets/api_keys"


def test_secrets_stay_out_of_git_and_the_image():
    assert "/deploy/secrets/" in (ROOT / ".gitignore").read_text().split()
    if shutil.which("git") and (ROOT / ".git").exists():
        for name in ("api_keys", "compose.env"):
            ignored = subprocess.run(["git", "check-ignore", "-q", f"deploy/secrets/{name}"], cwd=ROOT,
                                     capture_output=True, timeout=30)
            assert ignored.returncode == 0, f"deploy/secrets/{name} is not git-ignored"
    docker_ignore = (ROOT / ".dockerignore").read_text().split()
    assert "deploy/secrets" in docker_ignore or "deploy" in docker_ignore


# ------------------------------------------------------------------ nginx: keys out of the log, TLS
def test_nginx_logs_no_key_parameter():
    """The access log's request line comes from the redacting map; nginx's raw request line
    ($request) is in no log_format.  The map's pattern, run by Python's re (PCRE's named
    groups spelt Python's way), on what clients send."""
    for text in (NGINX, NGINX_TLS):
        formats = re.findall(r"log_format\s+\w+((?:\s+'[^']*')+)\s*;", text)
        assert formats and all("$zv_log_uri" in f and not re.search(r"\$request(?![_a-z])", f) for f in formats)
        assert re.findall(r"^\s*access_log\s+\S+\s+(\w+)\s*;", text, re.M) == ["upstream"]
    m = re.search(r'map \$request_uri \$zv_log_uri \{\s*"~\*([^"]+)"\s+"([^"]+)";\s*default \$request_uri;', NGINX)
    pattern, value = re.compile(m.group(1).replace("(?<", "(?P<"), re.I), m.group(2)

    def logged(uri: str) -> str:
        hit = pattern.search(uri)
        return value.replace("$zv_path", hit.group("zv_path")) if hit else uri

    for uri in ("/v1/status?access_token=K", "/v1/ws/stats?a=1&access_token=K&b=2", "/v1/status?ACCESS_TOKEN=K",
                "/x?token=K", "/x?api_key=K", "/x?apikey=K", "/x?key=K&key=K2", "/v1/status?x=1&access_token=K"):
        assert "K" not in logged(uri).replace("/x", "").split("?", 1)[1] and logged(uri).endswith("?REDACTED"), uri
    for uri in ("/v1/status", "/v1/receipts/0190?limit=3", "/x?monkey=1", "/x?tokens=2"):
        assert logged(uri) == uri
    # every parameter the app's own log redacts, nginx's does too
    from app.api.access_log import KEY_PARAMETERS

    assert [p for p in KEY_PARAMETERS if not logged(f"/v1/status?a=1&{p}=K").endswith("?REDACTED")] == []


def test_tls_example_is_nginx_conf_with_tls():
    """deploy/nginx-tls.conf keeps every line of deploy/nginx.conf but its listen line, in
    the same order (so the two cannot drift apart), and adds TLS: 1.2 and 1.3 only,
    forward-secret AEAD suites for 1.2, no session tickets, HSTS explained but left off."""
    def code(text: str) -> list[str]:
        return [line.split("#", 1)[0].strip() for line in text.splitlines() if line.split("#", 1)[0].strip()]

    plain, tls = code(NGINX), code(NGINX_TLS)
    it = iter(tls)
    missing = [line for line in plain if not line.startswith("listen ") and line not in it]
    assert not missing, f"lines of deploy/nginx.conf missing from deploy/nginx-tls.conf (or out of order): {missing}"
    assert directive("listen", NGINX_TLS) == ["127.0.0.1:8080", "8443 ssl"]
    assert directive("ssl_protocols", NGINX_TLS) == ["TLSv1.2 TLSv1.3"]
    ciphers = directive("ssl_ciphers", NGINX_TLS)[0].split(":")
    assert ciphers and all(c.startswith("ECDHE-") and ("GCM" in c or "CHACHA20" in c) for c in ciphers)
    assert directive("ssl_session_tickets", NGINX_TLS) == ["off"]
    assert directive("ssl_certificate", NGINX_TLS) == ["/etc/nginx/tls/fullchain.pem"]
    assert directive("ssl_certificate_key", NGINX_TLS) == ["/etc/nginx/tls/privkey.pem"]
    assert not directive("add_header", NGINX_TLS) and "# add_header Strict-Transport-Security" in NGINX_TLS
    # the plain listener is the container's loopback, for compose's health check, and serves nothing else
    health = NGINX_TLS.split("listen 127.0.0.1:8080;")[1].split("\n    }\n")[0]
    assert "location = /healthz" in health and "return 404;" in health
    assert "http://127.0.0.1:8080/healthz" in " ".join(COMPOSE["services"]["nginx"]["healthcheck"]["test"])


def test_tls_example_passes_nginx_t(tmp_path):
    if not nginx_binary():
        pytest.skip("nginx is not installed (scripts/system_test installs it and serves through this file)")
    _, chain, key = make_tls_files(tmp_path)
    nginx_scratch(tmp_path)
    conf = tmp_path / "nginx.conf"
    conf.write_text(render_nginx_conf(NGINX_TLS, listen_port=18443, upstream_ports=[18001], scratch=tmp_path,
                                      replace={"health": "listen 127.0.0.1:18080;",
                                               "certificate": f"ssl_certificate {chain};",
                                               "certificate-key": f"ssl_certificate_key {key};"}))
    assert directive("listen", conf.read_text()) == ["127.0.0.1:18080", "127.0.0.1:18443 ssl"]
    Nginx(conf, tmp_path, tmp_path / "nginx.log").check()


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


def test_image_tags_carry_the_version_and_the_moving_tags_stay():
    """compose.yaml tags what it builds with the version and the variant (the Kubernetes
    overlays name the same tags: tests/test_kubernetes.py); ZAPVERIFY_VERSION picks another
    build.  scripts/container_test tags both images with those and with the moving tags
    zapverify:cpu and zapverify:cuda, and so do the `docker build` lines atop the Dockerfiles."""
    from app import __version__

    images = {name: svc["image"] for name, svc in compose_config(SECRETS_ENV)["services"].items()
              if name.startswith("verifier")}
    assert images == {"verifier": f"zapverify:{__version__}-cpu", "verifier-gpu": f"zapverify:{__version__}-cuda"}
    other = compose_config({**SECRETS_ENV, "ZAPVERIFY_VERSION": "9.8.7"})["services"]
    assert (other["verifier"]["image"], other["verifier-gpu"]["image"]) == ("zapverify:9.8.7-cpu",
                                                                            "zapverify:9.8.7-cuda")
    script = (ROOT / "scripts" / "container_test").read_text()
    for variant, dockerfile in (("cpu", "Dockerfile"), ("cuda", "Dockerfile.cuda")):
        build = re.search(rf"^timed_build {variant} (.*)$", script, re.M).group(1)
        assert build.startswith(f'zapverify:{variant} -t "zapverify:$VERSION-{variant}" ')
        assert build.endswith(f"-f {dockerfile} .")
        assert f"-t zapverify:{variant} -t zapverify:{__version__}-{variant} " in (ROOT / dockerfile).read_text()
    assert "VERSION=$(\"$PY\" -c 'from app import __version__; print(__version__)')" in script
    assert "\nunset ZAPVERIFY_VERSION\n" in script  # compose up runs with the default tags, the ones built


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


def test_standins_override_keeps_the_services_and_ports_of_compose_yaml(tmp_path):
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
        keys = tmp_path / "api_keys"
        keys.write_text(f"{'0' * 64}:verify:test\n")

        def config(*files: Path) -> dict:
            args = [a for f in files for a in ("-f", str(f))]
            out = subprocess.run([exe, *args, "config"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                                 env={**os.environ, **SECRETS_ENV, "ZAPVERIFY_HTTP_PORT": "8080",
                                      "ZAPVERIFY_API_KEYS_SECRET": str(keys)})
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
