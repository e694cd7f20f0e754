"""The test-only toy scheme of tests/kernels/toy.cu, on the CPU side.

Rule: an item is valid iff its signature starts with SHA-256(pk ‖ ctx ‖ options ‖ msg).
:class:`ToyCpu` stands in for the CPU backend and :func:`toy_answers` for the generated
known answers, so an engine with the toy kernel behind the kernel-host or (fake) CUDA
backend passes its self-test and the control flow can be driven end to end.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import replace
from pathlib import Path

from app.core.batch import OPT_ALLOW_HIGH_S, OPT_PREHASHED, Item
from app.core.result import Result
from app.core.schemes import SCHEMES
from app.engine.backends.base import READY, Backend, Capabilities
from app.engine.device.registry import KernelSource, VerifyKernel
from app.engine.reference.kat import KnownAnswer

TOY_SOURCE = KernelSource("toy", Path(__file__).resolve().parent / "kernels")
TOY = VerifyKernel(TOY_SOURCE, "zv_verify_toy")
#: The toy kernel serving every scheme.
TOY_ALL = {sid: TOY for sid in SCHEMES}
#: Engine settings for toy backends: the toy semantics are not the CPU reference's, so a
#: shadow check (app/engine/verify/shadow.py) would find every toy verdict wrong and degrade it.
NO_SHADOW = {"shadow_rate": 0.0, "shadow_min_per_batch": 0, "shadow_warmup_items": 0}
BROKEN = VerifyKernel(KernelSource("broken", TOY_SOURCE.directory), "zv_verify_broken")
ABSENT = VerifyKernel(KernelSource("absent", TOY_SOURCE.directory), "zv_verify_absent")


def toy_valid(pk: bytes, msg: bytes, sig: bytes, ctx: bytes = b"", options: int = 0) -> bool:
    return bytes(sig[:32]) == hashlib.sha256(bytes(pk) + bytes(ctx) + bytes([options]) + bytes(msg)).digest()


def toy_item(scheme_id: str, rng: random.Random, *, pk_len: int | None = None, ctx: bytes = b"",
             prehashed: bool = False, allow_high_s: bool = False) -> Item:
    s = SCHEMES[scheme_id]
    pk = rng.randbytes(pk_len or s.pk_len)
    msg = rng.randbytes(32 if prehashed else rng.randrange(0, 150))
    options = (OPT_PREHASHED if prehashed else 0) | (OPT_ALLOW_HIGH_S if allow_high_s else 0)
    sig = hashlib.sha256(pk + ctx + bytes([options]) + msg).digest() + rng.randbytes(s.sig_len - 32)
    return Item(scheme_id, pk, msg, sig, ctx, prehashed, allow_high_s)


def toy_items(scheme_id: str, n: int, seed: int = 0, **kw) -> list[Item]:
    rng = random.Random(f"toy/{scheme_id}/{seed}")
    return [toy_item(scheme_id, rng, **kw) for _ in range(n)]


def toy_answers() -> dict[str, list[KnownAnswer]]:
    """Two valid and two broken items per scheme, in every batch shape the engine forms."""
    out = {}
    for sid, s in SCHEMES.items():
        rng = random.Random(f"toy-kat/{sid}")
        kw = {"ctx": b"toy-ctx"} if s.has_context else ({"pk_len": 65} if sid == "secp256k1" else {})
        good = [toy_item(sid, rng), toy_item(sid, rng, **kw)]
        bad = [replace(good[0], message=good[0].message + b"!"),
               replace(good[1], signature=bytes([good[1].signature[0] ^ 1]) + good[1].signature[1:])]
        out[sid] = ([KnownAnswer(it, True, f"toy/{sid}/valid/{i}") for i, it in enumerate(good)]
                    + [KnownAnswer(it, False, f"toy/{sid}/bad/{i}") for i, it in enumerate(bad)])
    return out


class ToyCpu(Backend):
    """CPU stand-in applying the toy rule; reports the calls it got (verdicts only: the
    engine's commit step makes the leaves)."""

    name = "cpu"

    def __init__(self):
        self.calls: list[int] = []

    def capabilities(self) -> Capabilities:
        return Capabilities(schemes={s: READY for s in SCHEMES})

    def run(self, batch, *, commit: bool = False) -> Result:
        self.calls.append(len(batch))
        return Result.of(self.name, [toy_valid(batch.pks[i].tobytes(), batch.message(i), batch.sigs[i].tobytes(),
                                               batch.ctx, batch.options) for i in range(len(batch))])
