"""What the ``scripts/gen_*_tables`` programs of the short-Weierstrass curves share: affine
arithmetic on y² = x³ + a·x + b over GF(p) (to derive fixed-base tables from the curve's
definition), the sliding-window schedule of a fixed exponent (Fermat inversions, square
roots) and the rendering of integers as the kernels' 32-bit limbs.  Used by
gen_secp256k1_tables and gen_p256_tables."""

from __future__ import annotations

from dataclasses import dataclass

#: An affine point (x, y), or None for the point at infinity.
Point = tuple[int, int] | None


@dataclass(frozen=True)
class Curve:
    """y² = x³ + a·x + b over GF(p) (SEC 1 §2.2.1), affine group law with None as ∞."""

    p: int
    a: int
    b: int

    def on_curve(self, pt: Point) -> bool:
        assert pt is not None
        x, y = pt
        return (y * y - x * x * x - self.a * x - self.b) % self.p == 0

    def add(self, p1: Point, p2: Point) -> Point:
        p = self.p
        if p1 is None:
            return p2
        if p2 is None:
            return p1
        (x1, y1), (x2, y2) = p1, p2
        if x1 == x2:
            if (y1 + y2) % p == 0:
                return None
            lam = (3 * x1 * x1 + self.a) * pow(2 * y1, -1, p) % p
        else:
            lam = (y2 - y1) * pow(x2 - x1, -1, p) % p
        x3 = (lam * lam - x1 - x2) % p
        return x3, (lam * (x1 - x3) - y1) % p

    def mul(self, k: int, pt: Point) -> Point:
        out: Point = None
        while k:
            if k & 1:
                out = self.add(out, pt)
            pt = self.add(pt, pt)
            k >>= 1
        return out

    def odd_multiples(self, base: Point, count: int) -> list[tuple[int, int]]:
        """(2i+1)·base for i < count, each checked to be on the curve."""
        two = self.add(base, base)
        out, pt = [], base
        for _ in range(count):
            assert pt is not None and self.on_curve(pt)
            out.append(pt)
            pt = self.add(pt, two)
        return out


def sliding_window_schedule(e: int, w: int) -> list[tuple[int, int]]:
    """Steps (squarings, odd power index or −1) computing x^e from the odd powers x^(2j+1).

    Starting from 1 (represented by the first step, whose squarings are zero), each step
    squares the accumulator ``squarings`` times then multiplies by x^(2·index+1) when the
    index is not −1.  The first step sets the accumulator to its odd power.
    """
    bits = bin(e)[2:]
    steps: list[tuple[int, int]] = []
    i, pending = 0, 0
    while i < len(bits):
        if bits[i] == "0":
            pending += 1
            i += 1
            continue
        j = min(i + w, len(bits))
        while bits[j - 1] == "0":
            j -= 1
        val = int(bits[i:j], 2)
        steps.append((pending + (j - i), (val - 1) // 2))
        pending = 0
        i = j
    if pending:
        steps.append((pending, -1))
    # Check by replaying the schedule on exponents.
    acc = 0
    for n_sq, idx in steps:
        acc <<= n_sq
        if idx >= 0:
            acc += 2 * idx + 1
    assert acc == e
    return steps


def limbs(v: int, count: int = 8) -> str:
    """``v`` as a C initializer of ``count`` 32-bit limbs, least significant first."""
    assert 0 <= v < 2 ** (32 * count)
    return "{" + ", ".join(f"0x{(v >> (32 * i)) & 0xFFFFFFFF:08X}u" for i in range(count)) + "}"


def schedule_lines(prefix: str, what: str, steps: list[tuple[int, int]], w: int) -> list[str]:
    """C declarations of a sliding-window schedule: ``<prefix>_STEPS``, ``<prefix>_ODD_POWERS``,
    ``<prefix>_SQ[]`` (squarings per step) and ``<prefix>_IDX[]`` (odd power index or −1)."""
    return [
        f"/* {what} by sliding windows of {w} bits over the odd powers x^1..x^{2**w - 1}:",
        f" * step i squares {prefix}_SQ[i] times, then multiplies by x^(2*{prefix}_IDX[i]+1)"
        " unless the index is -1. */",
        f"#define {prefix}_STEPS {len(steps)}",
        f"#define {prefix}_ODD_POWERS {2 ** (w - 1)}",
        f"ZV_CONSTANT zv_u8 {prefix}_SQ[{prefix}_STEPS] = {{" + ", ".join(str(s) for s, _ in steps) + "};",
        f"ZV_CONSTANT signed char {prefix}_IDX[{prefix}_STEPS] = {{" + ", ".join(str(i) for _, i in steps) + "};",
    ]
