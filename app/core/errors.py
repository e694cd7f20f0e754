"""The one error hierarchy of zapverify.

Every error carries a stable machine-readable ``code`` (upper snake case, in the manner of
blst's ``BAD_ENCODING`` / ``POINT_NOT_IN_GROUP``), the ``field`` it is about when there is
one (``items[3].public_key``), and the HTTP status the API answers it with.  Bad *input*
is a 4xx; a 5xx is reserved for the service itself failing (store down, pool exhausted).

Every error also has a ``wire_code``: the u16 that a ZAP error frame carries
(docs/wire-format.md lists them).  0x0001-0x00FF are the sender's fault (4xx), 0x0100-0x01FF
the service's (5xx).  A subclass that names no ``wire_code`` inherits its parent's.
"""

from __future__ import annotations


class ZapVerifyError(Exception):
    """Base of every error raised on purpose by zapverify."""

    code: str = "INTERNAL"
    status: int = 500
    wire_code: int = 0x01FF
    #: seconds a client should wait before trying again (the HTTP ``Retry-After`` header);
    #: None where retrying the same request cannot help
    retry_after: float | None = None

    def __init__(self, message: str, *, field: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.field = field
        if code is not None:
            self.code = code

    def to_dict(self) -> dict:
        out = {"code": self.code, "message": self.message}
        if self.field is not None:
            out["field"] = self.field
        return out


class RequestError(ZapVerifyError):
    """The request cannot be read: a missing field, text that is not hex/base64, ..."""

    code = "BAD_REQUEST"
    status = 422
    wire_code = 0x00FF


class UnknownScheme(RequestError):
    code = "UNKNOWN_SCHEME"


class BadVectorFile(RequestError):
    """A vector file (JSONL, app/vectors.py) cannot be read: missing, not UTF-8, a line that
    is not JSON or lacks a field.  ``field`` is ``<path>:<line>``."""

    code = "BAD_VECTOR_FILE"


class LimitExceeded(RequestError):
    """A configured limit (items, body bytes, message bytes, context bytes) was exceeded."""

    code = "LIMIT_EXCEEDED"
    status = 413
    wire_code = 0x00FE


class EmptyBatch(RequestError):
    code = "EMPTY_BATCH"


class BackendUnavailable(ZapVerifyError):
    """A backend was forced (``ZAPVERIFY_BACKEND``) or asked for but cannot run here, or the
    CPU backend's worker processes died twice during one batch (a new pool is started after
    each death: the client may retry)."""

    code = "BACKEND_UNAVAILABLE"
    status = 503
    wire_code = 0x0101


class NotReady(ZapVerifyError):
    code = "NOT_READY"
    status = 503
    wire_code = 0x0100
    retry_after = 1.0


class Unauthorized(ZapVerifyError):
    """No API key, or one the server does not know (docs/operations.md, "Access control")."""

    code = "UNAUTHORIZED"
    status = 401
    wire_code = 0x0020


class Forbidden(Unauthorized):
    """The API key is known but lacks the scope the endpoint needs."""

    code = "FORBIDDEN"
    status = 403
    wire_code = 0x0021


class RateLimited(ZapVerifyError):
    """The API key spent its token bucket; ``retry_after`` seconds until the next token."""

    code = "RATE_LIMITED"
    status = 429
    wire_code = 0x0022

    def __init__(self, message: str, *, retry_after: float, field: str | None = None):
        super().__init__(message, field=field)
        self.retry_after = retry_after


class BodyTimeout(RequestError):
    """The request body stalled: no bytes for ``body_read_timeout_seconds``, or arriving slower
    than ``body_min_bytes_per_second`` (docs/operations.md, "Load shedding")."""

    code = "BODY_TIMEOUT"
    status = 408
    wire_code = 0x0023


class Overloaded(ZapVerifyError):
    """Admission control: the items or bytes in flight in this process are at their bound, so
    the request is refused before its body is read; retry after ``retry_after`` seconds."""

    code = "OVERLOADED"
    status = 503
    wire_code = 0x0105

    def __init__(self, message: str, *, retry_after: float = 1.0, field: str | None = None):
        super().__init__(message, field=field)
        self.retry_after = retry_after


class KernelError(ZapVerifyError):
    """A kernel could not be built, loaded or launched: a failure of a backend, not of the
    input.  The engine answers it by running the batch on the CPU."""

    code = "KERNEL_FAILED"
    status = 500


class KernelBuildError(KernelError):
    """A compiler (g++, nvcc or NVRTC) is missing or rejected a kernel source."""

    code = "KERNEL_BUILD_FAILED"


class KernelLaunchError(KernelError):
    """A kernel launch, or the device work it queued, reported an error."""

    code = "KERNEL_LAUNCH_FAILED"


class ConfigError(ZapVerifyError):
    """A setting cannot be used as given (an unknown database URL scheme, a pool smaller than a
    page, ...); ``field`` names the setting.  Raised at start-up."""

    code = "BAD_CONFIG"
    status = 500


class TransportUnavailable(ZapVerifyError):
    """The transport forced by ``ZAP_TRANSPORT`` lacks prerequisites on this host.

    ``missing`` lists each missing prerequisite in words.
    """

    code = "TRANSPORT_UNAVAILABLE"
    status = 503

    def __init__(self, message: str, *, missing: list[str] | None = None, field: str | None = "transport"):
        super().__init__(message, field=field)
        self.missing = list(missing or [])

    def to_dict(self) -> dict:
        return {**super().to_dict(), "missing": self.missing}


class AllocatorUnavailable(ZapVerifyError):
    """The pool's memory source (pinned, managed) cannot be used on this host."""

    code = "ALLOCATOR_UNAVAILABLE"
    status = 503


class PoolExhausted(ZapVerifyError):
    """The UMA pool had no room for a buffer within the wait timeout (it never grows)."""

    code = "POOL_EXHAUSTED"
    status = 503
    wire_code = 0x0103
    retry_after = 1.0


class SegmentGone(ZapVerifyError):
    """A CPU process worker found no shared-memory segment by the name it was sent (removed
    by someone else: app/engine/backends/shared_columns.py).  The server sends that chunk
    through the pool's pipe instead, so no client ever sees it."""

    code = "SEGMENT_GONE"


class BufferTooLarge(LimitExceeded):
    """A buffer was asked for that is larger than the whole UMA pool."""

    code = "BUFFER_TOO_LARGE"


class BufferMisuse(ZapVerifyError):
    """A pool buffer was released twice, used after release, or handed off by a non-owner."""

    code = "BUFFER_MISUSE"
    status = 500


class NotFound(ZapVerifyError):
    """Something asked for by name or number does not exist."""

    code = "NOT_FOUND"
    status = 404


class ReceiptNotFound(NotFound):
    code = "RECEIPT_NOT_FOUND"


class LeafIndexOutOfRange(NotFound):
    """An inclusion proof was asked for an index outside ``[0, count)`` of the receipt."""

    code = "LEAF_INDEX_OUT_OF_RANGE"


class ReceiptsDisabled(NotFound):
    """Receipts are off on this server (``ZAPVERIFY_RECEIPTS=false``)."""

    code = "RECEIPTS_DISABLED"


class StoreUnavailable(ZapVerifyError):
    """The receipt store could not be read or written (database down, disk full, ...).

    A verify request whose receipt cannot be written fails with this error (503): the
    service never answers with verdicts whose receipt is missing.
    """

    code = "STORE_UNAVAILABLE"
    status = 503
    wire_code = 0x0104
    #: a store fault is transient (a restarted database, freed disk space): retry after the
    #: store's probe interval (app/engine/receipts/health.py)
    retry_after: float | None = 1.0

    def __init__(self, message: str, *, field: str | None = None, reason: str | None = None,
                 retry_after: float | None = None):
        super().__init__(message, field=field)
        #: why the store is down (one of app.engine.receipts.health.REASONS), None if not known
        self.reason = reason
        if retry_after is not None:
            self.retry_after = retry_after

    def to_dict(self) -> dict:
        """The error shape plus ``reason`` (a code of app.engine.receipts.health.REASONS) where known."""
        out = super().to_dict()
        if self.reason is not None:
            out["reason"] = self.reason
        return out


class StoreSchemaTooNew(StoreUnavailable):
    """The database was migrated by a newer zapverify than this one."""

    code = "STORE_SCHEMA_TOO_NEW"
    retry_after = None  # only an upgrade helps


# ------------------------------------------------------------------ ZAP frame v1 (docs/wire-format.md)
class WireError(RequestError):
    """A ZAP frame that breaks ZAP frame v1 (docs/wire-format.md); raised before any section
    of the frame is read.  ``field`` names the header or body field at fault."""

    code = "BAD_FRAME"
    status = 400
    wire_code = 0x00FD


class BadMagic(WireError):
    """The first four bytes are not ``b"ZAP\\0"``."""

    code, wire_code = "BAD_MAGIC", 0x0001


class BadVersion(WireError):
    code, wire_code = "BAD_VERSION", 0x0002


class BadType(WireError):
    """An unknown frame type, or a known one where another is expected (a response sent to
    the server)."""

    code, wire_code = "BAD_TYPE", 0x0003


class BadReserved(WireError):
    """A reserved field (header ``flags``, request ``reserved``, error ``reserved``) is not 0."""

    code, wire_code = "BAD_RESERVED", 0x0004


class BadSize(WireError):
    """The ``size`` field disagrees with the bytes received or with the sections it must
    hold (a truncated frame, trailing bytes, a size not a multiple of 8)."""

    code, wire_code = "BAD_SIZE", 0x0005


class BadPadding(WireError):
    """A padding byte between or after sections is not zero."""

    code, wire_code = "BAD_PADDING", 0x0006


class BadOffsets(WireError):
    """``msg_offsets`` does not start at 0 or decreases."""

    code, wire_code = "BAD_OFFSETS", 0x0007


class UnknownSchemeCode(WireError, UnknownScheme):
    code, wire_code = "UNKNOWN_SCHEME", 0x0008


class BadKeyLength(WireError):
    """``pk_len`` is not a public-key length of the frame's scheme."""

    code, wire_code = "BAD_KEY_LENGTH", 0x0009


class BadSignatureLength(WireError):
    code, wire_code = "BAD_SIGNATURE_LENGTH", 0x000A


class BadOptions(WireError):
    """Unknown option bits, or an option bit on a scheme that does not accept it."""

    code, wire_code = "BAD_OPTIONS", 0x000B


class BadContext(WireError):
    """A context string on a scheme that takes none (only ML-DSA and SLH-DSA do)."""

    code, wire_code = "BAD_CONTEXT", 0x000C


class EmptyFrame(WireError, EmptyBatch):
    """A request or response frame with ``count`` = 0."""

    code, wire_code = "EMPTY_BATCH", 0x000D


class BadVerdict(WireError):
    """A response frame whose verdict bytes are not 0/1 or whose ``valid`` disagrees with them."""

    code, wire_code = "BAD_VERDICT", 0x000E


class BadUtf8(WireError):
    """An error frame whose message is not UTF-8."""

    code, wire_code = "BAD_UTF8", 0x000F


class BadContentType(WireError):
    code, wire_code, status = "BAD_CONTENT_TYPE", 0x0010, 415


class FrameTooLarge(WireError, LimitExceeded):
    """``size`` is over the server's frame limit."""

    code, wire_code, status = "FRAME_TOO_LARGE", 0x0011, 413


class CountLimit(WireError, LimitExceeded):
    """``count`` is over the server's item limit."""

    code, wire_code, status = "COUNT_LIMIT", 0x0012, 413


class MessageLimit(WireError, LimitExceeded):
    """A message is longer than the server's message limit."""

    code, wire_code, status = "MESSAGE_LIMIT", 0x0013, 413


# ------------------------------------------------------------------ client side
class RemoteError(ZapVerifyError):
    """The server answered with an error (JSON ``{"error": ...}`` or a ZAP error frame).

    ``code``, ``status``, ``wire_code`` and ``field`` are the server's; ``retry_after`` the
    seconds of its ``Retry-After`` header (an ``OVERLOADED`` 503 has one), None without.
    """

    def __init__(self, message: str, *, code: str, status: int, wire_code: int | None = None,
                 field: str | None = None, retry_after: float | None = None):
        super().__init__(message, field=field, code=code)
        self.status = status
        self.retry_after = retry_after
        if wire_code is not None:
            self.wire_code = wire_code


class ConnectionFailed(ZapVerifyError):
    """The server could not be reached, or the connection closed while requests waited for replies."""

    code = "CONNECTION_FAILED"
    status = 503
    wire_code = 0x0102


def error_classes() -> list[type[ZapVerifyError]]:
    """Every error class of the hierarchy, parents before children."""
    out, todo = [], [ZapVerifyError]
    while todo:
        cls = todo.pop(0)
        if cls not in out:
            out.append(cls)
            todo.extend(cls.__subclasses__())
    return out


def by_wire_code(wire_code: int) -> type[ZapVerifyError] | None:
    """The class whose own ``wire_code`` is ``wire_code`` (None for an unknown code)."""
    for cls in error_classes():
        if cls.__dict__.get("wire_code") == wire_code:
            return cls
    return None
