"""The one agreement run of ``scripts/agreement``: a kernel's host build against a reference
library at scale, per parameter set and per kind of item, with the per-scheme parts in the
modules beside this one.

A *suite* module (ed25519, secp256k1, ml_dsa, slh_dsa, bls12_381, bls12_381_arith) names:

- ``SCHEME`` (its ``--scheme``), ``TITLE``, ``RESULTS`` (the base name of its .json/.md),
  ``KERNEL`` and ``REFERENCE`` (what is compared, in words), ``VERSIONS`` (the reference
  packages whose versions are recorded), ``SETS`` (parameter sets; one for most),
  ``DEFAULTS`` (valid and mutated items per set), ``CHUNK`` (valid items per chunk, one key
  each) and ``VALID_KINDS`` (the kinds that count as valid items);
- ``prepare(args)``: build its host libraries once, before the workers fork;
- ``run_chunk(chunk) -> Tally``: generate one chunk's items, run them through the kernel and
  the reference, count per kind (it runs in a worker process);
- optionally ``configure(args)``: set ``RESULTS``, ``KERNEL`` and ``TITLE`` from its own
  options, before anything is read or written (ML-DSA's ``--kernel``);
- optionally ``add_arguments(ap)`` and ``extra_counts(args)`` (more items per chunk, e.g.
  Ed25519's mixed-order keys), ``chunk_size(args)``, ``finish_set(set_id, args)`` (more
  fields for a set's row), ``COLUMNS`` (more per-kind columns), ``notes(rows)`` (lines under
  the tables).

Everything else — splitting into chunks, the worker pool and its time budget, ZV_CHECK
failures, merging with the rows already recorded, the JSON, the Markdown, the exit status —
is here, once.
"""

from __future__ import annotations

import ctypes
import json
import math
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import numpy as np

from app.core.batch import Batch
from app.core.schemes import OPTIONS, SCHEMES
from app.engine.device import hostbuild, hostlib, ops, registry
from bench import provenance

FORMAT = 2  # of the JSON this package writes (earlier files came from the per-scheme scripts)
EXAMPLES = 3  # disagreements kept per kind
#: Per-kind counts that must stay 0 for a run to pass.
FAILURES = ("disagreements", "reference_unexpected", "ops_path_disagreements")


# ------------------------------------------------------------------ chunks and their counts
@dataclass(frozen=True)
class Chunk:
    """One unit of work: ``counts["valid"]`` valid items of parameter set ``set_id`` under one
    key, ``counts["mutated"]`` mutations of them (and a suite's extra counts), generated
    from ``seed`` and ``index``; ``options`` are the suite's command-line options."""

    set_id: str
    index: int
    seed: int
    counts: dict[str, int]
    options: dict = field(default_factory=dict)


class Tally:
    """Counts per (set, kind of item): ``items``, ``accepted`` (by the reference),
    ``kernel_accepted``, ``disagreements``, ``kernel_s``, ``reference_s`` and whatever a
    suite adds; a few disagreeing items per kind; ZV_CHECK failures per set."""

    def __init__(self) -> None:
        self.kinds: dict[tuple[str, str], Counter] = {}
        self.examples: dict[tuple[str, str], list[dict]] = {}
        self.zv_check_failures: Counter = Counter()

    def count(self, set_id: str, kind: str, **fields: float) -> None:
        self.kinds.setdefault((set_id, kind), Counter()).update(fields)

    def example(self, set_id: str, kind: str, example: dict) -> None:
        kept = self.examples.setdefault((set_id, kind), [])
        if len(kept) < EXAMPLES:
            kept.append(example)

    def merge(self, other: Tally) -> None:
        for key, c in other.kinds.items():
            self.kinds.setdefault(key, Counter()).update(c)
        for (set_id, kind), examples in other.examples.items():
            for ex in examples:
                self.example(set_id, kind, ex)
        self.zv_check_failures.update(other.zv_check_failures)

    def failures(self) -> int:
        """Disagreements, unexpected reference verdicts, ops-path differences and ZV_CHECK
        failures, all sets together."""
        return sum(c[f] for c in self.kinds.values() for f in FAILURES) + sum(self.zv_check_failures.values())


def hexed(value: bytes, limit: int = 128) -> str:
    h = bytes(value).hex()
    return h if len(h) <= limit else h[:limit] + "…"


def describe(item) -> dict:
    """An item (app.core.batch.Item) as hex for an example: public key, message, signature, context."""
    out = {"pk": hexed(item.public_key), "msg": hexed(item.message), "sig": hexed(item.signature)}
    if getattr(item, "context", b""):
        out["ctx"] = hexed(item.context)
    return out


def compare(tally: Tally, set_id: str, kind: str, items: list, kernel: Callable[[list], list[bool]],
            reference: Callable[[list], list[bool]], *, expect: bool | None = None,
            describe: Callable[[object], dict] = describe) -> tuple[list[bool], list[bool]]:
    """Run ``items`` through ``kernel`` and ``reference`` (each: items -> verdicts), time both
    and count them under (``set_id``, ``kind``); with ``expect``, also count the reference
    verdicts that differ from it (a generated case that does not test what it says)."""
    if not items:
        return [], []
    t0 = time.perf_counter()
    got = [bool(v) for v in kernel(items)]
    t1 = time.perf_counter()
    want = [bool(v) for v in reference(items)]
    t2 = time.perf_counter()
    bad = [i for i in range(len(items)) if got[i] != want[i]]
    unexpected = [i for i in range(len(items)) if expect is not None and want[i] != expect]
    tally.count(set_id, kind, items=len(items), accepted=sum(want), kernel_accepted=sum(got),
                disagreements=len(bad), reference_unexpected=len(unexpected), kernel_s=t1 - t0, reference_s=t2 - t1)
    for i in bad:
        tally.example(set_id, kind, {**describe(items[i]), "kernel": got[i], "reference": want[i]})
    for i in unexpected:
        tally.example(set_id, kind, {**describe(items[i]), "reference": want[i], "expected": expect})
    return got, want


def compare_launched(tally: Tally, set_id: str, kinds: dict[str, list], launch: Callable[[list], list[bool]],
                     reference: Callable[[list], list[bool]], *, order: list | None = None) -> None:
    """:func:`compare` for a kernel that runs every kind's items in one launch (one batch, as
    in service): ``launch`` gets them all (in ``order`` where given, else kind after kind),
    and each kind is given its items' share of its time."""
    every = order if order is not None else [it for items in kinds.values() for it in items]
    t0 = time.perf_counter()
    got = dict(zip(map(id, every), (bool(v) for v in launch(every)), strict=True))
    per_item = (time.perf_counter() - t0) / max(1, len(every))
    for kind, items in kinds.items():
        compare(tally, set_id, kind, items, lambda its: [got[id(it)] for it in its], reference)
        tally.count(set_id, kind, kernel_s=per_item * len(items))


class CheckFailures:
    """Counts the ZV_CHECK bounds-check failures of ``lib`` inside a ``with`` block into
    ``tally`` (host libraries count per process, so before and after are compared)."""

    def __init__(self, tally: Tally, set_id: str, lib) -> None:
        self.tally, self.set_id, self.lib = tally, set_id, lib

    def __enter__(self) -> CheckFailures:
        self.before = hostbuild.verify_failures(self.lib) or 0
        return self

    def __exit__(self, *exc) -> None:
        self.tally.zv_check_failures[self.set_id] += (hostbuild.verify_failures(self.lib) or 0) - self.before


# ------------------------------------------------------------------ kernels
def host_library(scheme_id: str):
    """The host build of ``scheme_id``'s verify kernel (its source as the registry names it)."""
    kernel = registry.verify_kernel(SCHEMES[scheme_id])
    if kernel is None:
        raise LookupError(f"{scheme_id} has no kernel source")
    return hostbuild.load(kernel.source.name, kernel.source.directory)


def by_lengths(keys_and_signatures: Iterable[tuple[bytes, bytes]]) -> dict[tuple[int, int], list[int]]:
    """Item indices grouped by (key length, signature length), in item order within a group:
    one direct call per group, as a column holds one length each."""
    groups: dict[tuple[int, int], list[int]] = {}
    for i, (pk, sig) in enumerate(keys_and_signatures):
        groups.setdefault((len(pk), len(sig)), []).append(i)
    return groups


def kernel_by_lengths(scheme_id: str, items: list[tuple[bytes, bytes, bytes]], options: int = 0) -> list[bool]:
    """Verdicts of ``scheme_id``'s verify entry point (host build, :func:`host_library`) for
    (pk, msg, sig) items under ZAP ``options`` bits: one direct call per (key length,
    signature length), so malformed lengths reach the kernel too (a Batch could not hold
    them).  Raises RuntimeError when the kernel writes a verdict other than 0 or 1."""
    kernel = registry.verify_kernel(SCHEMES[scheme_id])
    assert kernel is not None
    fn = getattr(host_library(scheme_id), kernel.entry)
    fn.restype = None
    out = [False] * len(items)
    ptr = ctypes.c_void_p
    for (pk_len, sig_len), idx in by_lengths((pk, sig) for pk, _, sig in items).items():
        # One spare byte each, so that an empty column still has an address.
        pks = np.frombuffer(b"".join(items[i][0] for i in idx) + b"\0", dtype=np.uint8)
        sigs = np.frombuffer(b"".join(items[i][2] for i in idx) + b"\0", dtype=np.uint8)
        msgs = np.frombuffer(b"".join(items[i][1] for i in idx) + b"\0", dtype=np.uint8)
        offsets = np.zeros(len(idx) + 1, dtype=np.uint64)
        offsets[1:] = np.cumsum([len(items[i][1]) for i in idx])
        verdicts = np.full(len(idx), 0xEE, dtype=np.uint8)
        fn(ptr(pks.ctypes.data), ctypes.c_uint32(pk_len), ptr(sigs.ctypes.data), ctypes.c_uint32(sig_len),
           ptr(msgs.ctypes.data), ptr(offsets.ctypes.data), None, ctypes.c_uint32(0),
           ctypes.c_uint32(options), ctypes.c_uint64(len(idx)), ptr(verdicts.ctypes.data))
        if not set(verdicts.tolist()) <= {0, 1}:
            raise RuntimeError(f"kernel wrote verdicts other than 0/1: {sorted(set(verdicts.tolist()))}")
        for j, i in enumerate(idx):
            out[i] = bool(verdicts[j])
    return out


def kernel_by_options(scheme_id: str, cases: list, names: tuple[str, ...]) -> list[bool]:
    """Verdicts of ``scheme_id``'s kernel (:func:`kernel_by_lengths`) for cases that each carry
    their own options: objects with ``pk``, ``msg``, ``sig`` and a ``bool`` attribute per
    option name in ``names`` (``("prehashed", "low_s")``); one kernel call per combination."""
    out = [False] * len(cases)
    groups: dict[tuple[bool, ...], list[int]] = {}
    for i, c in enumerate(cases):
        groups.setdefault(tuple(bool(getattr(c, n)) for n in names), []).append(i)
    for flags, idx in groups.items():
        bits = sum(OPTIONS[n].bit for n, on in zip(names, flags) if on)
        for i, v in zip(idx, kernel_by_lengths(scheme_id, [(cases[i].pk, cases[i].msg, cases[i].sig) for i in idx],
                                               bits)):
            out[i] = v
    return out


def kernel_via_ops(scheme_id: str, items: list, ctx: bytes = b"",
                   kernel: registry.VerifyKernel | None = None) -> list[bool]:
    """Verdicts of ``scheme_id``'s kernel (default: the registry's; ``kernel``: another row,
    e.g. a variant of :data:`registry.VERIFY_VARIANTS`) through app.engine.device.ops on the
    host device: the path the kernel-host backend takes (one Batch: one key length, one
    context)."""
    scheme = SCHEMES[scheme_id]
    batch = Batch.from_items(scheme, [it.public_key for it in items], [it.message for it in items],
                             [it.signature for it in items], ctx=ctx)
    row = kernel if kernel is not None else registry.verify_kernel(scheme)
    return [bool(v) for v in ops.verify_batch(hostlib.device(), row, batch).tolist()]


# ------------------------------------------------------------------ the run
def plan(suite, args) -> list[Chunk]:
    """Every set's chunks, interleaved across the sets (so that under a time budget each set
    gets its share): ``ceil(valid / chunk size)`` chunks per set, every count split evenly."""
    size = suite.chunk_size(args) if hasattr(suite, "chunk_size") else suite.CHUNK
    counts = {"valid": args.valid, "mutated": args.mutated,
              **(suite.extra_counts(args) if hasattr(suite, "extra_counts") else {})}
    n = max(1, math.ceil(args.valid / size))
    options = {k: getattr(args, k) for k in getattr(suite, "OPTIONS", ())}

    def share(total: int, i: int) -> int:
        return total // n + (i < total % n)

    return [Chunk(set_id, i, args.seed, {k: share(v, i) for k, v in counts.items()}, options)
            for i in range(n) for set_id in args.sets]


def set_row(suite, set_id: str, tally: Tally, chunks: list[Chunk], done: int, prov: dict) -> dict:
    """One set's row of the results: totals, per-kind counts and examples, what was asked."""
    kinds = {kind: dict(c) for (s, kind), c in sorted(tally.kinds.items()) if s == set_id}
    valid = [k for name, k in kinds.items() if name in suite.VALID_KINDS]
    n_valid = sum(k["items"] for k in valid)
    items = sum(k["items"] for k in kinds.values())

    def us(key: str) -> float | None:
        return round(1e6 * sum(k.get(key, 0.0) for k in valid) / n_valid, 1) if n_valid else None

    mine = [c for c in chunks if c.set_id == set_id]
    return {"scheme": set_id, "items": items, "valid_items": n_valid, "mutated_items": items - n_valid,
            **{f: sum(k.get(f, 0) for k in kinds.values()) for f in FAILURES},
            "zv_check_failures": tally.zv_check_failures[set_id],
            "kernel_us_per_valid_item": us("kernel_s"), "reference_us_per_valid_item": us("reference_s"),
            "kinds": {name: {f: round(v, 6) if isinstance(v, float) else v for f, v in k.items()}
                      for name, k in kinds.items()},
            "examples": {kind: ex for (s, kind), ex in sorted(tally.examples.items()) if s == set_id},
            "asked": {f: sum(c.counts[f] for c in mine) for f in mine[0].counts} | {"chunks": len(mine),
                                                                                   "chunks_done": done},
            "provenance": prov}


def merge_recorded(path: Path, rows: list[dict], sets: list[str], replace: bool) -> tuple[list[dict], list[str]]:
    """This run's rows merged into the rows recorded at ``path``, in ``sets`` order: a set run
    now replaces its recorded row unless that one checked more items (a quick run must not
    wipe a full-size one; ``replace`` lets it).  Rows of a file in an earlier format are not
    kept.  Returns the rows and a line per recorded row kept over this run's."""
    try:
        recorded = json.loads(path.read_text())
        old = {r["scheme"]: r for r in recorded["sets"]} if recorded.get("format") == FORMAT else {}
    except (OSError, ValueError, KeyError):
        old = {}
    kept = []
    for r in rows:
        prev = old.get(r["scheme"])
        if replace or prev is None or r["items"] >= prev["items"]:
            old[r["scheme"]] = r
        else:
            kept.append(f"{r['scheme']}: kept the recorded row ({prev['items']:,} items) over this run's "
                        f"({r['items']:,}); --replace to replace it")
    return [old[s] for s in sets if s in old], kept


def earlier_format(path: Path) -> bool:
    """Whether ``path`` holds results written before this package: rows of another shape,
    which a new run can neither compare itself with nor keep (see :func:`merge_recorded`)."""
    try:
        return json.loads(path.read_text()).get("format") != FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def versions(names: Iterable[str]) -> dict[str, str]:
    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


# ------------------------------------------------------------------ the report
def _fmt(v) -> str:
    if v is None or v == "":
        return "–"
    return f"{v:,}" if isinstance(v, int) else str(v)


def markdown(suite, result: dict) -> str:
    """The .md of a result (written from its JSON: ``scripts/agreement --render`` redoes it)."""
    rows = result["sets"]
    prov = result["provenance"]
    ref = suite.REFERENCE_SHORT
    lines = [f"# {suite.TITLE}", "", provenance.markdown_line(prov), "",
             f"Written by `{result['command']}`: {suite.KERNEL} against {suite.REFERENCE} "
             f"({', '.join(f'{k} {v}' for k, v in result['versions'].items())}); host build by "
             f"{result['compiler']} with the ZV_CHECK bounds checks on; {result['workers']} worker processes, "
             f"{result['wall_seconds']:.0f} s wall.  Per-item times are one core's, the machine shared."]
    partial = [r for r in rows if r["asked"]["chunks_done"] < r["asked"]["chunks"]]
    if partial:
        lines += ["", "**Partial run** (time budget): " + "; ".join(
            f"{r['scheme']} {r['asked']['chunks_done']} of {r['asked']['chunks']} chunks" for r in partial)
            + ". The counts below are what ran; the chunks mix every kind evenly, so a partial run is a "
              "smaller sample of the same distribution."]
    if len(suite.SETS) > 1:
        lines += ["", "| set | items | valid | mutated | disagreements | ZV_CHECK failures | kernel µs / valid item "
                  "| commit | date |", "|---|---:|---:|---:|---:|---:|---:|---|---|"]
        for r in rows:
            p = r["provenance"]
            lines.append(f"| {r['scheme']} | {r['items']:,} | {r['valid_items']:,} | {r['mutated_items']:,} | "
                         f"{r['disagreements']} | {r['zv_check_failures']} | {_fmt(r['kernel_us_per_valid_item'])} | "
                         f"`{p['commit'][:12]}` | {p['date']} |")
    extra = getattr(suite, "COLUMNS", ())
    for r in rows:
        if len(suite.SETS) > 1:
            lines += ["", f"## {r['scheme']}"]
        lines += ["", f"**{r['items']:,} items, {r['disagreements']} disagreements** ({r['valid_items']:,} valid, "
                  f"{r['mutated_items']:,} mutated); ZV_CHECK failures: {r['zv_check_failures']}; reference verdicts "
                  f"other than the case intends: {r['reference_unexpected']}; ops-path differences: "
                  f"{r['ops_path_disagreements']}.  Host build {_fmt(r['kernel_us_per_valid_item'])} µs per valid "
                  f"item, {ref} {_fmt(r['reference_us_per_valid_item'])} µs.", "",
                  "| kind | items | accepted by " + ref + " | accepted by the kernel | disagreements | kernel µs / item"
                  + "".join(f" | {head}" for head, _ in extra) + " |",
                  "|---|---:|---:|---:|---:|---:" + "|---" * len(extra) + "|"]
        for name, k in r["kinds"].items():
            per = round(1e6 * k.get("kernel_s", 0.0) / k["items"], 1) if k.get("items") else None
            lines.append(f"| {name} | {_fmt(k.get('items'))} | {_fmt(k.get('accepted'))} | "
                         f"{_fmt(k.get('kernel_accepted'))} | {_fmt(k.get('disagreements', 0))} | {_fmt(per)}"
                         + "".join(f" | {cell(k)}" for _, cell in extra) + " |")
        for kind, examples in r["examples"].items():
            lines += ["", f"First disagreements of `{kind}`: " + "; ".join(json.dumps(e) for e in examples)]
    if hasattr(suite, "notes"):
        lines += ["", *suite.notes(rows)]
    return "\n".join(lines) + "\n"
