/* bls12_381_fp.cuh — arithmetic in Fp, the 381-bit base field of BLS12-381
 * (p = 0x1a0111ea…ffffaaab, draft-irtf-cfrg-pairing-friendly-curves-11 §4.2.1).
 *
 * Representation: zv_fp holds twelve 32-bit limbs, least significant first, of the
 * Montgomery form a·R mod p with R = 2^384.  Every zv_fp passed to or returned by a
 * function here is FULLY reduced (value < p; checked with ZV_CHECK), so equality is limb
 * equality and encoding needs no final reduction.  The one exception is the internal
 * zv_fp_mont_mul, whose left operand may be any 384-bit value (see there).
 *
 * The arithmetic is mont.cuh's templates over zv_fp_modulus (below): twelve 32-bit limbs
 * (why 32-bit limbs: mont.cuh), products by Montgomery's CIOS (zv_mont_mul), squarings by
 * separated operand scanning (zv_mont_sqr), with their contracts and bounds stated and
 * checked there; the functions here are this field's names for them.
 *
 * Inversion is Fermat, a^(p−2), and the square root a^((p+1)/4) (p ≡ 3 mod 4): fixed
 * exponentiations by square-and-multiply over the exponent's bits, the same sequence for
 * every thread of a warp.  A constant-time method is not needed (verification handles
 * public data only); a variable-time binary GCD would be faster per call but diverges
 * per thread on the GPU, and inversions are rare here (one per point normalization).
 *
 * Index (public functions, in source order; the comment at each says more):
 *   zv_fp_limbs_lt_p(a)             Whether the 12-limb value a is below p
 *   zv_fp_zero(r)
 *   zv_fp_one(r)
 *   zv_fp_reduce_once(r, t, carry)  r = t − p if t ≥ p else t, for t < 2p given as 12 limbs plus a carry
 *                                   bit; branch-free
 *   zv_fp_add(r, a, b)              a + b, both < p: the sum is < 2p < 2^382 (no carry out of 12 limbs), one
 *                                   subtraction
 *   zv_fp_dbl(r, a)
 *   zv_fp_sub(r, a, b)              a − b, both < p
 *   zv_fp_neg(r, a)
 *   zv_fp_mont_mul(r, a, b)         Montgomery product a·b·R^−1 mod p (CIOS, bounds in mont.cuh's
 *                                   zv_mont_mul). a
 *   zv_fp_mul(r, a, b)
 *   zv_fp_sqr(r, a)                 a^2 for a < p by separated operand scanning
 *   zv_fp_is_zero(a)
 *   zv_fp_eq(a, b)
 *   zv_fp_cmov(r, a, flag)          r = a if flag else r; flag is 0 or 1
 *   zv_fp_inv(r, a)                 a^(p−2) = a^−1 for a ≠ 0; inv(0) = 0
 *   zv_fp_sqrt(r, a)                Returns 1 and a root in r when a is a square
 *   zv_fp_to_limbs(out, a)          Canonical (non-Montgomery) limbs of a: a·R·R^−1, i.e. a Montgomery
 *                                   product with 1
 *   zv_fp_from_limbs(r, x)          Plain limbs (value < p) to Montgomery form: x·R^2·R^−1
 *   zv_fp_from_be48(r, in)          48 big-endian bytes; returns 0 (r unspecified) when the value is ≥ p
 *   zv_fp_to_be48(out, a)
 *   zv_fp_from_be64(r, in)          A 64-byte big-endian integer T < 2^512 reduced mod p (RFC 9380 §5.3
 *                                   hash_to_field, L = 64), in …
 *   zv_fp_is_lex_largest(a)         Whether the canonical value of a exceeds (p − 1)/2
 *   zv_fp_sgn0(a)                   sgn0 of RFC 9380 §4.1 for m = 1: the parity of the canonical value
 */
#ifndef ZV_BLS12_381_FP_CUH
#define ZV_BLS12_381_FP_CUH

#include "zv_port.cuh"
#include "fields/mont.cuh"

typedef struct { zv_u32 v[12]; } zv_fp;  /* little-endian limbs, Montgomery form, value < p */
/* c0 + c1·u; declared here because the generated tables hold Fp2 constants (arithmetic:
 * bls12_381_fp2.cuh). */
typedef struct { zv_fp c0, c1; } zv_fp2;

#include "tables/bls12_381_tables.cuh"

/* Large routines stay out of line on the GPU (exponentiations, curve operations): a
 * product inlines to several hundred instructions, and inlining every call site of a
 * 380-step loop would only grow the code. */
#ifndef ZV_BLS_NOINLINE
#if ZV_CUDA_COMPILER
#define ZV_BLS_NOINLINE __host__ __device__ __noinline__
#else
#define ZV_BLS_NOINLINE static
#endif
#endif

/* Fp's modulus for the templates of mont.cuh (N = 12 limbs; p as a local initializer, so
 * the products' p limbs are instruction immediates on the GPU). */
struct zv_fp_modulus {
    static constexpr int N = 12;
    static constexpr zv_u32 N0 = ZV_BLS_P_N0;  /* −p^−1 mod 2^32 */
    static ZV_HD_MEMBER void modulus(zv_u32 m[12]) {
        const zv_u32 p[12] = ZV_BLS_P_INIT;
        for (int i = 0; i < 12; i++) m[i] = p[i];
    }
    static ZV_HD_MEMBER const zv_u32 *r2() { return ZV_BLS_FP_R2.v; }
};

/* Whether the 12-limb value a is below p. */
ZV_HD int zv_fp_limbs_lt_p(const zv_u32 a[12]) { return zv_mont_lt_m<zv_fp_modulus>(a); }

ZV_HD void zv_fp_zero(zv_fp *r) {
    for (int i = 0; i < 12; i++) r->v[i] = 0;
}

ZV_HD void zv_fp_one(zv_fp *r) { *r = ZV_BLS_FP_ONE; }

/* r = t − p if t ≥ p else t, for t < 2p given as 12 limbs plus a carry bit; branch-free. */
ZV_HD void zv_fp_reduce_once(zv_fp *r, const zv_u32 t[12], zv_u32 carry) {
    zv_mont_reduce_once<zv_fp_modulus>(r->v, t, carry);
}

/* a + b, both < p: the sum is < 2p < 2^382 (no carry out of 12 limbs), one subtraction. */
ZV_HD void zv_fp_add(zv_fp *r, const zv_fp *a, const zv_fp *b) { zv_mont_add<zv_fp_modulus>(r->v, a->v, b->v); }

ZV_HD void zv_fp_dbl(zv_fp *r, const zv_fp *a) { zv_fp_add(r, a, a); }

/* a − b, both < p. */
ZV_HD void zv_fp_sub(zv_fp *r, const zv_fp *a, const zv_fp *b) { zv_mont_sub<zv_fp_modulus>(r->v, a->v, b->v); }

ZV_HD void zv_fp_neg(zv_fp *r, const zv_fp *a) { zv_mont_neg<zv_fp_modulus>(r->v, a->v); }

/* Montgomery product a·b·R^−1 mod p (CIOS, bounds in mont.cuh's zv_mont_mul).
 * a: any 384-bit value; b < p.  Then a·b < R·p and the result is < p. */
ZV_HD void zv_fp_mont_mul(zv_fp *r, const zv_u32 a[12], const zv_u32 b[12]) {
    zv_mont_mul<zv_fp_modulus>(r->v, a, b);
}

ZV_HD void zv_fp_mul(zv_fp *r, const zv_fp *a, const zv_fp *b) {
    ZV_CHECK(zv_fp_limbs_lt_p(a->v));
    ZV_COUNT(ZV_OP_BLS_FP_MUL);
    zv_fp_mont_mul(r, a->v, b->v);
}

/* a^2 for a < p by separated operand scanning (mont.cuh's zv_mont_sqr: the 66 cross
 * products once, doubled, plus the 12 squares — 78 limb products instead of 144 — then
 * twelve Montgomery reduction rows). */
ZV_HD void zv_fp_sqr(zv_fp *r, const zv_fp *a) {
    ZV_COUNT(ZV_OP_BLS_FP_MUL);
    zv_mont_sqr<zv_fp_modulus>(r->v, a->v);
}

ZV_HD int zv_fp_is_zero(const zv_fp *a) { return zv_mp_is_zero<12>(a->v); }

ZV_HD int zv_fp_eq(const zv_fp *a, const zv_fp *b) { return zv_mp_eq<12>(a->v, b->v); }

/* r = a if flag else r; flag is 0 or 1. */
ZV_HD void zv_fp_cmov(zv_fp *r, const zv_fp *a, int flag) { zv_mp_cmov<12>(r->v, a->v, flag); }

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
ZV_HD void zv_fp_to_limbs(zv_u32 out[12], const zv_fp *a) { zv_mont_from<zv_fp_modulus>(out, a->v); }

/* Plain limbs (value < p) to Montgomery form: x·R^2·R^−1. */
ZV_HD void zv_fp_from_limbs(zv_fp *r, const zv_u32 x[12]) { zv_mont_to<zv_fp_modulus>(r->v, x); }

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
