"""The one error hierarchy of zapverify.

Every error carries a stable machine-readable ``code`` (upper snake case, in the manner of
blst's ``BAD_ENCODING`` / ``POINT_NOT_IN_GROUP``), the ``field`` it is about when there is
one (``items[3].public_key``), and the HTTP status the API answers it with.  Bad *input*
is a 4xx; a 5xx is reserved for the service itself failing (store down, pool exhausted).
"""

from __future__ import annotations


class ZapVerifyError(Exception):
    """Base of every error raised on purpose by zapverify."""

    code: str = "INTERNAL"
    status: int = 500

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


class UnknownScheme(RequestError):
    code = "UNKNOWN_SCHEME"


class LimitExceeded(RequestError):
    """A configured limit (items, body bytes, message bytes, context bytes) was exceeded."""

    code = "LIMIT_EXCEEDED"
    status = 413


class EmptyBatch(RequestError):
    code = "EMPTY_BATCH"


class BackendUnavailable(ZapVerifyError):
    """A backend was forced (``ZAPVERIFY_BACKEND``) or asked for but cannot run here."""

    code = "BACKEND_UNAVAILABLE"
    status = 503


class NotReady(ZapVerifyError):
    code = "NOT_READY"
    status = 503


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


class StoreSchemaTooNew(StoreUnavailable):
    """The database was migrated by a newer zapverify than this one."""

    code = "STORE_SCHEMA_TOO_NEW"
