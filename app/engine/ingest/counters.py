"""Counters of one ingest transport, for /v1/status, the dashboard and Prometheus.

Every frame a listener starts to receive ends in exactly one outcome, told once to the
observer (``zapverify_ingest_frames_total{transport,outcome}``): ``accepted`` (answered
with verdicts, as the HTTP and WebSocket endpoints count theirs) or one of
:data:`DROP_REASONS`.  A frame is dropped either at receive time
(:meth:`TransportCounters.rejected`: bad magic, truncated, ...) or after it was put in the
ring (:meth:`TransportCounters.queued`, then :meth:`TransportCounters.finished`: a body
that breaks ZAP v1, the engine not ready, ...).  So ``frames_received`` =
``frames_verified`` + ``dropped_total`` + the frames still being verified.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

#: Why a frame got no verdicts; each is an ``outcome`` label value, as is ``accepted``.
DROP_REASONS = (
    "bad_magic",       # the first 4 bytes are not ZAP\0 (TCP: error frame, then the connection closes)
    "bad_header",      # version, type, flags or a size that is not a multiple of 8
    "too_large",       # size over the frame limit, or more bytes than size (UDP datagram, QUIC stream)
    "truncated",       # fewer bytes than size before EOF / end of datagram / end of stream
    "malformed",       # the body breaks ZAP v1 (answered with an error frame)
    "pool_exhausted",  # no pool buffer (UDP, QUIC: at once; TCP: after pool_wait_seconds)
    "overloaded",      # over the process's admission bound (TCP, QUIC: answered with OVERLOADED; UDP: dropped)
    "body_timeout",    # TCP, QUIC: half-received past its read deadline or under the minimum rate (BODY_TIMEOUT)
    "unauthorized",    # TCP, QUIC with API keys: no, a wrong or a late handshake, or a key without the verify scope
    "rate_limited",    # TCP, QUIC with API keys: over the key's rate limit (answered with RATE_LIMITED)
    "ring_full",       # UDP only: TCP and QUIC stop reading instead
    "not_ready",       # the engine's self-test has not passed yet (answered with NOT_READY)
    "store_unavailable",  # the receipt could not be written, so no verdicts (STORE_UNAVAILABLE)
    "disconnected",    # the peer went away before its frame was verified
    "shutdown",        # received but not accepted when the listener stopped
    "internal",        # the service failed on it (answered with INTERNAL)
)
OUTCOMES = ("accepted",) + DROP_REASONS


class TransportCounters:
    """Thread-safe counters of one transport; ``observer(transport, outcome)`` (optional) is
    told the final outcome of every frame, e.g. to feed a Prometheus counter."""

    def __init__(self, transport: str, observer: Callable[[str, str], None] | None = None):
        self.transport = transport
        self.observer = observer
        self._lock = threading.Lock()
        self.frames_received = 0
        self.bytes_received = 0
        self.queued_total = 0
        self.verified = 0
        self.dropped = dict.fromkeys(DROP_REASONS, 0)
        self.replies_sent = 0
        self.error_replies_sent = 0
        self.replies_lost = 0
        self.connections = 0
        self.connections_total = 0
        self.backpressure_total = 0

    def received(self, nbytes: int) -> None:
        """Frame bytes read off the socket (not QUIC, UDP or IP overhead)."""
        with self._lock:
            self.bytes_received += nbytes

    def rejected(self, reason: str) -> None:
        """A frame dropped at receive time, before it reached the ring."""
        with self._lock:
            self.frames_received += 1
            self.dropped[reason] += 1
        self._tell(reason)

    def queued(self) -> None:
        """A whole frame put in the ring for a verify worker."""
        with self._lock:
            self.frames_received += 1
            self.queued_total += 1

    def finished(self, outcome: str) -> None:
        """A queued frame's end: ``accepted`` (answered with verdicts) or a drop reason."""
        with self._lock:
            if outcome == "accepted":
                self.verified += 1
            else:
                self.dropped[outcome] += 1
        self._tell(outcome)

    def _tell(self, outcome: str) -> None:
        if self.observer is not None:
            try:
                self.observer(self.transport, outcome)
            except Exception:  # an observer never fails a frame
                pass

    def replied(self, sent: bool, error: bool = False) -> None:
        """A reply (verdicts, or an error frame when ``error``) was written, or lost when not ``sent``."""
        with self._lock:
            if not sent:
                self.replies_lost += 1
            elif error:
                self.error_replies_sent += 1
            else:
                self.replies_sent += 1

    def connection(self, delta: int) -> None:
        with self._lock:
            self.connections += delta
            self.connections_total += delta > 0

    def stalled(self) -> None:
        """A receive path stopped reading because the ring was full."""
        with self._lock:
            self.backpressure_total += 1

    def snapshot(self) -> dict:
        with self._lock:
            return {"frames_received": self.frames_received, "bytes_received": self.bytes_received,
                    "frames_queued": self.queued_total, "frames_verified": self.verified,
                    "dropped": dict(self.dropped), "dropped_total": sum(self.dropped.values()),
                    "replies_sent": self.replies_sent, "error_replies_sent": self.error_replies_sent,
                    "replies_lost": self.replies_lost, "connections": self.connections,
                    "connections_total": self.connections_total, "backpressure_total": self.backpressure_total}
