/* secp256k1_field.cuh — arithmetic in GF(p), p = 2^256 − 2^32 − 977 (SEC 2 v2 §2.4.1).
 *
 * Representation: zv_k1_fe holds eight 32-bit limbs, least significant first, of a value in
 * [0, 2^256) congruent to the element mod p.  Results of add/sub/mul/sqr are in that range
 * but not necessarily below p ("weakly reduced", as libsecp256k1's magnitude-1 elements);
 * zv_k1_fe_normalize brings a value below p, and every comparison normalizes first.  Because
 * 2^256 − p = 2^32 + 977 is tiny, a weakly reduced value is at most one p above its
 * canonical form, so one conditional subtraction normalizes.
 *
 * Bounds (each checked with ZV_CHECK, counted in verify host builds — zv_port.cuh): the
 * high part zv_k1_fe_fold takes is below 2^35 (zv_k1_fe_mul_int's k < 2^32 and a product's
 * top limb plus carry stay far below), its first fold carries out at most 1 and its
 * second never carries out of limb 2; zv_k1_fe_sub's second correction never borrows;
 * zv_k1_fe_normalize's output is below p.
 *
 * Why 8 × 32-bit limbs and not 5 × 52 (libsecp256k1's x86-64 choice): the GPU multiplies
 * 32 × 32 → 64 bits natively (IMAD.WIDE); a 64 × 64 → 128 product is emulated with four of
 * those plus carries.  With 32-bit limbs a product is 64 IMAD.WIDE and every partial sum
 * fits a 64-bit accumulator exactly (operand scanning: (2^32−1)^2 + 2·(2^32−1) = 2^64 − 1),
 * so there is no lazy carry bookkeeping and the same C compiles to good code for both the
 * GPU and the host build that the tests run.
 *
 * Reduction uses 2^256 ≡ 2^32 + 977 (mod p): a 512-bit product H·2^256 + L becomes
 * L + 977·H + (H << 32), a 289-bit value whose top limb is folded the same way again.
 *
 * Inversion and square root are fixed exponentiations (Fermat: a^(p−2), and a^((p+1)/4)
 * since p ≡ 3 mod 4) by addition chains over the runs of ones in the exponents.  They are
 * branch-free and the same for every thread of a warp, which a GPU needs more than the
 * fewer operations of a variable-time binary GCD (libsecp256k1's safegcd divsteps diverge
 * per input and want 62-bit signed limbs).  The verify needs one inversion per signature
 * (the public key's table) and one square root per compressed key.
 *
 * Index (public functions, in source order; the comment at each says more):
 *   zv_k1_fe_set_u32(r, a)
 *   zv_k1_fe_copy(r, a)
 *   zv_k1_fe_fold(r, top)                       r (8 limbs) + top·2^256, top < 2^35, reduced to [0, 2^256)
 *   zv_k1_fe_add(r, a, b)
 *   zv_k1_fe_sub(r, a, b)                       a − b: a borrow out means the limbs hold a − b + 2^256 ≡ a −
 *                                               b + 2^32 + 977, so subtract that
 *   zv_k1_fe_neg(r, a)
 *   zv_k1_fe_mul_int(r, a, k)                   a · k for a small constant k < 2^32
 *   zv_k1_fe_reduce512(r, t)                    t = H·2^256 + L (16 limbs) reduced to 8 limbs: limb i of L +
 *                                               977·H + (H << 32)
 *   zv_k1_fe_mul(r, a, b)                       The 512-bit product (mont.cuh's zv_mp_mul_wide: 64 limb
 *                                               products), then the fold
 *   zv_k1_fe_sqr(r, a)                          Squaring (zv_mp_sqr_wide): the 28 cross products once,
 *                                               doubled by a shift, plus the 8 squares
 *   zv_k1_fe_sqr_n(r, a, n)
 *   zv_k1_fe_add_2_256_minus_p(s, a)            s = a + 2^32 + 977 mod 2^256
 *   zv_k1_fe_normalize(a)                       Bring a weakly reduced value below p: a ≥ p exactly when a +
 *                                               2^32 + 977 carries out
 *   zv_k1_fe_is_zero(a)
 *   zv_k1_fe_equal(a, b)
 *   zv_k1_fe_is_odd(a)                          Parity of the canonical value
 *   zv_k1_fe_set_b32_limit(r, b)                32 big-endian bytes
 *   zv_k1_fe_pow_ones223(x223, x22, x2, a)      The chain shared by the inverse and the square root
 *   zv_k1_fe_inv(r, a)                          r = a^(p−2) = a^−1 (0 for a = 0). p − 2 in binary: 223 ones,
 *                                               0, 22 ones, 0000101101
 *   zv_k1_fe_sqrt(r, a)                         r = a^((p+1)/4); returns 1 when r^2 = a (a is a square),
 *                                               else 0
 *   zv_k1_fe_block_batch_inv(z, prefix, count, tops, tops_prefix)
 *                                               Batched field inversion over a block chunk (zv_port.cuh's
 *                                               zv_block_batch_invert)
 */
#ifndef ZV_SECP256K1_FIELD_CUH
#define ZV_SECP256K1_FIELD_CUH

#include "zv_port.cuh"
#include "fields/mont.cuh"

typedef struct { zv_u32 v[8]; } zv_k1_fe;

/* Large routines (the runs of squarings in the exponentiations) stay out of line on the
 * GPU with ZV_NOINLINE: a field product inlines to ~300 instructions, and inlining every
 * call site of a 255-squaring chain would multiply the code size, and instruction-cache
 * misses, for no gain in registers.  Field products themselves inline. */

/* 2^256 − p = 2^32 + ZV_SECP256K1_P_C. */
#define ZV_SECP256K1_P_C 977u

ZV_HD void zv_k1_fe_set_u32(zv_k1_fe *r, zv_u32 a) {
    r->v[0] = a;
    for (int i = 1; i < 8; i++) r->v[i] = 0;
}

ZV_HD void zv_k1_fe_copy(zv_k1_fe *r, const zv_u32 a[8]) {
    for (int i = 0; i < 8; i++) r->v[i] = a[i];
}

/* r (8 limbs) + top·2^256, top < 2^35, reduced to [0, 2^256).  The first fold can carry
 * out once; the value is then below top·(2^32 + 977) < 2^68, so the second fold touches
 * three limbs and cannot carry further.
 *
 * On input: r holds any 8 limbs; top < 2^35 (ZV_CHECK).
 * On output: r ≡ r_in + top·2^256 (mod p) and r < 2^256.
 */
ZV_HD void zv_k1_fe_fold(zv_u32 r[8], zv_u64 top) {
    ZV_CHECK(top < (1ull << 35));
    zv_u64 c = (zv_u64)r[0] + top * ZV_SECP256K1_P_C;
    r[0] = (zv_u32)c; c >>= 32;
    c += (zv_u64)r[1] + top;
    r[1] = (zv_u32)c; c >>= 32;
    for (int i = 2; i < 8; i++) { c += r[i]; r[i] = (zv_u32)c; c >>= 32; }
    ZV_CHECK(c <= 1);
    zv_u32 t = (zv_u32)c;  /* 0 or 1 */
    c = (zv_u64)r[0] + t * ZV_SECP256K1_P_C;
    r[0] = (zv_u32)c; c >>= 32;
    c += (zv_u64)r[1] + t;
    r[1] = (zv_u32)c; c >>= 32;
    ZV_CHECK((zv_u64)r[2] + c < (1ull << 32));
    r[2] += (zv_u32)c;
}

/* r = a + b.  On input: a, b < 2^256 (weakly reduced).
 * On output: r ≡ a + b (mod p) and r < 2^256 (weakly reduced).
 */
ZV_HD void zv_k1_fe_add(zv_k1_fe *r, const zv_k1_fe *a, const zv_k1_fe *b) {
    ZV_COUNT(ZV_OP_K1_FE_ADD);
    zv_u64 c = 0;
    for (int i = 0; i < 8; i++) { c += (zv_u64)a->v[i] + b->v[i]; r->v[i] = (zv_u32)c; c >>= 32; }
    zv_k1_fe_fold(r->v, c);
}

/* a − b: a borrow out means the limbs hold a − b + 2^256 ≡ a − b + 2^32 + 977, so subtract
 * that; a second borrow (only when the limbs were below 2^32 + 977) is undone the same way
 * and leaves a value near 2^256 that cannot borrow again.
 *
 * On input: a, b < 2^256.
 * On output: r ≡ a − b (mod p) and r < 2^256.
 */
ZV_HD void zv_k1_fe_sub(zv_k1_fe *r, const zv_k1_fe *a, const zv_k1_fe *b) {
    ZV_COUNT(ZV_OP_K1_FE_SUB);
    zv_i64 c = 0;
    for (int i = 0; i < 8; i++) {
        c += (zv_i64)a->v[i] - (zv_i64)b->v[i];
        r->v[i] = (zv_u32)c; c >>= 32;  /* arithmetic shift: c is 0 or −1 */
    }
    for (int pass = 0; pass < 2; pass++) {
        zv_u32 bw = (zv_u32)(-c);  /* 1 when the previous step borrowed */
        c = (zv_i64)r->v[0] - (zv_i64)(bw * ZV_SECP256K1_P_C);
        r->v[0] = (zv_u32)c; c >>= 32;
        c += (zv_i64)r->v[1] - (zv_i64)bw;
        r->v[1] = (zv_u32)c; c >>= 32;
        for (int i = 2; i < 8; i++) { c += (zv_i64)r->v[i]; r->v[i] = (zv_u32)c; c >>= 32; }
    }
    ZV_CHECK(c == 0);
}

ZV_HD void zv_k1_fe_neg(zv_k1_fe *r, const zv_k1_fe *a) {
    zv_k1_fe z;
    zv_k1_fe_set_u32(&z, 0);
    zv_k1_fe_sub(r, &z, a);
}

/* a · k for a small constant k < 2^32.
 *
 * On input: a < 2^256; k < 2^32.
 * On output: r ≡ a·k (mod p) and r < 2^256.
 */
ZV_HD void zv_k1_fe_mul_int(zv_k1_fe *r, const zv_k1_fe *a, zv_u32 k) {
    ZV_COUNT(ZV_OP_K1_FE_MUL_INT);
    zv_u64 c = 0;
    for (int i = 0; i < 8; i++) { c += (zv_u64)a->v[i] * k; r->v[i] = (zv_u32)c; c >>= 32; }
    zv_k1_fe_fold(r->v, c);
}

/* t = H·2^256 + L (16 limbs) reduced to 8 limbs: limb i of L + 977·H + (H << 32).
 *
 * On input: t < 2^512 (16 limbs).
 * On output: r ≡ t (mod p) and r < 2^256.
 */
ZV_HD void zv_k1_fe_reduce512(zv_u32 r[8], const zv_u32 t[16]) {
    zv_u64 c = (zv_u64)t[0] + (zv_u64)t[8] * ZV_SECP256K1_P_C;
    r[0] = (zv_u32)c; c >>= 32;
ZV_UNROLL
    for (int i = 1; i < 8; i++) {
        c += (zv_u64)t[i] + (zv_u64)t[8 + i] * ZV_SECP256K1_P_C + t[7 + i];
        r[i] = (zv_u32)c; c >>= 32;
    }
    zv_k1_fe_fold(r, c + t[15]);
}

/* The 512-bit product (mont.cuh's zv_mp_mul_wide: 64 limb products), then the fold.
 *
 * On input: a, b < 2^256.
 * On output: r ≡ a·b (mod p) and r < 2^256 (weakly reduced).
 */
ZV_HD void zv_k1_fe_mul(zv_k1_fe *r, const zv_k1_fe *a, const zv_k1_fe *b) {
    ZV_COUNT(ZV_OP_K1_FE_MUL);
    zv_u32 t[16];
    zv_mp_mul_wide<8>(t, a->v, b->v);
    zv_k1_fe_reduce512(r->v, t);
}

/* Squaring (zv_mp_sqr_wide): the 28 cross products once, doubled by a shift, plus the 8
 * squares.
 *
 * On input: a < 2^256.
 * On output: r ≡ a² (mod p) and r < 2^256 (weakly reduced).
 */
ZV_HD void zv_k1_fe_sqr(zv_k1_fe *r, const zv_k1_fe *a) {
    ZV_COUNT(ZV_OP_K1_FE_SQR);
    zv_u32 t[16];
    zv_mp_sqr_wide<8>(t, a->v);
    zv_k1_fe_reduce512(r->v, t);
}

ZV_NOINLINE void zv_k1_fe_sqr_n(zv_k1_fe *r, const zv_k1_fe *a, int n) {
    zv_k1_fe_sqr(r, a);
    for (int i = 1; i < n; i++) zv_k1_fe_sqr(r, r);
}

/* s = a + 2^32 + 977 mod 2^256; returns the carry out, which is 1 exactly when a ≥ p
 * (and then s = a − p). */
ZV_HD zv_u32 zv_k1_fe_add_2_256_minus_p(zv_u32 s[8], const zv_u32 a[8]) {
    zv_u64 c = (zv_u64)a[0] + ZV_SECP256K1_P_C;
    s[0] = (zv_u32)c; c >>= 32;
    c += (zv_u64)a[1] + 1;
    s[1] = (zv_u32)c; c >>= 32;
    for (int i = 2; i < 8; i++) { c += a[i]; s[i] = (zv_u32)c; c >>= 32; }
    return (zv_u32)c;
}

/* Bring a weakly reduced value below p: a ≥ p exactly when a + 2^32 + 977 carries out.
 *
 * On input: a < 2^256.
 * On output: a < p, the same residue (ZV_CHECK).
 */
ZV_HD void zv_k1_fe_normalize(zv_k1_fe *a) {
    zv_u32 s[8];
    zv_u32 mask = (zv_u32)0 - zv_k1_fe_add_2_256_minus_p(s, a->v);  /* all ones when a ≥ p */
    for (int i = 0; i < 8; i++) a->v[i] = (s[i] & mask) | (a->v[i] & ~mask);
    ZV_CHECK(zv_k1_fe_add_2_256_minus_p(s, a->v) == 0);
}

ZV_HD int zv_k1_fe_is_zero(const zv_k1_fe *a) {
    zv_k1_fe t = *a;
    zv_k1_fe_normalize(&t);
    zv_u32 acc = 0;
    for (int i = 0; i < 8; i++) acc |= t.v[i];
    return acc == 0;
}

ZV_HD int zv_k1_fe_equal(const zv_k1_fe *a, const zv_k1_fe *b) {
    zv_k1_fe d;
    zv_k1_fe_sub(&d, a, b);
    return zv_k1_fe_is_zero(&d);
}

/* Parity of the canonical value. */
ZV_HD int zv_k1_fe_is_odd(const zv_k1_fe *a) {
    zv_k1_fe t = *a;
    zv_k1_fe_normalize(&t);
    return (int)(t.v[0] & 1);
}

/* 32 big-endian bytes; returns 0 (and leaves r unspecified) when the value is ≥ p, as
 * SEC 1 §2.3.6 requires of a field element in a point encoding.
 *
 * On output: when 1 is returned, r < p is the value of b.
 */
ZV_HD int zv_k1_fe_set_b32_limit(zv_k1_fe *r, const zv_u8 *b) {
    for (int i = 0; i < 8; i++) r->v[i] = zv_load_be32(b + 4 * (7 - i));
    zv_u32 s[8];
    return zv_k1_fe_add_2_256_minus_p(s, r->v) == 0;
}

/* The chain shared by the inverse and the square root: returns x^(2^223 − 1) and the
 * intermediate powers x^(2^k − 1) the tails need (k = 2, 22). */
ZV_NOINLINE void zv_k1_fe_pow_ones223(zv_k1_fe *x223, zv_k1_fe *x22, zv_k1_fe *x2, const zv_k1_fe *a) {
    zv_k1_fe x3, x6, x9, x11, x44, x88, x176, x220, t;
    zv_k1_fe_sqr(&t, a);
    zv_k1_fe_mul(x2, &t, a);             /* 2^2 − 1 */
    zv_k1_fe_sqr(&t, x2);
    zv_k1_fe_mul(&x3, &t, a);            /* 2^3 − 1 */
    zv_k1_fe_sqr_n(&t, &x3, 3);
    zv_k1_fe_mul(&x6, &t, &x3);
    zv_k1_fe_sqr_n(&t, &x6, 3);
    zv_k1_fe_mul(&x9, &t, &x3);
    zv_k1_fe_sqr_n(&t, &x9, 2);
    zv_k1_fe_mul(&x11, &t, x2);
    zv_k1_fe_sqr_n(&t, &x11, 11);
    zv_k1_fe_mul(x22, &t, &x11);
    zv_k1_fe_sqr_n(&t, x22, 22);
    zv_k1_fe_mul(&x44, &t, x22);
    zv_k1_fe_sqr_n(&t, &x44, 44);
    zv_k1_fe_mul(&x88, &t, &x44);
    zv_k1_fe_sqr_n(&t, &x88, 88);
    zv_k1_fe_mul(&x176, &t, &x88);
    zv_k1_fe_sqr_n(&t, &x176, 44);
    zv_k1_fe_mul(&x220, &t, &x44);
    zv_k1_fe_sqr_n(&t, &x220, 3);
    zv_k1_fe_mul(x223, &t, &x3);
}

/* r = a^(p−2) = a^−1 (0 for a = 0).  p − 2 in binary: 223 ones, 0, 22 ones, 0000101101.
 *
 * On input: a < 2^256.
 * On output: r·a ≡ 1 (mod p) for a ≢ 0, r ≡ 0 for a ≡ 0; r < 2^256.
 */
ZV_HD void zv_k1_fe_inv(zv_k1_fe *r, const zv_k1_fe *a) {
    zv_k1_fe x223, x22, x2, t;
    zv_k1_fe_pow_ones223(&x223, &x22, &x2, a);
    zv_k1_fe_sqr_n(&t, &x223, 23);
    zv_k1_fe_mul(&t, &t, &x22);
    zv_k1_fe_sqr_n(&t, &t, 5);
    zv_k1_fe_mul(&t, &t, a);
    zv_k1_fe_sqr_n(&t, &t, 3);
    zv_k1_fe_mul(&t, &t, &x2);
    zv_k1_fe_sqr_n(&t, &t, 2);
    zv_k1_fe_mul(r, &t, a);
}

/* r = a^((p+1)/4); returns 1 when r^2 = a (a is a square), else 0.
 * (p+1)/4 in binary: 223 ones, 0, 22 ones, 00001100.
 *
 * On input: a < 2^256.
 * On output: r < 2^256 (weakly reduced); r² ≡ a (mod p) exactly when 1 is returned.
 */
ZV_HD int zv_k1_fe_sqrt(zv_k1_fe *r, const zv_k1_fe *a) {
    zv_k1_fe x223, x22, x2, t;
    zv_k1_fe_pow_ones223(&x223, &x22, &x2, a);
    zv_k1_fe_sqr_n(&t, &x223, 23);
    zv_k1_fe_mul(&t, &t, &x22);
    zv_k1_fe_sqr_n(&t, &t, 6);
    zv_k1_fe_mul(&t, &t, &x2);
    zv_k1_fe_sqr_n(r, &t, 2);
    zv_k1_fe_sqr(&t, r);
    return zv_k1_fe_equal(&t, a);
}

/* Batched field inversion over a block chunk (zv_port.cuh's zv_block_batch_invert): z[i] =
 * z[i]^−1 for i < count; every z[i] nonzero (callers substitute 1 for an item they drop). */
ZV_HD void zv_k1_fe_block_batch_inv(zv_k1_fe *z, zv_k1_fe *prefix, int count, zv_k1_fe *tops, zv_k1_fe *tops_prefix) {
    zv_block_batch_invert<zv_k1_fe, zv_k1_fe_mul, zv_k1_fe_inv>(z, prefix, count, tops, tops_prefix);
}

#endif /* ZV_SECP256K1_FIELD_CUH */
