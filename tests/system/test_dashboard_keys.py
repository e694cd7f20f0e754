"""The dashboard on a server with API keys, in Debian's Chromium (headless, through
Playwright; scripts/system_test installs it): refused, it says why and asks for a key; given
one, it goes live, keeps the key in the ``#key=`` fragment and never in a URL it requests,
and its receipt links show the receipt fetched with the key (a plain link cannot carry the
header).  A uvicorn server of this process, no cluster."""

from __future__ import annotations

import re

import pytest

from app.api import security
from app.config import Settings
from app.engine.reference import kat
from app.engine.runtime import Runtime
from zapverify import Client

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]
ADMIN_KEY, VERIFY_KEY = "zv-dashboard-admin-0123456789", "zv-dashboard-verify-0123456789"


@pytest.fixture(scope="module")
def keyed(engine, tmp_path_factory):
    from app.main import create_app
    from tests.server import LiveServer

    keys = [f"{security.key_digest(ADMIN_KEY)}:verify+receipts+admin:ops",
            f"{security.key_digest(VERIFY_KEY)}:verify:verifier"]
    settings = Settings(api_keys=keys, receipts=True, data_dir=tmp_path_factory.mktemp("dashboard-keys"))
    with LiveServer(create_app(settings, runtime=Runtime(engine))) as server:
        items = kat.sign_items("ed25519", 3, seed=5)
        with Client(server.url, headers={"Authorization": f"Bearer {VERIFY_KEY}"}) as zv:
            zv.verify_batch("ed25519", [i.public_key for i in items], [i.message for i in items],
                            [i.signature for i in items])
        yield server


@pytest.fixture
def page():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        pg = browser.new_context(viewport={"width": 1440, "height": 900}).new_page()
        errors: list[str] = []
        pg.on("pageerror", lambda e: errors.append(str(e)))
        yield pg
        browser.close()
    assert errors == []  # refusals log failed loads to the console; the script itself never fails


def test_a_refused_dashboard_asks_for_a_key_and_uses_it_in_headers_only(keyed, page):
    urls: list[str] = []
    page.on("request", lambda r: urls.append(r.url))
    page.on("websocket", lambda ws: urls.append(ws.url))
    page.goto(keyed.url + "/")
    page.wait_for_selector("#key-form:not([hidden])", timeout=15000)
    assert "has API keys" in page.inner_text("#key-why") and "admin scope" in page.inner_text("#key-why")
    assert re.search(r"refused \(HTTP 401\): an API key is needed", page.inner_text("#conn"))
    page.fill("#key-input", ADMIN_KEY)
    page.click("#key-form button")
    page.wait_for_selector("#conn.ok", timeout=15000)  # the WebSocket feed is live
    assert page.is_hidden("#key-form") and page.evaluate("location.hash") == f"#key={ADMIN_KEY}"
    # A receipt link shows the receipt, fetched with the key.
    page.wait_for_selector("#recent a", timeout=10000)
    link = page.locator("#recent a").first
    assert link.get_attribute("href").startswith("/v1/receipts/")
    link.click()
    page.wait_for_function("() => document.getElementById('receipt-json').textContent.includes('merkle_root')",
                           timeout=5000)
    assert page.inner_text("#receipt-id").split()[0] in page.inner_text("#receipt-json")
    # A key without the admin scope: refused with 403, said so.
    page.evaluate(f"location.hash = 'key={VERIFY_KEY}'")
    page.wait_for_function("() => /lacks the admin scope/.test(document.getElementById('key-why').textContent)",
                           timeout=15000)
    assert page.is_visible("#key-form") and "HTTP 403" in page.inner_text("#conn")
    page.evaluate("location.hash = 'key=not-a-key'")
    page.wait_for_function("() => /does not know this API key/.test(document.getElementById('key-why').textContent)",
                           timeout=15000)
    assert urls and not [u for u in urls if ADMIN_KEY in u or VERIFY_KEY in u or "not-a-key" in u], urls
