"""The engine's start-up self-test: every backend verifies our known answers for every scheme
it offers, and a backend's Merkle kernels must build the CPU's tree, before it serves a batch
(docs/architecture.md, "Start-up").  A backend that fails is never routed to for that scheme."""

from __future__ import annotations

import numpy as np

from app.engine.backends.base import Backend, CommitsOnDevice
from app.engine.commit import merkle
from app.engine.verify import kat
from app.engine.verify.grouping import batch_of, group_items


def check_scheme(backend: Backend, kas: list[kat.KnownAnswer]) -> tuple[bool, str]:
    """Verify one scheme's known answers on ``backend``: (True, "") when every verdict is the
    expected one, else (False, what differed or what the backend raised)."""
    try:
        for group, idx in group_items([ka.item for ka in kas]).items():
            if group is None:
                continue
            batch = batch_of(group, [kas[i].item for i in idx])
            got = backend.verify(batch)
            want = np.array([kas[i].expected for i in idx])
            if not np.array_equal(np.asarray(got, dtype=bool), want):
                return False, f"verdicts {got.astype(int).tolist()} != expected {want.astype(int).tolist()}"
        return True, ""
    except Exception as exc:  # a backend that cannot even run is a failed self-test
        return False, f"{type(exc).__name__}: {exc}"


def check_merkle(backend: Backend, answers: dict[str, list[kat.KnownAnswer]]) -> str:
    """Compare the backend's leaves and roots with the CPU's on known-answer batches of
    1 to 7 items (every shape of a small RFC 6962 tree); ``"ready"`` or why not."""
    if not isinstance(backend, CommitsOnDevice):
        return "no Merkle kernels"
    state = backend.merkle_state()
    if state != "ready":
        return state
    try:
        items = [ka.item for ka in answers["ed25519"]]
        for n in range(1, 8):
            batch = batch_of(("ed25519", 32, b"", False, False), [items[i % len(items)] for i in range(n)])
            verdicts = np.arange(n) % 3 == 0
            leaves, root = backend.commit(batch, verdicts)
            want = merkle.batch_leaves(batch, verdicts)
            if not np.array_equal(leaves, want) or root != merkle.root(want):
                return f"Merkle tree of {n} leaves differs from the CPU's"
        return "ready"
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
