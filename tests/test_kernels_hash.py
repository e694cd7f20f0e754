"""Hash kernels (sha2.cuh, keccak.cuh via hash.cu), host build, against hashlib.

Every length 0–300 covers the one- and two-block paddings of SHA-256 (55/56/64 bytes),
SHA-512 (111/112/128) and the Keccak rates (72, 136, 168); SHAKE outputs run to several
blocks of squeezing.
"""

import hashlib
import random

import numpy as np
import pytest

from app.core.errors import RequestError
from app.engine.device import hostlib, ops

pytestmark = pytest.mark.skipif(hostlib.hostbuild.compiler() is None, reason="no C++ compiler")

FIXED = {"sha256": hashlib.sha256, "sha512": hashlib.sha512, "sha3-256": hashlib.sha3_256,
         "sha3-512": hashlib.sha3_512}
XOF = {"shake128": hashlib.shake_128, "shake256": hashlib.shake_256}


@pytest.fixture(scope="module")
def dev():
    return hostlib.device()


@pytest.fixture(scope="module")
def messages():
    rng = random.Random(20240601)
    return [rng.randbytes(n) for n in range(301)]


@pytest.mark.parametrize("algo", FIXED)
def test_fixed_digests_equal_hashlib_for_every_length_0_to_300(dev, messages, algo):
    out = ops.hash_messages(dev, algo, messages)
    assert out.shape == (301, FIXED[algo]().digest_size)
    for m, d in zip(messages, out):
        assert d.tobytes() == FIXED[algo](m).digest(), f"{algo} length {len(m)}"


@pytest.mark.parametrize("algo", XOF)
@pytest.mark.parametrize("out_len", [1, 16, 32, 64, 135, 136, 137, 167, 168, 169, 336, 1000])
def test_shake_output_lengths_across_blocks(dev, messages, algo, out_len):
    picked = messages[::7] + [messages[135], messages[136], messages[167], messages[168]]
    out = ops.hash_messages(dev, algo, picked, out_len)
    for m, d in zip(picked, out):
        assert d.tobytes() == XOF[algo](m).digest(out_len), f"{algo} in {len(m)} out {out_len}"


def test_long_messages_cross_many_blocks(dev):
    rng = random.Random(7)
    msgs = [rng.randbytes(n) for n in (1000, 4096, 10_007, 65_536)]
    for algo, ref in FIXED.items():
        assert [d.tobytes() for d in ops.hash_messages(dev, algo, msgs)] == [ref(m).digest() for m in msgs]
    assert [d.tobytes() for d in ops.hash_messages(dev, "shake256", msgs, 200)] == \
        [hashlib.shake_256(m).digest(200) for m in msgs]


def test_fips_202_known_answers(dev):
    # FIPS 202 / NIST example values for the empty message (also in hashlib's own tests).
    assert ops.hash_messages(dev, "sha3-256", [b""])[0].tobytes().hex() == \
        "a7ffc6f8bf1ed76651c14756a061d662f580ff4de43b49fa82d80a4b80f8434a"
    assert ops.hash_messages(dev, "shake128", [b""], 32)[0].tobytes().hex() == \
        "7f9c2ba4e88f827d616045507605853ed73b8093f6efbc88eb1a6eacfa66ef26"


def test_messages_share_one_buffer_by_offsets(dev):
    # The kernels must read exactly msgs[offsets[i]:offsets[i+1]]: no bleed between neighbours.
    msgs = [b"a" * 55, b"", b"b" * 56, b"c" * 64, b""]
    out = ops.hash_messages(dev, "sha256", msgs)
    assert [d.tobytes() for d in out] == [hashlib.sha256(m).digest() for m in msgs]


def test_empty_list_and_bad_arguments(dev):
    assert ops.hash_messages(dev, "sha256", []).shape == (0, 32)
    with pytest.raises(RequestError) as e:
        ops.hash_messages(dev, "md5", [b"x"])
    assert e.value.field == "algo"
    with pytest.raises(RequestError) as e:
        ops.hash_messages(dev, "shake128", [b"x"])
    assert e.value.field == "out_len"
    with pytest.raises(RequestError):
        ops.hash_messages(dev, "sha256", [b"x"], 64)


def test_host_device_refuses_untyped_scalars():
    with pytest.raises(TypeError):
        hostlib.c_arg(5)
    assert hostlib.c_arg(np.uint32(5)).value == 5
