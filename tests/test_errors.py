"""The error hierarchy (app/core/errors.py): stable codes and wire codes, documented in docs/wire-format.md."""

from __future__ import annotations

import re
from pathlib import Path

from app.core import errors

DOC = Path(__file__).resolve().parent.parent / "docs" / "wire-format.md"


def _own_wire_codes() -> dict[int, type]:
    out: dict[int, type] = {}
    for cls in errors.error_classes():
        if "wire_code" in cls.__dict__:
            assert cls.wire_code not in out, f"{cls.__name__} reuses wire code {cls.wire_code:#06x}"
            out[cls.wire_code] = cls
    return out


def test_wire_codes_are_unique_u16_and_split_by_fault():
    for code, cls in _own_wire_codes().items():
        assert 0 < code <= 0xFFFF
        assert (code < 0x0100) == (cls.status < 500), cls.__name__


def test_by_wire_code_finds_each_class():
    for code, cls in _own_wire_codes().items():
        assert errors.by_wire_code(code) is cls
    assert errors.by_wire_code(0xBEEF) is None


def test_documented_table_matches_the_code():
    rows = re.findall(r"^\| (0x[0-9A-F]{4}) \| `([A-Z_0-9]+)` \| (\d{3}) \|", DOC.read_text(), re.M)
    documented = {int(code, 16): (name, int(status)) for code, name, status in rows}
    in_code = {code: (cls.code, cls.status) for code, cls in _own_wire_codes().items()}
    assert documented == in_code


def test_wire_errors_are_request_errors_with_4xx():
    for cls in errors.error_classes():
        if issubclass(cls, errors.WireError):
            assert issubclass(cls, errors.RequestError) and 400 <= cls.status < 500


def test_remote_error_carries_the_servers_fields():
    e = errors.RemoteError("bad", code="BAD_MAGIC", status=400, wire_code=1, field="magic")
    assert (e.code, e.status, e.wire_code, e.field) == ("BAD_MAGIC", 400, 1, "magic")
    assert e.to_dict() == {"code": "BAD_MAGIC", "message": "bad", "field": "magic"}
