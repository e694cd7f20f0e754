"""Mutation fuzzing of the ZAP decoders (docs/wire-format.md): every decode entry point, on
frames mutated from valid ones, must either decode or raise a :class:`app.core.errors.ZapVerifyError`
— never another exception (a crash, which the server would answer 500), never hang.

Seeds: a request frame of every scheme (1–3 items, random keys and signatures: the decoder
checks structure, not validity; contexts and secp256k1 options included), response frames
(with and without a batch id) and error frames.  Each case takes a seed and applies 1–4
mutations drawn from: bit flips, "interesting" bytes, a u32 field of the layout
(``size``, ``count``, ``pk_len``, ``sig_len``, a message offset) set to an edge value,
truncation, extension, a splice of another seed's header; then, half the time, ``size`` is
set to the new length so the decoder gets past the size check.

Entry points, each run on every case: :func:`zap.decode_request`, :func:`zap.decode_response`,
:func:`zap.decode` (server limits), and :class:`FrameReader` fed the case in random
chunks (then :func:`zap.decode_request` on what it assembled).  A decoded request's batch is
also validated (:meth:`Batch.validate`).

Writes ``bench/results/fuzz_zap.json`` and ``.md``: cases run, calls, outcomes by error
code, the rate, and every crash (none expected) with its case bytes.

    python bench/fuzz_zap.py [--cases 1000000] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import struct
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.core.errors import ZapVerifyError  # noqa: E402
from app.core.schemes import SCHEMES  # noqa: E402
from app.wire import zap  # noqa: E402
from app.wire.reader import FrameReader  # noqa: E402
from bench import provenance  # noqa: E402

U32_EDGES = (0, 1, 7, 8, 15, 16, 17, 31, 32, 255, 256, 0x7FFF_FFFF, 0x8000_0000, 0xFFFF_FFF8, 0xFFFF_FFFF)
BYTE_EDGES = (0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF)
#: Offsets of the u32 fields of a request: size (8), count (20), pk_len (24), sig_len (28).
FIELDS = (8, 20, 24, 28)


def seeds(rng: random.Random) -> list[bytes]:
    """Valid frames to mutate: requests of every scheme, responses, errors."""
    out: list[bytes] = []
    for scheme in SCHEMES.values():
        for n in (1, 2, 3):
            pks = [rng.randbytes(scheme.pk_len) for _ in range(n)]
            sigs = [rng.randbytes(scheme.sig_len) for _ in range(n)]
            prehashed = scheme.accepts_option("prehashed") and n == 2
            msgs = [rng.randbytes(32 if prehashed else rng.randrange(0, 40)) for _ in range(n)]
            ctx = rng.randbytes(rng.randrange(0, 12)) if scheme.has_context else b""
            out.append(bytes(zap.encode_items(scheme.id, pks, msgs, sigs, ctx=ctx, prehashed=prehashed,
                                              allow_high_s=scheme.accepts_option("allow_high_s") and n == 3,
                                              request_id=rng.getrandbits(32), want_batch_id=n == 1)))
    for n in (1, 5, 9):
        verdicts = [rng.random() < 0.5 for _ in range(n)]
        out.append(bytes(zap.encode_response(rng.getrandbits(32), verdicts, rng.randbytes(32))))
        out.append(bytes(zap.encode_response(rng.getrandbits(32), verdicts, rng.randbytes(32), rng.randbytes(16))))
    out.append(bytes(zap.encode_error(7, 0x0005, "BAD_SIZE: size field says 8 bytes")))
    out.append(bytes(zap.encode_error(0, 0x0105, "OVERLOADED: ünïcödé")))
    return out


def mutate(rng: random.Random, frame: bytes, others: list[bytes]) -> bytes:
    buf = bytearray(frame)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(7)
        if op == 0 and buf:  # bit flips
            for _ in range(rng.randint(1, 8)):
                i = rng.randrange(len(buf))
                buf[i] ^= 1 << rng.randrange(8)
        elif op == 1 and buf:  # interesting bytes, biased to the fixed part
            for _ in range(rng.randint(1, 4)):
                i = rng.randrange(min(len(buf), 64)) if rng.random() < 0.7 else rng.randrange(len(buf))
                buf[i] = rng.choice(BYTE_EDGES)
        elif op == 2:  # a u32 field of the layout, or a message offset, to an edge value
            offs = [o for o in FIELDS if o + 4 <= len(buf)]
            if len(buf) >= 36:
                offs.append(rng.randrange(32, len(buf) - 3) & ~3)
            if offs:
                value = rng.choice(U32_EDGES + (len(buf), len(buf) + 8, len(buf) - 8))
                struct.pack_into("<I", buf, rng.choice(offs), value & 0xFFFF_FFFF)
        elif op == 3:  # truncate
            del buf[rng.randrange(len(buf) + 1):]
        elif op == 4:  # extend
            buf += rng.randbytes(rng.choice((1, 7, 8, 16, rng.randrange(1, 200))))
        elif op == 5:  # another seed's header
            other = rng.choice(others)
            buf[:16] = other[:16]
        elif op == 6 and len(buf) > 8:  # delete or duplicate a span
            i, j = sorted(rng.randrange(len(buf)) for _ in range(2))
            buf[i:j] = b"" if rng.random() < 0.5 else bytes(buf[i:j]) * 2
    if rng.random() < 0.5 and len(buf) >= 16:
        struct.pack_into("<I", buf, 12, len(buf))  # size = the real length: past the size check
    return bytes(buf)


def chunked(rng: random.Random, data: bytes) -> zap.Request:
    """The FrameReader entry point: the case fed in random chunks, then decoded."""
    reader = FrameReader(zap.DEFAULT_LIMITS, expected=len(data) if rng.random() < 0.5 else None)
    i = 0
    while i < len(data):
        n = rng.choice((1, 3, 8, 16, 17, 64, 4096))
        reader.feed(data[i:i + n])
        i += n
    _, buf = reader.finish()
    return zap.decode_request(buf)


def run(cases: int, seed: int = 1, report_every: float = 30.0) -> dict:
    """Fuzz ``cases`` mutated frames through every entry point; the tally (see module doc)."""
    rng = random.Random(seed)
    pool = seeds(rng)
    outcomes: Counter[str] = Counter()
    crashes: list[dict] = []
    calls = 0
    t0 = last = time.perf_counter()
    entries = (("decode_request", lambda d: zap.decode_request(d)), ("decode_response", zap.decode_response),
               ("decode", zap.decode), ("frame_reader", lambda d: chunked(rng, d)))
    for case in range(cases):
        data = mutate(rng, rng.choice(pool), pool)
        for name, fn in entries:
            calls += 1
            try:
                got = fn(data)
                if isinstance(got, zap.Request):
                    got.batch.validate()
                outcomes[f"{name}:ok"] += 1
            except ZapVerifyError as exc:
                outcomes[f"{name}:{exc.code}"] += 1
            except Exception as exc:  # a crash: what this script exists to find
                outcomes[f"{name}:CRASH"] += 1
                if len(crashes) < 50:
                    crashes.append({"entry": name, "case": case, "error": f"{type(exc).__name__}: {exc}",
                                    "frame_hex": data[:512].hex()})
        now = time.perf_counter()
        if now - last > report_every:
            last = now
            print(f"{case + 1} cases, {(case + 1) / (now - t0):.0f}/s, crashes {len(crashes)}", flush=True)
    seconds = time.perf_counter() - t0
    return {"cases": cases, "calls": calls, "seed": seed, "seeds": len(pool), "seconds": round(seconds, 1),
            "cases_per_second": round(cases / seconds), "outcomes": dict(sorted(outcomes.items())),
            "crashes": crashes}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args()
    prov = provenance.collect()
    result = {"provenance": prov, "when": datetime.now(UTC).isoformat(timespec="seconds"), "host": platform.node(),
              "python": platform.python_version(), **run(args.cases, args.seed)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fuzz_zap.json").write_text(json.dumps(result, indent=2) + "\n")
    by_entry: dict[str, Counter[str]] = {}
    for key, n in result["outcomes"].items():
        entry, outcome = key.split(":", 1)
        by_entry.setdefault(entry, Counter())[outcome] = n
    lines = [
        "# ZAP decoder fuzzing (bench/fuzz_zap.py)", "", provenance.markdown_line(prov), "",
        f"{result['when']}, {result['host']}, Python {result['python']}. Written by `bench/fuzz_zap.py "
        f"--cases {args.cases} --seed {args.seed}`.", "",
        f"- {result['cases']:,} mutated frames from {result['seeds']} valid seeds, {result['calls']:,} decoder calls "
        f"in {result['seconds']:g} s ({result['cases_per_second']:,} frames/s on this shared 2-core machine).",
        f"- Crashes (an exception other than a ZapVerifyError): **{len(result['crashes'])}**.", "",
        "| entry point | decoded | most frequent errors |", "|---|---|---|",
    ]
    for entry, counts in by_entry.items():
        errors = ", ".join(f"{k} {v:,}" for k, v in counts.most_common() if k != "ok")
        lines.append(f"| `{entry}` | {counts.get('ok', 0):,} | {errors[:300]} |")
    for c in result["crashes"][:10]:
        lines += ["", f"- CRASH in `{c['entry']}` (case {c['case']}): {c['error']}", f"  `{c['frame_hex'][:160]}`"]
    (args.out / "fuzz_zap.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 1 if result["crashes"] else 0


if __name__ == "__main__":
    sys.exit(main())
