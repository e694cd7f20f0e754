"""The monitoring files of deploy/: the Prometheus alert rules (deploy/prometheus/alerts.yml,
with their promtool unit tests in alerts_test.yml) and the Grafana dashboard
(deploy/grafana/zapverify.json).  Every metric either names is exported by a live server's
/metrics; promtool checks the rules, runs their tests and parses every dashboard query."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from app.config import Settings
from app.engine.reference import kat
from app.engine.runtime import Runtime
from app.main import create_app
from tests import promtool
from tests.server import LiveServer

ROOT = Path(__file__).resolve().parents[1]
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
ALERTS_TEST = ROOT / "deploy" / "prometheus" / "alerts_test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "zapverify.json"
#: Series Prometheus itself makes for every target (no exporter has them).
SYNTHETIC = {"up"}

_LABEL_LISTS = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
             "offset", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (functions, label names, strings,
    ranges, numbers and Grafana variables left out); ``label_values(SELECTOR, label)``, a
    Grafana variable query, names its selector's metric."""
    e = expr.strip()
    if m := re.fullmatch(r"label_values\((.*),\s*\w+\s*\)", e, flags=re.S):
        e = m.group(1)
    e = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', e)  # strings (label values, regexes)
    e = re.sub(r"\{[^}]*\}", "", e)  # label matchers
    e = re.sub(r"\[[^\]]*\]", "", e)  # ranges and subqueries
    e = _LABEL_LISTS.sub("", e)  # by (...), on (...), ...
    e = re.sub(r"\$\{[^}]*\}|\$\w+", "", e)  # Grafana variables
    found = re.findall(r"(?<![\w:.])([A-Za-z_:][\w:]*)(?![\w:])(?!\s*\()", e)
    return {n for n in found if n.lower() not in _KEYWORDS}


def test_metric_names_finds_selected_metrics_only():
    assert metric_names('histogram_quantile(0.99, sum by (route, le) (rate(a_bucket{route=~"/v1/.*"}[5m]))) '
                        '> 2.5') == {"a_bucket"}
    assert metric_names('sum(rate(b_total{job=~"$job", status=~"5.."}[$__rate_interval])) / '
                        'sum(rate(c_total[$__rate_interval])) offset 5m') == {"b_total", "c_total"}
    assert metric_names("up{job=\"zapverify\"} == 0 and on (instance) d:recorded > 1e-9") == {"up", "d:recorded"}
    assert metric_names('label_values(zapverify_build_info{job=~"$job"}, instance)') == {"zapverify_build_info"}
    assert metric_names("min by (instance, backend) (x) == 0 unless bool y") == {"x", "y"}


@pytest.fixture(scope="module")
def exported(engine, tmp_path_factory) -> set[str]:
    """Every sample name a live server's /metrics can have (a counter's ``_total``, a
    histogram's ``_bucket``, ``_sum`` and ``_count``...), after a few requests: a verify
    (with its receipt), an error, a scrape."""
    settings = Settings(instance="monitoring-1", data_dir=tmp_path_factory.mktemp("data"))
    kas = kat.known_answers()["ed25519"]
    body = {"items": [{"scheme": "ed25519", "public_key": k.item.public_key.hex(), "message": k.item.message.hex(),
                       "signature": k.item.signature.hex()} for k in kas]}
    with LiveServer(create_app(settings, runtime=Runtime(engine))) as srv:
        assert httpx.post(srv.url + "/v1/verify", json=body, timeout=30).status_code == 200
        assert httpx.get(srv.url + "/v1/receipts/01900000-0000-7000-8000-000000000000").status_code == 404
        text = httpx.get(srv.url + "/metrics").text
    names = set()
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "summary": ("", "_sum", "_count")}
    for family in text_string_to_metric_families(text):
        names.update(family.name + s for s in suffixes.get(family.type, ("",)))
        names.update(s.name for s in family.samples)
    assert "zapverify_signatures_total" in names and "process_resident_memory_bytes" in names
    return names


# ------------------------------------------------------------------ alert rules
def _rules() -> list[dict]:
    return [r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]]


def test_alert_rules_cover_what_an_operator_is_paged_for():
    rules = {r["alert"]: r for r in _rules()}
    assert {"ZapverifyInstanceDown", "ZapverifyNotReady", "ZapverifySchemeDegraded", "ZapverifyShadowMismatch",
            "ZapverifyReceiptStoreDown", "ZapverifyLatencyHigh", "ZapverifyOverloaded",
            "ZapverifyPoolNearExhaustion"} <= set(rules)
    for name, rule in rules.items():
        assert rule["labels"]["severity"] in {"critical", "warning"}, name
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], name
    # every alert has a unit test that makes it fire
    tested = {t["alertname"] for case in yaml.safe_load(ALERTS_TEST.read_text())["tests"]
              for t in case["alert_rule_test"] if t["exp_alerts"]}
    assert tested == set(rules)


def test_alert_rules_name_only_exported_metrics(exported):
    for rule in _rules():
        unknown = metric_names(rule["expr"]) - exported - SYNTHETIC
        assert not unknown, f"{rule['alert']} names metrics /metrics does not export: {sorted(unknown)}"


def test_alert_rules_pass_promtool_check_and_their_unit_tests():
    out = promtool.run("check", "rules", str(ALERTS)).stdout
    assert f"SUCCESS: {len(_rules())} rules found" in out
    promtool.run("test", "rules", ALERTS_TEST.name, cwd=ALERTS_TEST.parent)


# ------------------------------------------------------------------ Grafana dashboard
def _panels(panels: list[dict]) -> list[dict]:
    out = []
    for p in panels:
        out.append(p)
        out.extend(_panels(p.get("panels", [])))  # a collapsed row holds its panels
    return out


def _queries() -> list[tuple[str, str]]:
    """(where, PromQL) of every panel target and template variable of the dashboard."""
    dash = json.loads(DASHBOARD.read_text())
    out = [(f"panel {p['title']!r}", t["expr"]) for p in _panels(dash["panels"]) for t in p.get("targets", [])]
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            q = var["query"]
            out.append((f"variable {var['name']}", q["query"] if isinstance(q, dict) else q))
    return out


def test_dashboard_is_well_formed_and_covers_the_service():
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] == "zapverify" and dash["schemaVersion"] >= 36
    panels = _panels(dash["panels"])
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    for p in panels:
        assert {"h", "w", "x", "y"} <= set(p["gridPos"]) and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24
        if p["type"] == "row":
            continue
        refs = [t["refId"] for t in p["targets"]]
        assert refs and len(refs) == len(set(refs)), p["title"]
        assert p["datasource"]["uid"] == "${datasource}", p["title"]
        assert all(t["datasource"]["uid"] == "${datasource}" for t in p["targets"]), p["title"]
    used = set().union(*(metric_names(q) for _, q in _queries()))
    wanted = {"zapverify_signatures_total",  # throughput per scheme
              "zapverify_http_request_duration_seconds_bucket",  # latency per route
              "zapverify_http_errors_total", "zapverify_admission_refusals_total",  # errors, refusals
              "zapverify_admission_estimated_wait_seconds", "zapverify_admission_in_flight",  # admission
              "zapverify_pool_bytes", "zapverify_backend_available", "zapverify_shadow_checked_items_total",
              "zapverify_shadow_mismatches_total", "zapverify_receipt_store_up",
              "process_resident_memory_bytes", "process_cpu_seconds_total"}
    assert wanted <= used, sorted(wanted - used)


def test_dashboard_queries_name_only_exported_metrics(exported):
    for where, query in _queries():
        names = metric_names(query)
        assert names, f"{where}: no metric found in {query!r}"
        unknown = names - exported
        assert not unknown, f"{where} names metrics /metrics does not export: {sorted(unknown)}"


def test_dashboard_queries_parse_as_promql(tmp_path):
    # Grafana's variables replaced by what they stand for; each query as a recording rule.
    subst = {"$__rate_interval": "5m", "$__range": "1h", "$job": "zapverify", "$instance": ".*"}
    rules = []
    for i, (_, query) in enumerate(_queries()):
        if query.startswith("label_values("):
            query = re.fullmatch(r"label_values\((.*),\s*\w+\s*\)", query).group(1)
        for var, value in subst.items():
            query = query.replace(var, value)
        assert "$" not in query, query
        rules.append({"record": f"grafana:query_{i}", "expr": query})
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "grafana", "rules": rules}]}))
    promtool.run("check", "rules", str(path))
