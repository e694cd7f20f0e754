"""bench/fuzz_zap.py in small: a sample of mutated frames through every ZAP decode entry point
never raises anything but a ZapVerifyError (the full run, 1,000,000 frames, is in
bench/results/fuzz_zap.md)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from app.wire import zap

_SPEC = importlib.util.spec_from_file_location("fuzz_zap", Path(__file__).resolve().parent.parent / "bench" /
                                               "fuzz_zap.py")
assert _SPEC is not None and _SPEC.loader is not None
fuzz_zap = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(fuzz_zap)


def test_a_sample_of_mutated_frames_never_crashes_a_decoder():
    result = fuzz_zap.run(3000, seed=7)
    assert result["crashes"] == []
    entries = {key.split(":")[0] for key in result["outcomes"]}
    assert entries == {"decode_request", "decode_response", "decode", "frame_reader"}
    # The mutations reach past the header checks: some frames still decode, others fail deep inside.
    assert result["outcomes"].get("decode_request:ok", 0) > 0 and result["outcomes"].get("decode:ok", 0) > 0
    assert {"BAD_OFFSETS", "BAD_PADDING", "BAD_KEY_LENGTH"} & {k.split(":")[1] for k in result["outcomes"]}


def test_the_fuzzer_reports_a_decoder_that_crashes(monkeypatch):
    real = zap.decode_response

    def broken(buf, *args, **kw):
        if len(buf) % 16 == 8:
            raise IndexError("out of range")
        return real(buf, *args, **kw)

    monkeypatch.setattr(zap, "decode_response", broken)
    result = fuzz_zap.run(300, seed=3)
    assert result["crashes"] and result["crashes"][0]["entry"] == "decode_response"
    assert result["crashes"][0]["error"] == "IndexError: out of range"


@pytest.mark.parametrize("seed", [1, 2])
def test_mutations_are_reproducible(seed):
    assert fuzz_zap.run(50, seed=seed)["outcomes"] == fuzz_zap.run(50, seed=seed)["outcomes"]
