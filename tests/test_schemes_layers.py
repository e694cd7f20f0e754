"""The scheme registry's options and signature formats are exactly what every layer takes:
the JSON API (its schema and its decoding), the ZAP decoder and encoder, the client and the
generated known answers.  The tests enumerate the registry, so an option or format added
there without the layers fails here; a made-up scheme with an option of its own shows that
no layer decides by family name (adding a scheme needs its registry record and a verifier)."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
from pydantic import ValidationError

from app.api import schemas
from app.core import encoding, schemes
from app.core.batch import Batch, Item
from app.core.errors import BadOptions, RequestError
from app.engine.reference import kat
from app.wire import zap
from zapverify import AsyncClient, BatchRequest, Client, json_body

LIMITS = {"max_items": 100, "max_message_bytes": 1 << 20}
SCHEME_IDS = list(schemes.SCHEMES)
OPTION_NAMES = list(schemes.OPTIONS)


def _row(s: schemes.Scheme, sig: bytes | None = None) -> dict:
    return {"scheme": s.id, "public_key": bytes(s.pk_len).hex(), "message": bytes(32).hex(),
            "signature": (bytes(s.sig_len) if sig is None else sig).hex()}


def _takers(bits: int) -> str:
    return "/".join(schemes.accepting(bits))


# ------------------------------------------------------------------ the registry itself
def test_the_registry_declares_options_and_formats_consistently():
    bits = [o.bit for o in schemes.OPTIONS.values()]
    assert all(b and not b & (b - 1) for b in bits) and len(set(bits)) == len(bits)  # one bit each
    assert schemes.OPTION_BITS == sum(bits) and schemes.OPTION_BITS < 0x100  # the wire's u8
    assert list(schemes.SIGNATURE_FORMATS)[0] == schemes.RAW
    for s in schemes.SCHEMES.values():
        assert set(s.options) <= set(schemes.OPTIONS) and s.signature_formats[0] == schemes.RAW
        assert s.option_bits == sum(schemes.OPTIONS[n].bit for n in s.options)
        assert all(s.accepts_option(n) == (n in s.options) for n in schemes.OPTIONS)
    for name, o in schemes.OPTIONS.items():  # an option no scheme takes would be dead weight
        assert schemes.accepting(o.bit), name
    for f in schemes.SIGNATURE_FORMATS:
        assert any(f in s.signature_formats for s in schemes.SCHEMES.values()), f
        encoding.compact_signature(b"\x30\x00", f)  # every format has a reader


def test_a_scheme_record_refuses_an_undefined_option_or_format():
    with pytest.raises(ValueError, match="not in OPTIONS"):
        schemes.Scheme("x", 0x7E, "ed25519", (32,), 64, False, "-", options=("hashed",))
    with pytest.raises(ValueError, match="signature formats"):
        schemes.Scheme("x", 0x7E, "ed25519", (32,), 64, False, "-", signature_formats=("der",))
    with pytest.raises(ValueError, match="unknown signature format"):
        encoding.compact_signature(b"", "pem")


def test_todays_registry_gives_ecdsa_its_options_and_der():
    """What the API, wire format and docs promise today (docs/wire-format.md,
    "3. Verify request (type 0x01)", and docs/architecture.md, "Schemes")."""
    assert {s.id: s.options for s in schemes.SCHEMES.values() if s.options} == {
        "secp256k1": ("prehashed", "allow_high_s"), "p256": ("prehashed", "low_s")}
    assert {s.id: s.signature_formats for s in schemes.SCHEMES.values() if len(s.signature_formats) > 1} == {
        "secp256k1": ("raw", "der"), "p256": ("raw", "der")}
    assert {name: o.bit for name, o in schemes.OPTIONS.items()} == {"prehashed": 0x01, "allow_high_s": 0x02,
                                                                    "low_s": 0x04}
    assert schemes.get("p256").code == 0x04


# ------------------------------------------------------------------ JSON API
def test_the_json_request_has_one_field_per_option_and_the_registrys_formats():
    props = schemas.VerifyRequest.model_json_schema()["properties"]
    assert set(props) - {"items", "encoding", "signature_format"} == set(schemes.OPTIONS)
    for name, o in schemes.OPTIONS.items():
        assert (props[name]["type"], props[name]["default"]) == ("boolean", False)
        assert props[name]["description"] == f"{_takers(o.bit)}: {o.summary}"
    fmt = props["signature_format"]
    assert fmt["enum"] == list(schemes.SIGNATURE_FORMATS) and fmt["default"] == schemes.RAW
    # The descriptions as published today (the OpenAPI schema is a contract).
    assert props["prehashed"]["description"] == "secp256k1/p256: messages are 32-byte digests"
    assert props["allow_high_s"]["description"] == "secp256k1: accept s > n/2 (normalised first)"
    assert props["low_s"]["description"] == "p256: require s ≤ n/2 (malleability-free verdicts)"
    assert fmt["description"] == "secp256k1/p256: 'der' converts ASN.1 DER signatures to compact r‖s"


@pytest.mark.parametrize("name", OPTION_NAMES)
def test_a_json_option_is_a_strict_bool_naming_its_field(name):
    with pytest.raises(ValidationError) as e:
        schemas.VerifyRequest.model_validate({"items": [_row(schemes.get("ed25519"))], name: "yes"})
    assert schemas.loc_to_field(("body", *e.value.errors()[0]["loc"])) == name


@pytest.mark.parametrize("name", OPTION_NAMES)
@pytest.mark.parametrize("sid", SCHEME_IDS)
def test_a_json_option_applies_exactly_to_the_schemes_that_accept_it(sid, name):
    s = schemes.SCHEMES[sid]
    req = schemas.VerifyRequest.model_validate({"items": [_row(s), _row(s)], name: True})
    want = schemes.OPTIONS[name].bit if s.accepts_option(name) else 0
    items = schemas.to_items(req, **LIMITS)
    assert [schemes.option_bits(it) for it in items] == [want, want]
    if not want:  # no item takes it: refused naming the option (issue 53), not silently dropped
        with pytest.raises(RequestError) as e:
            schemas.to_work(req, **LIMITS)
        assert e.value.field == name and "/".join(schemes.accepting(schemes.OPTIONS[name].bit)) in e.value.message
        taker = schemes.SCHEMES[schemes.accepting(schemes.OPTIONS[name].bit)[0]]
        mixed = schemas.VerifyRequest.model_validate({"items": [_row(s), _row(taker)], name: True})
        assert [schemes.option_bits(it) for it in schemas.to_work(mixed, **LIMITS)] == [0, schemes.OPTIONS[name].bit]
        return
    work = schemas.to_work(req, **LIMITS)  # the column path decides alike
    assert isinstance(work, Batch) and work.options == want


@pytest.mark.parametrize("fmt", list(schemes.SIGNATURE_FORMATS))
@pytest.mark.parametrize("sid", SCHEME_IDS)
def test_a_signature_format_applies_exactly_to_the_schemes_that_accept_it(sid, fmt):
    s = schemes.SCHEMES[sid]
    sent = bytes(i % 251 for i in range(s.sig_len))  # no format but raw reads it as itself
    req = schemas.VerifyRequest.model_validate({"items": [_row(s, sent)], "signature_format": fmt})
    [item] = schemas.to_items(req, **LIMITS)
    if fmt in s.signature_formats:
        assert item.signature == encoding.compact_signature(sent, fmt)
    else:
        assert item.signature == sent
    if fmt != schemes.RAW and fmt not in s.signature_formats:  # no item takes it: refused (issue 53)
        with pytest.raises(RequestError) as e:
            schemas.to_work(req, **LIMITS)
        assert e.value.field == "signature_format"
        return
    # Only signatures taken as sent go straight to columns; others are read one by one.
    assert isinstance(schemas.to_work(req, **LIMITS), Batch) == (s.signature_format_for(fmt) == schemes.RAW)


def test_a_format_no_scheme_accepts_is_refused_naming_the_field():
    with pytest.raises(ValidationError) as e:
        schemas.VerifyRequest.model_validate({"items": [_row(schemes.get("secp256k1"))], "signature_format": "pem"})
    assert schemas.loc_to_field(("body", *e.value.errors()[0]["loc"])) == "signature_format"


# ------------------------------------------------------------------ ZAP
def _undefined_bit() -> int:
    return next(1 << k for k in range(8) if not schemes.OPTION_BITS & (1 << k))


def test_the_wire_knows_exactly_the_registrys_option_bits():
    assert zap.KNOWN_OPTIONS == schemes.OPTION_BITS
    frame = zap.encode_items("secp256k1", [bytes(33)], [bytes(32)], [bytes(64)])
    frame[zap.HEADER_SIZE + 1] = _undefined_bit()
    with pytest.raises(BadOptions, match="unknown option bits") as e:
        zap.decode_request(frame)
    assert e.value.field == "options"


@pytest.mark.parametrize("name", OPTION_NAMES)
@pytest.mark.parametrize("sid", SCHEME_IDS)
def test_a_zap_option_bit_is_taken_exactly_by_the_schemes_that_accept_it(sid, name):
    s, bit = schemes.SCHEMES[sid], schemes.OPTIONS[name].bit
    frame = zap.encode_items(sid, [bytes(s.pk_len)], [bytes(32)], [bytes(s.sig_len)])
    frame[zap.HEADER_SIZE + 1] = bit
    batch = Batch.from_items(s, [bytes(s.pk_len)], [bytes(32)], [bytes(s.sig_len)], **{name: True})
    if s.accepts_option(name):
        got = zap.decode_request(frame).batch
        assert getattr(got, name) is True and got.options == bit
        assert zap.encode_request(batch) == frame
        assert zap.encode_items(sid, [bytes(s.pk_len)], [bytes(32)], [bytes(s.sig_len)], **{name: True}) == frame
        return
    with pytest.raises(BadOptions) as e:
        zap.decode_request(frame)
    assert e.value.field == "options"
    # the error names the option, its bit and the schemes that take it, decoding or encoding
    want = f"option {name} (0x{bit:02x}) applies to {_takers(bit)} only, not {sid}"
    assert e.value.message == want
    with pytest.raises(BadOptions) as e:
        zap.encode_request(batch)
    assert e.value.message == want


def test_zap_option_errors_name_the_options():
    frame = zap.encode_items("ed25519", [bytes(32)], [bytes(32)], [bytes(64)])
    frame[zap.HEADER_SIZE + 1] = 0x03
    with pytest.raises(BadOptions, match=r"^options prehashed, allow_high_s \(0x03\) apply to secp256k1/p256 only, "
                                         r"not ed25519$"):
        zap.decode_request(frame)
    with pytest.raises(BadOptions, match=r"^option allow_high_s \(0x02\) applies to secp256k1 only, not ml-dsa-44$"):
        zap.encode_items("ml-dsa-44", [bytes(1312)], [b""], [bytes(2420)], allow_high_s=True)


# ------------------------------------------------------------------ client
@pytest.mark.parametrize("entry", [json_body, Client.verify, AsyncClient.verify, Client.verify_batch,
                                   AsyncClient.verify_batch, zap.encode_items])
def test_every_client_entry_point_takes_every_option(entry):
    assert set(schemes.OPTIONS) <= set(inspect.signature(entry).parameters)


def test_every_item_and_batch_carries_every_option():
    for cls in (Item, Batch, BatchRequest):
        fields = {f.name: f for f in dataclasses.fields(cls)}
        assert all(fields[n].default is False for n in schemes.OPTIONS), cls


@pytest.mark.parametrize("name", OPTION_NAMES)
@pytest.mark.parametrize("sid", SCHEME_IDS)
def test_the_client_takes_an_option_from_the_items_of_the_schemes_that_accept_it(sid, name):
    s = schemes.SCHEMES[sid]
    item = Item(sid, bytes(s.pk_len), bytes(32), bytes(s.sig_len), **{name: True})
    body = json_body([item])
    assert body[name] is s.accepts_option(name)
    # The server reads the body the client wrote with the same option.
    [got] = schemas.to_items(schemas.VerifyRequest.model_validate(body), **LIMITS)
    assert getattr(got, name) is s.accepts_option(name)
    other = dataclasses.replace(item, **{name: False})
    if not s.accepts_option(name):  # items of other schemes do not take part
        assert json_body([item, other])[name] is False
        return
    with pytest.raises(RequestError) as e:
        json_body([item, other])
    assert e.value.field == name
    assert e.value.message == f"{_takers(schemes.OPTIONS[name].bit)} items disagree on {name}; pass {name}= explicitly"
    assert json_body([item, other], **{name: True})[name] is True


def test_client_disagreement_reads_as_before():
    items = [Item("secp256k1", bytes(33), b"", bytes(64), prehashed=p) for p in (True, False)]
    with pytest.raises(RequestError, match=r"^secp256k1/p256 items disagree on prehashed; pass prehashed= explicitly$"):
        json_body(items)


# ------------------------------------------------------------------ generated known answers
@pytest.mark.parametrize("sid", [s.id for s in schemes.SCHEMES.values() if s.family != "slh-dsa"])  # slow signer
def test_generated_answers_cover_each_key_length_option_and_context(sid):
    s = schemes.SCHEMES[sid]
    items = [ka.item for ka in kat.generate(sid, 6, 0)]
    assert {len(it.public_key) for it in items} == set(s.pk_lens)
    assert any(it.context for it in items) == s.has_context
    assert any(it.prehashed for it in items) == s.accepts_option("prehashed")


# ------------------------------------------------------------------ a scheme of tomorrow
@pytest.fixture
def toy(monkeypatch) -> schemes.Scheme:
    """A made-up scheme taking only ``prehashed``, of a family that has no options today."""
    toy = schemes.Scheme("toy-prehashed", 0x7E, "ed25519", (32,), 64, False, "test only", options=("prehashed",))
    monkeypatch.setitem(schemes.SCHEMES, toy.id, toy)
    monkeypatch.setitem(schemes.BY_CODE, toy.code, toy)
    return toy


def test_a_new_scheme_with_an_option_of_its_own_needs_only_its_record(toy):
    frame = zap.encode_items(toy.id, [bytes(32)], [bytes(32)], [bytes(64)], prehashed=True)
    assert zap.decode_request(frame).batch.prehashed
    with pytest.raises(BadOptions, match=rf"^option allow_high_s \(0x02\) applies to secp256k1 only, not {toy.id}$"):
        zap.encode_items(toy.id, [bytes(32)], [bytes(32)], [bytes(64)], allow_high_s=True)
    frame[zap.HEADER_SIZE + 1] = 0x03
    with pytest.raises(BadOptions, match=rf"^option allow_high_s \(0x02\) applies to secp256k1 only, not {toy.id}$"):
        zap.decode_request(frame)

    req = schemas.VerifyRequest.model_validate({"items": [_row(toy)], "prehashed": True, "allow_high_s": True,
                                                "signature_format": "der"})
    [item] = schemas.to_items(req, **LIMITS)
    assert (item.prehashed, item.allow_high_s, item.signature) == (True, False, bytes(64))
    with pytest.raises(RequestError, match="^option allow_high_s applies to secp256k1 only"):
        schemas.to_work(req, **LIMITS)  # no item takes it: refused, not dropped
    own = schemas.VerifyRequest.model_validate({"items": [_row(toy)], "prehashed": True})
    work = schemas.to_work(own, **LIMITS)
    assert isinstance(work, Batch) and work.options == 0x01

    body = json_body([Item(toy.id, bytes(32), bytes(32), bytes(64), prehashed=True, allow_high_s=True)])
    assert (body["prehashed"], body["allow_high_s"]) == (True, False)
    with pytest.raises(RequestError, match="^secp256k1/p256/toy-prehashed items disagree on prehashed"):
        json_body([Item(toy.id, bytes(32), b"", bytes(64), prehashed=True),
                   Item("secp256k1", bytes(33), b"", bytes(64))])


def test_a_reference_verifier_gets_only_its_schemes_options(toy, monkeypatch):
    """The CPU loop passes a verifier exactly the options its scheme accepts, by name
    (``Scheme.verifier_options``), so a verifier of a new scheme names only its own options
    and a new option elsewhere does not reach it."""
    from app.engine.backends import cpu_worker
    from app.engine.reference import reference

    seen = []

    def verify(pk, msg, sig, ctx=b"", prehashed=False):  # no allow_high_s, no low_s
        seen.append(prehashed)
        return prehashed

    monkeypatch.setitem(reference._CACHE, toy.id, verify)
    flags, _ = cpu_worker.verify_range(toy.id, 32, bytes(32), bytes(64), bytes(32), [0, 32], b"", 0x07)
    assert flags == b"\x01" and seen == [True]
    assert toy.verifier_options(Item(toy.id, b"", b"", b"", prehashed=True, low_s=True)) == {"prehashed": True}
