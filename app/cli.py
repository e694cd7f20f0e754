"""The ``zapverify`` command: serve | check-vectors | selftest."""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict


def _serve(args: argparse.Namespace) -> int:
    import os

    import uvicorn

    # Settings are read by each worker process from the environment, so pass them there.
    os.environ["ZAPVERIFY_HOST"], os.environ["ZAPVERIFY_PORT"] = args.host, str(args.port)
    print(f"zapverify: dashboard at http://{args.host}:{args.port}/  (API docs at /docs)", flush=True)
    uvicorn.run("app.main:create_app", factory=True, host=args.host, port=args.port, workers=args.workers,
                log_level=args.log_level)
    return 0


def _engine(backend: str):
    from app.engine.dispatch import Engine, EngineConfig

    engine = Engine(EngineConfig(backend=backend))
    engine.start()
    return engine


def _check_vectors(args: argparse.Namespace) -> int:
    from app.vectors import read_jsonl

    records = [ka for path in args.files for ka in read_jsonl(path)]
    if not records:
        print("no vectors in the given files", file=sys.stderr)
        return 2
    engine = _engine(args.backend)
    try:
        tally: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
        disagreements = []
        for lo in range(0, len(records), args.chunk):
            part = records[lo:lo + args.chunk]
            result = engine.verify_items([ka.item for ka in part])
            for ka, got in zip(part, result.verdicts.tolist()):
                row = tally[(ka.item.scheme, ka.source)]
                if got == ka.expected:
                    row[0] += 1
                else:
                    row[1] += 1
                    disagreements.append((ka, got))
        width = max(len(f"{s}  {src}") for s, src in tally)
        print(f"{'scheme  source':<{width}}  {'agree':>7}  {'disagree':>8}")
        for (scheme, source), (ok, bad) in sorted(tally.items()):
            print(f"{scheme + '  ' + source:<{width}}  {ok:>7}  {bad:>8}")
        for ka, got in disagreements[:50]:
            print(f"DISAGREE {ka.item.scheme} {ka.source} id={ka.id}: expected {ka.expected}, got {got}")
        total_bad = len(disagreements)
        print(f"backend={args.backend} vectors={len(records)} agree={len(records) - total_bad} disagree={total_bad}")
        return 1 if total_bad else 0
    finally:
        engine.close()


def _selftest(args: argparse.Namespace) -> int:
    engine = _engine(args.backend)
    try:
        status = engine.status()
        for scheme, route in status["schemes"].items():
            tests = " ".join(f"{b}={'pass' if ok else 'FAIL'}" for b, ok in route["selftest"].items())
            print(f"{scheme:<22} -> {route['backend']:<12} {tests}")
        print("ready" if status["ready"] else "NOT READY")
        return 0 if status["ready"] else 1
    finally:
        engine.close()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="zapverify", description="Batch signature verification service.")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("serve", help="run the HTTP service (uvicorn)")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--workers", type=int, default=1)
    s.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    s.set_defaults(func=_serve)

    backends = ["auto", "cpu", "kernel-host", "cuda"]
    c = sub.add_parser("check-vectors", help="run JSONL vector files through the engine")
    c.add_argument("files", nargs="+", help="JSONL vector files (see app/vectors.py)")
    c.add_argument("--backend", default="cpu", choices=backends)
    c.add_argument("--chunk", type=int, default=4096, help="items per engine call")
    c.set_defaults(func=_check_vectors)

    t = sub.add_parser("selftest", help="run the known-answer self-test of every backend")
    t.add_argument("--backend", default="auto", choices=backends)
    t.set_defaults(func=_selftest)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except Exception as exc:  # one clear line instead of a traceback for expected failures
        from app.errors import ZapVerifyError

        if isinstance(exc, ZapVerifyError):
            print(f"zapverify: {exc.code}: {exc.message}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
