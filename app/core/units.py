"""Units shown to people: byte counts in binary units."""

from __future__ import annotations


def fmt_bytes(n: int | None) -> str:
    """``n`` bytes in binary units (``4.0 GiB``, ``512 B``); ``?`` for None."""
    if n is None:
        return "?"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"
