"""Items and batches: :class:`Item`, one signature in row form (the JSON API, the client and
the vector files use it), :class:`AggregateItem`, one BLS aggregate signature with its keys
and messages (docs/bls-aggregate.md), and :class:`Batch`, the columnar batch every backend
verifies (docs/architecture.md, "Batches and routing")."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from app.core.errors import RequestError
from app.core.schemes import OPTIONS, Scheme, option_bits

#: Batch option bits, shared with the ZAP wire format (docs/wire-format.md); the registry's
#: :data:`~app.core.schemes.OPTIONS` defines them and which schemes accept each.
OPT_PREHASHED = OPTIONS["prehashed"].bit
OPT_ALLOW_HIGH_S = OPTIONS["allow_high_s"].bit
OPT_LOW_S = OPTIONS["low_s"].bit


def message_span(offsets: np.ndarray, lo: int, hi: int) -> tuple[int, int, np.ndarray]:
    """Items [lo, hi)'s messages in a batch's ``msgs`` column, from its ``offsets``
    (``uint64[N + 1]``): their start, their end, and their offsets relative to the start
    (``int64[hi - lo + 1]``)."""
    off = offsets[lo:hi + 1].astype(np.int64)
    base = int(off[0])
    return base, int(off[-1]), off - base


@dataclass(frozen=True)
class Item:
    """One verification item in row form (the JSON API and the vector files use this).

    ``prehashed``, ``allow_high_s`` and ``low_s`` are the batch options (:data:`~app.core.schemes.OPTIONS`)
    the item is verified under; they matter only for a scheme that accepts them
    (``Scheme.options``)."""

    scheme: str
    public_key: bytes
    message: bytes
    signature: bytes
    context: bytes = b""
    prehashed: bool = False
    allow_high_s: bool = False
    low_s: bool = False


#: BLS aggregate modes and their byte in the Merkle leaf (docs/bls-aggregate.md).
AGGREGATE_MODES: dict[str, int] = {"fast_aggregate": 1, "aggregate": 2}
#: The name each mode is counted under on the dashboard, in metrics and in receipts.
AGGREGATE_LABELS: dict[str, str] = {"fast_aggregate": "bls12-381-fast-aggregate", "aggregate": "bls12-381-aggregate"}
#: Rules a ``fast_aggregate`` item may be verified under (docs/bls-aggregate.md, section 1):
#: ``ietf``, FastAggregateVerify of draft-irtf-cfrg-bls-signature §3.3.4 (no keys: false), and
#: ``eth``, the consensus specs' ``eth_fast_aggregate_verify`` (altair, beacon-chain.md §"BLS
#: signatures": no keys and the G2 infinity encoding as signature: true, else the same rule).
AGGREGATE_VARIANTS: tuple[str, ...] = ("ietf", "eth")
#: The leaf's mode byte of a ``fast_aggregate`` item under the ``eth`` variant: the variant
#: can change the verdict, so the leaf commits to it (modes 1 and 2 keep their bytes, so
#: IETF leaves are unchanged).
AGGREGATE_ETH_LEAF_MODE = 3
#: G2_POINT_AT_INFINITY of the consensus specs: the compressed identity of G2, 96 bytes.
G2_INFINITY = b"\xc0" + bytes(95)


@dataclass(frozen=True)
class AggregateItem:
    """One BLS12-381 aggregate item: FastAggregateVerify (``mode`` ``fast_aggregate``,
    ``messages`` holds its one message) or AggregateVerify (``aggregate``, message i signed
    by key i).  Bytes as sent: 48-byte keys, 96-byte signature (wrong ones verify false).

    ``variant`` (:data:`AGGREGATE_VARIANTS`) applies to ``fast_aggregate`` only: ``"ietf"``
    (default) or ``"eth"``; an ``aggregate`` item with ``"eth"`` is refused by the API and
    verifies false here."""

    mode: str
    public_keys: tuple[bytes, ...]
    messages: tuple[bytes, ...]
    signature: bytes
    variant: str = "ietf"

    @property
    def leaf_mode(self) -> int:
        """The mode byte of this item's Merkle leaf: :data:`AGGREGATE_MODES`, or
        :data:`AGGREGATE_ETH_LEAF_MODE` for ``fast_aggregate`` under ``eth``; 0 for an unknown
        mode or variant."""
        if self.variant == "eth" and self.mode == "fast_aggregate":
            return AGGREGATE_ETH_LEAF_MODE
        if self.variant != "ietf":
            return 0
        return AGGREGATE_MODES.get(self.mode, 0)


@dataclass(frozen=True)
class AggregateBatch:
    """BLS12-381 aggregate items verified as one batch (a backend's ``run`` takes it where its
    capabilities say ``aggregates``); ``items`` in order, any mix of modes."""

    items: tuple[AggregateItem, ...]

    def __len__(self) -> int:
        return len(self.items)


@dataclass
class Batch:
    """N items of one scheme, stored column by column.

    Attributes:
        scheme: the scheme of every item.
        pks: ``uint8[N, pk_len]`` public keys; ``pk_len`` is one of ``scheme.pk_lens``.
        sigs: ``uint8[N, sig_len]`` signatures.
        msgs: ``uint8[M]`` all messages back to back.
        offsets: ``uint32`` or ``uint64[N + 1]``; message i is ``msgs[offsets[i]:offsets[i+1]]``.
        ctx: the FIPS 204/205 context string for every item (≤ 255 bytes; empty elsewhere).
        prehashed: messages are 32-byte digests, not hashed again (for a scheme whose
            ``options`` accept it: secp256k1, p256).
        allow_high_s: accept s > n/2 after normalising it (likewise: secp256k1).
        low_s: refuse s > n/2 (likewise: p256, where high-S is valid otherwise).

    Arrays may be zero-copy views into a received frame or pool slab; a Batch never copies
    them.  :meth:`validate` checks shapes and offsets and raises :class:`RequestError`.
    """

    scheme: Scheme
    pks: np.ndarray
    sigs: np.ndarray
    msgs: np.ndarray
    offsets: np.ndarray
    ctx: bytes = b""
    prehashed: bool = False
    allow_high_s: bool = False
    low_s: bool = False
    source: str = field(default="api", compare=False)

    def __len__(self) -> int:
        return int(self.pks.shape[0])

    @property
    def options(self) -> int:
        """The option bits of this batch as on the wire (bit0 prehashed, bit1 allow_high_s, bit2 low_s)."""
        return option_bits(self)

    def message(self, i: int) -> memoryview:
        """Message ``i`` as a zero-copy view."""
        return self.msgs[int(self.offsets[i]):int(self.offsets[i + 1])].data

    def slice(self, lo: int, hi: int) -> Batch:
        """Items ``lo .. hi-1`` as a batch of their own: views of the key, signature and
        message columns, fresh offsets rebased to 0 (``uint64[hi - lo + 1]``)."""
        n = len(self)
        if not 0 <= lo <= hi <= n:
            raise IndexError(f"slice [{lo}, {hi}) outside a batch of {n}")
        base, end, off = message_span(self.offsets, lo, hi)
        return Batch(self.scheme, self.pks[lo:hi], self.sigs[lo:hi], self.msgs[base:end], off.astype(np.uint64),
                     self.ctx, self.prehashed, self.allow_high_s, self.low_s, self.source)

    def validate(self) -> None:
        """Check the column shapes and offsets; raises :class:`RequestError` naming the field."""
        n = len(self)
        if self.pks.ndim != 2 or self.pks.dtype != np.uint8 or self.pks.shape[1] not in self.scheme.pk_lens:
            raise RequestError(f"pks must be uint8[N, {'|'.join(map(str, self.scheme.pk_lens))}]", field="pks")
        if self.sigs.shape != (n, self.scheme.sig_len) or self.sigs.dtype != np.uint8:
            raise RequestError(f"sigs must be uint8[{n}, {self.scheme.sig_len}]", field="sigs")
        if self.msgs.ndim != 1 or self.msgs.dtype != np.uint8:
            raise RequestError("msgs must be a flat uint8 array", field="msgs")
        if self.offsets.shape != (n + 1,):
            raise RequestError(f"offsets must have N + 1 = {n + 1} entries", field="offsets")
        off = self.offsets.astype(np.int64)
        if n >= 0 and (off[0] != 0 or np.any(np.diff(off) < 0) or off[-1] > self.msgs.shape[0]):
            raise RequestError("offsets must start at 0, never decrease and end within msgs",
                               field="offsets")
        if len(self.ctx) > 255:
            raise RequestError("context longer than 255 bytes", field="ctx")

    @classmethod
    def from_items(cls, scheme: Scheme, pks: list[bytes], msgs: list[bytes], sigs: list[bytes],
                   **kw) -> Batch:
        """Build a batch from Python byte strings (copies them into fresh columns).

        All ``pks`` must share one length of ``scheme.pk_lens`` and all ``sigs`` be
        ``scheme.sig_len`` long; raises :class:`RequestError` otherwise.
        """
        n = len(pks)
        if not (len(msgs) == len(sigs) == n):
            raise RequestError("pks, msgs and sigs must have the same length", field="items")
        pk_len = len(pks[0]) if n else scheme.pk_len
        if any(len(p) != pk_len for p in pks):
            raise RequestError("public keys of one batch must share one length", field="pks")
        if any(len(s) != scheme.sig_len for s in sigs):
            raise RequestError(f"signatures must be {scheme.sig_len} bytes", field="sigs")
        offsets = np.zeros(n + 1, dtype=np.uint64)
        if n:
            np.cumsum([len(m) for m in msgs], out=offsets[1:])
        batch = cls(
            scheme=scheme,
            pks=np.frombuffer(b"".join(pks), dtype=np.uint8).reshape(n, pk_len),
            sigs=np.frombuffer(b"".join(sigs), dtype=np.uint8).reshape(n, scheme.sig_len),
            msgs=np.frombuffer(b"".join(msgs), dtype=np.uint8),
            offsets=offsets,
            **kw,
        )
        batch.validate()
        return batch
