"""Request bodies made of the engine's known answers (valid and mutated items)."""

from __future__ import annotations

from app.engine.reference import kat

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


def load_while(kill, *, base: str, post, kinds: tuple[str, ...], before: float, after: float,
               who=lambda instance: instance, headers: dict[str, str] | None = None,
               ) -> tuple[list[tuple[str, float, float, int, str]], float]:
    """Send requests from one thread per entry of ``kinds`` ("GET" /v1/status, "POST" a verify
    through ``post(base, client=...)``) for ``before`` seconds, call ``kill()``, go on for
    ``after`` seconds.  Every request carries ``headers`` (the API key).  Returns the results
    (kind, start, end, status, ``who(instance header)``; status 0 for a transport error,
    named in the last field) and when ``kill`` ran."""
    import threading
    import time

    import httpx

    stop = threading.Event()
    results: list[tuple[str, float, float, int, str]] = []
    lock = threading.Lock()

    def run(kind: str) -> None:
        with httpx.Client(headers=headers) as c:
            while not stop.is_set():
                t0 = time.monotonic()
                try:
                    r = post(base, client=c) if kind == "POST" else c.get(base + "/v1/status", timeout=30)
                    status, name = r.status_code, who(r.headers.get("X-Zapverify-Instance", ""))
                except httpx.TransportError as exc:
                    status, name = 0, type(exc).__name__
                with lock:
                    results.append((kind, t0, time.monotonic(), status, name))

    threads = [threading.Thread(target=run, args=(k,)) for k in kinds]
    for t in threads:
        t.start()
    time.sleep(before)
    killed_at = time.monotonic()
    kill()
    time.sleep(after)
    stop.set()
    for t in threads:
        t.join(60)
    return results, killed_at
