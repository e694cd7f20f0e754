"""The engine's start-up self-test: every backend verifies our known answers for every scheme
it serves, and a backend's Merkle kernels must build the CPU's tree, before it serves a batch
(docs/architecture.md, "Start-up").  A backend that fails is never routed to for that scheme."""

from __future__ import annotations

import numpy as np

from app.engine.backends.base import READY, Backend
from app.engine.commit import merkle
from app.engine.reference import kat
from app.engine.verify.grouping import batch_of, group_items

#: Largest known-answer batch the Merkle check commits: 1 to 7 leaves cover every shape of a
#: small RFC 6962 tree (a full one, a carried odd node at each level).
MERKLE_CHECK_ITEMS = 7


def check_scheme(backend: Backend, kas: list[kat.KnownAnswer]) -> tuple[bool, str]:
    """Verify one scheme's known answers on ``backend``: (True, "") when every verdict is the
    expected one, else (False, what differed or what the backend raised)."""
    try:
        for group, idx in group_items([ka.item for ka in kas]).items():
            if group is None:
                continue
            batch = batch_of(group, [kas[i].item for i in idx])
            got = backend.run(batch).check(len(batch)).verdicts
            want = np.array([kas[i].expected for i in idx])
            if not np.array_equal(got, want):
                return False, f"verdicts {got.astype(int).tolist()} != expected {want.astype(int).tolist()}"
        return True, ""
    except Exception as exc:  # a backend that cannot even run is a failed self-test
        return False, f"{type(exc).__name__}: {exc}"


def check_merkle(backend: Backend, answers: dict[str, list[kat.KnownAnswer]]) -> str:
    """Compare the leaves and roots ``backend`` makes (``run(batch, commit=True)``) with the
    CPU's reference (hashlib) on known-answer batches of 1 to
    :data:`MERKLE_CHECK_ITEMS` items, valid and invalid ones mixed, of the first scheme in
    ``answers`` (those whose self-test passed on ``backend``); ``"ready"`` or why not."""
    state = backend.capabilities().commits
    if state != READY:
        return state
    items = _mixed(answers)
    if items is None:
        return "no scheme passed its self-test with valid and invalid known answers to commit"
    try:
        for n in range(1, MERKLE_CHECK_ITEMS + 1):
            batch = batch_of(items[0], items[1][:n])
            got = backend.run(batch, commit=True).check(n)
            if got.leaves is None or got.root is None:
                return "run(commit=True) returned no leaves or root"
            want = merkle.batch_leaves(batch, got.verdicts)
            if not np.array_equal(got.leaves, want) or got.root != merkle.root(want):
                return f"Merkle tree of {n} leaves differs from the CPU's"
        return READY
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


def _mixed(answers: dict[str, list[kat.KnownAnswer]]):
    """(batch key, items) of one batch key group of known answers, an invalid item first and
    every third after, the rest valid, :data:`MERKLE_CHECK_ITEMS` long; None where no group
    has both."""
    for kas in answers.values():
        for key, idx in group_items([ka.item for ka in kas]).items():
            good = [kas[i].item for i in idx if kas[i].expected]
            bad = [kas[i].item for i in idx if not kas[i].expected]
            if key is not None and good and bad:
                return key, [bad[i % len(bad)] if i % 3 == 0 else good[i % len(good)]
                             for i in range(MERKLE_CHECK_ITEMS)]
    return None
