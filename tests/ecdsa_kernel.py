"""What the P-256 and secp256k1 ECDSA kernel tests share; only the curve differs.

A :class:`Curve` names the scheme, its agreement suite (scripts/lib/agreement/<scheme>.py:
the ctypes call of the host build and the mutated items), its table generator
(scripts/gen_<scheme>_tables), the per-item option besides ``prehashed`` and how the
reference signs a digest.  tests/test_kernel_ecdsa.py runs the tests both curves have alike;
tests/test_kernel_p256.py and tests/test_kernel_secp256k1.py the ones of one curve.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from app.core import encoding

ROOT = Path(__file__).resolve().parents[1]


def load_script(name: str) -> ModuleType:
    """A script of scripts/ (no .py suffix) as a module (registered in ``sys.modules``, where
    dataclasses look their module up)."""
    path = ROOT / "scripts" / name
    loader = importlib.machinery.SourceFileLoader(name, str(path))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[loader.name] = mod
    loader.exec_module(mod)
    return mod


def i2b(v: int) -> bytes:
    return v.to_bytes(32, "big")


def point_bytes(pt, compressed=True) -> bytes:
    x, y = pt
    return bytes([2 | (y & 1)]) + i2b(x) if compressed else b"\x04" + i2b(x) + i2b(y)


def _sign_p256(d: int, digest: bytes) -> tuple[int, int]:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, utils

    der = ec.derive_private_key(d, ec.SECP256R1()).sign(digest, ec.ECDSA(utils.Prehashed(hashes.SHA256())))
    return utils.decode_dss_signature(der)


def _sign_secp256k1(d: int, digest: bytes) -> tuple[int, int]:
    import coincurve

    c = encoding.der_to_compact(coincurve.PrivateKey(i2b(d)).sign(digest, hasher=None))
    return int.from_bytes(c[:32], "big"), int.from_bytes(c[32:], "big")


@dataclass(frozen=True)
class Curve:
    """One ECDSA curve as its kernel tests see it.

    Attributes:
        option: the per-item option besides ``prehashed`` (``low_s``, ``allow_high_s``).
        reference_name: the reference library, for failure messages.
        sign_digest: ``(d, 32-byte digest) -> (r, s)`` by the reference library.
        wycheproof: Wycheproof file → the option its items carry.
        all_accepted / none_accepted: mutation kinds of the agreement suite the kernel must
            accept every item of / refuse every item of.
    """

    scheme: str
    option: str
    reference_name: str
    sign_digest: Callable[[int, bytes], tuple[int, int]]
    wycheproof: dict[str, bool]
    all_accepted: tuple[str, ...]
    none_accepted: tuple[str, ...]

    @property
    def agreement(self) -> ModuleType:
        return importlib.import_module(f"scripts.lib.agreement.{self.scheme}")

    @property
    def gen(self) -> ModuleType:
        name = f"gen_{self.scheme}_tables"
        return sys.modules.get(name) or load_script(name)

    def kernel_verify(self, items, *, prehashed=False, flag=False) -> list[bool]:
        return self.agreement.kernel_verify(items, prehashed=prehashed, **{self.option: flag})

    def reference_verify(self, items, *, prehashed=False, flag=False) -> list[bool]:
        return [self.agreement.CURVE.reference(pk, msg, sig, prehashed=prehashed, **{self.option: flag})
                for pk, msg, sig in items]

    def assert_agrees(self, items, *, prehashed=False, flag=False, names=None) -> list[bool]:
        """Kernel verdicts equal the reference's for (pk, msg, sig) items under ``prehashed``
        and the curve's option set to ``flag``; returns the verdicts."""
        got = self.kernel_verify(items, prehashed=prehashed, flag=flag)
        want = self.reference_verify(items, prehashed=prehashed, flag=flag)
        bad = [((names or [None] * len(items))[i], w) for i, (g, w) in enumerate(zip(got, want)) if g != w]
        assert not bad, f"kernel disagrees with {self.reference_name} on (case, reference verdict): {bad[:20]}"
        return want


P256 = Curve("p256", "low_s", "OpenSSL", _sign_p256,
             {"ecdsa_secp256r1_sha256_test.json": False, "ecdsa_secp256r1_sha256_p1363_test.json": False},
             all_accepted=("valid", "high-s", "low-s-low_s"), none_accepted=("high-s-low_s",))
SECP256K1 = Curve("secp256k1", "allow_high_s", "libsecp256k1", _sign_secp256k1,
                  {"ecdsa_secp256k1_sha256_test.json": True, "ecdsa_secp256k1_sha256_p1363_test.json": True,
                   "ecdsa_secp256k1_sha256_bitcoin_test.json": False},
                  all_accepted=("valid", "high-s-allowed"), none_accepted=("high-s",))
CURVES = {c.scheme: c for c in (P256, SECP256K1)}
