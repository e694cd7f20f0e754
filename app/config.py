"""Settings, read from the environment (prefix ``ZAPVERIFY_``) or a ``.env`` file.

Names kept from the seed design (``ZAP_UMA_POOL_BYTES``, ``ZAP_TRANSPORT``) are accepted as
aliases of their ``ZAPVERIFY_`` names.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict


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
    instance: str = Field(default_factory=lambda: f"{os.uname().nodename}-{os.getpid()}",
                          description="name of this replica, sent in the X-Zapverify-Instance header")
    data_dir: Path = Path("data")

    # --- engine
    backend: Literal["auto", "cpu", "kernel-host", "cuda"] = Field(
        "auto", description="force one backend for every scheme; auto picks per scheme")
    cpu_workers: int = Field(0, ge=0, description="CPU verify workers; 0 = every core")
    cpu_chunk: int = Field(256, ge=1, description="items per CPU work unit")

    # --- request limits (the API answers 413 above them)
    max_items: int = Field(65536, ge=1)
    max_body_bytes: int = Field(64 * 1024 * 1024, ge=1024)
    max_message_bytes: int = Field(1024 * 1024, ge=1)

    # --- ZAP frames (docs/wire-format.md) and the WebSocket stream
    zap_max_frame_bytes: int = Field(256 * 1024 * 1024, ge=64,
                                     description="largest ZAP frame accepted (HTTP body or WebSocket message)")
    zap_max_items: int = Field(1 << 20, ge=1, description="largest item count of one ZAP frame")
    ws_max_in_flight: int = Field(32, ge=1, description="requests in flight per WebSocket connection; at the "
                                                         "bound the server stops reading (backpressure)")


@lru_cache
def get_settings() -> Settings:
    return Settings()
