"""The Python client of zapverify, a top-level package of its own (the server is ``app``):
the HTTP/WebSocket client (:mod:`zapverify.http`), the NIC ingest client
(:mod:`zapverify.ingest`) and the load generator (:mod:`zapverify.loadgen`).

The names most users need are exported here::

    from zapverify import Client, leaf_hash, verify_inclusion, der_to_compact
    from zapverify import AggregateItem, aggregate_leaf     # BLS aggregate items (docs/bls-aggregate.md)
    from zapverify import RemoteError                       # the server's error code, message and field
"""

from app.core.encoding import compact_to_der, der_to_compact
from app.core.errors import ConnectionFailed, RemoteError, ZapVerifyError
from zapverify.http import (
    AggregateItem,
    AsyncClient,
    BatchRequest,
    BatchVerdicts,
    Client,
    Retry,
    VerifyResult,
    VerifyStream,
    aggregate_body,
    aggregate_leaf,
    aggregate_leaf_hash,
    json_body,
    leaf_hash,
    verify_inclusion,
)
from zapverify.proofs import MalformedProof

__all__ = ["AggregateItem", "AsyncClient", "BatchRequest", "BatchVerdicts", "Client", "Retry", "VerifyResult",
           "VerifyStream",
           "aggregate_body", "aggregate_leaf", "aggregate_leaf_hash", "json_body", "leaf_hash", "verify_inclusion",
           "compact_to_der", "der_to_compact", "ConnectionFailed", "MalformedProof", "RemoteError", "ZapVerifyError"]
