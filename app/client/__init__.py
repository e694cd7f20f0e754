"""Python clients of zapverify: the HTTP/WebSocket client (:mod:`app.client.http`), the NIC
ingest client (:mod:`app.client.ingest`) and the load generator (:mod:`app.client.loadgen`).

The names most users need are exported here::

    from app.client import Client, leaf_hash, verify_inclusion, der_to_compact
"""

from app.client.http import (
    AsyncClient,
    BatchRequest,
    BatchVerdicts,
    Client,
    VerifyResult,
    VerifyStream,
    json_body,
    leaf_hash,
    verify_inclusion,
)

__all__ = ["AsyncClient", "BatchRequest", "BatchVerdicts", "Client", "VerifyResult", "VerifyStream", "json_body",
           "leaf_hash", "verify_inclusion"]
