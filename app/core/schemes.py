"""The scheme registry: every signature scheme zapverify verifies, with its exact semantics.

Every backend must give the verdict of the CPU reference named here, on every input,
malformed ones included (a malformed item is ``False``, never an exception for the batch).

``ed25519`` (wire code 0x01) — RFC 8032 §5.1.7, *cofactorless*, as libsodium's
    ``crypto_sign_verify_detached`` in its releases up to 1.0.22:
    pk 32 B, sig 64 B = R ‖ S, any message.  Rejected: S ≥ L (the group order); a public key
    A that is not a canonical encoding (y ≥ p) or decodes to no point; A or R of small order
    (the 8-torsion, libsodium's blocklist, including the non-canonical encodings of those
    points); then the check is encode([S]B − [k]A) == R byte for byte, with
    k = SHA-512(R ‖ A ‖ M) mod L.  No cofactor multiplication.

``secp256k1`` (0x02) — ECDSA over secp256k1 as libsecp256k1 (SEC 1 §4.1.4):
    pk 33 B (0x02/0x03 ‖ x) or 65 B (0x04 ‖ x ‖ y, or the hybrid 0x06/0x07 whose parity
    matches y), exactly what ``secp256k1_ec_pubkey_parse`` accepts; sig 64 B compact r ‖ s
    (big-endian; a JSON request may send strict DER, signature format ``der``).
    r, s ∈ [1, n−1]; s ≤ n/2 (low-S) is required unless the batch sets the option
    ``allow_high_s``, in which case s is normalised to n − s first.  The message is hashed
    with SHA-256 unless the batch is ``prehashed``, in which case it must be exactly 32 bytes.

``p256`` (0x04) — ECDSA over NIST P-256 with SHA-256 (FIPS 186-5 §6.4.2) as OpenSSL through
    ``cryptography``: pk 33 B (0x02/0x03 ‖ x, SEC 1 §2.3.4) or 65 B (0x04 ‖ x ‖ y, §2.3.3),
    exactly what ``EllipticCurvePublicKey.from_encoded_point`` accepts: x, y < p and the point
    on the curve; the hybrid prefixes 0x06/0x07 are refused (``cryptography`` refuses them
    before OpenSSL, which would take them; WebAuthn/COSE and X.509 keys never use them).
    sig 64 B r ‖ s big-endian (IEEE P1363; a JSON request may send strict DER, signature
    format ``der``).  r, s ∈ [1, n−1]; high-S is **valid** (FIPS 186-5, WebAuthn) unless the
    batch sets ``low_s``, under which s > n/2 is ``False``.  The message is hashed with
    SHA-256 unless the batch is ``prehashed``, in which case it must be exactly 32 bytes and is
    the digest e (any other length is ``False``).  The check is x(u1·G + u2·Q) mod n == r.
``bip340`` (0x05) — BIP-340 Schnorr over secp256k1, the BIP's Verify exactly (libsecp256k1's
    ``secp256k1_xonly_pubkey_parse`` then ``secp256k1_schnorrsig_verify``):
    pk 32 B x-only: lift_x(x) must exist (x < p and x³ + 7 a square mod p; the point with
    even y is taken); sig 64 B = r ‖ s, big-endian, with r < p and s < n; messages of any
    length (BIP-340, "Messages of arbitrary size").  e = int(tagged_hash("BIP0340/challenge",
    r ‖ pk ‖ m)) mod n with tagged_hash(t, x) = SHA-256(SHA-256(t) ‖ SHA-256(t) ‖ x);
    R = s·G − e·P, valid iff R is not infinity, has even y and x(R) = r.  No options; the
    signature format is ``raw`` only.

``bls12-381`` (0x03) — ciphersuite ``BLS_SIG_BLS12381G2_XMD:SHA-256_SSWU_RO_POP_``
    (Ethereum consensus; draft-irtf-cfrg-bls-signature-04 CoreVerify with KeyValidate):
    pk 48 B compressed G1, sig 96 B compressed G2 (ZCash encoding flags), any message.
    Rejected: bad flags or length, points off the curve or outside the prime-order
    subgroup, the identity public key.

``ml-dsa-44/65/87`` (0x10–0x12) — FIPS 204 ML-DSA.Verify (Alg. 3), pure, external
    interface: M' = 0 ‖ |ctx| ‖ ctx ‖ M with a context of at most 255 bytes.

``slh-dsa-{sha2,shake}-{128,192,256}{s,f}`` (0x20–0x2B) — FIPS 205 slh_verify (Alg. 24),
    pure, external interface with a context of at most 255 bytes; sizes from FIPS 205
    table 2.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from app.core.errors import UnknownScheme

Family = Literal["ed25519", "secp256k1", "p256", "bip340", "bls12-381", "ml-dsa", "slh-dsa"]

#: Largest FIPS 204/205 context string, bytes.
MAX_CONTEXT_BYTES = 255


@dataclass(frozen=True)
class Option:
    """A batch option: one flag that holds for every item of a batch, off unless set.

    Attributes:
        name: its name as a JSON request field, an :class:`~app.core.batch.Item` and
            :class:`~app.core.batch.Batch` attribute and a vector-file key (``"prehashed"``).
        bit: its bit in a ZAP request's ``options`` byte (docs/wire-format.md,
            "3. Verify request (type 0x01)").
        summary: what it does, one line (the JSON API describes the field with it).
    """

    name: str
    bit: int
    summary: str


#: Every batch option, in bit order.  A scheme lists those it accepts in ``Scheme.options``;
#: a ZAP frame setting another is ``BAD_OPTIONS``, a JSON request's flag does not apply to it.
OPTIONS: dict[str, Option] = {o.name: o for o in (
    Option("prehashed", 0x01, "messages are 32-byte digests"),
    Option("allow_high_s", 0x02, "accept s > n/2 (normalised first)"),
    Option("low_s", 0x04, "require s ≤ n/2 (malleability-free verdicts)"),
)}


def _all_bits() -> int:
    bits = 0
    for o in OPTIONS.values():
        if o.bit & (o.bit - 1) or o.bit & bits:  # one bit each, none shared
            raise ValueError(f"option {o.name}: bit 0x{o.bit:02x} is not a bit of its own")
        bits |= o.bit
    return bits


#: The option bits :data:`OPTIONS` defines; any other bit of a ZAP ``options`` byte is undefined.
OPTION_BITS = _all_bits()

#: The signature format every scheme accepts and a request uses unless it names another:
#: the scheme's own encoding (the sizes of the registry), verified as sent.
RAW = "raw"


@dataclass(frozen=True)
class SignatureFormat:
    """An encoding a JSON request may send signatures in (its ``signature_format``).

    Attributes:
        name: the ``signature_format`` value (``"der"``).
        summary: what the server does with it, one line (the JSON API's field description).
    """

    name: str
    summary: str


#: Every signature format, the default (:data:`RAW`) first.  How each becomes the bytes the
#: verifier takes is :func:`app.core.encoding.native_signature`.
SIGNATURE_FORMATS: dict[str, SignatureFormat] = {f.name: f for f in (
    SignatureFormat(RAW, "as sent, in the scheme's own encoding"),
    SignatureFormat("der", "converts ASN.1 DER signatures to compact r‖s"),  # SEC 1 §C.5
)}


def option_flags(bits: int) -> dict[str, bool]:
    """``{option name: set?}`` for every option of :data:`OPTIONS`, from ZAP option ``bits``
    (the keyword arguments of :class:`~app.core.batch.Item` and :class:`~app.core.batch.Batch`)."""
    return {name: bool(bits & o.bit) for name, o in OPTIONS.items()}


def option_settings(holder: object) -> dict[str, bool]:
    """``{option name: flag}`` of ``holder`` for every option of :data:`OPTIONS` (keyword
    arguments that carry a batch's options over to another :class:`~app.core.batch.Batch`)."""
    return {name: bool(getattr(holder, name)) for name in OPTIONS}


def option_bits(holder: object) -> int:
    """The ZAP option bits of ``holder``: any object with a ``bool`` attribute per option
    name (an :class:`~app.core.batch.Item`, a :class:`~app.core.batch.Batch`, a JSON request)."""
    return sum(o.bit for name, o in OPTIONS.items() if getattr(holder, name))


@dataclass(frozen=True)
class Scheme:
    """One signature scheme.

    Attributes:
        id: the name used in JSON and the CLI (``"ml-dsa-65"``).
        code: the one-byte ZAP wire code (docs/architecture.md, "Schemes").
        family: the algorithm family, which selects the verify routine.
        pk_lens: the public-key lengths accepted, bytes (two for secp256k1: 33 and 65).
        sig_len: the signature length, bytes.
        has_context: True where FIPS 204/205 define a context string.
        standard: the document and section implemented.
        options: names of the :data:`OPTIONS` its batches may set (``prehashed``...).
        signature_formats: names of the :data:`SIGNATURE_FORMATS` a JSON request may send
            its signatures in, :data:`RAW` first.

    Every layer asks these fields (:meth:`accepts_option`, :attr:`option_bits`,
    :meth:`signature_format_for`) rather than the family, so a scheme with options of its
    own needs only its record here and its verifier.  Raises ``ValueError`` for an option or
    format that is not defined, or formats that do not start with :data:`RAW`.
    """

    id: str
    code: int
    family: Family
    pk_lens: tuple[int, ...]
    sig_len: int
    has_context: bool
    standard: str
    options: tuple[str, ...] = ()
    signature_formats: tuple[str, ...] = (RAW,)

    def __post_init__(self) -> None:
        unknown = [o for o in self.options if o not in OPTIONS]
        if unknown:
            raise ValueError(f"scheme {self.id}: options {unknown} are not in OPTIONS")
        bad = [f for f in self.signature_formats if f not in SIGNATURE_FORMATS]
        if bad or self.signature_formats[:1] != (RAW,):
            raise ValueError(f"scheme {self.id}: signature formats {self.signature_formats} must be "
                             f"from SIGNATURE_FORMATS, {RAW!r} first")

    @property
    def pk_len(self) -> int:
        """The usual public-key length, bytes (the first of ``pk_lens``)."""
        return self.pk_lens[0]

    def accepts_option(self, name: str) -> bool:
        """True when this scheme's batches may set option ``name``."""
        return name in self.options

    def verifier_options(self, holder: object) -> dict[str, bool]:
        """The keyword arguments of this scheme's reference verifier
        (:func:`app.engine.reference.reference.verifier`): each option it accepts, as
        ``holder`` (an :class:`~app.core.batch.Item`, a :class:`~app.core.batch.Batch`) sets
        it.  A verifier takes only its own scheme's options, so a new option touches no
        other scheme's verifier."""
        return {name: bool(getattr(holder, name)) for name in self.options}

    @property
    def option_bits(self) -> int:
        """The ZAP option bits this scheme accepts (0 for a scheme without options)."""
        return sum(OPTIONS[name].bit for name in self.options)

    def signature_format_for(self, requested: str) -> str:
        """The format this scheme's signatures are read in when a request asks for
        ``requested``: that one where the scheme accepts it, else :data:`RAW` (a request's
        ``signature_format`` applies to the items of the schemes that have it)."""
        return requested if requested in self.signature_formats else RAW


def _registry() -> list[Scheme]:
    out = [
        Scheme("ed25519", 0x01, "ed25519", (32,), 64, False, "RFC 8032 §5.1.7 (libsodium rules)"),
        Scheme("secp256k1", 0x02, "secp256k1", (33, 65), 64, False, "SEC 1 §4.1.4 (libsecp256k1 rules)",
               options=("prehashed", "allow_high_s"), signature_formats=(RAW, "der")),
        Scheme("bls12-381", 0x03, "bls12-381", (48,), 96, False,
               "draft-irtf-cfrg-bls-signature-04 CoreVerify, POP ciphersuite"),
        Scheme("p256", 0x04, "p256", (33, 65), 64, False, "FIPS 186-5 §6.4.2 (OpenSSL rules)",
               options=("prehashed", "low_s"), signature_formats=(RAW, "der")),
        Scheme("bip340", 0x05, "bip340", (32,), 64, False, "BIP-340 Verify (libsecp256k1 rules)"),
    ]
    for i, (level, pk, sig) in enumerate([(44, 1312, 2420), (65, 1952, 3309), (87, 2592, 4627)]):
        out.append(Scheme(f"ml-dsa-{level}", 0x10 + i, "ml-dsa", (pk,), sig, True, "FIPS 204 Alg. 3"))
    # FIPS 205 table 2: (n, signature bytes) per parameter set, in wire-code order.
    slh = [("128s", 32, 7856), ("128f", 32, 17088), ("192s", 48, 16224),
           ("192f", 48, 35664), ("256s", 64, 29792), ("256f", 64, 49856)]
    code = 0x20
    for hash_name in ("sha2", "shake"):
        for name, pk, sig in slh:
            out.append(Scheme(f"slh-dsa-{hash_name}-{name}", code, "slh-dsa", (pk,), sig, True,
                              "FIPS 205 Alg. 24"))
            code += 1
    return out


SCHEMES: dict[str, Scheme] = {s.id: s for s in _registry()}
BY_CODE: dict[int, Scheme] = {s.code: s for s in SCHEMES.values()}


def get(scheme_id: str) -> Scheme:
    """Return the scheme named ``scheme_id``; raises :class:`UnknownScheme`, which lists the
    known ids.  Ids are case-sensitive, as the Merkle leaf's scheme code makes them one name
    each (docs/architecture.md): ``"Ed25519"`` is refused with a hint naming ``"ed25519"``."""
    try:
        return SCHEMES[scheme_id]
    except KeyError:
        folded = {s.casefold(): s for s in SCHEMES}.get(str(scheme_id).casefold())
        hint = f" (scheme ids are case-sensitive: did you mean {folded!r}?)" if folded else ""
        raise UnknownScheme(f"unknown scheme {scheme_id!r}{hint}; known: {', '.join(SCHEMES)}",
                            field="scheme") from None


def accepting(bits: int) -> list[str]:
    """Ids of the schemes that accept any of the option ``bits``, in registry order (what an
    error about a refused option names)."""
    return [s.id for s in SCHEMES.values() if s.option_bits & bits]


def by_code(code: int) -> Scheme:
    """Return the scheme with ZAP wire code ``code``; raises :class:`UnknownScheme`."""
    try:
        return BY_CODE[code]
    except KeyError:
        raise UnknownScheme(f"unknown scheme code 0x{code:02x}", field="scheme") from None
