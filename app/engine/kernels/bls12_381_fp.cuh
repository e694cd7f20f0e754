/* bls12_381_fp.cuh — arithmetic in Fp, the 381-bit base field of BLS12-381
 * (p = 0x1a0111ea…ffffaaab, draft-irtf-cfrg-pairing-friendly-curves-11 §4.2.1).
 *
 * Representation: zv_fp holds twelve 32-bit limbs, least significant first, of the
 * Montgomery form a·R mod p with R = 2^384.  Every zv_fp passed to or returned by a
 * function here is FULLY reduced (value < p; checked with ZV_CHECK), so equality is limb
 * equality and encoding needs no final reduction.  The one exception is the internal
 * zv_fp_mont_mul, whose left operand may be any 384-bit value (see there).
 *
 * Why 12 × 32 bits: the GPU multiplies 32 × 32 → 64 natively (IMAD.WIDE.U32); 64-bit limbs
 * would emulate every 64 × 64 → 128 product with four of those plus carry handling.  A
 * 64-bit accumulator holds a limb product plus two limbs exactly ((2^32−1)^2 + 2(2^32−1)
 * = 2^64 − 1), so the same C is exact on the host (g++, the tests) and the GPU.
 *
 * Multiplication is Montgomery's CIOS (Koç, Acar, Kaliski, "Analyzing and comparing
 * Montgomery multiplication algorithms", IEEE Micro 1996): twelve rounds of one row of
 * a·b_i followed by one reduction row m·p, m = t_0·(−p^−1) mod 2^32, which clears the low
 * limb so the accumulator shifts down by 32 bits.  Bounds (a < 2^384, b < p): after k
 * rounds t = (a·(b mod 2^32k) + M·p)/2^32k with M < 2^32k, so t < a + p < 2^385 (12 limbs
 * and a carry limb ≤ 1; t < 2p when a < p), and at the end t = (a·b + M·p)/R < 2p because
 * a·b < R·p: one conditional subtraction gives a·b·R^−1 mod p, fully reduced.
 *
 * Inversion is Fermat, a^(p−2), and the square root a^((p+1)/4) (p ≡ 3 mod 4): fixed
 * exponentiations by square-and-multiply over the exponent's bits, the same sequence for
 * every thread of a warp.  A constant-time method is not needed (verification handles
 * public data only); a variable-time binary GCD would be faster per call but diverges
 * per thread on the GPU, and inversions are rare here (one per point normalization).
 */
#ifndef ZV_BLS12_381_FP_CUH
#define ZV_BLS12_381_FP_CUH

#include "zv_port.cuh"

typedef struct { zv_u32 v[12]; } zv_fp;  /* little-endian limbs, Montgomery form, value < p */
/* c0 + c1·u; declared here because the generated tables hold Fp2 constants (arithmetic:
 * bls12_381_fp2.cuh). */
typedef struct { zv_fp c0, c1; } zv_fp2;

#include "bls12_381_tables.cuh"

/* Large routines stay out of line on the GPU (exponentiations, curve operations): a
 * product inlines to several hundred instructions, and inlining every call site of a
 * 380-step loop would only grow the code. */
#ifndef ZV_BLS_NOINLINE
#if ZV_DEVICE_BUILD
#define ZV_BLS_NOINLINE __host__ __device__ __noinline__
#else
#define ZV_BLS_NOINLINE static
#endif
#endif

/* Whether the 12-limb value a is below p (limb-wise compare from the top). */
ZV_HD int zv_fp_limbs_lt_p(const zv_u32 a[12]) {
    const zv_u32 p[12] = ZV_BLS_P_INIT;
    zv_i64 c = 0;
    ZV_UNROLL
    for (int i = 0; i < 12; i++) { c += (zv_i64)a[i] - (zv_i64)p[i]; c >>= 32; }
    return c != 0;  /* a − p borrowed */
}

ZV_HD void zv_fp_zero(zv_fp *r) {
    for (int i = 0; i < 12; i++) r->v[i] = 0;
}

ZV_HD void zv_fp_one(zv_fp *r) { *r = ZV_BLS_FP_ONE; }

/* r = t − p if t ≥ p else t, for t < 2p given as 12 limbs plus a carry bit; branch-free. */
ZV_HD void zv_fp_reduce_once(zv_fp *r, const zv_u32 t[12], zv_u32 carry) {
    const zv_u32 p[12] = ZV_BLS_P_INIT;
    zv_u32 s[12];
    zv_i64 c = 0;
    ZV_UNROLL
    for (int i = 0; i < 12; i++) { c += (zv_i64)t[i] - (zv_i64)p[i]; s[i] = (zv_u32)c; c >>= 32; }
    /* t ≥ p exactly when the subtraction did not borrow beyond the carry bit. */
    zv_u32 keep_t = (zv_u32)0 - (zv_u32)((zv_i64)carry + c < 0);
    ZV_UNROLL
    for (int i = 0; i < 12; i++) r->v[i] = (t[i] & keep_t) | (s[i] & ~keep_t);
    ZV_CHECK(zv_fp_limbs_lt_p(r->v));
}

/* a + b, both < p: the sum is < 2p < 2^382 (no carry out of 12 limbs), one subtraction. */
ZV_HD void zv_fp_add(zv_fp *r, const zv_fp *a, const zv_fp *b) {
    ZV_CHECK(zv_fp_limbs_lt_p(a->v) && zv_fp_limbs_lt_p(b->v));
    zv_u32 t[12];
    zv_u64 c = 0;
    ZV_UNROLL
    for (int i = 0; i < 12; i++) { c += (zv_u64)a->v[i] + b->v[i]; t[i] = (zv_u32)c; c >>= 32; }
    zv_fp_reduce_once(r, t, (zv_u32)c);
}

ZV_HD void zv_fp_dbl(zv_fp *r, const zv_fp *a) { zv_fp_add(r, a, a); }

/* a − b, both < p: on a borrow the difference is in (−p, 0) and adding p brings it to [0, p). */
ZV_HD void zv_fp_sub(zv_fp *r, const zv_fp *a, const zv_fp *b) {
    ZV_CHECK(zv_fp_limbs_lt_p(a->v) && zv_fp_limbs_lt_p(b->v));
    const zv_u32 p[12] = ZV_BLS_P_INIT;
    zv_u32 t[12];
    zv_i64 c = 0;
    ZV_UNROLL
    for (int i = 0; i < 12; i++) { c += (zv_i64)a->v[i] - (zv_i64)b->v[i]; t[i] = (zv_u32)c; c >>= 32; }
    zv_u32 mask = (zv_u32)c;  /* all ones on a borrow (c = −1), else 0 */
    zv_u64 d = 0;
    ZV_UNROLL
    for (int i = 0; i < 12; i++) { d += (zv_u64)t[i] + (p[i] & mask); r->v[i] = (zv_u32)d; d >>= 32; }
    ZV_CHECK(zv_fp_limbs_lt_p(r->v));
}

ZV_HD void zv_fp_neg(zv_fp *r, const zv_fp *a) {
    zv_fp z;
    zv_fp_zero(&z);
    zv_fp_sub(r, &z, a);
}

/* Montgomery product a·b·R^−1 mod p (CIOS, bounds in the header comment).
 * a: any 384-bit value; b < p.  Then a·b < R·p and the result is < p. */
ZV_HD void zv_fp_mont_mul(zv_fp *r, const zv_u32 a[12], const zv_u32 b[12]) {
    ZV_CHECK(zv_fp_limbs_lt_p(b));
    const zv_u32 p[12] = ZV_BLS_P_INIT;
    zv_u32 t[12];
    zv_u32 t12 = 0;  /* the carry limb of t (t < a + p < 2^385: at most 1) */
    ZV_UNROLL
    for (int j = 0; j < 12; j++) t[j] = 0;
    ZV_UNROLL
    for (int i = 0; i < 12; i++) {
        zv_u64 c = 0;
        ZV_UNROLL
        for (int j = 0; j < 12; j++) {
            c += (zv_u64)a[j] * b[i] + t[j];
            t[j] = (zv_u32)c; c >>= 32;
        }
        zv_u64 top = (zv_u64)t12 + c;  /* t + a·b_i < 2^385 + 2^416: top < 2^33 */
        zv_u32 m = t[0] * ZV_BLS_P_N0;
        c = ((zv_u64)m * p[0] + t[0]) >> 32;  /* the low limb becomes 0 by the choice of m */
        ZV_UNROLL
        for (int j = 1; j < 12; j++) {
            c += (zv_u64)m * p[j] + t[j];
            t[j - 1] = (zv_u32)c; c >>= 32;
        }
        c += top;
        t[11] = (zv_u32)c;
        t12 = (zv_u32)(c >> 32);
        ZV_CHECK(t12 <= 1);
    }
    ZV_CHECK(t12 == 0);  /* final t < 2p < 2^382 */
    zv_fp_reduce_once(r, t, t12);
}

ZV_HD void zv_fp_mul(zv_fp *r, const zv_fp *a, const zv_fp *b) {
    ZV_CHECK(zv_fp_limbs_lt_p(a->v));
    zv_fp_mont_mul(r, a->v, b->v);
}

/* a^2 by separated operand scanning: the 66 cross products once, doubled, plus the 12
 * squares give the 24-limb a^2 (78 limb products instead of 144), then twelve Montgomery
 * reduction rows.  Bounds: a < p, so a^2 + M·p < p·p + R·p and the result (a^2 + M·p)/R
 * < 2p < 2^382: the final carry word is 0 (ZV_CHECK), and one conditional
 * subtraction finishes. */
ZV_HD void zv_fp_sqr(zv_fp *r, const zv_fp *a) {
    ZV_CHECK(zv_fp_limbs_lt_p(a->v));
    const zv_u32 p[12] = ZV_BLS_P_INIT;
    zv_u32 t[24];
    ZV_UNROLL
    for (int i = 0; i < 24; i++) t[i] = 0;
    ZV_UNROLL
    for (int i = 0; i < 11; i++) {
        zv_u64 c = 0;
        ZV_UNROLL
        for (int j = i + 1; j < 12; j++) {
            c += (zv_u64)a->v[i] * a->v[j] + t[i + j];
            t[i + j] = (zv_u32)c; c >>= 32;
        }
        t[i + 12] = (zv_u32)c;
    }
    t[23] = t[22] >> 31;  /* double the cross products: Σ < 2^766, so 2Σ fits 24 limbs */
    ZV_UNROLL
    for (int k = 22; k > 0; k--) t[k] = (t[k] << 1) | (t[k - 1] >> 31);
    t[0] <<= 1;
    zv_u64 c = 0;
    ZV_UNROLL
    for (int i = 0; i < 12; i++) {
        c += (zv_u64)a->v[i] * a->v[i] + t[2 * i];
        t[2 * i] = (zv_u32)c; c >>= 32;
        c += t[2 * i + 1];
        t[2 * i + 1] = (zv_u32)c; c >>= 32;
    }
    /* Row i adds m·p·2^32i; its carry out of limb i + 12 (0 or 1) is owed to limb i + 13,
     * which row i + 1 adds in, so no row propagates to the top; after row 11 it is the
     * limb above t[23]. */
    zv_u32 carry = 0;
    ZV_UNROLL
    for (int i = 0; i < 12; i++) {
        zv_u32 m = t[i] * ZV_BLS_P_N0;
        zv_u64 d = 0;
        ZV_UNROLL
        for (int j = 0; j < 12; j++) {
            d += (zv_u64)m * p[j] + t[i + j];
            t[i + j] = (zv_u32)d; d >>= 32;
        }
        d += (zv_u64)t[i + 12] + carry;
        t[i + 12] = (zv_u32)d;
        carry = (zv_u32)(d >> 32);
    }
    ZV_CHECK(carry == 0);
    zv_fp_reduce_once(r, t + 12, carry);
}

ZV_HD int zv_fp_is_zero(const zv_fp *a) {
    zv_u32 acc = 0;
    for (int i = 0; i < 12; i++) acc |= a->v[i];
    return acc == 0;
}

ZV_HD int zv_fp_eq(const zv_fp *a, const zv_fp *b) {
    zv_u32 acc = 0;
    for (int i = 0; i < 12; i++) acc |= a->v[i] ^ b->v[i];
    return acc == 0;
}

/* r = a if flag else r; flag is 0 or 1. */
ZV_HD void zv_fp_cmov(zv_fp *r, const zv_fp *a, int flag) {
    zv_u32 mask = (zv_u32)0 - (zv_u32)flag;
    for (int i = 0; i < 12; i++) r->v[i] = (r->v[i] & ~mask) | (a->v[i] & mask);
}

/* r = a^e for a fixed exponent e of `bits` bits (12 little-endian words), left to right. */
ZV_BLS_NOINLINE void zv_fp_pow(zv_fp *r, const zv_fp *a, const zv_u32 *e, int bits) {
    zv_fp base = *a, acc;
    zv_fp_one(&acc);
    for (int i = bits - 1; i >= 0; i--) {
        zv_fp_sqr(&acc, &acc);
        if ((e[i >> 5] >> (i & 31)) & 1) zv_fp_mul(&acc, &acc, &base);
    }
    *r = acc;
}

/* a^(p−2) = a^−1 for a ≠ 0; inv(0) = 0. */
ZV_HD void zv_fp_inv(zv_fp *r, const zv_fp *a) { zv_fp_pow(r, a, ZV_BLS_EXP_P_MINUS_2, ZV_BLS_EXP_P_MINUS_2_BITS); }

/* Returns 1 and a root in r when a is a square (r = a^((p+1)/4), p ≡ 3 mod 4), else 0
 * (r then holds a^((p+1)/4), which is a root of −a). */
ZV_HD int zv_fp_sqrt(zv_fp *r, const zv_fp *a) {
    zv_fp s, s2;
    zv_fp_pow(&s, a, ZV_BLS_EXP_P_PLUS_1_DIV_4, ZV_BLS_EXP_P_PLUS_1_DIV_4_BITS);
    zv_fp_sqr(&s2, &s);
    *r = s;
    return zv_fp_eq(&s2, a);
}

/* Canonical (non-Montgomery) limbs of a: a·R·R^−1, i.e. a Montgomery product with 1. */
ZV_HD void zv_fp_to_limbs(zv_u32 out[12], const zv_fp *a) {
    zv_u32 one[12];
    for (int i = 0; i < 12; i++) one[i] = 0;
    one[0] = 1;
    zv_fp t;
    zv_fp_mont_mul(&t, a->v, one);
    for (int i = 0; i < 12; i++) out[i] = t.v[i];
}

/* Plain limbs (value < p) to Montgomery form: x·R^2·R^−1. */
ZV_HD void zv_fp_from_limbs(zv_fp *r, const zv_u32 x[12]) { zv_fp_mont_mul(r, x, ZV_BLS_FP_R2.v); }

/* 48 big-endian bytes; returns 0 (r unspecified) when the value is ≥ p. */
ZV_HD int zv_fp_from_be48(zv_fp *r, const zv_u8 in[48]) {
    zv_u32 x[12];
    for (int i = 0; i < 12; i++) x[i] = zv_load_be32(in + 4 * (11 - i));
    if (!zv_fp_limbs_lt_p(x)) return 0;
    zv_fp_from_limbs(r, x);
    return 1;
}

ZV_HD void zv_fp_to_be48(zv_u8 out[48], const zv_fp *a) {
    zv_u32 x[12];
    zv_fp_to_limbs(x, a);
    for (int i = 0; i < 12; i++) zv_store_be32(out + 4 * (11 - i), x[i]);
}

/* A 64-byte big-endian integer T < 2^512 reduced mod p (RFC 9380 §5.3 hash_to_field,
 * L = 64), in Montgomery form.  T = hi·2^384 + lo with hi < 2^128, lo < 2^384, so
 * T·R = mont(hi, R^3) + mont(lo, R^2); mont(lo, ·) takes lo ≥ p, within its bound. */
ZV_HD void zv_fp_from_be64(zv_fp *r, const zv_u8 in[64]) {
    zv_u32 hi[12], lo[12];
    for (int i = 0; i < 12; i++) {
        lo[i] = zv_load_be32(in + 16 + 4 * (11 - i));
        hi[i] = i < 4 ? zv_load_be32(in + 4 * (3 - i)) : 0;
    }
    zv_fp a, b;
    zv_fp_mont_mul(&a, hi, ZV_BLS_FP_R3.v);
    zv_fp_mont_mul(&b, lo, ZV_BLS_FP_R2.v);
    zv_fp_add(r, &a, &b);
}

/* Whether the canonical value of a exceeds (p − 1)/2: the "sign" of the ZCash point
 * encoding (the lexicographically larger of y and −y) — a > (p−1)/2 ⟺ 2a ≥ p+1 ⟺ 2a > p,
 * tested as a > p − a on canonical limbs. */
ZV_HD int zv_fp_is_lex_largest(const zv_fp *a) {
    zv_fp n;
    zv_fp_neg(&n, a);
    zv_u32 x[12], y[12];
    zv_fp_to_limbs(x, a);
    zv_fp_to_limbs(y, &n);
    zv_i64 c = 0;  /* y − x borrows ⟺ x > y */
    for (int i = 0; i < 12; i++) { c += (zv_i64)y[i] - (zv_i64)x[i]; c >>= 32; }
    return c != 0;
}

/* sgn0 of RFC 9380 §4.1 for m = 1: the parity of the canonical value. */
ZV_HD int zv_fp_sgn0(const zv_fp *a) {
    zv_u32 x[12];
    zv_fp_to_limbs(x, a);
    return (int)(x[0] & 1);
}

#endif /* ZV_BLS12_381_FP_CUH */
