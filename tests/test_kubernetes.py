"""The Kubernetes manifests (deploy/kubernetes, docs/operations.md "Kubernetes"): each overlay,
and each optional component on top of it, renders with `kubectl kustomize` (no cluster
needed), and the rendered objects keep what users rely on: probes on routes the app serves,
a grace period that outlasts the shutdown, resources computed from the settings, an
unprivileged pod on a read-only root, a GPU in the cuda overlay only, settings the service
knows, Secrets referenced and never embedded, an autoscaler on a metric the service exports.

Without kubectl the tests skip, except under CI (CI=true), where they fail.  The schema
check (kubernetes-validate, strict) runs where that package is installed; .ci/run installs it
and runs this file again with it required."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client import Gauge

from app import __version__
from app.api import metrics
from app.api.routes.ops import router as ops_router
from app.config import Settings
from app.core.schemes import SCHEMES

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "deploy" / "kubernetes"
OVERLAYS = ("cpu", "cuda")
COMPONENTS = ("servicemonitor", "cloudnativepg", "ingest")
IN_CI = os.environ.get("CI", "").lower() == "true"
COMPOSE = yaml.safe_load((ROOT / "compose.yaml").read_text())
#: compose.yaml's service for each overlay's image: the same tag, the same start period.
COMPOSE_SERVICE = {"cpu": "verifier", "cuda": "verifier-gpu"}
#: The kinds every overlay renders (the issue's base).
BASE_KINDS = {"ServiceAccount", "ConfigMap", "Service", "Deployment", "PodDisruptionBudget",
              "HorizontalPodAutoscaler", "NetworkPolicy"}
MIB = 1 << 20

# The memory arithmetic of docs/operations.md, "Kubernetes", per uvicorn worker (MiB):
#: one uvicorn worker with its engine and libraries (93 MiB idle, bench/results/overload.md)
PROCESS_MIB = 256
#: one spawned CPU verify process (about 56 MiB measured at start; chunks add to it)
VERIFY_PROCESS_MIB = 128
#: parsed JSON per request byte in flight (a 4,096-item Ed25519 batch: 1.9 MB sent, about 8 MB parsed)
PARSE_FACTOR = 5
#: CuPy and the CUDA context, in the cuda overlay only (an allowance, not a measurement)
CUDA_PROCESS_MIB = 512
#: PostgreSQL's default max_connections (100) less superuser_reserved_connections (3).
POSTGRES_CONNECTIONS = 97


def kubectl() -> str:
    exe = shutil.which("kubectl")
    if exe is None:
        if IN_CI:
            pytest.fail("kubectl is not installed: CI must render deploy/kubernetes (kubectl kustomize)")
        pytest.skip("kubectl is not installed: `kubectl kustomize` renders deploy/kubernetes")
    return exe


def kustomize(directory: Path) -> list[dict]:
    out = subprocess.run([kubectl(), "kustomize", str(directory)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@functools.cache
def overlay(name: str) -> tuple[dict, ...]:
    return tuple(kustomize(K8S / "overlays" / name))


@pytest.fixture(scope="module", params=OVERLAYS)
def with_components(request, tmp_path_factory) -> tuple[str, list[dict]]:
    """An overlay with every optional component added, as a user's own kustomization would
    (kustomize takes relative paths only)."""
    where = tmp_path_factory.mktemp(f"k8s-{request.param}")
    rel = Path(os.path.relpath(K8S, where))
    (where / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [str(rel / "overlays" / request.param)],
        "components": [str(rel / "components" / c) for c in COMPONENTS]}))
    return request.param, kustomize(where)


def one(docs, kind: str, name: str | None = None) -> dict:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, (kind, name, [d["metadata"]["name"] for d in found])
    return found[0]


def pod_spec(docs) -> dict:
    return one(docs, "Deployment")["spec"]["template"]["spec"]


def container(docs) -> dict:
    (c,) = pod_spec(docs)["containers"]
    return c


def quantity(value) -> float:
    """A Kubernetes quantity ("4", "500m", "3584Mi", "1Gi", "2G") as a number of units."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(m|[KMGT]i?)?", str(value))
    assert m, value
    unit = m.group(2) or ""
    scale = {"": 1, "m": 1e-3, **{p + "i": 1024 ** (i + 1) for i, p in enumerate("KMGT")},
             **{p: 1000 ** (i + 1) for i, p in enumerate("KMGT")}}[unit]
    return float(m.group(1)) * scale


def env_name_of(field: str) -> list[str]:
    """The environment names a Settings field is read from: its validation aliases
    (app/config.py `_alias`: ZAPVERIFY_<NAME> plus any seed name), else the prefix + name."""
    alias = Settings.model_fields[field].validation_alias
    if alias is None:
        return [f"ZAPVERIFY_{field.upper()}"]
    choices = getattr(alias, "choices", [alias])
    return [c for c in choices if isinstance(c, str)]


SETTING_NAMES = {name for f in Settings.model_fields for name in env_name_of(f)}


def settings_of(data: dict[str, str], monkeypatch) -> Settings:
    """What a pod with this ConfigMap gets: only its keys, no .env, no test defaults."""
    for key in list(os.environ):
        if key.upper().startswith(("ZAPVERIFY_", "ZAP_")):
            monkeypatch.delenv(key)
    for key, value in data.items():
        monkeypatch.setenv(key, value)
    return Settings(_env_file=None)


def settings_map(docs) -> dict[str, str]:
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("zapverify-settings")]
    return cm["data"]


def served_get_routes() -> set[str]:
    return {r.path for r in ops_router.routes if "GET" in getattr(r, "methods", ())}


def container_policy(c: dict) -> list[str]:
    """What the issue requires of every container: probes on the app's health routes,
    requests and limits for CPU and memory, non-root on a read-only root."""
    bad = []
    routes = served_get_routes()
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz"), ("startupProbe", "/healthz")):
        got = c.get(probe, {}).get("httpGet", {}).get("path")
        if got != path or got not in routes:
            bad.append(f"{probe}: path {got!r}, expected {path!r} (a GET route of app/api/routes/ops.py)")
    res = c.get("resources", {})
    for part in ("requests", "limits"):
        for what in ("cpu", "memory"):
            if what not in res.get(part, {}):
                bad.append(f"resources.{part}.{what} missing")
    sc = c.get("securityContext", {})
    want = {"runAsNonRoot": True, "readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False}
    bad += [f"securityContext.{k} is {sc.get(k)!r}" for k, v in want.items() if sc.get(k) is not v]
    if sc.get("capabilities", {}).get("drop") != ["ALL"]:
        bad.append("securityContext.capabilities.drop is not [ALL]")
    return bad


# ------------------------------------------------------------------ what renders


@pytest.mark.parametrize("name", OVERLAYS)
def test_each_overlay_renders_the_base_kinds_and_no_secret(name):
    docs = overlay(name)
    assert {d["kind"] for d in docs} == BASE_KINDS
    assert len([d for d in docs if d["kind"] == "Deployment"]) == 1
    assert one(docs, "HorizontalPodAutoscaler")["apiVersion"] == "autoscaling/v2"
    assert one(docs, "PodDisruptionBudget")["apiVersion"] == "policy/v1"


@pytest.mark.parametrize("name", OVERLAYS)
def test_image_is_the_compose_tag(name):
    # kustomize's `images` sets the tag; users set newName to their registry.  The tag is the
    # version and the variant, as compose.yaml builds it with ZAPVERIFY_VERSION unset.
    compose = re.sub(r"\$\{ZAPVERIFY_VERSION:-([^}]*)\}", r"\1", COMPOSE["services"][COMPOSE_SERVICE[name]]["image"])
    assert container(overlay(name))["image"] == compose == f"zapverify:{__version__}-{name}"


# ------------------------------------------------------------------ the container


@pytest.mark.parametrize("name", OVERLAYS)
def test_container_policy_holds(name):
    assert container_policy(container(overlay(name))) == []


def test_container_policy_catches_a_missing_probe_path_or_limit():
    c = container(overlay("cpu"))
    no_path = yaml.safe_load(yaml.safe_dump(c))
    del no_path["readinessProbe"]["httpGet"]["path"]
    assert any("readinessProbe" in v for v in container_policy(no_path))
    wrong_path = yaml.safe_load(yaml.safe_dump(c))
    wrong_path["livenessProbe"]["httpGet"]["path"] = "/health"
    assert any("livenessProbe" in v for v in container_policy(wrong_path))
    no_limit = yaml.safe_load(yaml.safe_dump(c))
    del no_limit["resources"]["limits"]["memory"]
    assert container_policy(no_limit) == ["resources.limits.memory missing"]
    root = yaml.safe_load(yaml.safe_dump(c))
    root["securityContext"]["readOnlyRootFilesystem"] = False
    assert container_policy(root) == ["securityContext.readOnlyRootFilesystem is False"]


@pytest.mark.parametrize("name", OVERLAYS)
def test_probes_use_the_named_http_port(name):
    c = container(overlay(name))
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports["http"] == 8000 and c["command"][-2:] == ["--port", "8000"]
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert c[probe]["httpGet"]["port"] == "http", probe
    # the readiness probe outlasts the store probe it triggers (PostgreSQL: up to 2 s)
    assert c["readinessProbe"]["timeoutSeconds"] > 2


@pytest.mark.parametrize("name", OVERLAYS)
def test_startup_probe_allows_the_database_wait_and_the_kernel_load(name, monkeypatch):
    """/healthz answers only once the self-test passed (listen_when_ready), after the store
    opened; compose.yaml's start period for the same image is the kernel-load allowance."""
    docs = overlay(name)
    s = settings_of(settings_map(docs), monkeypatch)
    assert s.listen_when_ready
    probe = container(docs)["startupProbe"]
    window = probe["periodSeconds"] * probe["failureThreshold"]
    start_period = COMPOSE["services"][COMPOSE_SERVICE[name]]["healthcheck"]["start_period"]
    assert window >= s.database_wait_seconds + int(start_period.rstrip("s")), (window, start_period)


@pytest.mark.parametrize("name", OVERLAYS)
def test_grace_period_outlasts_prestop_and_the_shutdown(name, monkeypatch):
    docs = overlay(name)
    s = settings_of(settings_map(docs), monkeypatch)
    grace = pod_spec(docs)["terminationGracePeriodSeconds"]
    pre_stop = container(docs)["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep" and int(pre_stop[1]) >= 5  # endpoints drain before SIGTERM
    # The grace period starts with preStop; then requests in flight finish, then the ingest
    # frames already taken in are answered.
    assert grace > int(pre_stop[1]) + s.shutdown_timeout_seconds + s.ingest_shutdown_seconds
    assert grace > Settings.model_fields["shutdown_timeout_seconds"].default


@pytest.mark.parametrize("name", OVERLAYS)
def test_resources_follow_from_the_worker_counts_and_the_pool(name, monkeypatch):
    docs = overlay(name)
    s = settings_of(settings_map(docs), monkeypatch)
    # 0 would be os.cpu_count(): the node's cores, not the pod's
    workers, cpu_workers = s.workers, s.cpu_workers
    assert cpu_workers > 0
    res = container(docs)["resources"]
    for what in ("cpu", "memory"):
        assert quantity(res["requests"][what]) == quantity(res["limits"][what]), what  # Guaranteed QoS
    assert quantity(res["limits"]["cpu"]) == workers * cpu_workers
    shm = next(v for v in pod_spec(docs)["volumes"] if v["name"] == "dshm")["emptyDir"]
    per_worker = (PROCESS_MIB + cpu_workers * VERIFY_PROCESS_MIB + s.uma_pool_bytes / MIB
                  + PARSE_FACTOR * s.admission_max_bytes / MIB + (CUDA_PROCESS_MIB if name == "cuda" else 0))
    need = workers * per_worker + quantity(shm["sizeLimit"]) / MIB  # tmpfs pages count against the limit
    assert quantity(res["limits"]["memory"]) / MIB >= need, (res["limits"]["memory"], need)
    assert "ephemeral-storage" in res["limits"]


@pytest.mark.parametrize("name", OVERLAYS)
def test_dev_shm_is_memory_sized_for_the_cpu_workers(name, monkeypatch):
    """As compose's shm_size (tests/test_deploy.py): each uvicorn worker's CPU backend may keep
    a segment of its largest batch and takes one only where half of /dev/shm stays free."""
    docs = overlay(name)
    workers = settings_of(settings_map(docs), monkeypatch).workers
    (mount,) = [m for m in container(docs)["volumeMounts"] if m["mountPath"] == "/dev/shm"]
    (vol,) = [v for v in pod_spec(docs)["volumes"] if v["name"] == mount["name"]]
    scheme = SCHEMES["slh-dsa-shake-256f"]
    largest = 4096 * (scheme.pk_len + scheme.sig_len + 64)
    assert vol["emptyDir"]["medium"] == "Memory"
    assert quantity(vol["emptyDir"]["sizeLimit"]) >= 2 * workers * largest


@pytest.mark.parametrize("name", OVERLAYS)
def test_pod_runs_as_the_image_user_with_nothing_it_does_not_need(name):
    docs = overlay(name)
    spec = pod_spec(docs)
    dockerfile = (ROOT / ("Dockerfile.cuda" if name == "cuda" else "Dockerfile")).read_text()
    uid = int(re.search(r"useradd\b.*--uid (\d+)", dockerfile).group(1))
    sc = spec["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] == uid != 0 and sc["fsGroup"] == sc["runAsGroup"]
    assert sc["seccompProfile"]["type"] == "RuntimeDefault"
    # No API token, and no service-link variables (ZAPVERIFY_PORT=tcp://... for the Service
    # named zapverify would be read as the setting `port`).
    assert spec["automountServiceAccountToken"] is False and spec["enableServiceLinks"] is False
    assert spec["serviceAccountName"] == one(docs, "ServiceAccount")["metadata"]["name"]


@pytest.mark.parametrize("name", OVERLAYS)
def test_writable_paths_are_volumes_and_receipts_never_on_the_pod(name):
    docs = overlay(name)
    c, spec = container(docs), pod_spec(docs)
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    vols = {v["name"]: v for v in spec["volumes"]}
    assert "emptyDir" in vols[mounts["/tmp"]]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["PROMETHEUS_MULTIPROC_DIR"].startswith("/tmp/")
    dockerfile = (ROOT / ("Dockerfile.cuda" if name == "cuda" else "Dockerfile")).read_text()
    data_dir = re.search(r"ZAPVERIFY_DATA_DIR=(\S+)", dockerfile).group(1)
    # nothing writable at or above the data directory: no SQLite receipts on a pod's disk
    assert not [p for p in mounts if data_dir == p or data_dir.startswith(p.rstrip("/") + "/")]
    if name == "cuda":
        cupy = re.search(r"CUPY_CACHE_DIR=(\S+)", dockerfile).group(1)
        assert "emptyDir" in vols[mounts[cupy]]
        assert env["CUDA_CACHE_PATH"].startswith(cupy + "/")


def test_gpu_in_the_cuda_overlay_only(monkeypatch):
    cuda, cpu = overlay("cuda"), overlay("cpu")
    res = container(cuda)["resources"]
    assert res["limits"]["nvidia.com/gpu"] == 1 and res["requests"]["nvidia.com/gpu"] == 1
    spec = pod_spec(cuda)
    assert spec["nodeSelector"]
    assert any(t["key"] == "nvidia.com/gpu" and t["effect"] == "NoSchedule" for t in spec["tolerations"])
    # the device plugin shows the pod its one GPU, as ordinal 0
    s = settings_of(settings_map(cuda), monkeypatch)
    assert s.cuda_device == 0 and s.backend == "auto"
    # a surge pod would wait for a GPU a full pool does not have
    assert one(cuda, "Deployment")["spec"]["strategy"]["rollingUpdate"]["maxSurge"] == 0
    assert "nvidia.com/gpu" not in yaml.safe_dump(list(cpu))
    assert "nodeSelector" not in pod_spec(cpu) and "tolerations" not in pod_spec(cpu)
    assert settings_of(settings_map(cpu), monkeypatch).backend == "cpu"


# ------------------------------------------------------------------ settings and Secrets


@pytest.mark.parametrize("name", OVERLAYS)
def test_configmap_holds_only_settings_the_service_knows(name, monkeypatch):
    data = settings_map(overlay(name))
    unknown = sorted(k for k in data if k not in SETTING_NAMES)
    assert unknown == [], f"not settings of app/config.py: {unknown}"
    s = settings_of(data, monkeypatch)  # and every value parses
    assert s.receipts and s.database_url is None  # the URL is the Secret's, not the ConfigMap's
    assert s.api_keys_file is not None and not s.api_keys


@pytest.mark.parametrize("name", OVERLAYS)
def test_secrets_are_referenced_never_embedded(name):
    docs = overlay(name)
    assert not [d for d in docs if d["kind"] == "Secret"]
    c, spec = container(docs), pod_spec(docs)
    env = {e["name"]: e for e in c["env"]}
    assert env["ZAPVERIFY_DATABASE_URL"]["valueFrom"]["secretKeyRef"]["name"] == "zapverify-database"
    assert "postgresql://" not in yaml.safe_dump(list(docs))
    # the keys file lies in the mounted Secret
    keys_file = settings_map(docs)["ZAPVERIFY_API_KEYS_FILE"]
    (mount,) = [m for m in c["volumeMounts"] if keys_file.startswith(m["mountPath"].rstrip("/") + "/")]
    (vol,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    assert vol["secret"]["secretName"] == "zapverify-api-keys" and mount["readOnly"] is True
    assert keys_file.rsplit("/", 1)[1] in example_secrets()["zapverify-api-keys"]["stringData"]


@functools.cache
def example_secrets() -> dict[str, dict]:
    docs = [d for d in yaml.safe_load_all((K8S / "secrets.example.yaml").read_text()) if d]
    return {d["metadata"]["name"]: d for d in docs}


def secret_names(docs) -> set[str]:
    """Every Secret the rendered objects read: env references, volumes, scrape credentials."""
    names = set()

    def walk(node):
        if isinstance(node, dict):
            for key in ("secretKeyRef", "secret"):
                if isinstance(node.get(key), dict):
                    names.add(node[key].get("name") or node[key].get("secretName"))
            if node.get("type") == "Bearer" and "credentials" in node:
                names.add(node["credentials"]["name"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(list(docs))
    return names


def test_example_secrets_are_placeholders_for_every_secret_read(with_components):
    name, docs = with_components
    examples = example_secrets()
    assert {d["kind"] for d in examples.values()} == {"Secret"}
    for secret in examples.values():
        for key, value in secret["stringData"].items():
            assert "REPLACE_WITH" in value, (secret["metadata"]["name"], key)
            assert not re.search(r"\b[0-9a-f]{64}\b", value)  # no digest of a real key
    # every Secret the manifests read has its example, except the one the CloudNativePG
    # operator makes itself
    cluster = one(docs, "Cluster")["metadata"]["name"]
    assert secret_names(docs) - set(examples) == {f"{cluster}-app"}
    assert secret_names(overlay(name)) <= set(examples)
    # and no kustomization applies the example
    for k in K8S.rglob("kustomization.yaml"):
        spec = yaml.safe_load(k.read_text())
        listed = spec.get("resources", []) + spec.get("components", []) + [p.get("path", "") for p in
                                                                           spec.get("patches", [])]
        assert not [f for f in listed if "secrets.example" in f], k


# ------------------------------------------------------------------ scaling, selection, network


@pytest.mark.parametrize("name", OVERLAYS)
def test_hpa_scales_on_cpu_and_a_gauge_the_service_exports_through_the_adapter(name, monkeypatch):
    docs = overlay(name)
    rules = yaml.safe_load((K8S / "prometheus-adapter" / "rules.yaml").read_text())["rules"]
    served = {r["name"]["as"]: r for r in rules}
    # a gauge: exported under its own name (a counter would gain `_total`), one value per pod
    gauges = {family.name for m in vars(metrics).values() if isinstance(m, Gauge) for family in m.describe()}
    hpa = one(docs, "HorizontalPodAutoscaler")["spec"]
    kinds = {m["type"]: m for m in hpa["metrics"]}
    assert set(kinds) == {"Resource", "Pods"} and kinds["Resource"]["resource"]["name"] == "cpu"
    pods = kinds["Pods"]["pods"]
    metric = pods["metric"]["name"]
    assert metric in gauges, (metric, sorted(gauges))
    rule = served[metric]
    assert rule["seriesQuery"].startswith(metric + "{") and re.fullmatch(rule["name"]["matches"], metric)
    assert set(rule["resources"]["overrides"]) == {"namespace", "pod"}
    assert "<<.Series>>{<<.LabelMatchers>>" in rule["metricsQuery"] and "by (<<.GroupBy>>)" in rule["metricsQuery"]
    # pods are added long before requests wait their deadline (and are refused)
    s = settings_of(settings_map(docs), monkeypatch)
    assert metric == "zapverify_admission_estimated_wait_seconds"
    assert 0 < quantity(pods["target"]["averageValue"]) < s.admission_default_deadline_seconds / 10
    assert hpa["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                     "name": one(docs, "Deployment")["metadata"]["name"]}
    assert hpa["minReplicas"] >= 2  # the PDB lets a drain through with one serving


@pytest.mark.parametrize("name", OVERLAYS)
def test_database_connections_fit_postgres_defaults(name, monkeypatch):
    docs = overlay(name)
    s = settings_of(settings_map(docs), monkeypatch)
    most = one(docs, "HorizontalPodAutoscaler")["spec"]["maxReplicas"] * s.workers * s.database_pool_size
    assert most <= POSTGRES_CONNECTIONS, most


@pytest.mark.parametrize("name", OVERLAYS)
def test_selectors_select_the_pods(name):
    docs = overlay(name)
    dep = one(docs, "Deployment")
    labels = dep["spec"]["template"]["metadata"]["labels"]

    def selects(selector: dict) -> bool:
        return bool(selector) and selector.items() <= labels.items()

    assert selects(dep["spec"]["selector"]["matchLabels"])
    assert selects(one(docs, "Service")["spec"]["selector"])
    assert selects(one(docs, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"])
    assert selects(one(docs, "NetworkPolicy")["spec"]["podSelector"]["matchLabels"])
    assert one(docs, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1
    ports = {p["name"] for p in container(docs)["ports"]}
    assert {p["targetPort"] for p in one(docs, "Service")["spec"]["ports"]} <= ports


@pytest.mark.parametrize("name", OVERLAYS)
def test_network_policy_lets_in_http_and_out_dns_and_postgres(name):
    policy = one(overlay(name), "NetworkPolicy")["spec"]
    assert set(policy["policyTypes"]) == {"Ingress", "Egress"}
    inbound = {p["port"] for rule in policy["ingress"] for p in rule["ports"]}
    assert inbound == {"http"}
    outbound = {(p["port"], p["protocol"]) for rule in policy["egress"] for p in rule["ports"]}
    url_port = int(re.search(r":(\d+)/", example_secrets()["zapverify-database"]["stringData"]["url"]).group(1))
    assert outbound == {(53, "UDP"), (53, "TCP"), (url_port, "TCP")}


# ------------------------------------------------------------------ the components


def test_components_add_monitoring_database_and_ingest(with_components, monkeypatch):
    name, docs = with_components
    assert BASE_KINDS | {"ServiceMonitor", "Cluster"} == {d["kind"] for d in docs}
    c = container(docs)
    # ServiceMonitor: the HTTP Service, its port by name, /metrics with an admin key
    sm = one(docs, "ServiceMonitor")
    services = [d for d in docs if d["kind"] == "Service"
                and sm["spec"]["selector"]["matchLabels"].items() <= d["metadata"]["labels"].items()]
    assert [s["metadata"]["name"] for s in services] == ["zapverify"]
    (endpoint,) = sm["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics" and endpoint["port"] in {p["name"] for p in services[0]["spec"]["ports"]}
    assert "REPLACE_WITH_THE_SHA256_HEX_OF_THE_SCRAPE_KEY:admin:" in \
        example_secrets()["zapverify-api-keys"]["stringData"]["api-keys"]
    # CloudNativePG: the URL from the operator's Secret
    cluster = one(docs, "Cluster")["metadata"]["name"]
    ref = {e["name"]: e for e in c["env"]}["ZAPVERIFY_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": f"{cluster}-app", "key": "uri"}
    # ingest: settings, container ports, Service and policy agree
    s = settings_of(settings_map(docs), monkeypatch)
    assert s.ingest_host == "0.0.0.0"
    ports = {p["name"]: (p["containerPort"], p["protocol"]) for p in c["ports"]}
    assert {ports["zap-tcp"], ports["zap-udp"], ports["zap-quic"]} == {
        (s.ingest_tcp_port, "TCP"), (s.ingest_udp_port, "UDP"), (s.ingest_quic_port, "UDP")}
    svc = one(docs, "Service", "zapverify-ingest")["spec"]
    assert svc["type"] in ("LoadBalancer", "NodePort")
    assert {(p["targetPort"], p["protocol"]) for p in svc["ports"]} == {(n, ports[n][1]) for n in ports if n != "http"}
    assert all(p["name"] == p["targetPort"] for p in svc["ports"])  # named ports
    policy = one(docs, "NetworkPolicy", "zapverify-ingest")["spec"]
    assert {p["port"] for rule in policy["ingress"] for p in rule["ports"]} == set(ports) - {"http"}
    # one QUIC certificate for every pod, from the mounted Secret
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert s.ingest_quic_cert is not None and s.ingest_quic_key is not None
    tls_dir = s.ingest_quic_cert.parent
    assert s.ingest_quic_key.parent == tls_dir
    (vol,) = [v for v in pod_spec(docs)["volumes"] if mounts.get(v["name"]) == str(tls_dir)]
    assert vol["secret"]["secretName"] == "zapverify-ingest-tls"
    assert container_policy(c) == []
    assert [k for k in settings_map(docs) if k not in SETTING_NAMES] == []


# ------------------------------------------------------------------ the API schemas


#: The oldest Kubernetes minor the manifests are meant for (PodDisruptionBudget's
#: unhealthyPodEvictionPolicy is GA from 1.31, on by default from 1.27).
OLDEST_MINOR = "1.30"


def test_rendered_objects_validate_against_the_kubernetes_schemas(with_components):
    # .ci/run installs the package (119 MB, not in the test extra) and sets
    # ZAPVERIFY_REQUIRE_KUBERNETES_VALIDATE=1 for its run of this file: there a missing one fails.
    if os.environ.get("ZAPVERIFY_REQUIRE_KUBERNETES_VALIDATE") == "1":
        import kubernetes_validate as kv
    else:
        kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is not installed: "
                                 "the rendered objects are checked against the API schemas where it is")
    name, docs = with_components
    crds = {"ServiceMonitor", "Cluster"}  # the operators' kinds: no schema in the package
    for version in (OLDEST_MINOR, kv.utils.latest_version()):
        for d in list(docs) + list(example_secrets().values()):
            if d["kind"] not in crds:
                kv.validate(d, version, strict=True)
