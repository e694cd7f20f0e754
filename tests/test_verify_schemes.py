import pytest

from app.core import schemes
from app.core.errors import UnknownScheme


def test_twenty_schemes_with_unique_codes():
    assert len(schemes.SCHEMES) == 20
    assert len({s.code for s in schemes.SCHEMES.values()}) == 20


@pytest.mark.parametrize("scheme_id,code,pk,sig", [
    ("ed25519", 0x01, (32,), 64),
    ("secp256k1", 0x02, (33, 65), 64),
    ("bls12-381", 0x03, (48,), 96),
    ("p256", 0x04, (33, 65), 64),         # SEC 1 §2.3.3/2.3.4 keys, IEEE P1363 r ‖ s
    ("bip340", 0x05, (32,), 64),          # BIP-340: x-only key, r ‖ s
    ("ml-dsa-44", 0x10, (1312,), 2420),   # FIPS 204 table 2
    ("ml-dsa-65", 0x11, (1952,), 3309),
    ("ml-dsa-87", 0x12, (2592,), 4627),
    ("slh-dsa-sha2-128s", 0x20, (32,), 7856),   # FIPS 205 table 2
    ("slh-dsa-sha2-128f", 0x21, (32,), 17088),
    ("slh-dsa-sha2-192s", 0x22, (48,), 16224),
    ("slh-dsa-sha2-192f", 0x23, (48,), 35664),
    ("slh-dsa-sha2-256s", 0x24, (64,), 29792),
    ("slh-dsa-sha2-256f", 0x25, (64,), 49856),
    ("slh-dsa-shake-128s", 0x26, (32,), 7856),
    ("slh-dsa-shake-256f", 0x2B, (64,), 49856),
])
def test_registry_matches_design_table(scheme_id, code, pk, sig):
    s = schemes.get(scheme_id)
    assert (s.code, s.pk_lens, s.sig_len) == (code, pk, sig)
    assert schemes.by_code(code) is s


def test_unknown_scheme_names_the_field():
    with pytest.raises(UnknownScheme) as e:
        schemes.get("rsa")
    assert e.value.field == "scheme"
    with pytest.raises(UnknownScheme):
        schemes.by_code(0x99)


def test_signature_sizes_match_the_libraries():
    import importlib

    for s in schemes.SCHEMES.values():
        if s.family == "slh-dsa":
            mod = importlib.import_module("pqcrypto.sign." + s.id.replace("-", "_"))
            assert (mod.PUBLIC_KEY_SIZE, mod.SIGNATURE_SIZE) == (s.pk_len, s.sig_len)
