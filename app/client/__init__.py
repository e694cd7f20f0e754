"""Python clients of zapverify: the HTTP/WebSocket client (:mod:`app.client.http`), the NIC
ingest client (:mod:`app.client.ingest`) and the load generator (:mod:`app.client.loadgen`).

The names most users need are exported here::

    from app.client import Client, leaf_hash, verify_inclusion, der_to_compact
    from app.client import AggregateItem, aggregate_leaf     # BLS aggregate items (docs/bls-aggregate.md)
"""

from app.client.http import (
    AggregateItem,
    AsyncClient,
    BatchRequest,
    BatchVerdicts,
    Client,
    VerifyResult,
    VerifyStream,
    aggregate_body,
    aggregate_leaf,
    aggregate_leaf_hash,
    json_body,
    leaf_hash,
    verify_inclusion,
)
from app.core.encoding import compact_to_der, der_to_compact

__all__ = ["AggregateItem", "AsyncClient", "BatchRequest", "BatchVerdicts", "Client", "VerifyResult", "VerifyStream",
           "aggregate_body", "aggregate_leaf", "aggregate_leaf_hash", "json_body", "leaf_hash", "verify_inclusion",
           "compact_to_der", "der_to_compact"]
