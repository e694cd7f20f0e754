/* mont.cuh — multiprecision integers of N 32-bit limbs and Montgomery arithmetic modulo an
 * odd modulus, written once for every prime field and scalar ring of the kernels.
 *
 * Who uses it: the secp256k1 scalar (secp256k1_scalar.cuh, zv_k1_sc_*: N = 8, the group
 * order n), the P-256 field and scalar (p256_field.cuh, p256_scalar.cuh: N = 8, p and n;
 * their inversions and square root by zv_mont_pow_schedule), the BLS12-381 base field (bls12_381_fp.cuh, zv_fp_*: N = 12, p), and the wide
 * 2N-limb products of the secp256k1 field (secp256k1_field.cuh), the Ed25519 field
 * (fe25519.cuh) and the GLV split (secp256k1.cuh).  A family keeps its own type (a struct
 * holding `zv_u32 v[N]`) and its public names as thin wrappers over these templates, the way
 * sppark's ff/mont_t.cuh serves every field from one class and blst's mul_mont_n every
 * modulus from one routine.
 *
 * Representation.  An N-limb value is zv_u32 v[N], least significant limb first, value
 * Σ v[i]·2^(32i) < 2^(32N).  Why 32-bit limbs: the GPU multiplies 32 × 32 → 64 natively
 * (IMAD.WIDE.U32) and emulates 64 × 64 → 128 with four of those plus carries; a 64-bit
 * accumulator holds a limb product plus two limbs exactly ((2^32−1)^2 + 2(2^32−1) = 2^64 − 1),
 * so every carry chain below is exact in plain C on the host (g++) and the GPU alike.
 *
 * Modulus traits.  The zv_mont_* templates take a traits type M:
 *   struct M {
 *       static constexpr int N = ...;          // limbs
 *       static constexpr zv_u32 N0 = ...;      // −m^−1 mod 2^32 (m is the modulus; odd)
 *       static ZV_HD_MEMBER void modulus(zv_u32 m[N]); // writes the limbs of m
 *       static ZV_HD_MEMBER const zv_u32 *r2();        // R^2 mod m, R = 2^(32N)
 *   };
 * Each function below copies the modulus into a local array first, as the field code it
 * replaced declared `const zv_u32 p[12] = …` at its top: after unrolling, a modulus written
 * as a local initializer (BLS12-381's p) becomes instruction immediates and one read from
 * ZV_CONSTANT memory (secp256k1's n) constant-bank operands, and nvcc emits the same PTX
 * for the BLS12-381 product and square as before the template (an accessor called per
 * limb instead reorders the carry additions and costs ptxas registers).
 * Nothing here needs spare bits above m: a modulus whose top bit is set (secp256k1's n)
 * carries one bit above N limbs where the bounds below say so; one with 2m < 2^(32N)
 * (BLS12-381's p, 381 bits) never does, which ZV_CHECK verifies.
 *
 * Montgomery form of x is x·R mod m.  Contracts (input ranges → output range; in verify
 * host builds, zv_port.cuh, ZV_CHECK tests every output bound and every input bound that
 * the output bound does not already imply):
 *   zv_mont_reduce_once(r, t, carry): t + carry·2^(32N) < 2m            → t mod m, < m
 *   zv_mont_add(r, a, b):  a, b < m                                      → a + b mod m, < m
 *   zv_mont_sub(r, a, b):  a, b < m                                      → a − b mod m, < m
 *   zv_mont_neg(r, a):     a < m                                         → −a mod m, < m
 *   zv_mont_mul(r, a, b):  a < 2^(32N) (any N-limb value), b < m         → a·b·R^−1 mod m, < m
 *   zv_mont_sqr(r, a):     a < m                                         → a²·R^−1 mod m, < m
 *   zv_mont_redc(r, t):    t < m·R (2N limbs; t is overwritten)          → t·R^−1 mod m, < m
 *   zv_mont_to(r, x):      x < 2^(32N)                                   → x·R mod m, < m
 *   zv_mont_from(r, a):    a < 2^(32N)                                   → a·R^−1 mod m, < m
 *   zv_mont_lt_m(a):       any                                           → a < m
 * The multiplications' bounds (a < R, b < m, so a·b < R·m) are what the single final
 * subtraction needs: see zv_mont_mul.  Outputs are fully reduced (< m), so equality of
 * elements is limb equality (zv_mp_eq) and encoding needs no further reduction.
 *
 * Plain multiprecision (no modulus; any N-limb inputs):
 *   zv_mp_lt(a, b) → a < b;  zv_mp_is_zero(a);  zv_mp_eq(a, b);  zv_mp_cmov(r, a, flag);
 *   zv_mp_mul_wide(t, a, b) → t = a·b exactly (2N limbs);
 *   zv_mp_sqr_wide(t, a)    → t = a² exactly (2N limbs).
 *
 * Aliasing: r may be the same array as any input (each function reads limb i of every
 * input before it writes limb i of r); t of the wide products must not overlap a or b.
 *
 * Index (public functions, in source order; the comment at each says more):
 *   zv_mp_lt(a, b)                              a < b (the borrow out of a − b)
 *   zv_mp_is_zero(a)
 *   zv_mp_eq(a, b)
 *   zv_mp_cmov(r, a, flag)                      r = a if flag else r; flag is 0 or 1; branch-free
 *   zv_mp_mul_wide(t, a, b)                     t = a·b, 2N limbs, by operand scanning
 *   zv_mp_sqr_wide(t, a)                        t = a², 2N limbs
 *   zv_mont_has_spare_bit()                     Whether 2m < 2^(32N) (the top bit of m is clear)
 *   zv_mont_lt_m(a)                             a < m
 *   zv_mont_reduce_once(r, t, carry)            r = t − m if t ≥ m else t, for t < 2m given as N limbs plus
 *                                               a carry bit (the bit 2^(32N))
 *   zv_mont_add(r, a, b)                        a + b for a, b < m
 *   zv_mont_sub(r, a, b)                        a − b for a, b < m: on a borrow the difference is in (−m, 0)
 *                                               and adding m brings it to [0, m)
 *   zv_mont_neg(r, a)                           −a = 0 − a for a < m: m − a for a ≠ 0, 0 for a = 0
 *   zv_mont_mul(r, a, b)
 *   zv_mont_redc(r, t)                          Montgomery reduction t·R^−1 mod m of a 2N-limb t < m·R
 *   zv_mont_sqr(r, a)                           a²·R^−1 mod m for a < m
 *   zv_mont_to(r, x)                            To Montgomery form: x·R^2·R^−1 = x·R mod m, for any N-limb x
 *   zv_mont_from(r, a)                          Out of Montgomery form: a·1·R^−1 mod m (a Montgomery product
 *                                               with 1), for any N-limb a
 *   zv_mont_pow_schedule(r, a, sq, idx, steps)
 */
#ifndef ZV_MONT_CUH
#define ZV_MONT_CUH

#include "zv_port.cuh"

/* ---- plain multiprecision ---------------------------------------------------------- */

/* a < b (the borrow out of a − b). */
template <int N> ZV_HD int zv_mp_lt(const zv_u32 a[N], const zv_u32 b[N]) {
    zv_i64 c = 0;
    ZV_UNROLL
    for (int i = 0; i < N; i++) { c += (zv_i64)a[i] - (zv_i64)b[i]; c >>= 32; }
    return c != 0;
}

template <int N> ZV_HD int zv_mp_is_zero(const zv_u32 a[N]) {
    zv_u32 acc = 0;
    for (int i = 0; i < N; i++) acc |= a[i];
    return acc == 0;
}

template <int N> ZV_HD int zv_mp_eq(const zv_u32 a[N], const zv_u32 b[N]) {
    zv_u32 acc = 0;
    for (int i = 0; i < N; i++) acc |= a[i] ^ b[i];
    return acc == 0;
}

/* r = a if flag else r; flag is 0 or 1; branch-free. */
template <int N> ZV_HD void zv_mp_cmov(zv_u32 r[N], const zv_u32 a[N], int flag) {
    zv_u32 mask = (zv_u32)0 - (zv_u32)flag;
    for (int i = 0; i < N; i++) r[i] = (r[i] & ~mask) | (a[i] & mask);
}

/* t = a·b, 2N limbs, by operand scanning: row i adds a_i·b to t at limb i; each step is one
 * 32 × 32 + 32 + 32 → 64 multiply-add (exact, see the header comment). */
template <int N> ZV_HD void zv_mp_mul_wide(zv_u32 t[2 * N], const zv_u32 a[N], const zv_u32 b[N]) {
    ZV_UNROLL
    for (int i = 0; i < 2 * N; i++) t[i] = 0;
    ZV_UNROLL
    for (int i = 0; i < N; i++) {
        zv_u64 c = 0;
        ZV_UNROLL
        for (int j = 0; j < N; j++) {
            c += (zv_u64)a[i] * b[j] + t[i + j];
            t[i + j] = (zv_u32)c; c >>= 32;
        }
        t[i + N] = (zv_u32)c;
    }
}

/* t = a², 2N limbs: the N(N−1)/2 cross products once, doubled by a one-bit shift, plus the N
 * squares (for N = 12: 78 limb products instead of 144).  The cross sum is below a²/2 <
 * 2^(64N−1), so doubling it fits 2N limbs, and a² < 2^(64N) leaves no carry out. */
template <int N> ZV_HD void zv_mp_sqr_wide(zv_u32 t[2 * N], const zv_u32 a[N]) {
    ZV_UNROLL
    for (int i = 0; i < 2 * N; i++) t[i] = 0;
    ZV_UNROLL
    for (int i = 0; i < N - 1; i++) {
        zv_u64 c = 0;
        ZV_UNROLL
        for (int j = i + 1; j < N; j++) {
            c += (zv_u64)a[i] * a[j] + t[i + j];
            t[i + j] = (zv_u32)c; c >>= 32;
        }
        t[i + N] = (zv_u32)c;
    }
    t[2 * N - 1] = t[2 * N - 2] >> 31;
    ZV_UNROLL
    for (int k = 2 * N - 2; k > 0; k--) t[k] = (t[k] << 1) | (t[k - 1] >> 31);
    t[0] <<= 1;
    zv_u64 c = 0;
    ZV_UNROLL
    for (int i = 0; i < N; i++) {
        c += (zv_u64)a[i] * a[i] + t[2 * i];
        t[2 * i] = (zv_u32)c; c >>= 32;
        c += t[2 * i + 1];
        t[2 * i + 1] = (zv_u32)c; c >>= 32;
    }
}

/* ---- Montgomery arithmetic modulo M ------------------------------------------------ */

/* Whether 2m < 2^(32N) (the top bit of m is clear): then no sum or product below carries a
 * bit out of N limbs. */
template <class M> ZV_HD int zv_mont_has_spare_bit() {
    zv_u32 m[M::N];
    M::modulus(m);
    return (m[M::N - 1] >> 31) == 0;
}

/* a < m. */
template <class M> ZV_HD int zv_mont_lt_m(const zv_u32 a[M::N]) {
    zv_u32 m[M::N];
    M::modulus(m);
    zv_i64 c = 0;
    ZV_UNROLL
    for (int i = 0; i < M::N; i++) { c += (zv_i64)a[i] - (zv_i64)m[i]; c >>= 32; }
    return c != 0;  /* a − m borrowed */
}

/* r = t − m if t ≥ m else t, for t < 2m given as N limbs plus a carry bit (the bit 2^(32N));
 * branch-free. */
template <class M> ZV_HD void zv_mont_reduce_once(zv_u32 r[M::N], const zv_u32 t[M::N], zv_u32 carry) {
    constexpr int N = M::N;
    ZV_CHECK(carry <= 1);
    zv_u32 m[N];
    M::modulus(m);
    zv_u32 s[N];
    zv_i64 c = 0;
    ZV_UNROLL
    for (int i = 0; i < N; i++) { c += (zv_i64)t[i] - (zv_i64)m[i]; s[i] = (zv_u32)c; c >>= 32; }
    /* t ≥ m exactly when the subtraction did not borrow beyond the carry bit. */
    zv_u32 keep_t = (zv_u32)0 - (zv_u32)((zv_i64)carry + c < 0);
    ZV_UNROLL
    for (int i = 0; i < N; i++) r[i] = (t[i] & keep_t) | (s[i] & ~keep_t);
    ZV_CHECK(zv_mont_lt_m<M>(r));
}

/* a + b for a, b < m: the sum is below 2m (a carry bit only when m's top bit is set), so one
 * conditional subtraction. */
template <class M> ZV_HD void zv_mont_add(zv_u32 r[M::N], const zv_u32 a[M::N], const zv_u32 b[M::N]) {
    constexpr int N = M::N;
    ZV_CHECK(zv_mont_lt_m<M>(a) && zv_mont_lt_m<M>(b));
    zv_u32 t[N];
    zv_u64 c = 0;
    ZV_UNROLL
    for (int i = 0; i < N; i++) { c += (zv_u64)a[i] + b[i]; t[i] = (zv_u32)c; c >>= 32; }
    zv_mont_reduce_once<M>(r, t, (zv_u32)c);
}

/* a − b for a, b < m: on a borrow the difference is in (−m, 0) and adding m brings it to
 * [0, m). */
template <class M> ZV_HD void zv_mont_sub(zv_u32 r[M::N], const zv_u32 a[M::N], const zv_u32 b[M::N]) {
    constexpr int N = M::N;
    ZV_CHECK(zv_mont_lt_m<M>(a) && zv_mont_lt_m<M>(b));
    zv_u32 m[N];
    M::modulus(m);
    zv_u32 t[N];
    zv_i64 c = 0;
    ZV_UNROLL
    for (int i = 0; i < N; i++) { c += (zv_i64)a[i] - (zv_i64)b[i]; t[i] = (zv_u32)c; c >>= 32; }
    zv_u32 mask = (zv_u32)c;  /* all ones on a borrow (c = −1), else 0 */
    zv_u64 d = 0;
    ZV_UNROLL
    for (int i = 0; i < N; i++) { d += (zv_u64)t[i] + (m[i] & mask); r[i] = (zv_u32)d; d >>= 32; }
    ZV_CHECK(zv_mont_lt_m<M>(r));
}

/* −a = 0 − a for a < m: m − a for a ≠ 0, 0 for a = 0. */
template <class M> ZV_HD void zv_mont_neg(zv_u32 r[M::N], const zv_u32 a[M::N]) {
    zv_u32 z[M::N];
    for (int i = 0; i < M::N; i++) z[i] = 0;
    zv_mont_sub<M>(r, z, a);
}

/* Montgomery product a·b·R^−1 mod m by CIOS (Koç, Acar, Kaliski, "Analyzing and comparing
 * Montgomery multiplication algorithms", IEEE Micro 1996): N rounds of one row t += a·b_i
 * followed by one reduction row t = (t + q·m)/2^32, q = t_0·(−m^−1) mod 2^32, which clears
 * the low limb so the accumulator shifts down by one limb.
 * Bounds (a < 2^(32N), b < m): after k rounds t = (a·(b mod 2^32k) + Q·m)/2^32k with
 * Q < 2^32k, so t < a + m < 2^(32N+1) — N limbs and a carry limb of at most 1 — and at the
 * end t = (a·b + Q·m)/R < 2m because a·b < R·m, so one conditional subtraction leaves the
 * result below m.  When 2m < 2^(32N) the final carry limb is 0. */
template <class M> ZV_HD void zv_mont_mul(zv_u32 r[M::N], const zv_u32 a[M::N], const zv_u32 b[M::N]) {
    constexpr int N = M::N;
    ZV_CHECK(zv_mont_lt_m<M>(b));
    zv_u32 m[N];
    M::modulus(m);
    zv_u32 t[N];
    zv_u32 t_hi = 0;  /* the carry limb of t (t < a + m < 2^(32N+1): at most 1) */
    ZV_UNROLL
    for (int j = 0; j < N; j++) t[j] = 0;
    ZV_UNROLL
    for (int i = 0; i < N; i++) {
        zv_u64 c = 0;
        ZV_UNROLL
        for (int j = 0; j < N; j++) {
            c += (zv_u64)a[j] * b[i] + t[j];
            t[j] = (zv_u32)c; c >>= 32;
        }
        zv_u64 top = (zv_u64)t_hi + c;  /* t + a·b_i < 2^(32N+1) + 2^(32N+32): top < 2^33 */
        zv_u32 q = t[0] * M::N0;
        c = ((zv_u64)q * m[0] + t[0]) >> 32;  /* the low limb becomes 0 by the choice of q */
        ZV_UNROLL
        for (int j = 1; j < N; j++) {
            c += (zv_u64)q * m[j] + t[j];
            t[j - 1] = (zv_u32)c; c >>= 32;
        }
        c += top;
        t[N - 1] = (zv_u32)c;
        t_hi = (zv_u32)(c >> 32);
        ZV_CHECK(t_hi <= 1);
    }
    ZV_CHECK(t_hi == 0 || !zv_mont_has_spare_bit<M>());
    zv_mont_reduce_once<M>(r, t, t_hi);
}

/* Montgomery reduction t·R^−1 mod m of a 2N-limb t < m·R (separated operand scanning: N
 * rows t += q_i·m·2^32i, each clearing limb i).  Row i's carry out of limb i + N (0 or 1) is
 * owed to limb i + N + 1, which row i + 1 adds in, so no row propagates to the top; after
 * row N − 1 it is the bit above t's 2N limbs.  The result (t + Q·m)/R < (m·R + R·m)/R = 2m,
 * so one conditional subtraction finishes; the carry is 0 when 2m < 2^(32N).  t is
 * overwritten. */
template <class M> ZV_HD void zv_mont_redc(zv_u32 r[M::N], zv_u32 t[2 * M::N]) {
    constexpr int N = M::N;
    zv_u32 m[N];
    M::modulus(m);
    zv_u32 carry = 0;
    ZV_UNROLL
    for (int i = 0; i < N; i++) {
        zv_u32 q = t[i] * M::N0;
        zv_u64 d = 0;
        ZV_UNROLL
        for (int j = 0; j < N; j++) {
            d += (zv_u64)q * m[j] + t[i + j];
            t[i + j] = (zv_u32)d; d >>= 32;
        }
        d += (zv_u64)t[i + N] + carry;
        t[i + N] = (zv_u32)d;
        carry = (zv_u32)(d >> 32);
    }
    ZV_CHECK(carry == 0 || !zv_mont_has_spare_bit<M>());
    zv_mont_reduce_once<M>(r, t + N, carry);
}

/* a²·R^−1 mod m for a < m: the wide square (zv_mp_sqr_wide) then zv_mont_redc, whose input
 * bound holds because a² < m·m < m·R. */
template <class M> ZV_HD void zv_mont_sqr(zv_u32 r[M::N], const zv_u32 a[M::N]) {
    ZV_CHECK(zv_mont_lt_m<M>(a));
    zv_u32 t[2 * M::N];
    zv_mp_sqr_wide<M::N>(t, a);
    zv_mont_redc<M>(r, t);
}

/* To Montgomery form: x·R^2·R^−1 = x·R mod m, for any N-limb x. */
template <class M> ZV_HD void zv_mont_to(zv_u32 r[M::N], const zv_u32 x[M::N]) { zv_mont_mul<M>(r, x, M::r2()); }

/* Out of Montgomery form: a·1·R^−1 mod m (a Montgomery product with 1), for any N-limb a. */
template <class M> ZV_HD void zv_mont_from(zv_u32 r[M::N], const zv_u32 a[M::N]) {
    zv_u32 one[M::N];
    for (int i = 0; i < M::N; i++) one[i] = 0;
    one[0] = 1;
    zv_mont_mul<M>(r, a, one);
}

/* x^e·R mod m for a = x·R < m (Montgomery form in and out), by a generated sliding-window
 * schedule of a fixed exponent e (scripts/lib/curve_tables.py sliding_window_schedule): the
 * odd powers x^1, x^3, ..., x^(2·ODD − 1) first, then step i squares sq[i] times and
 * multiplies by x^(2·idx[i] + 1) unless idx[i] is −1; step 0 starts the accumulator at its
 * odd power.  Fixed exponents (Fermat inversions, square roots) make it branch-free in the
 * data and the same for every thread of a warp. */
template <class M, int ODD>
ZV_HD void zv_mont_pow_schedule(zv_u32 r[M::N], const zv_u32 a[M::N], const zv_u8 *sq, const signed char *idx,
                                int steps) {
    constexpr int N = M::N;
    zv_u32 pw[ODD][N], x2[N], acc[N];
    for (int i = 0; i < N; i++) pw[0][i] = a[i];
    zv_mont_sqr<M>(x2, a);
    for (int j = 1; j < ODD; j++) zv_mont_mul<M>(pw[j], pw[j - 1], x2);
    for (int i = 0; i < N; i++) acc[i] = pw[idx[0]][i];
    for (int s = 1; s < steps; s++) {
        ZV_NO_UNROLL
        for (int q = 0; q < sq[s]; q++) zv_mont_sqr<M>(acc, acc);
        if (idx[s] >= 0) zv_mont_mul<M>(acc, acc, pw[idx[s]]);
    }
    for (int i = 0; i < N; i++) r[i] = acc[i];
}

#endif /* ZV_MONT_CUH */
