"""JSON verify requests decoded straight into columns (schemas.to_work) against the per-item path."""

import base64
import binascii
import dataclasses
import random

import numpy as np
import pytest

from app.api.schemas import VerifyRequest, _column, to_items, to_work
from app.core.batch import Batch
from app.core.errors import LimitExceeded, RequestError
from app.engine.reference import kat
from app.engine.verify.grouping import batch_of, group_items

LIMITS = {"max_items": 10_000, "max_message_bytes": 1 << 20}


def _enc(b: bytes, encoding: str) -> str:
    return b.hex() if encoding == "hex" else base64.b64encode(b).decode()


def _request(items, encoding="hex", **kw) -> VerifyRequest:
    rows = [{"scheme": i.scheme, "public_key": _enc(i.public_key, encoding), "message": _enc(i.message, encoding),
             "signature": _enc(i.signature, encoding),
             **({"context": _enc(i.context, encoding)} if i.context else {})} for i in items]
    return VerifyRequest.model_validate({"items": rows, "encoding": encoding, **kw})


def _same_as_items(req: VerifyRequest) -> Batch:
    work = to_work(req, **LIMITS)
    assert isinstance(work, Batch)
    groups = group_items(to_items(req, **LIMITS))
    assert len(groups) == 1
    (key, idx), = groups.items()
    want = batch_of(key, [to_items(req, **LIMITS)[i] for i in idx])
    for col in ("pks", "sigs", "msgs", "offsets"):
        assert np.array_equal(getattr(work, col), getattr(want, col)), col
    assert (work.scheme, work.ctx, work.prehashed, work.allow_high_s) == \
        (want.scheme, want.ctx, want.prehashed, want.allow_high_s)
    return work


@pytest.mark.parametrize("encoding", ["hex", "base64"])
@pytest.mark.parametrize("scheme_id,kw", [("ed25519", {}), ("secp256k1", {"prehashed": True, "allow_high_s": True}),
                                          ("secp256k1", {}), ("ml-dsa-44", {})])
def test_one_batch_columns_equal_the_item_path(scheme_id, kw, encoding):
    items = kat.sign_items(scheme_id, 6, seed=1, context=b"ctx" if scheme_id.startswith("ml") else b"",
                           prehashed=kw.get("prehashed", False))
    items.append(dataclasses.replace(items[0], message=b""))  # an empty message (a false verdict)
    batch = _same_as_items(_request(items, encoding, **kw))
    assert len(batch) == 7 and batch.msgs.size == sum(len(i.message) for i in items)


@pytest.mark.parametrize("change", ["mixed", "0x", "short_sig", "der", "ctx_differs"])
def test_other_requests_take_the_item_path_with_the_same_items(change):
    items = kat.sign_items("ed25519", 4, seed=3)
    body = _request(items).model_dump()
    if change == "mixed":
        k1 = kat.sign_items("secp256k1", 1, seed=4)[0]
        body["items"].append(_request([k1]).model_dump()["items"][0])
    elif change == "0x":
        body["items"][1]["public_key"] = "0x" + body["items"][1]["public_key"]
    elif change == "short_sig":
        body["items"][0]["signature"] = body["items"][0]["signature"][:-2]
    elif change == "der":
        body["signature_format"] = "der"
        body["items"] = [_request(kat.sign_items("secp256k1", 2, seed=5)).model_dump()["items"][0]]
    else:
        body["items"][0]["context"] = "00"
        body["items"][0]["scheme"] = body["items"][1]["scheme"] = "ml-dsa-44"
    req = VerifyRequest.model_validate(body)
    work = to_work(req, **LIMITS)
    assert isinstance(work, list) and work == to_items(req, **LIMITS)


@pytest.mark.parametrize("encoding,field,bad", [("hex", "signature", "zz"), ("base64", "public_key", "!!!!"),
                                                ("hex", "message", "abc")])
def test_decode_errors_still_name_the_field(encoding, field, bad):
    items = kat.sign_items("ed25519", 3, seed=6)
    body = _request(items, encoding).model_dump()
    body["items"][2][field] = bad
    with pytest.raises(RequestError) as err:
        to_work(VerifyRequest.model_validate(body), **LIMITS)
    assert err.value.field == f"items[2].{field}" and err.value.code == "BAD_ENCODING"


@pytest.mark.parametrize("where", [0, 2])
@pytest.mark.parametrize("field", ["public_key", "message", "signature"])
@pytest.mark.parametrize("mangle,why", [
    (lambda t: t[:2] + " " + t[2:], "whitespace at character 2"),
    (lambda t: " ".join(t[i:i + 2] for i in range(0, len(t), 2)), "whitespace at character 2"),
    (lambda t: t + "\n", "whitespace at character"),
    (lambda t: "0x" + t[:4] + "\t" + t[4:], "whitespace at character 6"),
    (lambda t: t[:2] + ":" + t[2:], "':' at character 2 is not a hex digit"),
    (lambda t: t + "a", "an odd number of digits"),
], ids=["one-space", "spaced-pairs", "newline", "tab-after-0x", "colon", "odd"])
def test_hex_with_embedded_whitespace_or_separators_is_refused_naming_the_field(where, field, mangle, why):
    # bytes.fromhex skips whitespace between pairs: such text was verified as if it had none.
    items = kat.sign_items("ed25519", 3, seed=8, msg_len=8)
    body = _request(items).model_dump()
    body["items"][where][field] = mangle(body["items"][where][field])
    with pytest.raises(RequestError) as err:
        to_work(VerifyRequest.model_validate(body), **LIMITS)
    assert (err.value.field, err.value.code) == (f"items[{where}].{field}", "BAD_ENCODING")
    assert err.value.message.startswith("not valid hex: ") and why in err.value.message, err.value.message


@pytest.mark.parametrize("text,why", [
    (base64.urlsafe_b64encode(b"\xfb\xff\xbf\xfb").decode(), "'-' at character 0 is URL-safe base64 (RFC 4648 §5)"),
    (base64.urlsafe_b64encode(b"\xff\xff\xff").decode(), "'_' at character 0 is URL-safe base64"),
    (base64.b64encode(b"ab").decode().rstrip("="), "3 characters, not a multiple of 4: unpadded base64 is refused"),
    ("YW I=", "whitespace at character 2"),
    ("YW*=", "'*' at character 2 is not in the base64 alphabet"),
    ("Y=WI", "misplaced '=' padding"),
], ids=["url-safe-dash", "url-safe-underscore", "unpadded", "space", "star", "padding-inside"])
def test_base64_refusals_say_which_alphabet(text, why):
    items = kat.sign_items("ed25519", 2, seed=9)
    body = _request(items, "base64").model_dump()
    body["items"][1]["message"] = text
    with pytest.raises(RequestError) as err:
        to_work(VerifyRequest.model_validate(body), **LIMITS)
    assert (err.value.field, err.value.code) == ("items[1].message", "BAD_ENCODING")
    msg = err.value.message
    assert msg.startswith("not valid base64: ") and why in msg, msg
    assert "standard base64 (RFC 4648 §4: A-Z a-z 0-9 + /, '=' padding)" in msg


def test_limits_name_the_field():
    items = kat.sign_items("ed25519", 3, seed=7, msg_len=40)
    req = _request(items)
    with pytest.raises(LimitExceeded) as err:
        to_work(req, max_items=10, max_message_bytes=39)
    assert err.value.field == "items[0].message"
    with pytest.raises(LimitExceeded) as err:
        to_work(req, max_items=2, max_message_bytes=100)
    assert err.value.field == "items"


def test_strict_base64_accepts_only_what_the_item_path_accepts_with_the_same_bytes():
    rng = random.Random(11)
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/= \n-_"
    accepted = 0
    for _ in range(20_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 10)))
        got = _column([text], "base64", None)
        if got is not None:
            accepted += 1
            assert got[0] == base64.b64decode(text, validate=True)
    assert accepted > 100
    assert _column(["QQ==", "QUI="], "base64", None) == (b"AAB", [1, 2])
    assert _column(["0a", "0b0c"], "hex", None) == (b"\x0a\x0b\x0c", [1, 2])
    assert _column(["0a", "0b0c"], "hex", 1) is None
    with pytest.raises(binascii.Error):
        base64.b64decode("QQ", validate=True)  # unpadded: refused by both paths
    assert _column(["QQ"], "base64", None) is None
