"""Reading one ZAP frame off a stream (docs/wire-format.md): chunks as they arrive, assembled
into one buffer of the frame's declared size, the header checked before any buffer is taken.

:mod:`app.wire.zap` encodes and decodes whole frames; this module is the state of a frame
still arriving (an HTTP body read chunk by chunk, app/api/routes/zap.py; the fuzzer's random
chunking, bench/fuzz_zap.py).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from app.core.errors import BadSize
from app.wire.zap import DEFAULT_LIMITS, HEADER_SIZE, Buffer, Header, Limits, as_u8, peek_request_id, read_header


class FrameReader:
    """Assembles one frame from chunks into one buffer of the frame's declared size.

    The header is checked (:func:`read_header`, and against ``expected``, e.g. a
    Content-Length) as soon as its 16 bytes are in, before any buffer is taken; then the
    rest is copied, once, into a buffer of ``size`` bytes: one that the caller
    :meth:`attach`-es (a pool slab acquired off the event loop), else ``alloc(size)``.

    Raises from :meth:`take_header` / :meth:`feed` / :meth:`finish`: what
    :func:`read_header` raises, and :class:`BadSize` for more or fewer bytes than ``size``
    or a ``size`` other than ``expected``.
    """

    def __init__(self, limits: Limits = DEFAULT_LIMITS, alloc: Callable[[int], Buffer] = bytearray,
                 expected: int | None = None):
        self.limits = limits
        self.alloc = alloc
        self.expected = expected
        self.header: Header | None = None
        self.buffer: np.ndarray | None = None
        self._head = bytearray()
        self.filled = 0

    def take_header(self, chunk: bytes | memoryview) -> memoryview:
        """Consume header bytes from ``chunk``; returns what is left of it.

        Sets :attr:`header` once 16 bytes are in (then returns the rest unconsumed)."""
        view = memoryview(chunk)
        if self.header is not None:
            return view
        take = min(HEADER_SIZE - len(self._head), len(view))
        self._head += view[:take]
        if len(self._head) == HEADER_SIZE:
            self.header = read_header(self._head, self.limits)  # kept on error: its request_id addresses the reply
            if self.expected is not None and self.expected != self.header.size:
                raise BadSize(f"size field says {self.header.size} bytes, the body is {self.expected}",
                              field="size")
        return view[take:]

    @property
    def request_id(self) -> int:
        """The frame's ``request_id`` once the header's 16 bytes are in and begin with the
        magic (even if the header then failed its checks), else 0: what an error reply is
        addressed to (docs/wire-format.md, section 5)."""
        return self.header.request_id if self.header is not None else peek_request_id(self._head)

    def attach(self, buffer: Buffer, *, partial: bool = False) -> None:
        """Use ``buffer`` (at least ``header.size`` bytes, writable) for the frame.

        ``partial``: the buffer may be shorter (at least the header); the caller
        :meth:`rebind`-s a larger one, holding the bytes so far, before they outgrow it."""
        if self.header is None or self.buffer is not None:
            raise RuntimeError("attach() belongs after the header and before the body")
        self.buffer = as_u8(buffer)[:self.header.size]
        if self.buffer.shape[0] < (HEADER_SIZE if partial else self.header.size):
            raise ValueError(f"buffer of {self.buffer.shape[0]} bytes for a {self.header.size}-byte frame")
        self.buffer[:HEADER_SIZE] = np.frombuffer(self._head, dtype=np.uint8)
        self.filled = HEADER_SIZE

    def rebind(self, buffer: Buffer) -> None:
        """Go on in ``buffer``, which already holds the :attr:`filled` bytes received so far
        (a buffer that grows as the body arrives, app/api/landing.py)."""
        array = as_u8(buffer)[:self.header.size if self.header else 0]
        if array.shape[0] < self.filled:
            raise ValueError(f"buffer of {array.shape[0]} bytes for {self.filled} bytes received")
        self.buffer = array

    def feed(self, chunk: bytes | memoryview) -> None:
        view = self.take_header(chunk) if self.header is None else memoryview(chunk)
        if self.header is None:
            return
        if self.buffer is None:
            self.attach(self.alloc(self.header.size))
        n = len(view)
        if n == 0:
            return
        if self.filled + n > self.header.size:
            raise BadSize(f"more than the {self.header.size} bytes the size field declares", field="size")
        if self.buffer is None or self.filled + n > self.buffer.shape[0]:
            raise RuntimeError("attach() (or rebind()) a buffer large enough before feeding the body")
        self.buffer[self.filled:self.filled + n] = np.frombuffer(view, dtype=np.uint8)
        self.filled += n

    def finish(self) -> tuple[Header, np.ndarray]:
        """The header and the filled ``uint8[size]`` buffer; raises :class:`BadSize` if short."""
        if self.header is None:
            raise BadSize(f"{len(self._head)} bytes is shorter than the {HEADER_SIZE}-byte header",
                          field="size")
        if self.buffer is None:
            self.attach(self.alloc(self.header.size))
        assert self.buffer is not None  # attach() set it
        if self.filled != self.header.size or self.buffer.shape[0] < self.filled:
            raise BadSize(f"size field says {self.header.size} bytes, {self.filled} were received",
                          field="size")
        return self.header, self.buffer
