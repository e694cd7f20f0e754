"""ZAP frame v1: encode and decode (docs/wire-format.md).

A frame is little-endian and every section starts at a multiple of 8 bytes from the frame
start, so a frame received into memory the GPU can read (a pool slab) is verified where it
lies: :func:`decode_request` returns a :class:`~app.core.batch.Batch` whose columns are
numpy views into the frame buffer, never copies.

Decoding checks every bound with plain integers before it makes a view or reads a section:
header fields, the scheme's sizes, the configured :class:`Limits`, the section sizes against
``size`` and ``size`` against the buffer, the offsets, and that every padding byte is zero.
Each failure raises a :class:`app.core.errors.WireError` subclass with a stable ``code`` and
``wire_code``; nothing else escapes for any input (the property tests fuzz this).
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from app.core import schemes
from app.core.batch import Batch
from app.core.errors import (
    BadContext,
    BadKeyLength,
    BadMagic,
    BadOffsets,
    BadOptions,
    BadPadding,
    BadReserved,
    BadSignatureLength,
    BadSize,
    BadType,
    BadUtf8,
    BadVerdict,
    BadVersion,
    CountLimit,
    EmptyFrame,
    FrameTooLarge,
    MessageLimit,
    UnknownScheme,
    UnknownSchemeCode,
    ZapVerifyError,
)

MAGIC = b"ZAP\x00"
VERSION = 1
CONTENT_TYPE = "application/x-zap"
ALIGN = 8

TYPE_REQUEST = 0x01
TYPE_RESPONSE = 0x02
#: Ingest authentication (docs/wire-format.md, section 8, "Ingest authentication"): the server's
#: challenge on a new TCP or QUIC connection, and the client's answer to it.
TYPE_CHALLENGE = 0x10
TYPE_AUTH = 0x11
TYPE_ERROR = 0x7F
TYPE_NAMES = {TYPE_REQUEST: "verify request", TYPE_RESPONSE: "verify response", TYPE_CHALLENGE: "auth challenge",
              TYPE_AUTH: "auth", TYPE_ERROR: "error"}

# magic 4s | version u16 | type u8 | flags u8 | request_id u32 | size u32
_HEADER = struct.Struct("<4sHBBII")
# scheme u8 | options u8 | ctx_len u8 | reserved u8 | count u32 | pk_len u32 | sig_len u32
_REQUEST = struct.Struct("<BBBBIII")
# count u32 | valid u32 | merkle_root 32s
_RESPONSE = struct.Struct("<II32s")
# code u16 | reserved u16 | msg_len u32
_ERROR = struct.Struct("<HHI")
# method u8 | reserved 7 bytes | value 32s (the challenge, or the client's MAC over it)
_AUTH = struct.Struct("<B7s32s")

HEADER_SIZE = _HEADER.size            # 16
REQUEST_FIXED = HEADER_SIZE + _REQUEST.size   # 32: where ctx starts
RESPONSE_FIXED = HEADER_SIZE + _RESPONSE.size  # 56: where verdicts start
ERROR_FIXED = HEADER_SIZE + _ERROR.size        # 24: where the message starts
AUTH_FRAME_SIZE = HEADER_SIZE + _AUTH.size     # 56: a challenge or an auth frame, exactly

#: The one authentication method of ZAP v1: HMAC-SHA256 keyed by SHA-256(API key) over
#: :data:`AUTH_CONTEXT` ‖ challenge (:func:`auth_mac`).
AUTH_HMAC_SHA256 = 1
#: Bytes of a challenge and of an HMAC-SHA256 tag.
CHALLENGE_SIZE = 32
#: Prepended to the challenge before it is MAC-ed, so that a tag made for ingest authentication
#: can never be taken for a MAC of anything else made with the same key digest.
AUTH_CONTEXT = b"zapverify/ingest-auth/v1\x00"

#: The option bits the registry defines (schemes.OPTIONS); which a scheme takes is its own.
KNOWN_OPTIONS = schemes.OPTION_BITS
#: Header flag (docs/wire-format.md, "Batch ids"): on a request, "answer with the batch
#: id"; on a response, the 16-byte batch id (the receipt's UUID) follows the verdicts'
#: padding.  A peer that never sets it sees exactly the frames of before.
FLAG_BATCH_ID = 0x01
#: The flags each frame type may carry.
_TYPE_FLAGS = {TYPE_REQUEST: FLAG_BATCH_ID, TYPE_RESPONSE: FLAG_BATCH_ID, TYPE_CHALLENGE: 0, TYPE_AUTH: 0,
               TYPE_ERROR: 0}
BATCH_ID_SIZE = 16
#: Longest message an error frame carries; longer ones are cut at a UTF-8 boundary.
MAX_ERROR_MESSAGE = 1024
_U32_MAX = 0xFFFF_FFFF

Buffer = bytes | bytearray | memoryview | np.ndarray


def pad8(n: int) -> int:
    """``n`` rounded up to a multiple of 8."""
    return (n + ALIGN - 1) & ~(ALIGN - 1)


@dataclass(frozen=True)
class Limits:
    """Bounds a decoder enforces (the server's come from :class:`app.config.Settings`).

    Attributes:
        max_frame_bytes: largest ``size`` accepted, bytes (:class:`FrameTooLarge`).
        max_items: largest ``count`` accepted (:class:`CountLimit`).
        max_message_bytes: longest single message, bytes (:class:`MessageLimit`).
    """

    max_frame_bytes: int = 256 * 1024 * 1024
    max_items: int = 1 << 20
    max_message_bytes: int = 1024 * 1024


DEFAULT_LIMITS = Limits()
#: What a client accepts from a server: anything a u32 ``size`` can say.
CLIENT_LIMITS = Limits(max_frame_bytes=_U32_MAX, max_items=_U32_MAX, max_message_bytes=_U32_MAX)


@dataclass(frozen=True)
class Header:
    """The 16-byte frame header."""

    version: int
    type: int
    flags: int
    request_id: int
    size: int


@dataclass
class Request:
    """A decoded verify request: ``batch`` columns are views into the frame buffer."""

    request_id: int
    batch: Batch
    want_batch_id: bool = False


@dataclass
class Response:
    """A decoded verify response.

    Attributes:
        request_id: the request's id, echoed.
        count: items verified.
        valid: how many verdicts are 1.
        merkle_root: the 32-byte RFC 6962 root of the batch (docs/architecture.md, "Merkle leaf and receipts").
        verdicts: ``uint8[count]`` view into the frame, 1 valid / 0 invalid.
        batch_id: the 16-byte batch id (UUID) when the frame carries one, else None.
    """

    request_id: int
    count: int
    valid: int
    merkle_root: bytes
    verdicts: np.ndarray
    batch_id: bytes | None = None


@dataclass
class ErrorFrame:
    """A decoded error frame: ``code`` is the u16 ``wire_code`` of an :mod:`app.core.errors` class."""

    request_id: int
    code: int
    message: str

    @property
    def name(self) -> str:
        """The error's ``code`` string (``BAD_MAGIC``...), or ``WIRE_0x....`` if unknown here."""
        from app.core.errors import by_wire_code

        cls = by_wire_code(self.code)
        return cls.code if cls is not None else f"WIRE_0x{self.code:04x}"


@dataclass
class AuthFrame:
    """A decoded challenge (``type`` :data:`TYPE_CHALLENGE`, ``value`` the server's 32 random
    bytes) or auth frame (:data:`TYPE_AUTH`, ``value`` the client's 32-byte HMAC-SHA256 tag);
    ``method`` is :data:`AUTH_HMAC_SHA256`."""

    type: int
    request_id: int
    method: int
    value: bytes


Frame = Request | Response | ErrorFrame | AuthFrame


# ------------------------------------------------------------------ helpers
def as_u8(buf: Buffer) -> np.ndarray:
    """A flat uint8 view of ``buf`` (no copy)."""
    arr = buf if isinstance(buf, np.ndarray) else np.frombuffer(buf, dtype=np.uint8)
    if arr.dtype != np.uint8 or arr.ndim != 1:
        arr = arr.reshape(-1).view(np.uint8)
    return arr


def _refused(bits: int, scheme: schemes.Scheme) -> str:
    """The error of option ``bits`` set on a ``scheme`` that does not take them: their names
    and bits, and the schemes that do take them ("option low_s (0x04) applies to p256 only,
    not bip340")."""
    names = [o.name for o in schemes.OPTIONS.values() if o.bit & bits]
    noun, verb = ("option", "applies") if len(names) == 1 else ("options", "apply")
    return (f"{noun} {', '.join(names)} (0x{bits:02x}) {verb} to {'/'.join(schemes.accepting(bits))} only, "
            f"not {scheme.id}")


def _check_padding(arr: np.ndarray, start: int, end: int, field: str) -> None:
    if end > start and np.any(arr[start:end]):
        raise BadPadding(f"padding bytes {start}..{end - 1} after {field} must be zero", field=field)


def peek_request_id(buf: Buffer) -> int:
    """The ``request_id`` of a frame whose header can be read, else 0; never raises.

    Used to address an error reply to the request that caused it.
    """
    arr = as_u8(buf)
    if arr.shape[0] < HEADER_SIZE or arr[:4].tobytes() != MAGIC:
        return 0
    return int.from_bytes(arr[8:12].tobytes(), "little")


def read_header(buf: Buffer, limits: Limits = DEFAULT_LIMITS) -> Header:
    """Read and check the 16-byte header at the start of ``buf``.

    Checks magic, version, type, flags and that ``size`` is a multiple of 8 and within
    ``limits.max_frame_bytes``; does *not* compare ``size`` with ``len(buf)``, so a stream
    reader can call it on the first 16 bytes to learn how many to read.

    Raises:
        BadSize: fewer than 16 bytes, or ``size`` under 16 or not a multiple of 8.
        BadMagic, BadVersion, BadType, BadReserved (flags), FrameTooLarge.
    """
    arr = as_u8(buf)
    if arr.shape[0] < HEADER_SIZE:
        raise BadSize(f"{arr.shape[0]} bytes is shorter than the {HEADER_SIZE}-byte header", field="size")
    magic, version, ftype, flags, request_id, size = _HEADER.unpack(arr[:HEADER_SIZE].tobytes())
    if magic != MAGIC:
        raise BadMagic(f"magic is {magic!r}, expected {MAGIC!r}", field="magic")
    if version != VERSION:
        raise BadVersion(f"version {version} is not supported; this side speaks {VERSION}", field="version")
    if ftype not in TYPE_NAMES:
        raise BadType(f"unknown frame type 0x{ftype:02x}", field="type")
    if flags & ~_TYPE_FLAGS[ftype]:
        raise BadReserved(f"flags 0x{flags:02x} on a {TYPE_NAMES[ftype]} frame; it may carry only "
                          f"0x{_TYPE_FLAGS[ftype]:02x}", field="flags")
    if size > limits.max_frame_bytes:
        raise FrameTooLarge(f"frame of {size} bytes, the limit is {limits.max_frame_bytes}", field="size")
    if size < HEADER_SIZE or size % ALIGN:
        raise BadSize(f"size {size} must be at least {HEADER_SIZE} and a multiple of {ALIGN}", field="size")
    return Header(version, ftype, flags, request_id, size)


def _frame(buf: Buffer, limits: Limits, want: int | None) -> tuple[np.ndarray, Header]:
    arr = as_u8(buf)
    header = read_header(arr, limits)
    if want is not None and header.type != want:
        raise BadType(f"expected a {TYPE_NAMES[want]} frame (0x{want:02x}), got a "
                      f"{TYPE_NAMES[header.type]} frame (0x{header.type:02x})", field="type")
    if header.size != arr.shape[0]:
        raise BadSize(f"size field says {header.size} bytes, {arr.shape[0]} were received", field="size")
    return arr, header


# ------------------------------------------------------------------ decode
def decode_request(buf: Buffer, limits: Limits = DEFAULT_LIMITS) -> Request:
    """Decode a verify request frame into a zero-copy :class:`Batch`.

    Args:
        buf: exactly one frame (``len(buf)`` must equal its ``size`` field).  A writable
            buffer (bytearray, numpy array, pool slab) gives writable views; ``bytes`` read-only.
        limits: the bounds to enforce.

    Returns:
        :class:`Request` whose ``batch`` has ``pks`` ``uint8[count, pk_len]``, ``sigs``
        ``uint8[count, sig_len]``, ``offsets`` ``<u4[count + 1]`` and ``msgs`` ``uint8[M]``,
        all views into ``buf``; ``ctx`` is a bytes copy (≤ 255 B).

    Raises:
        WireError subclasses: BadSize, BadMagic, BadVersion, BadType, BadReserved,
        FrameTooLarge, UnknownSchemeCode, BadOptions, BadContext, EmptyFrame, CountLimit,
        BadKeyLength, BadSignatureLength, BadPadding, BadOffsets, MessageLimit.
    """
    arr, header = _frame(buf, limits, TYPE_REQUEST)
    size = header.size
    if size < REQUEST_FIXED:
        raise BadSize(f"a request frame is at least {REQUEST_FIXED} bytes, this one is {size}", field="size")
    code, options, ctx_len, reserved, count, pk_len, sig_len = _REQUEST.unpack(
        arr[HEADER_SIZE:REQUEST_FIXED].tobytes())
    try:
        scheme = schemes.by_code(code)
    except UnknownScheme:
        raise UnknownSchemeCode(f"unknown scheme code 0x{code:02x}", field="scheme") from None
    if reserved != 0:
        raise BadReserved(f"reserved byte is 0x{reserved:02x}, it must be 0", field="reserved")
    if options & ~KNOWN_OPTIONS:
        raise BadOptions(f"unknown option bits 0x{options & ~KNOWN_OPTIONS:02x}", field="options")
    refused = options & ~scheme.option_bits
    if refused:
        raise BadOptions(_refused(refused, scheme), field="options")
    if ctx_len and not scheme.has_context:
        raise BadContext(f"{scheme.id} takes no context, ctx_len is {ctx_len}", field="ctx_len")
    if count == 0:
        raise EmptyFrame("a request frame needs at least one item", field="count")
    if count > limits.max_items:
        raise CountLimit(f"{count} items, the limit is {limits.max_items}", field="count")
    if pk_len not in scheme.pk_lens:
        raise BadKeyLength(f"pk_len {pk_len} is not a {scheme.id} key length "
                           f"({' or '.join(map(str, scheme.pk_lens))})", field="pk_len")
    if sig_len != scheme.sig_len:
        raise BadSignatureLength(f"sig_len {sig_len}, {scheme.id} signatures are {scheme.sig_len} bytes",
                                 field="sig_len")
    # Section bounds, computed with Python integers (no overflow) before any section is read.
    ctx_at = REQUEST_FIXED
    pks_at = ctx_at + pad8(ctx_len)
    sigs_at = pks_at + pad8(count * pk_len)
    offs_at = sigs_at + pad8(count * sig_len)
    msgs_at = offs_at + pad8(4 * (count + 1))
    if msgs_at > size:
        raise BadSize(f"{count} items of {scheme.id} need at least {msgs_at} bytes, the frame has {size}",
                      field="size")
    msgs_len = int.from_bytes(arr[offs_at + 4 * count:offs_at + 4 * count + 4].tobytes(), "little")
    if msgs_at + pad8(msgs_len) != size:
        raise BadSize(f"msg_offsets[count] = {msgs_len} puts the frame end at {msgs_at + pad8(msgs_len)}, "
                      f"size says {size}", field="size")
    _check_padding(arr, ctx_at + ctx_len, pks_at, "ctx")
    _check_padding(arr, pks_at + count * pk_len, sigs_at, "pks")
    _check_padding(arr, sigs_at + count * sig_len, offs_at, "sigs")
    _check_padding(arr, offs_at + 4 * (count + 1), msgs_at, "msg_offsets")
    _check_padding(arr, msgs_at + msgs_len, size, "msgs")
    offsets = arr[offs_at:offs_at + 4 * (count + 1)].view("<u4")
    if offsets[0] != 0:
        raise BadOffsets(f"msg_offsets[0] is {int(offsets[0])}, it must be 0", field="msg_offsets")
    lengths = offsets[1:] - offsets[:-1]  # wraps where an offset decreases, caught next
    if np.any(offsets[1:] < offsets[:-1]):
        bad = int(np.argmax(offsets[1:] < offsets[:-1]))
        raise BadOffsets(f"msg_offsets[{bad + 1}] = {int(offsets[bad + 1])} is below msg_offsets[{bad}] = "
                         f"{int(offsets[bad])}", field="msg_offsets")
    longest = int(lengths.max())
    if longest > limits.max_message_bytes:
        raise MessageLimit(f"message {int(np.argmax(lengths))} is {longest} bytes, the limit is "
                           f"{limits.max_message_bytes}", field="msgs")
    batch = Batch(
        scheme=scheme,
        pks=arr[pks_at:pks_at + count * pk_len].reshape(count, pk_len),
        sigs=arr[sigs_at:sigs_at + count * sig_len].reshape(count, sig_len),
        msgs=arr[msgs_at:msgs_at + msgs_len],
        offsets=offsets,
        ctx=arr[ctx_at:ctx_at + ctx_len].tobytes(),
        source="zap",
        **schemes.option_flags(options),
    )
    return Request(header.request_id, batch, bool(header.flags & FLAG_BATCH_ID))


def decode_response(buf: Buffer, limits: Limits = CLIENT_LIMITS) -> Response:
    """Decode a verify response frame; ``verdicts`` is a ``uint8[count]`` view into ``buf``.

    Raises:
        WireError subclasses: BadSize, BadMagic, BadVersion, BadType, BadReserved,
        FrameTooLarge, EmptyFrame, BadPadding, BadVerdict.
    """
    arr, header = _frame(buf, limits, TYPE_RESPONSE)
    if header.size < RESPONSE_FIXED:
        raise BadSize(f"a response frame is at least {RESPONSE_FIXED + ALIGN} bytes, this one is "
                      f"{header.size}", field="size")
    count, valid, root = _RESPONSE.unpack(arr[HEADER_SIZE:RESPONSE_FIXED].tobytes())
    if count == 0:
        raise EmptyFrame("a response frame has at least one verdict", field="count")
    end = pad8(RESPONSE_FIXED + count)
    extra = BATCH_ID_SIZE if header.flags & FLAG_BATCH_ID else 0
    if end + extra != header.size:
        raise BadSize(f"{count} verdicts make a {end + extra}-byte frame, size says {header.size}", field="size")
    _check_padding(arr, RESPONSE_FIXED + count, end, "verdicts")
    verdicts = arr[RESPONSE_FIXED:RESPONSE_FIXED + count]
    if np.any(verdicts > 1):
        raise BadVerdict(f"verdict {int(np.argmax(verdicts > 1))} is not 0 or 1", field="verdicts")
    if int(np.count_nonzero(verdicts)) != valid:
        raise BadVerdict(f"valid is {valid} but {int(np.count_nonzero(verdicts))} verdicts are 1",
                         field="valid")
    batch_id = arr[end:end + extra].tobytes() if extra else None
    return Response(header.request_id, count, valid, root, verdicts, batch_id)


def decode_error(buf: Buffer, limits: Limits = CLIENT_LIMITS) -> ErrorFrame:
    """Decode an error frame.

    Raises:
        WireError subclasses: BadSize, BadMagic, BadVersion, BadType, BadReserved,
        FrameTooLarge, BadPadding, BadUtf8.
    """
    arr, header = _frame(buf, limits, TYPE_ERROR)
    if header.size < ERROR_FIXED:
        raise BadSize(f"an error frame is at least {ERROR_FIXED} bytes, this one is {header.size}",
                      field="size")
    code, reserved, msg_len = _ERROR.unpack(arr[HEADER_SIZE:ERROR_FIXED].tobytes())
    if reserved != 0:
        raise BadReserved(f"reserved is 0x{reserved:04x}, it must be 0", field="reserved")
    if pad8(ERROR_FIXED + msg_len) != header.size:
        raise BadSize(f"a {msg_len}-byte message makes a {pad8(ERROR_FIXED + msg_len)}-byte frame, size says "
                      f"{header.size}", field="size")
    _check_padding(arr, ERROR_FIXED + msg_len, header.size, "message")
    try:
        message = arr[ERROR_FIXED:ERROR_FIXED + msg_len].tobytes().decode("utf-8")
    except UnicodeDecodeError:
        raise BadUtf8("the error message is not UTF-8", field="message") from None
    return ErrorFrame(header.request_id, code, message)


def decode_auth(buf: Buffer, want: int = TYPE_AUTH, limits: Limits = CLIENT_LIMITS) -> AuthFrame:
    """Decode a challenge (``want`` :data:`TYPE_CHALLENGE`) or an auth frame (:data:`TYPE_AUTH`):
    exactly :data:`AUTH_FRAME_SIZE` bytes (docs/wire-format.md, section 8, "Ingest authentication").

    Raises:
        WireError subclasses: BadSize, BadMagic, BadVersion, BadType, BadReserved, FrameTooLarge,
        and BadOptions for a ``method`` other than :data:`AUTH_HMAC_SHA256`.
    """
    arr, header = _frame(buf, limits, want)
    if header.size != AUTH_FRAME_SIZE:
        raise BadSize(f"a {TYPE_NAMES[want]} frame is {AUTH_FRAME_SIZE} bytes, this one is {header.size}",
                      field="size")
    method, reserved, value = _AUTH.unpack(arr[HEADER_SIZE:AUTH_FRAME_SIZE].tobytes())
    if any(reserved):
        raise BadReserved("the 7 reserved bytes after method must be 0", field="reserved")
    if method != AUTH_HMAC_SHA256:
        raise BadOptions(f"unknown authentication method {method}; ZAP v1 knows {AUTH_HMAC_SHA256} "
                         f"(HMAC-SHA256)", field="method")
    return AuthFrame(header.type, header.request_id, method, value)


def decode(buf: Buffer, limits: Limits = DEFAULT_LIMITS) -> Frame:
    """Decode a frame of any type: :class:`Request`, :class:`Response`, :class:`ErrorFrame` or
    :class:`AuthFrame`."""
    header = read_header(buf, limits)
    if header.type == TYPE_REQUEST:
        return decode_request(buf, limits)
    if header.type == TYPE_RESPONSE:
        return decode_response(buf, limits)
    if header.type in (TYPE_CHALLENGE, TYPE_AUTH):
        return decode_auth(buf, header.type, limits)
    return decode_error(buf, limits)


# ------------------------------------------------------------------ encode
def _header(ftype: int, request_id: int, size: int, flags: int = 0) -> bytes:
    if not 0 <= request_id <= _U32_MAX:
        raise ValueError(f"request_id {request_id} does not fit a u32")
    if size > _U32_MAX:
        raise FrameTooLarge(f"a frame of {size} bytes does not fit ZAP v1's u32 size", field="size")
    return _HEADER.pack(MAGIC, VERSION, ftype, flags, request_id, size)


def encode_request(batch: Batch, request_id: int = 0, *, want_batch_id: bool = False) -> bytearray:
    """Encode ``batch`` as a verify request frame (with :data:`FLAG_BATCH_ID` set when
    ``want_batch_id``: the server then answers with the batch id).

    Returns a new ``bytearray`` of the frame's ``size``.  Raises :class:`app.core.errors.RequestError`
    for a batch of the wrong shapes, :class:`EmptyFrame` for zero items, :class:`FrameTooLarge`
    when the frame would not fit a u32 ``size``, :class:`BadContext` / :class:`BadOptions` for
    a context or options its scheme does not take.
    """
    batch.validate()
    scheme, count = batch.scheme, len(batch)
    if count == 0:
        raise EmptyFrame("a request frame needs at least one item", field="count")
    if batch.ctx and not scheme.has_context:
        raise BadContext(f"{scheme.id} takes no context", field="ctx")
    refused = batch.options & ~scheme.option_bits
    if refused:
        raise BadOptions(_refused(refused, scheme), field="options")
    pk_len, sig_len = batch.pks.shape[1], scheme.sig_len
    base = int(batch.offsets[0])
    offsets = batch.offsets.astype(np.uint64) - base
    msgs_len = int(offsets[-1])
    if msgs_len > _U32_MAX:
        raise FrameTooLarge(f"{msgs_len} bytes of messages do not fit ZAP v1's u32 offsets", field="msgs")
    ctx_at = REQUEST_FIXED
    pks_at = ctx_at + pad8(len(batch.ctx))
    sigs_at = pks_at + pad8(count * pk_len)
    offs_at = sigs_at + pad8(count * sig_len)
    msgs_at = offs_at + pad8(4 * (count + 1))
    size = msgs_at + pad8(msgs_len)
    out = bytearray(size)
    out[:HEADER_SIZE] = _header(TYPE_REQUEST, request_id, size, FLAG_BATCH_ID if want_batch_id else 0)
    out[HEADER_SIZE:REQUEST_FIXED] = _REQUEST.pack(scheme.code, batch.options, len(batch.ctx), 0, count,
                                                   pk_len, sig_len)
    arr = np.frombuffer(out, dtype=np.uint8)
    arr[ctx_at:ctx_at + len(batch.ctx)] = np.frombuffer(batch.ctx, dtype=np.uint8)
    arr[pks_at:pks_at + count * pk_len] = batch.pks.reshape(-1)
    arr[sigs_at:sigs_at + count * sig_len] = batch.sigs.reshape(-1)
    arr[offs_at:offs_at + 4 * (count + 1)].view("<u4")[:] = offsets
    arr[msgs_at:msgs_at + msgs_len] = batch.msgs[base:base + msgs_len]
    return out


def encode_items(scheme_id: str, pks: Sequence[bytes] | np.ndarray, msgs: Sequence[bytes],
                 sigs: Sequence[bytes] | np.ndarray, *, ctx: bytes = b"", prehashed: bool = False,
                 allow_high_s: bool = False, low_s: bool = False, request_id: int = 0,
                 want_batch_id: bool = False) -> bytearray:
    """Encode one scheme's items given as byte strings (or ``uint8[N, len]`` arrays).

    Raises :class:`app.core.errors.UnknownScheme`, :class:`app.core.errors.RequestError` for keys or
    signatures of mixed or wrong lengths, and what :func:`encode_request` raises.
    """
    scheme = schemes.get(scheme_id)
    rows = [bytes(x) for x in pks] if isinstance(pks, np.ndarray) else list(pks)
    srows = [bytes(x) for x in sigs] if isinstance(sigs, np.ndarray) else list(sigs)
    batch = Batch.from_items(scheme, rows, list(msgs), srows, ctx=bytes(ctx), prehashed=prehashed,
                             allow_high_s=allow_high_s, low_s=low_s)
    return encode_request(batch, request_id, want_batch_id=want_batch_id)


def encode_response(request_id: int, verdicts: np.ndarray | Sequence[bool], merkle_root: bytes,
                    batch_id: bytes | None = None) -> bytearray:
    """Encode a verify response frame.

    Args:
        request_id: the request's id.
        verdicts: ``bool[N]`` (or 0/1 ints), N ≥ 1.
        merkle_root: 32 bytes.
        batch_id: 16 bytes (the batch's UUID) to append under :data:`FLAG_BATCH_ID`, or None.
    """
    v = np.asarray(verdicts, dtype=bool).astype(np.uint8)
    count = int(v.shape[0])
    if count == 0:
        raise EmptyFrame("a response frame has at least one verdict", field="count")
    if len(merkle_root) != 32:
        raise ValueError("merkle_root must be 32 bytes")
    if batch_id is not None and len(batch_id) != BATCH_ID_SIZE:
        raise ValueError(f"batch_id must be {BATCH_ID_SIZE} bytes")
    end = pad8(RESPONSE_FIXED + count)
    size = end + (BATCH_ID_SIZE if batch_id is not None else 0)
    out = bytearray(size)
    out[:HEADER_SIZE] = _header(TYPE_RESPONSE, request_id, size, 0 if batch_id is None else FLAG_BATCH_ID)
    out[HEADER_SIZE:RESPONSE_FIXED] = _RESPONSE.pack(count, int(np.count_nonzero(v)), bytes(merkle_root))
    out[RESPONSE_FIXED:RESPONSE_FIXED + count] = v.tobytes()
    if batch_id is not None:
        out[end:] = batch_id
    return out


def _clip_utf8(text: str, limit: int) -> bytes:
    raw = text.encode("utf-8")
    if len(raw) <= limit:
        return raw
    return raw[:limit].decode("utf-8", errors="ignore").encode("utf-8")


def encode_error(request_id: int, code: int, message: str) -> bytearray:
    """Encode an error frame with the u16 ``code`` and a UTF-8 message (cut to 1024 bytes)."""
    msg = _clip_utf8(message, MAX_ERROR_MESSAGE)
    size = pad8(ERROR_FIXED + len(msg))
    out = bytearray(size)
    out[:HEADER_SIZE] = _header(TYPE_ERROR, request_id, size)
    out[HEADER_SIZE:ERROR_FIXED] = _ERROR.pack(code & 0xFFFF, 0, len(msg))
    out[ERROR_FIXED:ERROR_FIXED + len(msg)] = msg
    return out


def encode_challenge(challenge: bytes) -> bytearray:
    """The server's challenge frame (``request_id`` 0) carrying ``challenge``, 32 random bytes."""
    return _encode_auth(TYPE_CHALLENGE, challenge, 0)


def encode_auth(mac: bytes, request_id: int = 0) -> bytearray:
    """The client's auth frame carrying ``mac``, the 32-byte :func:`auth_mac` of the challenge.
    Send it with ``request_id`` 0: a refusal is then addressed to the connection (section 5)."""
    return _encode_auth(TYPE_AUTH, mac, request_id)


def _encode_auth(ftype: int, value: bytes, request_id: int) -> bytearray:
    if len(value) != CHALLENGE_SIZE:
        raise ValueError(f"a {TYPE_NAMES[ftype]} frame carries {CHALLENGE_SIZE} bytes, got {len(value)}")
    out = bytearray(AUTH_FRAME_SIZE)
    out[:HEADER_SIZE] = _header(ftype, request_id, AUTH_FRAME_SIZE)
    out[HEADER_SIZE:] = _AUTH.pack(AUTH_HMAC_SHA256, bytes(7), bytes(value))
    return out


def auth_mac(key_digest: bytes, challenge: bytes) -> bytes:
    """HMAC-SHA256 keyed by ``key_digest`` (SHA-256 of the API key's UTF-8, 32 bytes, what the
    server's key list holds) over :data:`AUTH_CONTEXT` ‖ ``challenge``: the 32 bytes an auth
    frame carries."""
    return hmac.new(key_digest, AUTH_CONTEXT + bytes(challenge), hashlib.sha256).digest()


def error_frame(exc: ZapVerifyError, request_id: int = 0) -> bytearray:
    """The error frame for ``exc``: its ``wire_code`` and ``"CODE: message (field)"``."""
    text = f"{exc.code}: {exc.message}" + (f" (field {exc.field})" if exc.field else "")
    return encode_error(request_id, exc.wire_code, text)
