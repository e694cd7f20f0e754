"""Settings, read from the environment (prefix ``ZAPVERIFY_``) or a ``.env`` file.

Names kept from the seed design (``ZAP_UMA_POOL_BYTES``, ``ZAP_TRANSPORT``) are accepted as
aliases of their ``ZAPVERIFY_`` names.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AliasChoices, Field, StringConstraints
from pydantic_settings import BaseSettings, SettingsConfigDict

#: A fault mode as ``ZAPVERIFY_FAULTS`` takes it (app/engine/verify/faults.py checks the rest).
FAULT_PATTERN = r"^(selftest|(raise|garbage|invert)(@after=\d+)?)$"


def _alias(name: str, *seed: str) -> AliasChoices:
    return AliasChoices(f"ZAPVERIFY_{name.upper()}", *seed)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ZAPVERIFY_", env_file=".env", extra="ignore",
                                      populate_by_name=True)

    # --- server
    host: str = "127.0.0.1"
    port: int = 8000
    workers: int = 1
    log_level: Literal["critical", "error", "warning", "info", "debug"] = "info"
    log_format: Literal["text", "json"] = Field("text", description=(
        "text: one line per record; json: one JSON object per line (time, level, logger, message, "
        "request_id; access lines add method, path, route, status, duration_ms) (app/logs.py)"))
    instance: str = Field(default_factory=lambda: f"{os.uname().nodename}-{os.getpid()}",
                          description="name of this replica, sent in the X-Zapverify-Instance header")
    data_dir: Path = Path("data")
    listen_when_ready: bool = Field(
        False, description="accept connections only once the engine's self-test passed (uvicorn binds after the "
                           "start-up), so a load balancer without active health checks keeps a starting replica "
                           "out of rotation; /healthz then answers only from that point on")

    # --- engine
    backend: Literal["auto", "cpu", "kernel-host", "cuda"] = Field(
        "auto", description="force one backend for every scheme; auto picks per scheme")
    cpu_workers: int = Field(0, ge=0, description="CPU verify workers; 0 = every core")
    cpu_chunk: int = Field(0, ge=0, description=(
        "items per full CPU work unit (a batch's last round is cut smaller; on processes with shared memory, "
        "the smallest range a worker claims); 0 = sized per scheme from the measured cost"))
    bls_batch: bool = Field(True, description=(
        "verify BLS12-381 batches on the CPU by random linear combination (same verdicts, "
        "faster from a few items up, bench/results/bls_batch.md); false: one CoreVerify per item"))
    kernel_variant: str = Field("auto", pattern=r"^[a-z0-9_-]+$", description=(
        "for schemes the GPU can verify with more than one kernel (ML-DSA: thread, one thread per "
        "signature; block, one 128-thread block per signature): auto measures each at start and keeps "
        "the fastest per parameter set; a variant name forces it (docs/kernels.md, ML-DSA)"))
    crossover: dict[str, int] = Field(default_factory=dict, description=(
        "fixed smallest batch per scheme id that goes to the GPU, as JSON ({\"ed25519\": 512}), and under "
        "\"bls12-381-aggregates\" the smallest BLS aggregate request, in pairings (keys + 1 per item); "
        "measured at start where absent"))
    hybrid: bool = Field(False, description="split large batches between the GPU and the CPU by their rates")
    hybrid_min: int = Field(4096, ge=2, description="smallest batch that hybrid mode splits")
    faults: dict[str, Annotated[str, StringConstraints(pattern=FAULT_PATTERN)]] = Field(
        default_factory=dict, description=(
            "fault injection for tests and drills, as JSON {\"<backend>:<scheme>\": \"<mode>[@after=N]\"}, modes "
            "selftest, raise, garbage (wrong-length verdicts), invert (every verdict inverted; only a shadow "
            "check sees it); @after=N: the first N batches after start are right (app/engine/verify/faults.py); "
            "empty in production"))
    # --- shadow verification (docs/operations.md, "Shadow verification"); app/engine/verify/shadow.py
    shadow_rate: float = Field(0.001, ge=0, le=1, allow_inf_nan=False, description=(
        "fraction of the items of each batch an accelerated backend verified that the CPU reference "
        "verifies again"))
    shadow_min_per_batch: int = Field(1, ge=0, description="items of each accelerated batch checked at least")
    shadow_warmup_items: int = Field(10000, ge=0, description=(
        "per backend and scheme, every item verified true among the first this many is checked"))
    shadow_mode: Literal["async", "sync"] = Field("async", description=(
        "async: checked off the request's path (a mismatch degrades the scheme and is recorded on the "
        "receipt); sync: checked before answering, a batch with a mismatch re-verified on the CPU"))
    shadow_queue_items: int = Field(4096, ge=1, description=(
        "most sampled items waiting for the async checker; more are dropped (counted), never waited for"))
    cuda_device: int = Field(0, ge=0, description="the GPU ordinal the CUDA backend uses")
    cuda_transfer: Literal["auto", "zero-copy", "copy"] = Field(
        "copy", description=("how kernels read batch columns: copy (one transfer per batch into device "
                             "memory), or in place from pinned memory (zero-copy; auto: in place when pinned)"))
    cuda_chunk_items: int = Field(0, ge=0, description=(
        "items per pipelined GPU chunk; 0 = cuda_waves full waves of the scheme's kernel"))
    cuda_waves: int = Field(2, ge=1, le=64, description="full GPU waves per pipelined chunk")
    cuda_streams: int = Field(3, ge=1, le=16, description="CUDA streams a large batch's chunks cycle through")

    # --- host and UMA pool (docs/architecture.md, "Memory" and "Host classes")
    transport: Literal["auto", "gpudirect", "dpdk", "uma", "heap"] = Field(
        "auto", validation_alias=_alias("transport", "ZAP_TRANSPORT"),
        description="ingest transport; auto tries gpudirect, dpdk, uma, then heap")
    uma_pool_bytes: int = Field(
        4 * 1024**3, ge=4096, validation_alias=_alias("uma_pool_bytes", "ZAP_UMA_POOL_BYTES"),
        description="UMA pool size in bytes, clamped to what the host can page-lock")
    pool_source: Literal["auto", "pinned", "managed", "heap"] = Field(
        "auto", validation_alias=_alias("pool_source"),
        description="pool memory; auto follows the allocator Pick chose")
    pool_wait_seconds: float = Field(1.0, ge=0, validation_alias=_alias("pool_wait_seconds"),
                                     description="how long a buffer request waits for room, seconds")
    pool_debug: bool = Field(False, validation_alias=_alias("pool_debug"),
                             description="poison released pool memory and raise on buffer misuse")

    # --- request limits (the API answers 413 above them)
    max_items: int = Field(65536, ge=1)
    max_body_bytes: int = Field(64 * 1024 * 1024, ge=1024)
    max_message_bytes: int = Field(1024 * 1024, ge=1)
    bls_aggregate_max_keys: int = Field(2048, ge=1, description=(
        "POST /v1/verify/bls-aggregate: most public keys in one item (an Ethereum committee has at most 2048)"))
    bls_aggregate_max_pairings: int = Field(16384, ge=2, description=(
        "POST /v1/verify/bls-aggregate: most work in one request, counted as the sum over items of "
        "public keys + 1 (the pairings an aggregate item needs at most)"))

    # --- load shedding and slow clients (docs/operations.md, "Load shedding"); app/api/admission.py
    admission_max_items: int = Field(262144, ge=1, description=(
        "items in flight per process (verify requests between admission and answer) beyond which a new "
        "request is answered 503 OVERLOADED with Retry-After; one request alone is always admitted"))
    admission_max_bytes: int = Field(256 * 1024 * 1024, ge=1024, description=(
        "request body bytes in flight per process, counted as they arrive; while they are at this bound a "
        "new request is refused the same way, before its body is read, and a body that would pass it is cut"))
    admission_default_deadline_seconds: float = Field(30.0, gt=0, allow_inf_nan=False, description=(
        "the deadline of a verify request that sends no X-Zapverify-Deadline header: it waits in the fair "
        "queue while it is estimated to finish by then, and is answered 503 OVERLOADED when it cannot"))
    admission_max_deadline_seconds: float = Field(300.0, gt=0, allow_inf_nan=False, description=(
        "the longest X-Zapverify-Deadline a client may ask for (longer ones are cut to it)"))
    admission_pipeline_seconds: float = Field(0.5, gt=0, allow_inf_nan=False, description=(
        "estimated seconds of verify work in flight up to which queued requests start; beyond it only a "
        "client with nothing in flight starts one (fairness), the others wait their turn"))
    admission_max_queued: int = Field(1024, ge=1, description=(
        "verify requests that may wait in the admission queue per process; one more is refused"))
    admission_max_share: float = Field(0.5, gt=0, le=1, description=(
        "most of admission_max_bytes one request may hold while others are in flight or being refused"))
    admission_retry_after_seconds: float = Field(1.0, gt=0, description=(
        "the least Retry-After of an OVERLOADED answer (it is computed from the queue)"))
    body_read_timeout_seconds: float = Field(30.0, gt=0, description=(
        "a request body that sends no byte for this long is cut with 408 BODY_TIMEOUT"))
    body_min_bytes_per_second: float = Field(65536.0, ge=0, description=(
        "after the first body_read_timeout_seconds a body must average at least this rate; 0 = no minimum"))
    zap_reserve_step_bytes: int = Field(1024 * 1024, ge=4096, description=(
        "pool memory a ZAP body over HTTP gets before its bytes arrive; it grows (doubling) as they do"))
    # --- HTTP request heads on a direct bind (app/api/http_limits.py; `zapverify serve`)
    max_header_bytes: int = Field(64 * 1024, ge=1024, description=(
        "most bytes of an HTTP request head (request line and headers); beyond, 431 and the connection closed"))
    max_header_count: int = Field(100, ge=8, description="most header fields in one HTTP request; beyond, 431")
    header_timeout_seconds: float = Field(10.0, gt=0, description=(
        "an HTTP request head (or the first byte of one on a new connection) not complete within this "
        "many seconds is cut: 408 if part of it arrived, else the connection is closed"))
    shutdown_timeout_seconds: int = Field(10, ge=0, description=(
        "on SIGTERM, how long requests in flight may finish before their connections are cut "
        "(uvicorn's timeout_graceful_shutdown)"))

    # --- ZAP frames (docs/wire-format.md) and the WebSocket stream
    zap_max_frame_bytes: int = Field(256 * 1024 * 1024, ge=64,
                                     description="largest ZAP frame accepted (HTTP body or WebSocket message)")
    zap_max_items: int = Field(1 << 20, ge=1, description="largest item count of one ZAP frame")
    ws_max_in_flight: int = Field(32, ge=1, description="requests in flight per WebSocket connection; at the "
                                                         "bound the server stops reading (backpressure)")

    # --- NIC ingest (app/engine/ingest): ZAP frames over raw TCP, UDP and QUIC; docs/wire-format.md section 8
    ingest_host: str = Field("127.0.0.1", description="bind address of the ingest listeners (0.0.0.0 or :: for all)")
    ingest_tcp_port: int = Field(0, ge=0, le=65535, description="ZAP frames over TCP; 0 = off")
    ingest_udp_port: int = Field(0, ge=0, le=65535, description="ZAP frames over UDP, one per datagram; 0 = off")
    ingest_quic_port: int = Field(0, ge=0, le=65535, description="ZAP frames over QUIC (ALPN zap/1), one per "
                                                               "stream; 0 = off")
    ingest_quic_cert: Path | None = Field(None, description="PEM certificate of the QUIC listener; unset = "
                                                           "self-signed at start")
    ingest_quic_key: Path | None = Field(None, description="PEM private key of ingest_quic_cert")
    ingest_ring_slots: int = Field(1024, ge=1, description="frames the ring between receive threads and "
                                                          "verify workers holds; full = backpressure")
    ingest_coalesce_items: int = Field(0, ge=0, description=(
        "largest batch small frames of one scheme are joined into, items; 0 = what the GPU backend "
        "prefers (its pipelined chunk, at least one full wave), else 1024"))
    ingest_coalesce_wait_seconds: float = Field(0.0005, ge=0, le=1, description=(
        "how long a verify worker waits for more frames to join a batch, seconds"))
    ingest_max_in_flight: int = Field(64, ge=1, description="TCP frames per connection between read and reply "
                                                           "written; at the bound the connection is not read")
    ingest_workers: int = Field(1, ge=1, description="ingest verify worker threads")
    ingest_shutdown_seconds: float = Field(10.0, ge=0, description="how long shutdown waits for the replies of "
                                                                  "frames already taken in")
    # With API keys, TCP and QUIC ingest require a keyed handshake (docs/wire-format.md section 8); a
    # half-received frame has the HTTP body's deadline and rate (body_read_timeout_seconds,
    # body_min_bytes_per_second), the handshake the request head's (header_timeout_seconds).
    ingest_udp_unauthenticated: bool = Field(False, description=(
        "with API keys configured, let UDP ingest run anyway, unauthenticated (a datagram carries no key): "
        "for a trusted network only; false = the server refuses to start with UDP on and keys configured"))

    # --- receipts (docs/architecture.md, "Merkle leaf and receipts"; docs/operations.md)
    database_url: str | None = Field(
        None, description="sqlite:///relative/path, sqlite:////absolute/path or postgresql://user:pw@host/db; "
                          "unset = sqlite under data_dir")
    receipts: bool = Field(True, description="write a receipt per batch before answering (503 if it fails)")
    retention_max_age_seconds: float = Field(30 * 86400, ge=0, description="prune receipts older than this; 0 = keep")
    retention_max_rows: int = Field(0, ge=0, description="keep at most this many receipts; 0 = no limit")
    prune_interval_seconds: float = Field(60.0, gt=0, description="time between retention runs")
    database_pool_size: int = Field(8, ge=1, description="PostgreSQL connections per process")
    receipt_proof_cache_bytes: int = Field(64 * 1024 * 1024, ge=0, description=(
        "memory per process for the Merkle tree levels that make an inclusion proof O(log n) (about 32 bytes "
        "per item of a receipt kept); receipts of 65,536 items or more get theirs when written; 0 = none kept"))
    database_wait_seconds: float = Field(
        0.0, ge=0, description="at start, keep retrying to open the receipt store for this long (a database "
                               "container that is still starting)")

    # --- access (docs/operations.md, "Access control"); app/api/security.py
    api_keys: list[str] = Field(default_factory=list, description=(
        "API keys as '<sha256 hex of the key>:<scope>[+<scope>...][:<name>]', scopes verify, receipts, admin; "
        "empty (with no api_keys_file) = no authentication"))
    api_keys_file: Path | None = Field(None, description="a file of api_keys entries, one a line (# comments); "
                                                         "a mounted secret")
    rate_limit_per_second: float = Field(0.0, ge=0, description="requests per second per API key (token bucket); "
                                                                "0 = no limit")
    rate_limit_burst: int = Field(20, ge=1, description="requests a key may make at once before the rate applies")
    allowed_hosts: list[str] = Field(default_factory=list, description=(
        "Host header values accepted (TrustedHost: blocks DNS rebinding); empty = the loopback names when "
        "bound to loopback, else any"))
    allowed_origins: list[str] = Field(default_factory=list, description=(
        "Origin values a browser WebSocket may come from (scheme://host[:port]); a same-origin page and "
        "clients that send no Origin are always accepted"))

    @property
    def trusted_hosts(self) -> list[str]:
        """``allowed_hosts``, or its default: loopback names on a loopback bind, else any host."""
        if self.allowed_hosts:
            return self.allowed_hosts
        if self.host in ("127.0.0.1", "localhost", "::1"):
            return ["127.0.0.1", "localhost", "::1", "[::1]"]
        return ["*"]

    @property
    def receipts_database_url(self) -> str:
        """``database_url``, or the embedded default ``sqlite:///<data_dir>/receipts.sqlite3``."""
        return self.database_url or f"sqlite:///{self.data_dir / 'receipts.sqlite3'}"


@lru_cache
def get_settings() -> Settings:
    return Settings()
