"""ZAP frame v1 encode/decode (app/wire/zap.py): round trips, zero-copy views, and hostile input."""

from __future__ import annotations

import random
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.batch import Batch
from app.core.errors import (
    BadContext,
    BadKeyLength,
    BadMagic,
    BadOffsets,
    BadOptions,
    BadPadding,
    BadReserved,
    BadSignatureLength,
    BadSize,
    BadType,
    BadUtf8,
    BadVerdict,
    BadVersion,
    CountLimit,
    EmptyFrame,
    FrameTooLarge,
    MessageLimit,
    UnknownSchemeCode,
    WireError,
)
from app.core.schemes import SCHEMES
from app.wire import zap
from app.wire.reader import FrameReader

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _pad(b: bytes) -> bytes:
    return b + bytes(-len(b) % 8)


def raw_request(*, scheme=0x01, options=0, ctx=b"", count=None, pk_len=32, sig_len=64, pks=None, sigs=None,
                msgs=(b"",), offsets=None, blob=None, request_id=1, size=None, magic=b"ZAP\0", version=1,
                ftype=1, flags=0, reserved=0) -> bytes:
    """A request frame built with struct from docs/wire-format.md, every field overridable."""
    n = len(msgs) if count is None else count
    pks = pks if pks is not None else bytes(len(msgs) * pk_len)
    sigs = sigs if sigs is not None else bytes(len(msgs) * sig_len)
    if offsets is None:
        offsets = [0]
        for m in msgs:
            offsets.append(offsets[-1] + len(m))
    body = (struct.pack("<BBBBIII", scheme, options, len(ctx), reserved, n, pk_len, sig_len)
            + _pad(ctx) + _pad(pks) + _pad(sigs) + _pad(struct.pack(f"<{len(offsets)}I", *offsets))
            + _pad(b"".join(msgs) if blob is None else blob))
    total = 16 + len(body)
    return struct.pack("<4sHBBII", magic, version, ftype, flags, request_id, total if size is None else size) + body


@st.composite
def batches(draw, scheme_ids=tuple(SCHEMES)):
    scheme = SCHEMES[draw(st.sampled_from(scheme_ids))]
    n = draw(st.integers(1, 6))
    pk_len = draw(st.sampled_from(scheme.pk_lens))
    rng = random.Random(draw(st.integers(0, 2**32)))  # keys and signatures of up to 49 856 bytes
    pks = [rng.randbytes(pk_len) for _ in range(n)]
    sigs = [rng.randbytes(scheme.sig_len) for _ in range(n)]
    msgs = [draw(st.binary(max_size=40)) for _ in range(n)]
    ctx = draw(st.binary(max_size=255)) if scheme.has_context else b""
    secp = scheme.family == "secp256k1"
    return Batch.from_items(scheme, pks, msgs, sigs, ctx=ctx, prehashed=secp and draw(st.booleans()),
                            allow_high_s=secp and draw(st.booleans()))


def _base(arr: np.ndarray, buf) -> bool:
    """True when ``arr`` lies inside ``buf``'s memory (a view, not a copy), empty views included."""
    whole = np.frombuffer(buf, dtype=np.uint8)
    lo = whole.__array_interface__["data"][0]
    at = arr.__array_interface__["data"][0]
    return lo <= at and at + arr.nbytes <= lo + whole.nbytes and (arr.nbytes == 0 or np.shares_memory(arr, whole))


# ------------------------------------------------------------------ round trips
@pytest.mark.parametrize("scheme_id", list(SCHEMES))
@given(data=st.data())
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_request_round_trip_every_scheme(scheme_id, data):
    batch = data.draw(batches((scheme_id,)))
    rid = data.draw(st.integers(0, 2**32 - 1))
    frame = zap.encode_request(batch, rid)
    assert len(frame) % 8 == 0
    req = zap.decode_request(frame)
    got = req.batch
    assert req.request_id == rid
    assert got.scheme is batch.scheme
    assert np.array_equal(got.pks, batch.pks) and np.array_equal(got.sigs, batch.sigs)
    assert [bytes(got.message(i)) for i in range(len(got))] == [bytes(batch.message(i)) for i in range(len(batch))]
    assert (got.ctx, got.prehashed, got.allow_high_s) == (batch.ctx, batch.prehashed, batch.allow_high_s)
    # Zero copy: every column is a view into the frame buffer.
    for col in (got.pks, got.sigs, got.msgs, got.offsets):
        assert _base(col, frame)
    got.validate()
    assert zap.encode_request(got, rid) == frame


def test_sections_are_8_byte_aligned():
    batch = Batch.from_items(SCHEMES["ml-dsa-44"], [bytes(1312)] * 3, [b"a", b"bcd", b""], [bytes(2420)] * 3,
                             ctx=b"12345")
    frame = zap.encode_request(batch)
    got = zap.decode_request(frame).batch
    base = np.frombuffer(frame, dtype=np.uint8).__array_interface__["data"][0]
    for col in (got.pks, got.sigs, got.offsets, got.msgs):
        assert (col.__array_interface__["data"][0] - base) % 8 == 0


@given(verdicts=st.lists(st.booleans(), min_size=1, max_size=300), root=st.binary(min_size=32, max_size=32),
       rid=st.integers(0, 2**32 - 1))
@FUZZ
def test_response_round_trip(verdicts, root, rid):
    frame = zap.encode_response(rid, verdicts, root)
    got = zap.decode(frame)
    assert isinstance(got, zap.Response)
    assert (got.request_id, got.count, got.valid, got.merkle_root) == (rid, len(verdicts), sum(verdicts), root)
    assert got.verdicts.astype(bool).tolist() == verdicts
    assert _base(got.verdicts, frame)


@given(code=st.integers(0, 0xFFFF), message=st.text(max_size=2000), rid=st.integers(0, 2**32 - 1))
@FUZZ
def test_error_round_trip(code, message, rid):
    got = zap.decode(zap.encode_error(rid, code, message))
    assert isinstance(got, zap.ErrorFrame)
    assert (got.request_id, got.code) == (rid, code)
    assert message.encode().startswith(got.message.encode()) and len(got.message.encode()) <= 1024


def test_error_frame_of_exception_names_code():
    got = zap.decode(zap.error_frame(BadMagic("nope", field="magic"), 9))
    assert (got.request_id, got.code, got.name) == (9, 0x0001, "BAD_MAGIC")
    assert got.message == "BAD_MAGIC: nope (field magic)"


def test_secp256k1_both_key_lengths_and_options():
    for pk_len in (33, 65):
        frame = raw_request(scheme=0x02, options=3, pk_len=pk_len, msgs=[bytes(32)] * 2)
        b = zap.decode_request(frame).batch
        assert b.pks.shape == (2, pk_len) and b.prehashed and b.allow_high_s


# ------------------------------------------------------------------ named errors
@pytest.mark.parametrize("frame, error", [
    (raw_request(magic=b"ZAP1"), BadMagic),
    (raw_request(version=2), BadVersion),
    (raw_request(ftype=0x03), BadType),
    (raw_request(ftype=0x02), BadType),
    (raw_request(flags=2), BadReserved),  # 0x01 (batch id wanted) is the only request flag
    (raw_request(reserved=1), BadReserved),
    (raw_request(scheme=0x7F), UnknownSchemeCode),  # no scheme has code 0x7F
    (raw_request(options=0x04), BadOptions),
    (raw_request(options=0x01), BadOptions),  # prehashed is secp256k1's
    (raw_request(ctx=b"x"), BadContext),  # Ed25519 takes no context
    (raw_request(msgs=[], count=0), EmptyFrame),
    (raw_request(pk_len=33), BadKeyLength),
    (raw_request(scheme=0x02, pk_len=34), BadKeyLength),
    (raw_request(sig_len=65), BadSignatureLength),
    (raw_request(msgs=[b"ab", b"c"], offsets=[1, 2, 3]), BadOffsets),
    (raw_request(msgs=[b"ab", b"c"], offsets=[0, 2, 1], blob=b"a"), BadOffsets),
    (raw_request(size=24), BadSize),
    (raw_request(size=17), BadSize),
    (raw_request(count=5), BadSize),  # declares more items than the frame holds
    (b"ZAP\0\x01\x00", BadSize),
    (b"", BadSize),
])
def test_named_errors(frame, error):
    with pytest.raises(error) as info:
        zap.decode_request(frame)
    assert info.value.code == error.code and info.value.field


def test_offsets_may_repeat_but_not_decrease():
    good = bytearray(raw_request(msgs=[b"a", b"b"]))
    o = 16 + 16 + 64 + 128  # msg_offsets of a 2-item Ed25519 frame without ctx
    good[o + 4:o + 8] = struct.pack("<I", 2)  # [0, 2, 2]: message 1 is empty
    b = zap.decode_request(bytes(good)).batch
    assert (bytes(b.message(0)), bytes(b.message(1))) == (b"ab", b"")
    good[o + 4:o + 8] = struct.pack("<I", 3)  # [0, 3, 2]: decreasing
    with pytest.raises(BadOffsets):
        zap.decode_request(bytes(good))


def test_limits():
    frame = raw_request(msgs=[b"abcdef", b""])
    with pytest.raises(FrameTooLarge):
        zap.decode_request(frame, zap.Limits(max_frame_bytes=len(frame) - 8))
    with pytest.raises(CountLimit):
        zap.decode_request(frame, zap.Limits(max_items=1))
    with pytest.raises(MessageLimit):
        zap.decode_request(frame, zap.Limits(max_message_bytes=5))
    zap.decode_request(frame, zap.Limits(max_frame_bytes=len(frame), max_items=2, max_message_bytes=6))


def _pad_regions(ctx_len, count, pk_len, sig_len, msgs_len) -> dict[str, tuple[int, int]]:
    """Padding spans of a request frame, from the section formulas of docs/wire-format.md."""
    c = 32
    p = c + (ctx_len + 7) // 8 * 8
    s = p + (count * pk_len + 7) // 8 * 8
    o = s + (count * sig_len + 7) // 8 * 8
    m = o + (4 * (count + 1) + 7) // 8 * 8
    end = m + (msgs_len + 7) // 8 * 8
    return {"ctx": (c + ctx_len, p), "pks": (p + count * pk_len, s), "sigs": (s + count * sig_len, o),
            "msg_offsets": (o + 4 * (count + 1), m), "msgs": (m + msgs_len, end)}


@pytest.mark.parametrize("kw, shape", [
    (dict(scheme=0x10, ctx=b"abc", pk_len=1312, sig_len=2420, msgs=[b"x", b"", b"yz"]), (3, 3, 1312, 2420, 3)),
    (dict(msgs=[b"abc", b"d"]), (0, 2, 32, 64, 4)),
    (dict(scheme=0x02, pk_len=33, msgs=[b"q"]), (0, 1, 33, 64, 1)),
])
def test_nonzero_padding_rejected_in_every_section(kw, shape):
    frame = raw_request(**kw)
    zap.decode_request(frame)
    for name, (lo, hi) in _pad_regions(*shape).items():
        for at in range(lo, hi):
            bad = bytearray(frame)
            bad[at] = 0x80
            with pytest.raises(BadPadding) as info:
                zap.decode_request(bytes(bad))
            assert info.value.field == name


def test_every_padding_region_is_covered():
    seen = set()
    for shape in [(3, 3, 1312, 2420, 3), (0, 2, 32, 64, 4), (0, 1, 33, 64, 1)]:
        seen |= {name for name, (lo, hi) in _pad_regions(*shape).items() if hi > lo}
    assert seen == {"ctx", "pks", "sigs", "msg_offsets", "msgs"}


def test_response_and_error_frames_checked():
    good = bytearray(zap.encode_response(1, [True, False, True], bytes(32)))
    bad = bytearray(good)
    bad[56] = 2
    with pytest.raises(BadVerdict):
        zap.decode(bytes(bad))
    bad = bytearray(good)
    bad[20] = 3  # valid says 3, two verdicts are 1
    with pytest.raises(BadVerdict):
        zap.decode(bytes(bad))
    bad = bytearray(good)
    bad[-1] = 1
    with pytest.raises(BadPadding):
        zap.decode(bytes(bad))
    err = bytearray(zap.encode_error(1, 5, "ab"))
    err[24] = 0xFF
    with pytest.raises(BadUtf8):
        zap.decode(bytes(err))
    with pytest.raises(BadType):
        zap.decode_request(bytes(good))


# ------------------------------------------------------------------ hostile input
VALID = bytes(zap.encode_request(Batch.from_items(
    SCHEMES["ml-dsa-44"], [bytes(range(256)) * 5 + bytes(32)] * 2, [b"hello", b"zap"], [bytes(2420)] * 2,
    ctx=b"ctx")))


@given(cut=st.integers(0, len(VALID) - 1))
@FUZZ
def test_truncations_are_bad_size(cut):
    with pytest.raises(BadSize):
        zap.decode_request(VALID[:cut])


@given(cut=st.integers(0, len(VALID) - 1))
@FUZZ
def test_never_reads_past_the_buffer(cut):
    # The rest of the frame lies in memory right after the view; the decoder must not see it.
    backing = np.frombuffer(bytearray(VALID), dtype=np.uint8)
    with pytest.raises(BadSize):
        zap.decode_request(backing[:cut])


def test_trailing_bytes_are_bad_size():
    with pytest.raises(BadSize):
        zap.decode_request(VALID + bytes(8))


@given(bit=st.integers(0, len(VALID) * 8 - 1))
@FUZZ
def test_bit_flips_decode_or_raise_named_error(bit):
    frame = bytearray(VALID)
    frame[bit // 8] ^= 1 << (bit % 8)
    try:
        req = zap.decode_request(bytes(frame))
    except WireError as exc:
        assert exc.code and exc.wire_code < 0x0100
        expected = {0: BadMagic, 1: BadMagic, 2: BadMagic, 3: BadMagic, 4: BadVersion, 5: BadVersion,
                    6: BadType, 7: BadReserved, 12: (BadSize, FrameTooLarge), 13: (BadSize, FrameTooLarge),
                    14: (BadSize, FrameTooLarge), 15: (BadSize, FrameTooLarge), 19: BadReserved}.get(bit // 8)
        if expected is not None:
            assert isinstance(exc, expected)
    else:
        req.batch.validate()
        # Only a payload byte, the request id, the batch-id flag, or ctx_len growing into
        # ctx's zero padding.
        assert bit // 8 >= 32 or bit // 8 in (8, 9, 10, 11, 18) or bit == 7 * 8
        assert req.want_batch_id == (bit == 7 * 8)


header_ints = st.one_of(st.integers(0, 8), st.integers(0, 2**32 - 1), st.sampled_from([2**31, 2**32 - 1, 2**32 - 8]))


@given(scheme=st.integers(0, 255), options=st.integers(0, 255), ctx_len=st.integers(0, 255),
       count=header_ints, pk_len=header_ints, sig_len=header_ints, size=header_ints,
       tail=st.binary(max_size=600), ftype=st.sampled_from([0x01, 0x02, 0x7F, 0x00, 0xFF]))
@FUZZ
def test_hostile_headers_raise_only_wire_errors(scheme, options, ctx_len, count, pk_len, sig_len, size, tail, ftype):
    body = struct.pack("<BBBBIII", scheme, options, ctx_len, 0, count, pk_len, sig_len) + tail
    frame = struct.pack("<4sHBBII", b"ZAP\0", 1, ftype, 0, 7, size) + body
    for fn in (zap.decode, zap.decode_request, zap.decode_response, zap.decode_error):
        try:
            fn(frame)
        except WireError:
            pass


@given(data=st.binary(max_size=400))
@FUZZ
def test_random_bytes_raise_only_wire_errors(data):
    for buf in (data, b"ZAP\0\x01\x00" + data, b"ZAP\0\x01\x00\x01\x00" + data):
        try:
            zap.decode(buf)
        except WireError:
            pass


@given(offsets=st.lists(st.integers(0, 80) | st.integers(0, 2**32 - 1), min_size=2, max_size=6),
       blob=st.binary(max_size=80))
@FUZZ
def test_hostile_offsets(offsets, blob):
    frame = raw_request(msgs=[b""] * (len(offsets) - 1), offsets=offsets, blob=blob)
    try:
        req = zap.decode_request(frame)
    except WireError:
        return
    off = req.batch.offsets.astype(np.int64)
    assert off[0] == 0 and np.all(np.diff(off) >= 0) and off[-1] == req.batch.msgs.shape[0]
    # The messages section is the blob zero-padded to 8 bytes; offsets may reach into the
    # padding (those bytes are then message bytes, and the frame is legal).
    assert off[-1] <= len(blob) + (-len(blob) % 8)


# ------------------------------------------------------------------ stream assembly
@given(cuts=st.lists(st.integers(0, len(VALID)), max_size=8))
@FUZZ
def test_frame_reader_reassembles_any_split(cuts):
    bounds = sorted(set([0, len(VALID)] + cuts))
    reader = FrameReader()
    for lo, hi in zip(bounds, bounds[1:]):
        reader.feed(VALID[lo:hi])
    header, buf = reader.finish()
    assert header.size == len(VALID) and buf.tobytes() == VALID
    zap.decode_request(buf)


def test_frame_reader_refuses_before_allocating():
    allocated = []

    def alloc(n):
        allocated.append(n)
        return bytearray(n)

    with pytest.raises(BadSize):
        FrameReader(alloc=alloc, expected=len(VALID) - 8).feed(VALID)
    with pytest.raises(FrameTooLarge):
        FrameReader(zap.Limits(max_frame_bytes=64), alloc=alloc).feed(VALID[:16])
    with pytest.raises(BadMagic):
        FrameReader(alloc=alloc).feed(b"HTTP/1.1 200 OK\r\n")
    assert allocated == []
    r = FrameReader(alloc=alloc)
    r.feed(VALID[:20])
    assert allocated == [len(VALID)]
    with pytest.raises(BadSize):
        r.feed(VALID[20:] + b"\0" * 8)
    short = FrameReader()
    short.feed(VALID[:-8])
    with pytest.raises(BadSize):
        short.finish()
    with pytest.raises(BadSize):
        FrameReader().finish()


def test_frame_reader_fills_a_caller_buffer():
    slab = np.zeros(len(VALID) + 64, dtype=np.uint8)  # a pool slab is larger than the frame
    r = FrameReader(alloc=lambda n: slab)
    r.feed(VALID)
    _, buf = r.finish()
    req = zap.decode_request(buf)
    assert np.shares_memory(req.batch.pks, slab)


def test_encoder_refuses_what_the_decoder_would():
    with pytest.raises(BadContext):
        zap.encode_request(Batch.from_items(SCHEMES["ed25519"], [bytes(32)], [b""], [bytes(64)], ctx=b"x"))
    with pytest.raises(BadOptions):
        zap.encode_request(Batch.from_items(SCHEMES["ed25519"], [bytes(32)], [b""], [bytes(64)], prehashed=True))
    with pytest.raises(EmptyFrame):
        zap.encode_response(1, [], bytes(32))


def test_peek_request_id():
    assert zap.peek_request_id(raw_request(request_id=0xDEADBEEF)) == 0xDEADBEEF
    assert zap.peek_request_id(b"ZAP\0" + bytes(4)) == 0
    assert zap.peek_request_id(b"XAP\0" + bytes(20)) == 0


# ------------------------------------------------------------------ batch ids (FLAG_BATCH_ID)
def test_a_response_carries_the_batch_id_only_when_asked():
    bid = bytes(range(16))
    plain = zap.encode_response(5, [True, False, True], b"\x11" * 32)
    tagged = zap.encode_response(5, [True, False, True], b"\x11" * 32, bid)
    assert len(tagged) == len(plain) + 16 and tagged[7] == zap.FLAG_BATCH_ID and plain[7] == 0
    assert zap.decode_response(bytes(plain)).batch_id is None
    got = zap.decode_response(bytes(tagged))
    assert got.batch_id == bid and got.verdicts.tolist() == [1, 0, 1] and got.request_id == 5


def test_a_request_asks_for_the_batch_id_with_its_flag():
    pks, msgs, sigs = [b"\x01" * 32], [b"m"], [b"\x02" * 64]
    assert not zap.decode_request(bytes(zap.encode_items("ed25519", pks, msgs, sigs))).want_batch_id
    assert zap.decode_request(bytes(zap.encode_items("ed25519", pks, msgs, sigs, want_batch_id=True))).want_batch_id


def test_error_frames_take_no_flags_and_a_cut_batch_id_is_a_size_error():
    err = bytearray(zap.error_frame(BadMagic("x"), 1))
    err[7] = zap.FLAG_BATCH_ID
    with pytest.raises(BadReserved):
        zap.decode(bytes(err))
    tagged = zap.encode_response(1, [True], b"\x00" * 32, b"\x07" * 16)
    cut = bytearray(tagged[:-8])
    cut[12:16] = len(cut).to_bytes(4, "little")
    with pytest.raises(BadSize):
        zap.decode_response(bytes(cut))
