"""The ``zapverify`` command: serve | probe | convert-vectors | check-vectors | selftest | bench."""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path


def _serve(args: argparse.Namespace) -> int:
    import logging
    import logging.config
    import os
    import tempfile

    import uvicorn

    from app.config import Settings
    from app.logs import log_config

    # Settings are read by each worker process from the environment, so pass them there.
    os.environ["ZAPVERIFY_HOST"], os.environ["ZAPVERIFY_PORT"] = args.host, str(args.port)
    settings = Settings()
    # The log's format from the first line on: what this process says before uvicorn starts
    # is a log record too, so ZAPVERIFY_LOG_FORMAT=json gives a shipper JSON only.
    logging.config.dictConfig(log_config(settings.log_format, args.log_level))
    log = logging.getLogger("zapverify.cli")
    if settings.receipts:  # a missing optional dependency: one line, before anything starts
        from app.engine.receipts.open import missing_dependency

        missing = missing_dependency(settings.receipts_database_url)
        if missing:
            log.error("zapverify serve: %s", missing)
            return 2
    if args.workers is None:
        args.workers = max(1, settings.workers)
    # Several workers: Prometheus multiprocess mode, whose directory must be set before any
    # worker imports prometheus_client and must start empty (app/api/metrics.py).
    if args.workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="zapverify-metrics-")
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # Not app.api.metrics: this process must hold no metric value file (app/api/workers.py).
        from app.api import workers

        workers.clear(os.environ["PROMETHEUS_MULTIPROC_DIR"])
    busy = _port_in_use(args.host, args.port)
    if busy:
        log.error("zapverify serve: cannot listen on %s:%d: %s (another server there? choose another with --port)",
                  args.host, args.port, busy)
        return 2
    log.info("dashboard at http://%s:%d/  (API docs at /docs)", args.host, args.port)
    # A WebSocket message is a whole ZAP frame or JSON request: let it be as large as those limits.
    # On SIGTERM, requests in flight get shutdown_timeout_seconds, then their connections are cut
    # (a stalled upload must not hold the process; docs/operations.md, "Load shedding").
    # HTTP/1.1 through h11 with bounded request heads (size, header count, read deadline;
    # app/api/http_limits.py): httptools, uvicorn's pick when installed, bounds none of them.
    from app.api.http_limits import PROTOCOL
    from app.api.ws_limits import PROTOCOL as WS_PROTOCOL

    uvicorn.run("app.main:create_app", factory=True, host=args.host, port=args.port, workers=args.workers,
                log_level=args.log_level, log_config=log_config(settings.log_format, args.log_level),
                ws_max_size=max(settings.zap_max_frame_bytes, settings.max_body_bytes),
                # Text messages bounded and charged as they arrive (app/api/ws_limits.py); no
                # compression, so a frame's length is what its payload takes in memory.
                ws=WS_PROTOCOL, ws_per_message_deflate=False,
                timeout_graceful_shutdown=settings.shutdown_timeout_seconds,
                http=PROTOCOL, h11_max_incomplete_event_size=settings.max_header_bytes)
    return 0


def _port_in_use(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be listened on (a bind as uvicorn's, then closed), or None.
    Asked before anything is printed or started: uvicorn would start the app first and only
    then fail to bind, after its start-up lines."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        return str(exc)
    family, _, _, _, addr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(addr)
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


def _engine(backend: str):
    from app.engine.backends.factory import accelerated_backends
    from app.engine.verify.engine import Engine, EngineConfig

    engine = Engine(EngineConfig(backend=backend), backends=accelerated_backends(backend))
    engine.start()
    return engine


def _check_vectors(args: argparse.Namespace) -> int:
    from collections.abc import Sequence

    from app.core.batch import AGGREGATE_LABELS
    from app.engine.reference.kat import KnownAnswer
    from app.vectors import AggregateAnswer, read_jsonl

    records = [ka for path in args.files for ka in read_jsonl(path)]
    if not records:
        print("no vectors in the given files", file=sys.stderr)
        return 2
    engine = _engine(args.backend)
    try:
        tally: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
        disagreements: list[tuple[KnownAnswer | AggregateAnswer, bool]] = []

        def name(ka: KnownAnswer | AggregateAnswer) -> str:
            if isinstance(ka, AggregateAnswer):
                return AGGREGATE_LABELS.get(ka.item.mode, ka.item.mode)
            return ka.item.scheme

        def count(part: Sequence[KnownAnswer | AggregateAnswer], verdicts: list[bool]) -> None:
            for ka, got in zip(part, verdicts):
                row = tally[(name(ka), ka.source)]
                if got == ka.expected:
                    row[0] += 1
                else:
                    row[1] += 1
                    disagreements.append((ka, got))

        plain = [ka for ka in records if isinstance(ka, KnownAnswer)]
        aggregate = [ka for ka in records if isinstance(ka, AggregateAnswer)]
        for lo in range(0, len(plain), args.chunk):
            part = plain[lo:lo + args.chunk]
            count(part, engine.run([ka.item for ka in part]).verdicts.tolist())
        for lo in range(0, len(aggregate), args.chunk):
            agg_part = aggregate[lo:lo + args.chunk]
            count(agg_part, engine.run([ka.item for ka in agg_part]).verdicts.tolist())
        width = max(len(f"{s}  {src}") for s, src in tally)
        print(f"{'scheme  source':<{width}}  {'agree':>7}  {'disagree':>8}")
        for (scheme, source), (ok, bad) in sorted(tally.items()):
            print(f"{scheme + '  ' + source:<{width}}  {ok:>7}  {bad:>8}")
        for ka, got in disagreements[:50]:
            print(f"DISAGREE {name(ka)} {ka.source} id={ka.id}: expected {ka.expected}, got {got}")
        total_bad = len(disagreements)
        print(f"backend={args.backend} vectors={len(records)} agree={len(records) - total_bad} disagree={total_bad}")
        return 1 if total_bad else 0
    finally:
        engine.close()


def _convert_vectors(args: argparse.Namespace) -> int:
    """Convert the external vectors (and optionally freshly signed ones) to JSONL files.  The
    external ones are not in the repository: without their folder, ``--generated`` alone
    writes the signed ones (exit 0) and says so; with neither, exit 2 saying what is needed."""
    import itertools

    from app.vectors import convert_all, generated, generated_aggregate, write_jsonl

    external = args.root.is_dir()
    if not external:
        why = (f"no external vectors at {args.root}: they are not in the repository (a folder of Wycheproof's "
               "testvectors_v1, Ethereum's bls12-381-tests, ACVP SLH-DSA sigVer and BIP-340's test-vectors.csv, as "
               "published; give it with --root)")
        if not args.generated:
            print(f"zapverify: {why}; --generated N writes freshly signed vectors without them", file=sys.stderr)
            return 2
        print(f"zapverify: {why}; writing the generated vectors only", file=sys.stderr)
    args.out.mkdir(parents=True, exist_ok=True)
    if external:
        n = write_jsonl(args.out / "external.jsonl", convert_all(args.root))
        print(f"{n} external vectors -> {args.out / 'external.jsonl'}")
    if args.generated:
        m = write_jsonl(args.out / "generated.jsonl", itertools.chain(generated(args.generated, args.generated),
                                                                       generated_aggregate(args.generated)))
        print(f"{m} generated vectors -> {args.out / 'generated.jsonl'}")
    return 0


def _build_kernels(args: argparse.Namespace) -> int:
    """Compile the service's kernels ahead of time: nvcc fatbins, or NVRTC cubins and PTX
    where there is no nvcc (the CUDA image does the same at build time)."""
    from app.engine.device import nvrtc, prebuilt

    compiler = prebuilt.nvcc() if args.compiler in ("auto", "nvcc") else None
    if compiler is None and args.compiler == "nvcc":
        print("zapverify: no nvcc on the PATH (set NVCC)", file=sys.stderr)
        return 2
    if compiler is None and not nvrtc.available():
        print("zapverify: neither nvcc nor NVRTC (libnvrtc) found: kernels will be compiled by CuPy's NVRTC "
              "at first use", file=sys.stderr)
        return 2
    archs = tuple(a.strip() for a in args.arch.split(",") if a.strip())
    out = args.out or prebuilt.shipped_dir() or prebuilt.cache_dir()
    prebuilt.build_all(out, compiler=compiler, archs=archs, jobs=args.jobs)
    print(f"kernels in {out}")
    return 0


def _selftest(args: argparse.Namespace) -> int:
    if args.url:  # a running server's self-test, as GET /v1/status reports it
        from zapverify import Client

        with Client(args.url, api_key=_api_key(args), timeout=30) as zv:
            return _print_selftest(zv.status()["engine"])
    engine = _engine(args.backend)
    try:
        from app.engine.verify.status import engine_status

        return _print_selftest(engine_status(engine))
    finally:
        engine.close()


def _print_selftest(status: dict) -> int:
    """One line per scheme (backend, each backend's known-answer test), then ready or not: 0 or 1."""
    for scheme, route in status["schemes"].items():
        tests = " ".join(f"{b}={'pass' if ok else 'FAIL'}" for b, ok in route["selftest"].items())
        print(f"{scheme:<22} -> {route['backend']:<12} {tests}")
    print("ready" if status["ready"] else "NOT READY")
    return 0 if status["ready"] else 1


def _api_key(args: argparse.Namespace) -> str | None:
    """The API key of a command that talks to a server: ``--api-key``, else ``$ZAPVERIFY_API_KEY``."""
    import os

    from zapverify.http import API_KEY_ENV

    return args.api_key or os.environ.get(API_KEY_ENV) or None


def _add_api_key(parser: argparse.ArgumentParser, scope: str, more: str = "") -> None:
    """The one ``--api-key`` option of every command that talks to a server."""
    parser.add_argument("--api-key", default=None, metavar="KEY",
                        help=f"an API key with the {scope} scope, for a server with keys configured: sent as "
                             f"Authorization: Bearer{more}; default $ZAPVERIFY_API_KEY (prefer it: a command "
                             "line is visible to other local users)")


def _probe(args: argparse.Namespace) -> int:
    """Print the host probe, the transport pick and the pool the settings would get."""
    import json

    from app.config import get_settings
    from app.engine.host.pick import pick, render_report, report_dict
    from app.engine.host.probe import probe_host
    from app.engine.memory.plan import plan_pool

    settings = get_settings()
    probe = probe_host(args.root, system=args.system, machine=args.machine)
    choice = pick(probe, settings.transport)
    source = choice.pool_source if settings.pool_source == "auto" else settings.pool_source
    free = [g.free_bytes for g in probe.gpus if g.free_bytes is not None]
    plan = plan_pool(settings.uma_pool_bytes, source, device_free=free[0] if free else None)
    if args.json:
        print(json.dumps(report_dict(probe, choice, plan), indent=2))
    else:
        print(render_report(probe, choice, plan))
    return 0


def _bench(args: argparse.Namespace) -> int:
    import asyncio
    import json
    from pathlib import Path

    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from zapverify import loadgen

    cfg = loadgen.BenchConfig(url=args.url, scheme=args.scheme, batch=args.batch, duration=args.duration,
                              concurrency=args.concurrency, transport=args.transport, unique=args.unique,
                              port=args.port, host=args.host,
                              api_key=_api_key(args), deadline=args.deadline)
    console = Console(stderr=True)
    with console.status(f"signing {min(cfg.batch, cfg.unique)} {cfg.scheme} items"):
        items = loadgen.make_items(cfg.scheme, cfg.batch, cfg.unique)
    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), TimeElapsedColumn(),
                        TextColumn("{task.fields[rate]}"), console=console, disable=args.no_progress)
    task = progress.add_task(f"{cfg.transport} {cfg.scheme} x{cfg.batch}", total=cfg.duration, rate="")

    def tick(elapsed: float, report: loadgen.BenchReport) -> None:
        rate = report.items / elapsed if elapsed > 0 else 0.0
        progress.update(task, completed=min(elapsed, cfg.duration),
                        rate=f"{rate:,.0f} verifies/s  {report.requests} frames  {report.errors} errors")

    with progress:
        report = asyncio.run(loadgen.run(cfg, items, on_tick=tick))
    print(loadgen.format_report(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report.to_dict(), indent=2) + "\n")
    return 0 if report.ok else 1


def build_parser() -> argparse.ArgumentParser:
    from app.build import describe
    from app.engine.device.prebuilt import ARCHS  # standard library only: cheap for every command

    p = argparse.ArgumentParser(prog="zapverify", description="Batch signature verification service.")
    p.add_argument("--version", action="version", version=describe(), help="print the version and commit, then exit")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("serve", help="run the HTTP service (uvicorn)")
    s.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default %(default)s, loopback only; 0.0.0.0 for every interface: "
                        "then set API keys, docs/operations.md)")
    s.add_argument("--port", type=int, default=8000, help="TCP port to listen on (default %(default)s)")
    s.add_argument("--workers", type=int, default=None,
                   help="uvicorn worker processes (default: $ZAPVERIFY_WORKERS, else 1)")
    s.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"],
                   help="the least severe log lines written (default %(default)s; format: $ZAPVERIFY_LOG_FORMAT)")
    s.set_defaults(func=_serve)

    pr = sub.add_parser("probe", help="show the host class, the transport and allocator picked, and the pool")
    pr.add_argument("--json", action="store_true", help="print JSON instead of text")
    pr.add_argument("--root", default="/", help="directory read as / (a captured or fake host tree)")
    pr.add_argument("--system", default=None, help="OS name to assume (Linux, Darwin), default this one")
    pr.add_argument("--machine", default=None, help="machine to assume (x86_64, aarch64, arm64), default this one")
    pr.set_defaults(func=_probe)

    backends = ["auto", "cpu", "kernel-host", "cuda"]
    c = sub.add_parser("check-vectors", help="run JSONL vector files through the engine")
    c.add_argument("files", nargs="+", help="JSONL vector files (see app/vectors.py)")
    c.add_argument("--backend", default="cpu", choices=backends,
                   help="the backend to verify on (default %(default)s; auto: the fastest this host has)")
    c.add_argument("--chunk", type=int, default=4096, help="items per engine call")
    c.set_defaults(func=_check_vectors)

    from app.vectors import DEFAULT_ROOT

    cv = sub.add_parser("convert-vectors", help="convert the external vectors (../shared/vectors, not in the "
                                                "repository) and/or freshly signed ones to JSONL for check-vectors")
    cv.add_argument("out", type=Path, help="output folder (temporary or git-ignored: never commit external vectors)")
    cv.add_argument("--root", type=Path, default=DEFAULT_ROOT,
                    help="the external vector folder, laid out as published upstream (default %(default)s); "
                         "without it only --generated vectors are written")
    cv.add_argument("--generated", type=int, default=0, metavar="N",
                    help="also write N valid and N mutated items per scheme, N BLS aggregate signer sets")
    cv.set_defaults(func=_convert_vectors)

    bk = sub.add_parser("build-kernels", help="compile the GPU kernels ahead of time (nvcc fatbins, else NVRTC "
                                              "cubins and PTX)")
    bk.add_argument("--out", type=Path, default=None,
                    help="folder (default $ZAPVERIFY_KERNEL_PREBUILT, else the kernel cache)")
    bk.add_argument("--arch", default=",".join(ARCHS), help="SM versions (default %(default)s)")
    bk.add_argument("--compiler", default="auto", choices=["auto", "nvcc", "nvrtc"],
                    help="auto: nvcc where it is on the PATH, else NVRTC (default %(default)s)")
    bk.add_argument("--jobs", type=int, default=0, help="compiles at once (default: one per core)")
    bk.set_defaults(func=_build_kernels)

    t = sub.add_parser("selftest", help="run the known-answer self-test of every backend (or show a running "
                                        "server's, with --url)")
    t.add_argument("--url", default=None,
                   help="a running server: print its self-test results (GET /v1/status) instead of running them here")
    _add_api_key(t, "admin", " with --url")
    t.add_argument("--backend", default="auto", choices=backends,
                   help="the backend whose self-test to run (default %(default)s: every one this host has)")
    t.set_defaults(func=_selftest)

    from app.core.schemes import SCHEMES

    b = sub.add_parser("bench", help="load a running server with real signed items; print throughput and latency")
    b.add_argument("--url", default="http://127.0.0.1:8000", help="the server (default %(default)s)")
    b.add_argument("--scheme", default="ed25519", choices=list(SCHEMES), metavar="SCHEME",
                   help="scheme id, as GET /v1/schemes lists them (default %(default)s)")
    b.add_argument("--batch", type=_positive, default=1024, help="items per request (default %(default)s)")
    b.add_argument("--duration", type=float, default=10.0, help="seconds of load (default %(default)s)")
    b.add_argument("--concurrency", type=_positive, default=4, help="requests in flight (default %(default)s)")
    b.add_argument("--transport", default="zap", choices=["json", "zap", "ws", "tcp", "udp", "quic"],
                   help="json: POST /v1/verify; zap: POST /v1/verify/zap; ws: ZAP frames pipelined on "
                        "/v1/ws/verify; tcp, udp, quic: ZAP frames pipelined to the server's ingest port "
                        "(default %(default)s)")
    b.add_argument("--port", type=int, default=None,
                   help="tcp/udp/quic: the ingest port (default: the one GET /v1/status reports)")
    b.add_argument("--host", default=None, help="tcp/udp/quic: the ingest host (default: the --url host)")
    _add_api_key(b, "verify", " over HTTP and the WebSocket, in the keyed handshake over tcp/quic (UDP takes "
                              "none); GET /v1/status, asked for the ingest port, needs the admin scope")
    b.add_argument("--unique", type=_positive, default=64,
                   help="distinct signed items, repeated to fill a batch (default %(default)s)")
    b.add_argument("--deadline", type=float, default=None, metavar="SECONDS",
                   help="HTTP: each request's deadline, sent as X-Zapverify-Deadline (default: the server's)")
    b.add_argument("--json", metavar="PATH", help="also write the numbers to PATH as JSON")
    b.add_argument("--no-progress", action="store_true", help="no live progress bar")
    b.set_defaults(func=_bench)
    return p


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except Exception as exc:  # one clear line instead of a traceback for expected failures
        from pydantic import ValidationError
        from pydantic_settings import SettingsError

        from app.core.errors import ZapVerifyError

        if isinstance(exc, ValidationError) and exc.title == "Settings":  # a setting out of range
            from app.config import Settings

            prefix = Settings.model_config.get("env_prefix", "")
            for e in exc.errors():
                name = (prefix + str(e["loc"][0])).upper()
                print(f"zapverify: invalid setting {name}={e.get('input')!r}: {e['msg']}", file=sys.stderr)
            return 2
        if isinstance(exc, SettingsError):  # a setting that does not parse (JSON of a list or dict)
            print(f"zapverify: invalid setting: {exc}", file=sys.stderr)
            return 2
        if isinstance(exc, ZapVerifyError):
            hint = ""
            if exc.code in ("UNAUTHORIZED", "FORBIDDEN") and "api_key" in args:
                hint = (" (this server has API keys: pass --api-key or set ZAPVERIFY_API_KEY)"
                        if exc.code == "UNAUTHORIZED" else " (the key given lacks the scope this command needs)")
            print(f"zapverify: {exc.code}: {exc.message}{hint}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
