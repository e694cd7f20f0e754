"""Conformance vectors: our JSONL format and converters from the external files.

JSONL format, one object per line::

    {"scheme": "ed25519", "public_key": "<hex>", "message": "<hex>", "signature": "<hex>",
     "context": "<hex>"?, "prehashed": false?, "allow_high_s": false?,
     "low_s": false?, "signature_format": "raw"|"der"?, "expected": true, "source": "...", "id": "...",
     "rule": "..."?}

A BLS aggregate record (docs/bls-aggregate.md) has ``mode`` instead of ``scheme``::

    {"mode": "fast_aggregate", "public_keys": ["<hex>", ...], "message": "<hex>",
     "signature": "<hex>", "expected": true, "source": "...", "id": "..."}
    {"mode": "aggregate", "public_keys": [...], "messages": ["<hex>", ...], ...}

with ``"variant": "eth"`` on a record of an item under Ethereum's rule (absent: ``ietf``).

``expected`` is the verdict under zapverify's documented semantics (app/core/schemes.py).
Where that differs from what the source file expects, ``rule`` names the rule; the rules are
the constants ``RULE_*`` below, never lists of case ids.

Converters read the external files in place (``../shared/vectors``, see SOURCES.md there);
their output goes to a temporary or git-ignored folder and is never committed.  This module
needs only the standard library and app.engine (no web stack), so the GPU check can use it.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from app.core.batch import AggregateItem, Item
from app.core.errors import BadVectorFile
from app.engine.reference.kat import KnownAnswer

#: FIPS 205 slh_verify (external, pure) signs M' = 0 ‖ |ctx| ‖ ctx ‖ M; ACVP v1.1.0.37
#: sigVer vectors exercise slh_verify_internal on M directly.  Under the external interface
#: the internal message differs, so a signature the source accepts is ``False`` for us.
RULE_SLH_INTERNAL = "acvp-slh-dsa-internal-interface"

DEFAULT_ROOT = Path(__file__).resolve().parents[1].parent / "shared" / "vectors"


# ------------------------------------------------------------------ JSONL
def to_json(ka: KnownAnswer, signature_format: str = "raw", signature: bytes | None = None) -> dict:
    it = ka.item
    out = {"scheme": it.scheme, "public_key": it.public_key.hex(), "message": it.message.hex(),
           "signature": (signature if signature is not None else it.signature).hex(),
           "expected": ka.expected, "source": ka.source, "id": ka.id}
    if it.context:
        out["context"] = it.context.hex()
    if it.prehashed:
        out["prehashed"] = True
    if it.allow_high_s:
        out["allow_high_s"] = True
    if it.low_s:
        out["low_s"] = True
    if signature_format != "raw":
        out["signature_format"] = signature_format
    if ka.rule:
        out["rule"] = ka.rule
    return out


@dataclass(frozen=True)
class AggregateAnswer:
    """A BLS aggregate item with the verdict our semantics give it (see :class:`KnownAnswer`)."""

    item: AggregateItem
    expected: bool
    id: str
    source: str = "generated"
    rule: str = ""


def aggregate_record(item: AggregateItem, expected: bool, source: str, id_: str) -> dict:
    """The JSONL record of an aggregate item."""
    d: dict = {"mode": item.mode, "public_keys": [pk.hex() for pk in item.public_keys]}
    if item.mode == "fast_aggregate":
        d["message"] = item.messages[0].hex()
    else:
        d["messages"] = [m.hex() for m in item.messages]
    d.update({"signature": item.signature.hex(), "expected": expected, "source": source, "id": id_})
    if item.variant != "ietf":  # records of the default rule read as they always did
        d["variant"] = item.variant
    return d


def from_json(d: dict) -> KnownAnswer | AggregateAnswer:
    """One JSONL record as a :class:`KnownAnswer` (DER signatures converted to compact), or
    an :class:`AggregateAnswer` for a record with ``mode``.

    Raises ``KeyError``/``ValueError`` naming nothing more than Python does: vector files
    are trusted input of the test suite, not user requests.
    """
    if "mode" in d:
        msgs = [d["message"]] if d["mode"] == "fast_aggregate" else d["messages"]
        aggregate = AggregateItem(d["mode"], tuple(bytes.fromhex(pk) for pk in d["public_keys"]),
                                  tuple(bytes.fromhex(m) for m in msgs), bytes.fromhex(d["signature"]),
                                  str(d.get("variant", "ietf")))
        return AggregateAnswer(aggregate, bool(d["expected"]), str(d["id"]), d.get("source", ""), d.get("rule", ""))
    sig = bytes.fromhex(d["signature"])
    fmt = d.get("signature_format", "raw")
    if fmt != "raw":
        from app.core.encoding import native_signature  # DER needs libsecp256k1
        from app.core.schemes import SCHEMES

        sig = native_signature(SCHEMES[d["scheme"]], sig, fmt)
    item = Item(d["scheme"], bytes.fromhex(d["public_key"]), bytes.fromhex(d["message"]), sig,
                bytes.fromhex(d.get("context", "")), bool(d.get("prehashed", False)),
                bool(d.get("allow_high_s", False)), bool(d.get("low_s", False)))
    return KnownAnswer(item, bool(d["expected"]), str(d["id"]), d.get("source", ""), d.get("rule", ""))


def open_text(path: str | Path, mode: str = "r"):
    """``path`` opened as UTF-8 text for ``mode`` ("r" or "w"), through gzip when its name
    ends in ``.gz`` (what a GPU host is carried is kept small that way)."""
    if str(path).endswith(".gz"):
        return gzip.open(path, mode + "t", encoding="utf-8")
    return open(path, mode, encoding="utf-8")


def read_jsonl(path: str | Path) -> Iterator[KnownAnswer | AggregateAnswer]:
    """The records of a JSONL vector file (gzip-compressed when named ``*.gz``).  Raises
    :class:`app.core.errors.BadVectorFile` naming ``<path>:<line>`` for a file that cannot be
    opened or a line that is not a record."""
    try:
        f = open_text(path)
    except OSError as exc:
        raise BadVectorFile(f"cannot open {path}: {exc.strerror}", field=str(path)) from None
    with f:
        lineno = 0
        try:
            for lineno, line in enumerate(f, 1):  # noqa: B007 (lineno is read in the handler)
                if line.strip():
                    yield from_json(json.loads(line))
        except (UnicodeDecodeError, gzip.BadGzipFile, EOFError):
            raise BadVectorFile(f"{path}: not UTF-8 text (or not gzip)", field=f"{path}:{lineno + 1}") from None
        except json.JSONDecodeError as exc:
            raise BadVectorFile(f"{path}:{lineno}: not JSON ({exc.msg})", field=f"{path}:{lineno}") from None
        except (KeyError, ValueError, TypeError) as exc:
            what = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
            raise BadVectorFile(f"{path}:{lineno}: not a vector record ({what})", field=f"{path}:{lineno}") from None


def write_jsonl(path: str | Path, records: Iterable[dict]) -> int:
    """Write ``records`` one JSON object a line (gzip-compressed when ``path`` ends in
    ``.gz``); the file appears only once complete, so a failure (an import error in a signer,
    Ctrl-C) leaves no empty or partial file behind."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp{'.gz' if path.suffix == '.gz' else ''}")
    n = 0
    try:
        with open_text(tmp, "w") as f:
            for r in records:
                f.write(json.dumps(r, separators=(",", ":")) + "\n")
                n += 1
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return n


# ------------------------------------------------------------------ converters
def _record(scheme: str, pk: bytes, msg: bytes, sig: bytes, expected: bool, source: str, id_: str,
            *, context: bytes = b"", allow_high_s: bool = False, signature_format: str = "raw",
            rule: str = "") -> dict:
    d = {"scheme": scheme, "public_key": pk.hex(), "message": msg.hex(), "signature": sig.hex(),
         "expected": expected, "source": source, "id": id_}
    if context:
        d["context"] = context.hex()
    if allow_high_s:
        d["allow_high_s"] = True
    if signature_format != "raw":
        d["signature_format"] = signature_format
    if rule:
        d["rule"] = rule
    return d


def _wycheproof_result(t: dict) -> bool:
    if t["result"] not in ("valid", "invalid"):
        raise ValueError(f"tcId {t['tcId']}: result {t['result']!r} has no fixed verdict")
    return t["result"] == "valid"


def _wycheproof(root: Path) -> Iterator[dict]:
    base = root / "wycheproof" / "testvectors_v1"
    # (file, scheme, signature format, allow_high_s).  The plain and P1363 files are plain
    # ECDSA (high-S valid), so secp256k1 runs them with allow_high_s (P-256 accepts high-S
    # by default); the bitcoin file requires low-S.
    ecdsa = [("ecdsa_secp256k1_sha256_test.json", "secp256k1", "der", True),
             ("ecdsa_secp256k1_sha256_p1363_test.json", "secp256k1", "raw", True),
             ("ecdsa_secp256k1_sha256_bitcoin_test.json", "secp256k1", "der", False),
             ("ecdsa_secp256r1_sha256_test.json", "p256", "der", False),
             ("ecdsa_secp256r1_sha256_p1363_test.json", "p256", "raw", False)]
    for name, scheme, fmt, high_s in ecdsa:
        path = base / name
        if not path.is_file():
            continue
        for g in json.loads(path.read_text())["testGroups"]:
            pk = bytes.fromhex(g["publicKey"]["uncompressed"])
            for t in g["tests"]:
                yield _record(scheme, pk, bytes.fromhex(t["msg"]), bytes.fromhex(t["sig"]),
                              _wycheproof_result(t), f"wycheproof/{name}", str(t["tcId"]),
                              allow_high_s=high_s, signature_format=fmt)
    path = base / "ed25519_test.json"
    if path.is_file():
        for g in json.loads(path.read_text())["testGroups"]:
            pk = bytes.fromhex(g["publicKey"]["pk"])
            for t in g["tests"]:
                yield _record("ed25519", pk, bytes.fromhex(t["msg"]), bytes.fromhex(t["sig"]),
                              _wycheproof_result(t), "wycheproof/ed25519_test.json", str(t["tcId"]))
    for level in (44, 65, 87):
        name = f"mldsa_{level}_verify_test.json"
        path = base / name
        if not path.is_file():
            continue
        for g in json.loads(path.read_text())["testGroups"]:
            pk = bytes.fromhex(g["publicKey"])
            for t in g["tests"]:
                yield _record(f"ml-dsa-{level}", pk, bytes.fromhex(t["msg"]), bytes.fromhex(t["sig"]),
                              _wycheproof_result(t), f"wycheproof/{name}", str(t["tcId"]),
                              context=bytes.fromhex(t.get("ctx", "")))
    path = base / "bls_sig_g2_pop_verify_test.json"
    if path.is_file():
        for g in json.loads(path.read_text())["testGroups"]:
            pk = bytes.fromhex(g["publicKey"]["pk"])
            for t in g["tests"]:
                yield _record("bls12-381", pk, bytes.fromhex(t["msg"]), bytes.fromhex(t["sig"]),
                              _wycheproof_result(t), "wycheproof/bls_sig_g2_pop_verify_test.json",
                              str(t["tcId"]))


def _h(s: str) -> bytes:
    return bytes.fromhex(s[2:] if s.startswith("0x") else s)


def _ethereum_bls(root: Path) -> Iterator[dict]:
    base = root / "ethereum-bls12-381-tests" / "bls_tests_json"
    for path in sorted((base / "verify").glob("*.json")):
        d = json.loads(path.read_text())
        i = d["input"]
        yield _record("bls12-381", _h(i["pubkey"]), _h(i["message"]), _h(i["signature"]), bool(d["output"]),
                      "ethereum-bls12-381-tests/verify", path.stem)
    # fast_aggregate_verify / aggregate_verify (formats/*.md): read where present.
    for mode, handler in (("fast_aggregate", "fast_aggregate_verify"), ("aggregate", "aggregate_verify")):
        for path in sorted((base / handler).glob("*.json")):
            d = json.loads(path.read_text())
            i = d["input"]
            msgs = [i["message"]] if mode == "fast_aggregate" else i["messages"]
            item = AggregateItem(mode, tuple(_h(pk) for pk in i["pubkeys"]), tuple(_h(m) for m in msgs),
                                 _h(i["signature"]))
            yield aggregate_record(item, bool(d["output"]), f"ethereum-bls12-381-tests/{handler}", path.stem)


def _acvp_slh_dsa(root: Path) -> Iterator[dict]:
    folder = root / "acvp" / "SLH-DSA-sigVer-FIPS205_v1.1.0.37_via_circl"
    prompt, results = folder / "verify_prompt.json", folder / "verify_results.json"
    if not (prompt.is_file() and results.is_file()):
        return
    passed = {t["tcId"]: t["testPassed"] for g in json.loads(results.read_text())["testGroups"]
              for t in g["tests"]}
    for g in json.loads(prompt.read_text())["testGroups"]:
        # "SLH-DSA-SHA2-128s" -> "slh-dsa-sha2-128s"
        scheme = g["parameterSet"].lower()
        for t in g["tests"]:
            source_ok = passed[t["tcId"]]
            yield _record(scheme, bytes.fromhex(t["pk"]), bytes.fromhex(t["message"]),
                          bytes.fromhex(t["signature"]), False, "acvp/SLH-DSA-sigVer-FIPS205_v1.1.0.37",
                          str(t["tcId"]), rule=RULE_SLH_INTERNAL if source_ok else "")


def _bip340(root: Path) -> Iterator[dict]:
    """BIP-340's ``test-vectors.csv``: every row is a verification case (public key, message,
    signature, TRUE/FALSE), those with a secret key also a signing case; a row whose public
    key is no valid x-only key (not on the curve, x ≥ p) expects FALSE, as BIP-340 Verify
    fails on lift_x."""
    import csv

    path = root / "bip340" / "test-vectors.csv"
    if not path.is_file():
        return
    with path.open(newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            yield _record("bip340", bytes.fromhex(row["public key"]), bytes.fromhex(row["message"]),
                          bytes.fromhex(row["signature"]), row["verification result"] == "TRUE",
                          "bip340/test-vectors.csv", row["index"])


def convert_all(root: str | Path = DEFAULT_ROOT) -> Iterator[dict]:
    """Every external vector under ``root`` (default ``../shared/vectors``) as JSONL records.

    Yields nothing when ``root`` is absent.
    """
    root = Path(root)
    if not root.is_dir():
        return
    yield from _wycheproof(root)
    yield from _ethereum_bls(root)
    yield from _acvp_slh_dsa(root)
    yield from _bip340(root)


def generated(valid: int, mutated: int, seed: int = 0, schemes: Iterable[str] | None = None) -> Iterator[dict]:
    """Freshly signed valid items and their one-bit mutations for every scheme, as records."""
    from app.core.schemes import SCHEMES
    from app.engine.reference.kat import generate

    for s in schemes or SCHEMES:
        for ka in generate(s, valid, mutated, seed=seed):
            yield to_json(ka)


def generated_aggregate(count: int, seed: int = 0) -> Iterator[dict]:
    """``count`` signer sets as aggregate records: for each, a valid FastAggregateVerify and
    AggregateVerify item and one of each made invalid (wrong message, identity key added,
    a key missing, infinity signature, a message short), signed now with arkworks."""
    import random

    import py_arkworks_bls12381 as ark

    from app.engine.reference.reference import BLS_POP_DST

    rng = random.Random(f"aggregate/{seed}")
    r = 0x73EDA753299D7D483339D80809A1D80553BDA402FFFE5BFEFFFFFFFF00000001  # group order (RFC 9380 §8.8.1)
    identity, infinity = b"\xc0" + bytes(47), b"\xc0" + bytes(95)

    def sign(sk, m: bytes):
        return ark.G2Point.hash_to_curve(m, BLS_POP_DST) * sk

    for k in range(count):
        sks = [ark.Scalar.from_be_bytes(rng.randrange(1, r).to_bytes(32, "big")) for _ in range(rng.randrange(1, 6))]
        pks = tuple(bytes((ark.G1Point() * sk).to_compressed_bytes()) for sk in sks)
        msg = rng.randbytes(32)
        msgs = tuple(rng.randbytes(32) for _ in sks)
        fast_sig = bytes(sum((sign(sk, msg) for sk in sks[1:]), sign(sks[0], msg)).to_compressed_bytes())
        agg_sig = bytes(sum((sign(sk, m) for sk, m in zip(sks[1:], msgs[1:])), sign(sks[0], msgs[0]))
                        .to_compressed_bytes())
        fast = AggregateItem("fast_aggregate", pks, (msg,), fast_sig)
        agg = AggregateItem("aggregate", pks, msgs, agg_sig)
        bad = [("fast_aggregate", "wrong-message", AggregateItem("fast_aggregate", pks, (msg + b"!",), fast_sig)),
               ("fast_aggregate", "identity-key", AggregateItem("fast_aggregate", pks + (identity,), (msg,), fast_sig)),
               ("fast_aggregate", "infinity-signature", AggregateItem("fast_aggregate", pks, (msg,), infinity)),
               ("aggregate", "wrong-message", AggregateItem("aggregate", pks, msgs[:-1] + (b"!",), agg_sig)),
               ("aggregate", "messages-short", AggregateItem("aggregate", pks, msgs[:-1], agg_sig)),
               ("aggregate", "no-keys", AggregateItem("aggregate", (), (), agg_sig))]
        yield aggregate_record(fast, True, "generated", f"fast_aggregate/gen/{seed}/{k}/valid")
        yield aggregate_record(agg, True, "generated", f"aggregate/gen/{seed}/{k}/valid")
        for mode, kind, item in bad:
            yield aggregate_record(item, False, "generated", f"{mode}/gen/{seed}/{k}/{kind}")
