"""The live dashboard in Debian's Chromium (headless, through Playwright): opened with the
deployment's admin key as ``/#key=<key>`` (the replicas require keys, as compose.yaml's do),
it fills in from the WebSocket feed through nginx, its counts and chart follow verifies sent
through the API, and it reconnects by itself when its server restarts.  Screenshot:
artifacts/dashboard.png."""

from __future__ import annotations

import re
import time

import httpx
import pytest

from app.engine.reference import kat
from tests.system.conftest import ARTIFACTS
from tests.system.requests_util import SCHEMES, verify_body
from zapverify import Client

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    ctx = browser.new_context(viewport={"width": 1440, "height": 900})  # a laptop screen
    pg = ctx.new_page()
    errors = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    yield pg
    ctx.close()
    # A server going away shows as failed loads (expected in the restart test); nothing else may fail.
    assert not [e for e in errors if not re.search(r"net::ERR_CONNECTION_(REFUSED|RESET|CLOSED)", e)], errors


def number(text: str) -> float:
    t = text.replace(",", "").strip()
    scale = {"k": 1e3, "M": 1e6, "G": 1e9}
    m = re.fullmatch(r"([\d.]+)\s*([kMG])?", t)
    assert m, f"not a number: {text!r}"
    return float(m.group(1)) * scale.get(m.group(2) or "", 1)


def test_dashboard_follows_verifies_sent_through_the_api(cluster, page):
    page.goto(cluster.url + "/#key=" + cluster.api_key)
    page.wait_for_selector("#conn.ok", timeout=15000)  # the WebSocket feed is live
    instance = page.inner_text("#instance")
    assert instance in ("replica-a", "replica-b")
    replica = cluster.replicas[instance[-1]]
    total0 = number(page.inner_text("#total-verified"))
    # The sections read from the snapshot; where the server reports nothing they say so.
    status = httpx.get(replica.url + "/v1/status", headers=cluster.auth, timeout=10).json()
    host_class = page.inner_text("#host-class")
    if status["host"].get("class"):
        assert status["host"]["class"] in host_class
        assert status["pick"]["transport"] in page.inner_text("#transport")
        assert status["pick"]["allocator"] in page.inner_text("#allocator")
    else:
        assert host_class.startswith("not available")
    if status.get("pool"):
        assert page.locator("#pool-gauge svg").count() == 1
    else:
        assert "not available" in page.inner_text("#pool")

    # Verifies straight to the replica the page shows, over ~7 s, so the chart has points.
    # JSON requests (request i carries the first 1 + i % 5 schemes, so each scheme has a rate
    # of its own) and ZAP frames (they land in the UMA pool), plus one frame with a bad magic.
    sent = i = 0
    t_end = time.monotonic() + 7
    kas = [k for k in kat.known_answers()["ed25519"]]
    with httpx.Client(headers=cluster.auth) as c, Client(replica.url, headers=cluster.auth) as zc:
        while time.monotonic() < t_end:
            body, want = verify_body(*SCHEMES[: 1 + i % len(SCHEMES)])
            i += 1
            r = c.post(replica.url + "/v1/verify", json=body, timeout=60)
            assert r.status_code == 200 and r.json()["verdicts"] == want
            res = zc.verify_batch("ed25519", [k.item.public_key for k in kas], [k.item.message for k in kas],
                                  [k.item.signature for k in kas])
            assert res.verdicts.tolist() == [k.expected for k in kas]
            sent += len(want) + len(kas)
            time.sleep(0.2)
        bad = c.post(replica.url + "/v1/verify/zap", content=b"ZIP\0" + bytes(60),
                     headers={"content-type": "application/x-zap"})
        assert bad.status_code == 400
    deadline = time.monotonic() + 10
    while number(page.inner_text("#total-verified")) < total0 + sent and time.monotonic() < deadline:
        time.sleep(0.2)
    assert number(page.inner_text("#total-verified")) >= total0 + sent
    # one line per scheme verified, each with at least one point above the baseline
    lines = page.locator("#chart polyline")
    drawn = {lines.nth(i).get_attribute("data-scheme") for i in range(lines.count())}
    assert set(SCHEMES) <= drawn, drawn
    for i in range(lines.count()):
        ys = [float(p.split(",")[1]) for p in lines.nth(i).get_attribute("points").split()]
        assert min(ys) < max(ys), "a flat line: no data in the chart"
        assert min(ys) > 8, "a peak drawn on the top grid line (clipped)"  # T = 8 in renderChart
    # every scheme's row shows without scrolling inside a box
    from app.core.schemes import SCHEMES as ALL_SCHEMES

    assert page.locator("#schemes tr").count() == len(ALL_SCHEMES)
    assert page.evaluate("() => { const t = document.getElementById('schemes').closest('div');"
                         " return t.scrollHeight <= t.clientHeight; }")
    # recent batches link to their receipts, which open
    link = page.locator("#recent a").first
    href = link.get_attribute("href")
    assert href.startswith("/v1/receipts/")
    assert page.request.get(cluster.url + href, headers=cluster.auth).status == 200
    # each row shows its own id: the tail (a UUIDv7's head is the time, alike within a minute)
    shown = page.locator("#recent a").all_inner_texts()
    assert len(set(shown)) == len(shown), shown
    assert "✓" in page.inner_text("#schemes")  # self-test state per scheme
    page.wait_for_function("() => /bad magic/.test(document.getElementById('ingest').textContent)", timeout=5000)
    ingest = page.inner_text("#ingest")
    assert re.search(r"http\s+accepted\s+\d", ingest) and "bad magic" in ingest, ingest
    if status.get("pool"):
        acquired = [number(t) for t in page.locator("#pool-classes tbody tr td:last-child").all_inner_texts()]
        assert sum(acquired) > 0  # the ZAP frames took pool buffers
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)


def test_dashboard_reconnects_after_its_server_restarts(cluster, page):
    a = cluster.replicas["a"]
    page.goto(a.url + "/#key=" + cluster.api_key)
    page.wait_for_selector("#conn.ok", timeout=15000)
    a.stop()  # graceful: uvicorn closes the socket with 1012 "service restart"
    page.wait_for_selector("#conn.bad", timeout=15000)
    assert "disconnected" in page.inner_text("#conn")
    assert "ready" != page.inner_text("#ready") and "ok" not in page.get_attribute("#ready", "class")
    restarted = time.monotonic()
    a.start()
    a.wait_ready()
    page.wait_for_selector("#conn.ok", timeout=30000)
    page.wait_for_function("() => !document.body.classList.contains('stale')", timeout=5000)
    assert page.inner_text("#instance") == "replica-a"
    assert page.inner_text("#ready") == "ready"
    uptime = float(page.get_attribute("#uptime", "data-seconds"))
    assert uptime <= time.monotonic() - restarted + 1  # the new process's snapshots, not the old one's
