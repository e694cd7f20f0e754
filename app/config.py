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
    crossover: dict[str, int] = Field(default_factory=dict, description=(
        "fixed smallest batch per scheme id that goes to the GPU, as JSON ({\"ed25519\": 512}); "
        "measured at start where absent"))
    hybrid: bool = Field(False, description="split large batches between the GPU and the CPU by their rates")
    hybrid_min: int = Field(4096, ge=2, description="smallest batch that hybrid mode splits")
    cuda_device: int = Field(0, ge=0, description="the GPU ordinal the CUDA backend uses")
    cuda_transfer: Literal["auto", "zero-copy", "copy"] = Field(
        "auto", description="how kernels read batch columns: in place from pinned memory, or copied to the GPU")

    # --- request limits (the API answers 413 above them)
    max_items: int = Field(65536, ge=1)
    max_body_bytes: int = Field(64 * 1024 * 1024, ge=1024)
    max_message_bytes: int = Field(1024 * 1024, ge=1)


@lru_cache
def get_settings() -> Settings:
    return Settings()
