"""``scripts/agreement --scheme bls12-381-aggregate``: BLS12-381 aggregate items on the device
(app.engine.device.ops.verify_aggregates, host build of bls12_381_aggregate.cu: the kernel
backends' path) against the CPU reference (app.engine.reference.bls_aggregate: arkworks).

Items come in rounds of every shape of Ethereum's ``fast_aggregate_verify`` and
``aggregate_verify`` test directories and more (:func:`labelled_aggregates`): valid sets, an
extra or a missing key, another signer's signature or message, the identity key, no keys with
and without the infinity signature, keys that cancel (P and −P), duplicate keys, malformed and
off-subgroup signatures and keys, one bad member at every position; every FastAggregateVerify
shape under both variants (``ietf`` and ``eth``).  Here ``--valid`` counts rounds (each has
three valid items and 60–90 others) and ``--mutated`` is not used: the shapes are the
mutations.  tests/test_kernel_bls12_381_aggregate.py runs the same generator on a CI sample.
``--path blst``: the items through the CPU backend's blst loop instead
(app/engine/backends/native_bls.py, ``BlsLoops.aggregate_item``), into
bls_aggregate_blst_agreement.{json,md}.
"""

from __future__ import annotations

import random

import py_arkworks_bls12381 as ark

from app.core.batch import G2_INFINITY, AggregateItem
from app.engine.backends import native_bls
from app.engine.device import hostbuild, hostlib, ops, registry
from app.engine.reference import bls_aggregate, kat
from app.engine.reference.reference import bls_hash
from scripts.lib.agreement import CheckFailures, Chunk, Tally, compare_launched
from scripts.lib.agreement import bls12_381 as single

SCHEME = "bls12-381-aggregate"
TITLE = "BLS12-381 aggregate items (host build) vs arkworks"
RESULTS = "bls_aggregate_agreement"
KERNEL = "bls12_381_aggregate.cu (host build, through app.engine.device.ops.verify_aggregates)"
REFERENCE, REFERENCE_SHORT = "arkworks (app.engine.reference.bls_aggregate)", "arkworks"
VERSIONS = ("py_arkworks_bls12381",)
SETS = ["bls12-381"]
#: ``valid``: rounds of shapes (about 80 items each); ``mutated``: unused.
DEFAULTS = {"valid": 40, "mutated": 0}
CHUNK = 2
VALID_KINDS = ("fast valid", "fast valid:eth", "aggregate valid")
#: Per ``--path``: (TITLE, RESULTS, KERNEL).
RUNS = {
    "kernel": (TITLE, RESULTS, KERNEL),
    "blst": ("BLS12-381 aggregate items on blst (the CPU backend's loop) vs arkworks",
             "bls_aggregate_blst_agreement", "zv_bls_aggregate on blst (app/engine/backends/native_bls.py)"),
}
OPTIONS = ("path",)
add_arguments = single.add_arguments  # --path kernel|blst


def configure(args) -> None:
    global TITLE, RESULTS, KERNEL
    TITLE, RESULTS, KERNEL = RUNS[args.path]
IDENTITY_PK = b"\xc0" + bytes(47)


class Signers:
    """Keys and signatures made with arkworks (sk·G1, sk·H(m)); sums are aggregates."""

    def __init__(self, seed: int | str):
        self.rng = random.Random(seed)

    def key(self) -> int:
        return self.rng.randrange(1, 2**250)

    @staticmethod
    def pk(sk: int) -> bytes:
        return bytes((ark.G1Point() * ark.Scalar(sk)).to_compressed_bytes())

    @staticmethod
    def neg_pk(sk: int) -> bytes:
        return bytes((-(ark.G1Point() * ark.Scalar(sk))).to_compressed_bytes())

    @staticmethod
    def sig(pairs: list[tuple[int, bytes]]) -> bytes:
        """The aggregate of sk_i's signatures on m_i (the identity for no pairs)."""
        acc = None
        for sk, m in pairs:
            s = bls_hash(m) * ark.Scalar(sk)
            acc = s if acc is None else acc + s
        return G2_INFINITY if acc is None else bytes(acc.to_compressed_bytes())


def labelled_aggregates(seed: int | str, rounds: int) -> list[tuple[str, AggregateItem]]:
    """``rounds`` rounds of every shape of the module doc, each with its kind."""
    s = Signers(seed)
    out: list[tuple[str, AggregateItem]] = []
    for _ in range(rounds):
        n = s.rng.randrange(2, 6)
        sks = [s.key() for _ in range(n)]
        pks = tuple(s.pk(k) for k in sks)
        m = s.rng.randbytes(32)
        msgs = tuple(s.rng.randbytes(32) for _ in range(n))
        fsig = s.sig([(k, m) for k in sks])
        asig = s.sig(list(zip(sks, msgs)))
        other = s.pk(s.key())
        fast = [
            ("valid", pks, m, fsig), ("extra key", pks + (other,), m, fsig), ("missing key", pks[:-1], m, fsig),
            ("one signer's signature", pks, m, s.sig([(sks[0], m)])), ("other message", pks, m + b"!", fsig),
            ("identity key", pks[:1] + (IDENTITY_PK,) + pks[1:], m, fsig),
            ("no keys, infinity signature", (), m, G2_INFINITY), ("no keys", (), m, fsig),
            ("infinity signature", pks, m, G2_INFINITY), ("identity key only", (IDENTITY_PK,), m, G2_INFINITY),
            # P, −P and Q sum to Q: Q's signature verifies for all three (docs/bls-aggregate.md).
            ("keys that cancel", (pks[0], s.neg_pk(sks[0]), pks[1]), m, s.sig([(sks[1], m)])),
            ("keys that cancel to the identity", (pks[0], s.neg_pk(sks[0])), m, G2_INFINITY),
            # Duplicate keys: P twice needs 2·σ.
            ("duplicate key, 2σ", (pks[0], pks[0]), m, s.sig([(sks[0], m), (sks[0], m)])),
            ("duplicate key, σ", (pks[0], pks[0]), m, s.sig([(sks[0], m)])),
            ("signature with bad flags", pks, m, b"\xe0" + bytes(95)),
            ("truncated signature", pks, m, fsig[:95]),
            ("signature off the subgroup", pks, m, bytes(kat.off_subgroup_point(ark.G2Point, 96, s.rng))),
        ]
        # One bad member at every position: another key in place of key j, then one off G1's subgroup.
        fast += [("another key at one position", pks[:j] + (other,) + pks[j + 1:], m, fsig) for j in range(n)]
        fast += [("key off the subgroup at one position",
                  pks[:j] + (bytes(kat.off_subgroup_point(ark.G1Point, 48, s.rng)),) + pks[j + 1:], m, fsig)
                 for j in range(n)]
        for kind, keys, msg, sig in fast:
            out += [(f"fast {kind}", AggregateItem("fast_aggregate", keys, (msg,), sig)),
                    (f"fast {kind}:eth", AggregateItem("fast_aggregate", keys, (msg,), sig, "eth"))]
        agg = [
            ("valid", pks, msgs, asig), ("a message replaced", pks, msgs[:-1] + (m,), asig),
            ("another aggregate's signature", pks, msgs, fsig), ("a pair missing", pks[:-1], msgs[:-1], asig),
            ("counts differ", pks, msgs[:-1], asig), ("no pairs, infinity signature", (), (), G2_INFINITY),
            ("no pairs", (), (), asig), ("identity key", pks + (IDENTITY_PK,), msgs + (m,), asig),
            # Shared messages (no distinct-message rule in the POP suite) and keys that cancel.
            ("shared message", (pks[0], pks[1]), (m, m), s.sig([(sks[0], m), (sks[1], m)])),
            ("keys that cancel, one message", (pks[0], s.neg_pk(sks[0])), (m, m), G2_INFINITY),
            ("keys that cancel, two messages", (pks[0], s.neg_pk(sks[0])), (m, msgs[0]), G2_INFINITY),
        ]
        # One bad member at every position: message j replaced, then key j replaced.
        agg += [("another message at one position", pks, msgs[:j] + (m,) + msgs[j + 1:], asig) for j in range(n)]
        agg += [("another key at one position", pks[:j] + (other,) + pks[j + 1:], msgs, asig) for j in range(n)]
        out += [(f"aggregate {kind}", AggregateItem("aggregate", k, ms, sig)) for kind, k, ms, sig in agg]
        out.append(("aggregate valid:eth (refused)", AggregateItem("aggregate", pks, msgs, asig, "eth")))
    return out


def library():
    return hostbuild.load(registry.BLS_AGGREGATE.name, registry.BLS_AGGREGATE.directory)


def prepare(args) -> None:
    if args.path == "blst":
        native_bls.loops()  # built once, before the workers fork
    else:
        library()


def blst_verdicts(items: list[AggregateItem]) -> list[bool]:
    """The CPU backend's blst verdicts of aggregate items, in order."""
    loops = native_bls.loops()
    if loops is None:
        raise RuntimeError("the blst loops did not load (no compiler or no blspy)")
    return [loops.aggregate_item(it) for it in items]


def run_chunk(chunk: Chunk) -> Tally:
    labelled = labelled_aggregates(f"bls-aggregate-agreement/{chunk.seed}/{chunk.index}", chunk.counts["valid"])
    kinds: dict[str, list[AggregateItem]] = {}
    for kind, it in labelled:
        kinds.setdefault(kind, []).append(it)
    tally = Tally()
    if chunk.options.get("path") == "blst":
        compare_launched(tally, chunk.set_id, kinds, blst_verdicts,
                         lambda xs: [bls_aggregate.verify_item(x) for x in xs])
        return tally
    with CheckFailures(tally, chunk.set_id, library()):
        compare_launched(tally, chunk.set_id, kinds, lambda every: ops.verify_aggregates(hostlib.device(), every),
                         lambda xs: [bls_aggregate.verify_item(x) for x in xs])
    return tally
