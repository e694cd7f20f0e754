"""BLS aggregate requests (docs/bls-aggregate.md): JSON shapes and their decoding into engine
items with the request limits, shared by POST /v1/verify/bls-aggregate and WS /v1/ws/verify
(both verify through :func:`app.api.service.verify_bls_aggregate`)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from app.api.schemas import ENCODING_DESCRIPTION, decode_text
from app.config import Settings
from app.core.batch import AggregateItem
from app.core.errors import LimitExceeded, RequestError

# Secret keys 1, 2 and 3 of the POP suite signing the message "zapverify"
# (py_ecc G2ProofOfPossession); the test suite checks that it verifies.
EXAMPLE = {"encoding": "hex", "items": [{
    "mode": "fast_aggregate",
    "public_keys": [
        "97f1d3a73197d7942695638c4fa9ac0fc3688c4f9774b905a14e3a3f171bac586c55e83ff97a1aeffb3af00adb22c6bb",
        "a572cbea904d67468808c8eb50a9450c9721db309128012543902d0ac358a62ae28f75bb8f1c7c42c39a8c5529bf0f4e",
        "89ece308f9d1f0131765212deca99697b112d61f9be9a5f1f3780a51335b3ff981747a0b2ca2179b96d2c0c9024e5224"],
    "message": "7a6170766572696679",
    "signature": ("b2d6a2a45e63d270461551a9a170916ade8895717ffe03b476604ce516920a02d445b02cb30888ae767a472684ee487e"
                  "023a01a5c9a8fef6ff200153436c2a6b9a0374632db5a9db1877e315f841962e4f44844c705fd2fbd355350cec3c21b0")}]}


class AggregateItemModel(BaseModel):
    """One item: ``message`` in ``fast_aggregate`` mode, ``messages`` (one per key) in ``aggregate`` mode."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["fast_aggregate", "aggregate"]
    public_keys: list[str] = Field(description="48-byte compressed G1 keys; none gives a false verdict")
    message: str | None = Field(None, description="fast_aggregate: the one message every key signed")
    messages: list[str] | None = Field(None, description="aggregate: message i signed by key i; "
                                                         "another count than public_keys gives a false verdict")
    signature: str = Field(description="96-byte compressed G2 aggregate signature")
    variant: Literal["ietf", "eth"] = Field(
        "ietf", description="fast_aggregate only: 'ietf' is FastAggregateVerify of draft-irtf-cfrg-bls-signature "
                            "(no keys: false); 'eth' is the consensus specs' eth_fast_aggregate_verify (no keys "
                            "and the G2 infinity signature 0xc0 00..00: true, else the same rule)")


class BlsAggregateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    items: list[AggregateItemModel]
    encoding: Literal["hex", "base64"] = Field("hex", description=ENCODING_DESCRIPTION)


def to_aggregate_items(req: BlsAggregateRequest, settings: Settings) -> list[AggregateItem]:
    """Decode a request into :class:`AggregateItem` s.

    Raises :class:`LimitExceeded` (413) over ``max_items``, ``bls_aggregate_max_keys`` (field
    ``items[i].public_keys``), ``max_message_bytes`` or ``bls_aggregate_max_pairings`` (field
    ``items``), and :class:`RequestError` (422) for undecodable text or the message field of
    the other mode or the ``eth`` variant on an ``aggregate`` item, naming ``items[i].<field>``.
    """
    if len(req.items) > settings.max_items:
        raise LimitExceeded(f"{len(req.items)} items, the limit is {settings.max_items}", field="items")
    # Keys or messages, whichever are more (a count mismatch is a false verdict, yet decoded).
    work = sum(max(len(it.public_keys), len(it.messages or ())) + 1 for it in req.items)
    if work > settings.bls_aggregate_max_pairings:
        raise LimitExceeded(f"{work} pairings of work (public keys + 1 per item), the limit is "
                            f"{settings.bls_aggregate_max_pairings}", field="items")
    out = []
    for i, it in enumerate(req.items):
        where = f"items[{i}]"
        for name, count in (("public_keys", len(it.public_keys)), ("messages", len(it.messages or ()))):
            if count > settings.bls_aggregate_max_keys:
                raise LimitExceeded(f"{count} {name.replace('_', ' ')}, the limit is {settings.bls_aggregate_max_keys}",
                                    field=f"{where}.{name}")
        if it.mode == "fast_aggregate":
            if it.message is None or it.messages is not None:
                raise RequestError("fast_aggregate takes one 'message' and no 'messages'", field=f"{where}.message")
            texts, field = [it.message], f"{where}.message"
        else:
            if it.messages is None or it.message is not None:
                raise RequestError("aggregate takes 'messages' and no 'message'", field=f"{where}.messages")
            if it.variant != "ietf":
                raise RequestError("the 'eth' variant applies to fast_aggregate items only", field=f"{where}.variant")
            texts, field = it.messages, f"{where}.messages"
        msgs = []
        for j, text in enumerate(texts):
            name = field if it.mode == "fast_aggregate" else f"{field}[{j}]"
            msg = decode_text(text, req.encoding, name)
            if len(msg) > settings.max_message_bytes:
                raise LimitExceeded(f"message of {len(msg)} bytes, the limit is {settings.max_message_bytes}",
                                    field=name)
            msgs.append(msg)
        pks = tuple(decode_text(pk, req.encoding, f"{where}.public_keys[{j}]") for j, pk in enumerate(it.public_keys))
        out.append(AggregateItem(it.mode, pks, tuple(msgs), decode_text(it.signature, req.encoding,
                                                                          f"{where}.signature"), it.variant))
    return out
