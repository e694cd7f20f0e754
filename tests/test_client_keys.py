"""API keys in our own tools, against real uvicorn servers on loopback: the client library
(``api_key=`` or ``$ZAPVERIFY_API_KEY``), ``zapverify bench`` and ``zapverify selftest --url``
(``--api-key``), what a refused WebSocket handshake looks like to a client, and the README's
client example, run as written."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import re
from pathlib import Path

import pytest

from app import cli
from app.api import security
from app.config import Settings
from app.core.errors import ConnectionFailed, RemoteError, RequestError
from app.engine.reference import kat
from app.engine.runtime import Runtime
from zapverify import AggregateItem, AsyncClient, BatchRequest, Client, aggregate_body, leaf_hash

ROOT = Path(__file__).resolve().parents[1]
VERIFY_KEY, RECEIPTS_KEY, ADMIN_KEY = "zv-keys-verify-0123456789", "zv-keys-receipts-0123456789", "zv-keys-admin-0123"
KEYS = [f"{security.key_digest(VERIFY_KEY)}:verify:verifier", f"{security.key_digest(RECEIPTS_KEY)}:receipts",
        f"{security.key_digest(ADMIN_KEY)}:verify+receipts+admin:ops"]


@pytest.fixture(autouse=True)
def no_key_in_the_environment(monkeypatch):
    monkeypatch.delenv("ZAPVERIFY_API_KEY", raising=False)


@pytest.fixture(scope="module")
def keyed(engine, tmp_path_factory):
    """A server with API keys and receipts on."""
    from app.main import create_app
    from tests.server import LiveServer

    settings = Settings(api_keys=KEYS, receipts=True, data_dir=tmp_path_factory.mktemp("keyed"))
    with LiveServer(create_app(settings, runtime=Runtime(engine))) as server:
        yield server


@pytest.fixture(scope="module")
def cols():
    items = kat.sign_items("ed25519", 4, seed=41)
    return [i.public_key for i in items], [i.message for i in items], [i.signature for i in items]


def test_the_client_sends_its_key_over_http_and_the_websocket(keyed, cols):
    with Client(keyed.url) as zv, pytest.raises(RemoteError) as info:
        zv.verify_batch("ed25519", *cols)
    assert (info.value.status, info.value.code) == (401, "UNAUTHORIZED")
    with Client(keyed.url, api_key=ADMIN_KEY) as zv:
        one = zv.verify_batch("ed25519", *cols)
        j = zv.verify([{"scheme": "ed25519", "public_key": cols[0][0], "message": cols[1][0],
                        "signature": cols[2][0]}])
        streamed = list(zv.verify_stream([BatchRequest("ed25519", *cols)] * 3))  # the key in the handshake
        assert one.valid == 4 and j.verdicts == [True] and [r.valid for r in streamed] == [4, 4, 4]
        newest = zv.receipts(order="desc", limit=1)
        assert newest["receipts"][0]["id"] in {r.batch_id for r in streamed}  # pipelined: any of them
        assert zv.receipt(j.batch_id)["count"] == 1 and zv.status()["engine"]["ready"]
    with Client(keyed.url, api_key=VERIFY_KEY) as zv, pytest.raises(RemoteError) as info:
        zv.status()
    assert (info.value.status, info.value.code) == (403, "FORBIDDEN")


def test_the_client_reads_the_key_from_the_environment(keyed, cols, monkeypatch):
    monkeypatch.setenv("ZAPVERIFY_API_KEY", VERIFY_KEY)
    with Client(keyed.url) as zv:
        assert zv.verify_batch("ed25519", *cols).valid == 4
    with Client(keyed.url, api_key="") as zv, pytest.raises(RemoteError) as info:  # "": none
        zv.verify_batch("ed25519", *cols)
    assert info.value.status == 401
    # Headers given explicitly win: no second Authorization.
    with Client(keyed.url, headers={"X-API-Key": "not-a-key"}) as zv, pytest.raises(RemoteError) as info:
        zv.verify_batch("ed25519", *cols)
    assert info.value.message == "unknown API key"

    async def streamed() -> list[int]:
        async with AsyncClient(keyed.url) as zv, zv.stream() as s:
            futures = [await s.submit(BatchRequest("ed25519", *cols)) for _ in range(3)]
            return [r.valid for r in await asyncio.gather(*futures)]

    assert asyncio.run(streamed()) == [4, 4, 4]


def test_a_refused_websocket_gets_an_http_403_at_the_handshake(keyed, cols):
    # docs/operations.md, "Access control": the server closes before accepting (1008 in ASGI
    # terms), which uvicorn answers as HTTP 403: the client never sees a close frame.
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    ws = keyed.url.replace("http://", "ws://")
    for path, key in [("/v1/ws/verify", None), ("/v1/ws/verify", "not-a-key"), ("/v1/ws/verify", RECEIPTS_KEY),
                      ("/v1/ws/stats", VERIFY_KEY)]:
        headers = {"Authorization": f"Bearer {key}"} if key else None
        with pytest.raises(InvalidStatus) as info:
            connect(ws + path, additional_headers=headers, open_timeout=10).close()
        assert info.value.response.status_code == 403, (path, key)
    with connect(ws + "/v1/ws/stats", additional_headers={"Authorization": f"Bearer {ADMIN_KEY}"}) as conn:
        assert "engine" in json.loads(conn.recv(timeout=10))
    with Client(keyed.url) as zv, pytest.raises(ConnectionFailed, match="403"):
        list(zv.verify_stream([BatchRequest("ed25519", *cols)]))


def _run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(argv)
    return rc, out.getvalue(), err.getvalue()


BENCH = ["bench", "--scheme", "ed25519", "--batch", "4", "--duration", "0.4", "--concurrency", "2",
         "--unique", "2", "--no-progress"]


def test_bench_takes_an_api_key(keyed, tmp_path, monkeypatch):
    rc, _, err = _run_cli([*BENCH, "--url", keyed.url, "--transport", "zap"])
    assert rc == 2 and "UNAUTHORIZED" in err and "--api-key" in err and "ZAPVERIFY_API_KEY" in err, err
    for transport in ("zap", "json", "ws"):
        out = tmp_path / f"{transport}.json"
        rc, text, err = _run_cli([*BENCH, "--url", keyed.url, "--transport", transport, "--api-key", VERIFY_KEY,
                                  "--json", str(out)])
        numbers = json.loads(out.read_text())
        assert rc == 0 and numbers["requests"] > 0 and numbers["errors"] == 0, (transport, text, err)
        assert VERIFY_KEY not in out.read_text() + text + err  # never in the report
    monkeypatch.setenv("ZAPVERIFY_API_KEY", VERIFY_KEY)
    rc, text, err = _run_cli([*BENCH, "--url", keyed.url, "--transport", "zap"])
    assert rc == 0 and "verifies/s" in text, err


def test_selftest_of_a_running_server_takes_an_admin_key(keyed):
    rc, _, err = _run_cli(["selftest", "--url", keyed.url])
    assert rc == 2 and "UNAUTHORIZED" in err and "--api-key" in err
    rc, _, err = _run_cli(["selftest", "--url", keyed.url, "--api-key", VERIFY_KEY])
    assert rc == 2 and "FORBIDDEN" in err and "admin" in err
    rc, out, _ = _run_cli(["selftest", "--url", keyed.url, "--api-key", ADMIN_KEY])
    assert rc == 0 and re.search(r"^ed25519\s+-> cpu\s+cpu=pass", out, re.M) and out.rstrip().endswith("ready")


# ------------------------------------------------------------------ client-side errors
def test_an_aggregate_item_with_a_bare_bytes_message_names_the_field():
    pk, sig = bytes(48), bytes(96)
    with pytest.raises(RequestError) as info:
        aggregate_body([AggregateItem("fast_aggregate", (pk, pk), (b"m",), sig),
                        AggregateItem("fast_aggregate", (pk, pk), b"attestation", sig)])
    assert info.value.field == "items[1].messages" and "bare bytes" in info.value.message
    with pytest.raises(RequestError) as info:
        aggregate_body([AggregateItem("aggregate", pk, (b"a",), sig)])
    assert info.value.field == "items[0].public_keys"
    with pytest.raises(RequestError) as info:
        aggregate_body([AggregateItem("aggregate", (pk, pk), (b"a", "b"), sig)])
    assert info.value.field == "items[0].messages[1]"
    assert aggregate_body([AggregateItem("fast_aggregate", [pk], [b"m"], sig)])["items"][0]["message"] == "bQ=="


def test_leaf_hash_takes_the_scheme_id_or_its_code():
    from app.core.errors import UnknownScheme
    from app.core.schemes import SCHEMES

    it = kat.sign_items("secp256k1", 1, seed=42)[0]
    by_code = leaf_hash(SCHEMES["secp256k1"].code, True, it.public_key, it.message, it.signature)
    assert leaf_hash("secp256k1", True, it.public_key, it.message, it.signature) == by_code
    with pytest.raises(UnknownScheme) as info:
        leaf_hash("rsa", True, b"", b"", b"")
    assert info.value.field == "scheme"


# ------------------------------------------------------------------ the README's example
def _readme_client_example() -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Python client\n", 1)[1].split("\n## ", 1)[0]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_readme_client_example_runs_as_written(engine, tmp_path, capsys):
    from app.main import create_app
    from tests.server import LiveServer

    code = _readme_client_example()
    assert 'URL = "http://127.0.0.1:8000"' in code
    settings = Settings(receipts=True, data_dir=tmp_path)  # the defaults of `make run`
    with LiveServer(create_app(settings, runtime=Runtime(engine))) as server:
        exec(compile(code.replace("http://127.0.0.1:8000", server.url), "README.md", "exec"), {})
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("100 [ True  True")  # r.valid, r.verdicts (numpy wraps them), the root
    i = lines.index("[True, True] True")  # both JSON items valid; the newest receipt is their batch
    assert lines[i + 1] == "True True"  # the served proof, and the user's own leaf, verify offline
    assert lines[i + 2:] == ["10"] * 10 + [str([10] * 10)]  # the stream, then the asyncio stream


def test_the_readme_commands_write_their_files_outside_the_checkout():
    # `bench --json out.json`, run from the checkout as the README's commands are, left an untracked file.
    text = (ROOT / "README.md").read_text()
    paths = re.findall(r"--json\s+(\S+)", text) + re.findall(r"convert-vectors\s+(\S+)", text)
    assert paths and all(p.startswith("/tmp/") for p in paths), paths
