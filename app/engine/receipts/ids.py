"""Time-ordered identifiers: UUIDv7 (RFC 9562 §5.7), used for batch and receipt ids."""

from __future__ import annotations

import os
import threading
import time
import uuid

_lock = threading.Lock()
_last = [0, 0]  # (unix ms, 12-bit counter) so ids made in one millisecond still sort


def uuid7() -> uuid.UUID:
    """A new UUIDv7: 48-bit Unix time in ms, version 7, 12-bit sequence, variant, 62 random bits.

    Ids from one process are strictly increasing (the 12-bit ``rand_a`` field is used as a
    counter within a millisecond, RFC 9562 §6.2 method 1).
    """
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms <= _last[0]:
            ms, seq = _last[0], _last[1] + 1
            if seq > 0xFFF:  # counter exhausted: borrow the next millisecond
                ms, seq = ms + 1, 0
        else:
            seq = 0
        _last[0], _last[1] = ms, seq
    rand_b = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
    value = (ms << 80) | (0x7 << 76) | (seq << 64) | (0b10 << 62) | rand_b
    return uuid.UUID(int=value)


def new_batch_id() -> str:
    """A batch / receipt id as its canonical 36-character string."""
    return str(uuid7())
