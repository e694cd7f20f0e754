"""Request bodies made of the engine's known answers (valid and mutated items)."""

from __future__ import annotations

from app.engine.verify import kat

SCHEMES = ("ed25519", "secp256k1", "bls12-381", "ml-dsa-44", "slh-dsa-sha2-128f")


def items(scheme: str) -> list[dict]:
    """The known answers of ``scheme`` as JSON items, with their expected verdicts."""
    out = []
    for ka in kat.known_answers()[scheme]:
        it = ka.item
        if it.prehashed or it.allow_high_s:
            continue
        d = {"scheme": it.scheme, "public_key": it.public_key.hex(), "message": it.message.hex(),
             "signature": it.signature.hex(), "expected": ka.expected}
        if it.context:
            d["context"] = it.context.hex()
        out.append(d)
    return out


def verify_body(*schemes: str) -> tuple[dict, list[bool]]:
    """A /v1/verify body over ``schemes`` (default: ed25519) and the verdicts it must get."""
    its = [i for s in (schemes or ("ed25519",)) for i in items(s)]
    return {"items": [{k: v for k, v in i.items() if k != "expected"} for i in its]}, [i["expected"] for i in its]
