"""GET /v1/info: what a client needs to know about this server, open like /healthz (TEI's
``/info`` in spirit): version, commit, schemes, backends, the request limits.  Nothing of the
host, its addresses, the store or the keys: those are the admin-scoped /v1/status's."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, Field

from app import __version__, build
from app.api.deps import EngineDep, SettingsDep
from app.core.schemes import SCHEMES

router = APIRouter(tags=["ops"])


class InfoLimits(BaseModel):
    max_items: int = Field(description="items per JSON request (ZAPVERIFY_MAX_ITEMS); over it, 413")
    max_body_bytes: int = Field(description="bytes of a JSON body; over it, 413")
    max_message_bytes: int = Field(description="bytes of one item's message")
    zap_max_items: int = Field(description="items per ZAP frame")
    zap_max_frame_bytes: int = Field(description="bytes of one ZAP frame")


class InfoOut(BaseModel):
    name: str = Field(description="always zapverify")
    version: str = Field(description="the server's version (as `zapverify --version`)")
    commit: str = Field(description="the commit it was built from, 40 hex digits, or unknown")
    api: str = Field(description="the API's version prefix")
    schemes: list[str] = Field(description="scheme ids this server verifies (details: GET /v1/schemes)")
    backends: list[str] = Field(description="the backends verifying here: cpu, and kernel-host or cuda where present")
    receipts: bool = Field(description="whether verified batches get receipts and proofs (GET /v1/receipts…)")
    limits: InfoLimits


@router.get("/v1/info", response_model=InfoOut, responses={200: {"content": {"application/json": {"example": {
        "name": "zapverify", "version": __version__, "commit": "3f1c0e6a9d4b2c7e8f0a1b2c3d4e5f6a7b8c9d0e",
        "api": "v1", "schemes": ["ed25519", "secp256k1"], "backends": ["cpu"], "receipts": True,
        "limits": {"max_items": 65536, "max_body_bytes": 67108864, "max_message_bytes": 1048576,
                   "zap_max_items": 1048576, "zap_max_frame_bytes": 268435456}}}}}})
async def info(engine: EngineDep, settings: SettingsDep) -> dict:
    """Version, commit, schemes, backends and request limits; open (no key), as a client asks
    it before it knows anything else.  Host, addresses, the store and counters are in the
    admin-scoped ``/v1/status``."""
    return {"name": "zapverify", "version": __version__, "commit": build.commit(), "api": "v1",
            "schemes": list(SCHEMES), "backends": [b.name for b in engine.backends], "receipts": settings.receipts,
            "limits": {"max_items": settings.max_items, "max_body_bytes": settings.max_body_bytes,
                       "max_message_bytes": settings.max_message_bytes, "zap_max_items": settings.zap_max_items,
                       "zap_max_frame_bytes": settings.zap_max_frame_bytes}}
