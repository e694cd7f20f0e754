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
