"""Conformance vectors: our JSONL format and converters from the external files.

JSONL format, one object per line::

    {"scheme": "ed25519", "public_key": "<hex>", "message": "<hex>", "signature": "<hex>",
     "context": "<hex>"?, "prehashed": false?, "allow_high_s": false?,
     "signature_format": "raw"|"der"?, "expected": true, "source": "...", "id": "...",
     "rule": "..."?}

``expected`` is the verdict under zapverify's documented semantics (app/engine/verify/schemes.py).
Where that differs from what the source file expects, ``rule`` names the rule; the rules are
the constants ``RULE_*`` below, never lists of case ids.

Converters read the external files in place (``../shared/vectors``, see SOURCES.md there);
their output goes to a temporary or git-ignored folder and is never committed.  This module
needs only the standard library and app.engine (no web stack), so the GPU check can use it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from app.engine.verify.batch import Item
from app.engine.verify.kat import KnownAnswer
from app.errors import BadVectorFile

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
    if signature_format != "raw":
        out["signature_format"] = signature_format
    if ka.rule:
        out["rule"] = ka.rule
    return out


def from_json(d: dict) -> KnownAnswer:
    """One JSONL record as a :class:`KnownAnswer` (DER signatures converted to compact).

    Raises ``KeyError``/``ValueError`` naming nothing more than Python does: vector files
    are trusted input of the test suite, not user requests.
    """
    sig = bytes.fromhex(d["signature"])
    fmt = d.get("signature_format", "raw")
    if d["scheme"] == "secp256k1" and fmt != "raw":
        from app.wire.encoding import compact_signature  # DER needs libsecp256k1

        sig = compact_signature(sig, fmt)
    item = Item(d["scheme"], bytes.fromhex(d["public_key"]), bytes.fromhex(d["message"]), sig,
                bytes.fromhex(d.get("context", "")), bool(d.get("prehashed", False)),
                bool(d.get("allow_high_s", False)))
    return KnownAnswer(item, bool(d["expected"]), str(d["id"]), d.get("source", ""), d.get("rule", ""))


def read_jsonl(path: str | Path) -> Iterator[KnownAnswer]:
    """The records of a JSONL vector file.  Raises :class:`app.errors.BadVectorFile` naming
    ``<path>:<line>`` for a file that cannot be opened or a line that is not a record."""
    try:
        f = open(path, encoding="utf-8")
    except OSError as exc:
        raise BadVectorFile(f"cannot open {path}: {exc.strerror}", field=str(path)) from None
    with f:
        lineno = 0
        try:
            for lineno, line in enumerate(f, 1):  # noqa: B007 (lineno is read in the handler)
                if line.strip():
                    yield from_json(json.loads(line))
        except UnicodeDecodeError:
            raise BadVectorFile(f"{path}: not UTF-8 text", field=f"{path}:{lineno + 1}") from None
        except json.JSONDecodeError as exc:
            raise BadVectorFile(f"{path}:{lineno}: not JSON ({exc.msg})", field=f"{path}:{lineno}") from None
        except (KeyError, ValueError, TypeError) as exc:
            what = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
            raise BadVectorFile(f"{path}:{lineno}: not a vector record ({what})", field=f"{path}:{lineno}") from None


def write_jsonl(path: str | Path, records: Iterable[dict]) -> int:
    """Write ``records`` one JSON object a line; the file appears only once complete, so a
    failure (an import error in a signer, Ctrl-C) leaves no empty or partial file behind."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    n = 0
    try:
        with open(tmp, "w", encoding="utf-8") as f:
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
    # ECDSA (high-S valid), so they run with allow_high_s; the bitcoin file requires low-S.
    ecdsa = [("ecdsa_secp256k1_sha256_test.json", "der", True),
             ("ecdsa_secp256k1_sha256_p1363_test.json", "raw", True),
             ("ecdsa_secp256k1_sha256_bitcoin_test.json", "der", False)]
    for name, fmt, high_s in ecdsa:
        path = base / name
        if not path.is_file():
            continue
        for g in json.loads(path.read_text())["testGroups"]:
            pk = bytes.fromhex(g["publicKey"]["uncompressed"])
            for t in g["tests"]:
                yield _record("secp256k1", pk, bytes.fromhex(t["msg"]), bytes.fromhex(t["sig"]),
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


def _ethereum_bls(root: Path) -> Iterator[dict]:
    folder = root / "ethereum-bls12-381-tests" / "bls_tests_json" / "verify"
    for path in sorted(folder.glob("*.json")):
        d = json.loads(path.read_text())
        i = d["input"]

        def h(s: str) -> bytes:
            return bytes.fromhex(s[2:] if s.startswith("0x") else s)

        yield _record("bls12-381", h(i["pubkey"]), h(i["message"]), h(i["signature"]), bool(d["output"]),
                      "ethereum-bls12-381-tests/verify", path.stem)


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


def generated(valid: int, mutated: int, seed: int = 0, schemes: Iterable[str] | None = None) -> Iterator[dict]:
    """Freshly signed valid items and their one-bit mutations for every scheme, as records."""
    from app.engine.verify.kat import generate
    from app.engine.verify.schemes import SCHEMES

    for s in schemes or SCHEMES:
        for ka in generate(s, valid, mutated, seed=seed):
            yield to_json(ka)
