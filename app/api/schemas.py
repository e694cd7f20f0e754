"""JSON shapes of the REST API, and the decoding of a verify request into engine items."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StrictBool, model_validator

from app.core import schemes
from app.core.batch import Batch, Item
from app.core.encoding import native_signature
from app.core.errors import LimitExceeded, RequestError, UnknownScheme

# RFC 8032 §7.1 TEST 1 (empty message): a valid Ed25519 item.
_EXAMPLE_ITEM: dict[str, Any] = {
    "scheme": "ed25519",
    "public_key": "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
    "message": "",
    "signature": ("e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555"
                  "fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"),
}


VERIFY_EXAMPLES: dict[str, Any] = {
    "ed25519": {"summary": "one Ed25519 item (RFC 8032 TEST 1)",
                "value": {"encoding": "hex", "items": [_EXAMPLE_ITEM]}},
    "secp256k1-der": {"summary": "secp256k1, DER signature of \"hello\" by the secret key 0x2a", "value": {
        "signature_format": "der", "items": [{
            "scheme": "secp256k1",
            "public_key": "02fe8d1eb1bcb3432b1db5833ff5f2226d9cb5e65cee430558c18ed3a3c86ce1af",
            "message": "68656c6c6f",
            "signature": ("3044022039850e824c6405f4f0a46eb6bf3f0694d0e0e190c456e087fdbaae9591d454b3"
                          "02206a72ccd15509109d6d09ab5e786c92317b8859fcb3a0d1e2bb41b8d827b8e3f1")}]}},
}


#: What the ``encoding`` of a JSON request means (the schema's description of the field).
ENCODING_DESCRIPTION = (
    "how the bytes fields are written: 'hex', digits only (either case, an even count, an optional 0x "
    "prefix; no spaces or other separators), or 'base64', the standard alphabet with '=' padding "
    "(RFC 4648 §4: A-Z a-z 0-9 + /; URL-safe '-' '_' and unpadded text are refused, the message says why)")
_B64_ALPHABET = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")


class VerifyItem(BaseModel):
    """One item: bytes fields are text in the request's ``encoding``."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [_EXAMPLE_ITEM]})

    scheme: str = Field(description="scheme id, see GET /v1/schemes")
    public_key: str
    message: str
    signature: str
    context: str | None = Field(None, description="FIPS 204/205 context (ML-DSA, SLH-DSA only), ≤ 255 bytes")


def _option(name: str) -> Any:
    """The request field of batch option ``name``: off by default, described as the registry
    says, naming the schemes it applies to."""
    o = schemes.OPTIONS[name]
    return Field(False, description=f"{'/'.join(schemes.accepting(o.bit))}: {o.summary}")


def _formats_description() -> str:
    """What each signature format other than ``raw`` does, naming the schemes that accept it."""
    return "; ".join(f"{'/'.join(s.id for s in schemes.SCHEMES.values() if f.name in s.signature_formats)}: "
                     f"'{f.name}' {f.summary}" for f in schemes.SIGNATURE_FORMATS.values() if f.name != schemes.RAW)


if TYPE_CHECKING:
    SignatureFormatName = str
else:
    # The registry's format names as a Literal (Literal[("raw", "der")] is Literal["raw", "der"]),
    # so the schema's enum and pydantic's error list exactly the formats some scheme accepts.
    SignatureFormatName = Literal[tuple(schemes.SIGNATURE_FORMATS)]


#: ``ZAPVERIFY_MAX_ITEMS`` of the request being read, set before its body is validated
#: (:func:`app.api.deps.item_limit`), so a list over it is refused (413) on its length
#: before any of its items is validated: 65,537 items took 2.4 s to validate for that 413.
ITEM_LIMIT: ContextVar[int | None] = ContextVar("zapverify_item_limit", default=None)


class VerifyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "encoding": "hex", "items": [_EXAMPLE_ITEM]}]})

    # minItems in the schema only: an empty list stays the engine's EMPTY_BATCH (422, field items).
    items: list[VerifyItem] = Field(json_schema_extra={"minItems": 1})
    encoding: Literal["hex", "base64"] = Field("hex", description=ENCODING_DESCRIPTION)
    # One field per option of schemes.OPTIONS (tests/test_schemes_layers.py checks the set);
    # each applies to the items of the schemes that accept it (Scheme.options).
    prehashed: StrictBool = _option("prehashed")
    allow_high_s: StrictBool = _option("allow_high_s")
    low_s: StrictBool = _option("low_s")
    signature_format: SignatureFormatName = Field(schemes.RAW, description=_formats_description())

    @model_validator(mode="before")
    @classmethod
    def _count_first(cls, data: Any) -> Any:
        """Refuse more items than :data:`ITEM_LIMIT` before validating one (raises
        :class:`LimitExceeded`, which pydantic lets through: a 413 naming ``items``)."""
        limit = ITEM_LIMIT.get()
        items = data.get("items") if limit is not None and isinstance(data, dict) else None
        if isinstance(items, list) and len(items) > limit:  # type: ignore[operator]
            raise LimitExceeded(f"{len(items)} items, the limit is {limit}", field="items")
        return data


class VerifyResponse(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{
        "batch_id": "0192f7c5-3e1a-7000-8a4e-2f0d6f1b9c11", "count": 1, "valid": 1, "invalid": 0,
        "verdicts": [True], "merkle_root": "5f87043384baedad2cb383e870689eda92bd9c3ae3a3bd410133664e853ac1b9",
        "backends": {"ed25519": "cpu"}, "elapsed_ms": 1.9, "verify_ms": 0.4, "merkle_ms": 0.1}]})

    batch_id: str
    count: int
    valid: int
    invalid: int
    verdicts: list[bool]
    merkle_root: str = Field(description="RFC 6962 root over all items in input order, hex")
    backends: dict[str, str] = Field(description="backend that verified each scheme of the request")
    elapsed_ms: float
    verify_ms: float
    merkle_ms: float


class ErrorBody(BaseModel):
    code: str
    message: str
    field: str | None = None
    reason: str | None = Field(None, description=(
        "STORE_UNAVAILABLE only: why the receipt store is down (disk_full, unreachable, read_only, io_error, "
        "write_failed); the message says it in words, never the store's address"))


class ErrorResponse(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"error": {
        "code": "BAD_ENCODING", "message": "not valid hex: 'z' at character 6 is not a hex digit (0-9, a-f)",
        "field": "items[3].signature"}}]})

    error: ErrorBody


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    408: {"model": ErrorResponse, "description": "BODY_TIMEOUT: the body stalled or came too slowly"},
    413: {"model": ErrorResponse, "description": "a limit (items, body or message bytes) was exceeded"},
    415: {"model": ErrorResponse, "description": "Content-Type is not application/json"},
    422: {"model": ErrorResponse, "description": "the request cannot be read; `field` names where"},
    503: {"model": ErrorResponse, "description": "over the admission bound (OVERLOADED), not ready, or the "
                                                 "service failed; Retry-After where a retry can help"},
}


#: What a UUID looks like (RFC 9562 §4, any version, either case): ids are typed in the schema
#: with it, so a client (or a schema-driven tester) knows what the server accepts.
UUID_PATTERN = r"^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$"
#: Patterns of request parameters, said in words (pydantic's message quotes the regex).
_PATTERN_WORDS = {UUID_PATTERN: "is not a UUID (32 hex digits as 8-4-4-4-12, such as "
                                "01890a5d-ac96-774b-bcce-b302099a8057)"}


def validation_message(error: Mapping[str, Any], field: str) -> str:
    """The message of a request validation error (one of pydantic's ``errors()``) in words:
    pydantic's own, except where it would quote a regular expression this API uses."""
    words = _PATTERN_WORDS.get(str((error.get("ctx") or {}).get("pattern")))
    if error.get("type") == "string_pattern_mismatch" and words:
        return f"{field} {words}"
    return str(error.get("msg"))


def loc_to_field(loc: tuple) -> str:
    """A pydantic error location as a field path: ("body", "items", 3, "public_key") ->
    "items[3].public_key"; ("query", "limit") -> "limit"."""
    out = ""
    for part in loc[1:] if loc and loc[0] in ("body", "query", "path", "header", "cookie") else loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "body"


def _why_not(text: str, encoding: str) -> str:
    """In words, why ``text`` is not valid text of ``encoding`` (the first thing wrong)."""
    if encoding == "hex":
        start = 2 if text[:2] in ("0x", "0X") else 0
        for i in range(start, len(text)):
            c = text[i]
            if c.isspace():
                return f"whitespace at character {i}: hex is digits only, without spaces or separators"
            if c not in _HEX_DIGITS:
                return f"{c!r} at character {i} is not a hex digit (0-9, a-f)"
        return f"an odd number of digits ({len(text) - start}): each byte is two"
    standard = "this API takes standard base64 (RFC 4648 §4: A-Z a-z 0-9 + /, '=' padding)"
    for i, c in enumerate(text):
        if c in "-_":
            return f"{c!r} at character {i} is URL-safe base64 (RFC 4648 §5); {standard}"
        if c.isspace():
            return f"whitespace at character {i}; {standard}"
        if c not in _B64_ALPHABET and c != "=":
            return f"{c!r} at character {i} is not in the base64 alphabet; {standard}"
    if len(text) % 4:
        return f"{len(text)} characters, not a multiple of 4: unpadded base64 is refused; {standard}"
    return f"misplaced '=' padding; {standard}"


def decode_text(text: str, encoding: str, field: str) -> bytes:
    """``text`` in ``encoding`` (:data:`ENCODING_DESCRIPTION`: hex, optionally 0x-prefixed,
    or standard padded base64) as bytes; raises :class:`RequestError` (422 ``BAD_ENCODING``)
    naming ``field`` and saying in words what is wrong.  Hex with embedded whitespace is
    refused (``bytes.fromhex`` would skip it), as the one-pass column decoder refuses it."""
    try:
        if encoding == "hex":
            return binascii.unhexlify(text[2:] if text[:2] in ("0x", "0X") else text)
        return base64.b64decode(text, validate=True)
    except (ValueError, binascii.Error):
        raise RequestError(f"not valid {encoding}: {_why_not(text, encoding)}", field=field,
                           code="BAD_ENCODING") from None


def to_items(req: VerifyRequest, *, max_items: int, max_message_bytes: int) -> list[Item]:
    """Decode a request into engine items.

    Raises :class:`LimitExceeded` (413) over a limit, :class:`UnknownScheme` or
    :class:`RequestError` (422) naming ``items[i].<field>``.  Wrong lengths are not errors
    here: such an item gets a ``False`` verdict from the engine.
    """
    if len(req.items) > max_items:
        raise LimitExceeded(f"{len(req.items)} items, the limit is {max_items}", field="items")
    bits = schemes.option_bits(req)
    flags: dict[str, dict[str, bool]] = {}  # per scheme id: the request's options it accepts
    out = []
    for i, it in enumerate(req.items):
        where = f"items[{i}]"
        try:
            scheme = schemes.get(it.scheme)
        except UnknownScheme as exc:
            raise UnknownScheme(exc.message, field=f"{where}.scheme") from None
        msg = decode_text(it.message, req.encoding, f"{where}.message")
        if len(msg) > max_message_bytes:
            raise LimitExceeded(f"message of {len(msg)} bytes, the limit is {max_message_bytes}",
                                field=f"{where}.message")
        ctx = b""
        if it.context is not None:
            if not scheme.has_context:
                raise RequestError(f"{scheme.id} takes no context", field=f"{where}.context")
            ctx = decode_text(it.context, req.encoding, f"{where}.context")
        sig = native_signature(scheme, decode_text(it.signature, req.encoding, f"{where}.signature"),
                               req.signature_format)
        if scheme.id not in flags:
            flags[scheme.id] = schemes.option_flags(bits & scheme.option_bits)
        out.append(Item(scheme.id, decode_text(it.public_key, req.encoding, f"{where}.public_key"), msg, sig,
                        ctx, **flags[scheme.id]))
    return out


def _column(texts: list[str], encoding: str, width: int | None) -> tuple[bytes, list[int]] | None:
    """Decode one column of field texts in one pass: (the bytes back to back, each item's
    byte length), or None where any text is outside the plain form this path takes, so the
    caller falls back to :func:`to_items`, which names the field.

    Hex: the texts are joined and decoded by one ``binascii.unhexlify`` call (even lengths
    only, no ``0x`` prefix, no whitespace: each text then decodes alone to half its length).
    Base64: ``binascii.a2b_base64`` in strict mode per text (what it accepts,
    ``base64.b64decode(validate=True)`` accepts with the same bytes); measured faster than a
    numpy lookup-table pass over equal-length texts (0.7 against 2.6 ms for 4096 keys).  ``width``: the one byte
    length every item must have, or None for any.
    """
    try:
        if encoding == "hex":
            lens = [len(t) for t in texts]
            if any(n & 1 for n in lens):
                return None
            data = binascii.unhexlify("".join(texts))
            sizes = [n >> 1 for n in lens]
        else:
            parts = [binascii.a2b_base64(t, strict_mode=True) for t in texts]
            data, sizes = b"".join(parts), [len(b) for b in parts]
    except (ValueError, binascii.Error):
        return None
    if width is not None and any(n != width for n in sizes):
        return None
    return data, sizes


def _one_batch(req: VerifyRequest, max_message_bytes: int) -> Batch | None:
    """The request as one columnar batch, decoded column by column; None unless every item
    has one scheme, one key length, the scheme's signature length, one context and a
    message within the limit, and every text is in the plain form :func:`_column` takes."""
    items = req.items
    sid = items[0].scheme
    if any(it.scheme != sid for it in items) or sid not in schemes.SCHEMES:
        return None
    scheme = schemes.SCHEMES[sid]
    if scheme.signature_format_for(req.signature_format) != schemes.RAW:
        return None  # signatures to convert: to_items reads them one by one
    contexts = {it.context for it in items}
    if len(contexts) != 1:
        return None
    ctx_text = contexts.pop()
    ctx = b""
    if ctx_text is not None:
        if not scheme.has_context:
            return None
        got = _column([ctx_text], req.encoding, None)
        if got is None or len(got[0]) > schemes.MAX_CONTEXT_BYTES:
            return None
        ctx = got[0]
    pk_len = len(decode_text(items[0].public_key, req.encoding, "items[0].public_key"))
    if pk_len not in scheme.pk_lens:
        return None
    pks = _column([it.public_key for it in items], req.encoding, pk_len)
    sigs = _column([it.signature for it in items], req.encoding, scheme.sig_len)
    msgs = _column([it.message for it in items], req.encoding, None)
    if pks is None or sigs is None or msgs is None or max(msgs[1]) > max_message_bytes:
        return None
    n = len(items)
    offsets = np.zeros(n + 1, dtype=np.uint64)
    np.cumsum(msgs[1], out=offsets[1:])
    return Batch(scheme, np.frombuffer(pks[0], dtype=np.uint8).reshape(n, pk_len),
                 np.frombuffer(sigs[0], dtype=np.uint8).reshape(n, scheme.sig_len),
                 np.frombuffer(msgs[0], dtype=np.uint8), offsets, ctx, source="api",
                 **schemes.option_flags(schemes.option_bits(req) & scheme.option_bits))


def check_options_apply(req: VerifyRequest) -> None:
    """Refuse a request option that none of its items' schemes takes: 422 naming the option
    and the schemes that take it, the rule ``context`` follows per item (``"prehashed": true``
    on an Ed25519-only request would otherwise answer plain Ed25519 verdicts to someone who
    meant Ed25519ph).  An option some items take applies to those and not the others, as
    documented.  Requests with an unknown scheme id are left to :func:`to_items`, which names it."""
    ids = {it.scheme for it in req.items}
    if not ids or not ids <= schemes.SCHEMES.keys():
        return
    present = [schemes.SCHEMES[i] for i in schemes.SCHEMES if i in ids]  # registry order
    theirs = "/".join(s.id for s in present)
    taken = 0
    for s in present:
        taken |= s.option_bits
    refused = schemes.option_bits(req) & ~taken
    for name, o in schemes.OPTIONS.items():
        if refused & o.bit:
            raise RequestError(f"option {name} applies to {'/'.join(schemes.accepting(o.bit))} only, "
                               f"and this request's items are {theirs}", field=name)
    fmt = req.signature_format
    if fmt != schemes.RAW and not any(fmt in s.signature_formats for s in present):
        takers = "/".join(s.id for s in schemes.SCHEMES.values() if fmt in s.signature_formats)
        raise RequestError(f"signature_format {fmt!r} applies to {takers} only, and this request's items are "
                           f"{theirs}", field="signature_format")


def to_work(req: VerifyRequest, *, max_items: int, max_message_bytes: int) -> Batch | list[Item]:
    """Decode a request into what the engine verifies: one columnar :class:`Batch` straight
    from the texts when the request is one batch (one scheme, uniform lengths, plain
    encodings: the common case, decoded column by column), else the items of
    :func:`to_items`.  Either verifies to the same verdicts, leaves and root.

    Raises as :func:`to_items`; errors come from it, so they name ``items[i].<field>`` alike;
    and as :func:`check_options_apply` for an option no item takes.
    """
    if len(req.items) > max_items:
        raise LimitExceeded(f"{len(req.items)} items, the limit is {max_items}", field="items")
    check_options_apply(req)
    try:
        batch = _one_batch(req, max_message_bytes) if req.items else None
    except RequestError:
        batch = None  # the first key did not decode: to_items names it
    return batch if batch is not None else to_items(req, max_items=max_items, max_message_bytes=max_message_bytes)
