/* bls12_381_fp2.cuh — Fp2 = Fp[u]/(u^2 + 1), the field of G2's coordinates.
 *
 * zv_fp2 is c0 + c1·u with both coefficients zv_fp (Montgomery form, fully reduced), so
 * every bound of bls12_381_fp.cuh carries over and equality is coefficient equality.
 * Products use Karatsuba (3 Fp products), squares the complex method (2 Fp products).
 *
 * Inversion: (c0 + c1·u)^−1 = (c0 − c1·u)/(c0^2 + c1^2), one Fp inversion (Fermat).
 * Square root: Adj and Rodríguez-Henríquez, "Square root computation over even extension
 * fields", IEEE Trans. Computers 2014, Algorithm 9 (q ≡ 3 mod 4): two fixed
 * exponentiations in Fp2, then one squaring to confirm the root (so a non-square reports 0
 * instead of returning a wrong root).  Which of the two roots comes out is unspecified;
 * callers that need a particular one (point decoding, SSWU) fix the sign themselves.
 *
 * Index (public functions, in source order; the comment at each says more):
 *   zv_fp2_zero(r)
 *   zv_fp2_one(r)
 *   zv_fp2_add(r, a, b)
 *   zv_fp2_sub(r, a, b)
 *   zv_fp2_dbl(r, a)
 *   zv_fp2_neg(r, a)
 *   zv_fp2_conj(r, a)        The p-power Frobenius of Fp2 is conjugation: (c0 + c1·u)^p = c0 − c1·u since
 *                            u^p = −u
 *   zv_fp2_mul_fp(r, a, b)
 *   zv_fp2_mul_by_xi(r, a)   a·ξ with ξ = 1 + u (the non-residue of the Fp6 tower): (a0 − a1) + (a0 + a1)·u
 *   zv_fp2_is_zero(a)
 *   zv_fp2_eq(a, b)
 *   zv_fp2_cmov(r, a, flag)
 *   zv_fp2_inv(r, a)         1/a = conj(a)/(a0^2 + a1^2); inv(0) = 0 (the norm's Fermat inverse is 0)
 *   zv_fp2_sqrt(r, a)        Returns 1 and a square root of a in r when a is a square in Fp2, else 0 (r
 *                            unspecified)
 *   zv_fp2_is_square(a)      Whether a is a square in Fp2
 *   zv_fp2_sgn0(a)           sgn0 of RFC 9380 §4.1 for m = 2: sign of c0, or of c1 when c0 = 0
 */
#ifndef ZV_BLS12_381_FP2_CUH
#define ZV_BLS12_381_FP2_CUH

#include "fields/bls12_381_fp.cuh"

ZV_HD void zv_fp2_zero(zv_fp2 *r) { zv_fp_zero(&r->c0); zv_fp_zero(&r->c1); }

ZV_HD void zv_fp2_one(zv_fp2 *r) { zv_fp_one(&r->c0); zv_fp_zero(&r->c1); }

ZV_HD void zv_fp2_add(zv_fp2 *r, const zv_fp2 *a, const zv_fp2 *b) {
    zv_fp_add(&r->c0, &a->c0, &b->c0);
    zv_fp_add(&r->c1, &a->c1, &b->c1);
}

ZV_HD void zv_fp2_sub(zv_fp2 *r, const zv_fp2 *a, const zv_fp2 *b) {
    zv_fp_sub(&r->c0, &a->c0, &b->c0);
    zv_fp_sub(&r->c1, &a->c1, &b->c1);
}

ZV_HD void zv_fp2_dbl(zv_fp2 *r, const zv_fp2 *a) { zv_fp2_add(r, a, a); }

ZV_HD void zv_fp2_neg(zv_fp2 *r, const zv_fp2 *a) {
    zv_fp_neg(&r->c0, &a->c0);
    zv_fp_neg(&r->c1, &a->c1);
}

/* The p-power Frobenius of Fp2 is conjugation: (c0 + c1·u)^p = c0 − c1·u since u^p = −u. */
ZV_HD void zv_fp2_conj(zv_fp2 *r, const zv_fp2 *a) {
    r->c0 = a->c0;
    zv_fp_neg(&r->c1, &a->c1);
}

/* (a0 + a1·u)(b0 + b1·u) = (a0·b0 − a1·b1) + ((a0 + a1)(b0 + b1) − a0·b0 − a1·b1)·u.
 * Out of line on the GPU (as the square): three inlined Fp products are ~3500 instructions,
 * and the curve and tower code calls these from hundreds of places. */
ZV_BLS_NOINLINE void zv_fp2_mul(zv_fp2 *r, const zv_fp2 *a, const zv_fp2 *b) {
    zv_fp v0, v1, sa, sb, t;
    zv_fp_mul(&v0, &a->c0, &b->c0);
    zv_fp_mul(&v1, &a->c1, &b->c1);
    zv_fp_add(&sa, &a->c0, &a->c1);
    zv_fp_add(&sb, &b->c0, &b->c1);
    zv_fp_mul(&t, &sa, &sb);
    zv_fp_sub(&t, &t, &v0);
    zv_fp_sub(&r->c1, &t, &v1);
    zv_fp_sub(&r->c0, &v0, &v1);
}

/* (a0 + a1·u)^2 = (a0 + a1)(a0 − a1) + 2·a0·a1·u. */
ZV_BLS_NOINLINE void zv_fp2_sqr(zv_fp2 *r, const zv_fp2 *a) {
    zv_fp s, d, m;
    zv_fp_add(&s, &a->c0, &a->c1);
    zv_fp_sub(&d, &a->c0, &a->c1);
    zv_fp_mul(&m, &a->c0, &a->c1);
    zv_fp_mul(&r->c0, &s, &d);
    zv_fp_dbl(&r->c1, &m);
}

ZV_HD void zv_fp2_mul_fp(zv_fp2 *r, const zv_fp2 *a, const zv_fp *b) {
    zv_fp_mul(&r->c0, &a->c0, b);
    zv_fp_mul(&r->c1, &a->c1, b);
}

/* a·ξ with ξ = 1 + u (the non-residue of the Fp6 tower): (a0 − a1) + (a0 + a1)·u. */
ZV_HD void zv_fp2_mul_by_xi(zv_fp2 *r, const zv_fp2 *a) {
    zv_fp t;
    zv_fp_sub(&t, &a->c0, &a->c1);
    zv_fp_add(&r->c1, &a->c0, &a->c1);
    r->c0 = t;
}

ZV_HD int zv_fp2_is_zero(const zv_fp2 *a) { return zv_fp_is_zero(&a->c0) & zv_fp_is_zero(&a->c1); }

ZV_HD int zv_fp2_eq(const zv_fp2 *a, const zv_fp2 *b) {
    return zv_fp_eq(&a->c0, &b->c0) & zv_fp_eq(&a->c1, &b->c1);
}

ZV_HD void zv_fp2_cmov(zv_fp2 *r, const zv_fp2 *a, int flag) {
    zv_fp_cmov(&r->c0, &a->c0, flag);
    zv_fp_cmov(&r->c1, &a->c1, flag);
}

/* 1/a = conj(a)/(a0^2 + a1^2); inv(0) = 0 (the norm's Fermat inverse is 0). */
ZV_HD void zv_fp2_inv(zv_fp2 *r, const zv_fp2 *a) {
    zv_fp n, t;
    zv_fp_sqr(&n, &a->c0);
    zv_fp_sqr(&t, &a->c1);
    zv_fp_add(&n, &n, &t);
    zv_fp_inv(&n, &n);
    zv_fp_mul(&r->c0, &a->c0, &n);
    zv_fp_mul(&t, &a->c1, &n);
    zv_fp_neg(&r->c1, &t);
}

/* r = a^e for a fixed exponent e of `bits` bits (little-endian words), left to right. */
ZV_BLS_NOINLINE void zv_fp2_pow(zv_fp2 *r, const zv_fp2 *a, const zv_u32 *e, int bits) {
    zv_fp2 base = *a, acc;
    zv_fp2_one(&acc);
    for (int i = bits - 1; i >= 0; i--) {
        zv_fp2_sqr(&acc, &acc);
        if ((e[i >> 5] >> (i & 31)) & 1) zv_fp2_mul(&acc, &acc, &base);
    }
    *r = acc;
}

/* Returns 1 and a square root of a in r when a is a square in Fp2, else 0 (r unspecified).
 * Algorithm 9 of Adj–Rodríguez-Henríquez: a1 = a^((p−3)/4), α = a1^2·a = a^((p−1)/2),
 * x0 = a1·a; if α = −1 the root is u·x0, else (1 + α)^((p−1)/2)·x0. */
ZV_HD int zv_fp2_sqrt(zv_fp2 *r, const zv_fp2 *a) {
    zv_fp2 a1, alpha, x0, x, one, minus_one, check;
    zv_fp2_pow(&a1, a, ZV_BLS_EXP_P_MINUS_3_DIV_4, ZV_BLS_EXP_P_MINUS_3_DIV_4_BITS);
    zv_fp2_mul(&x0, &a1, a);
    zv_fp2_mul(&alpha, &a1, &x0);
    zv_fp2_one(&one);
    zv_fp2_neg(&minus_one, &one);
    if (zv_fp2_eq(&alpha, &minus_one)) {
        /* u·(x0 + x1·u) = −x1 + x0·u */
        zv_fp_neg(&x.c0, &x0.c1);
        x.c1 = x0.c0;
    } else {
        zv_fp2 b;
        zv_fp2_add(&b, &one, &alpha);
        zv_fp2_pow(&b, &b, ZV_BLS_EXP_P_MINUS_1_DIV_2, ZV_BLS_EXP_P_MINUS_1_DIV_2_BITS);
        zv_fp2_mul(&x, &b, &x0);
    }
    zv_fp2_sqr(&check, &x);
    *r = x;
    return zv_fp2_eq(&check, a);
}

/* Whether a is a square in Fp2: exactly when its norm a0^2 + a1^2 is a square in Fp
 * (the norm maps Fp2* onto Fp* and squares onto squares), decided by Euler's criterion
 * in Fp — one Fp exponentiation instead of the two Fp2 ones of a square-root attempt. */
ZV_HD int zv_fp2_is_square(const zv_fp2 *a) {
    zv_fp n, t, one;
    zv_fp_sqr(&n, &a->c0);
    zv_fp_sqr(&t, &a->c1);
    zv_fp_add(&n, &n, &t);
    zv_fp_pow(&t, &n, ZV_BLS_EXP_P_MINUS_1_DIV_2, ZV_BLS_EXP_P_MINUS_1_DIV_2_BITS);
    zv_fp_one(&one);
    return zv_fp_is_zero(&n) | zv_fp_eq(&t, &one);
}

/* sgn0 of RFC 9380 §4.1 for m = 2: sign of c0, or of c1 when c0 = 0. */
ZV_HD int zv_fp2_sgn0(const zv_fp2 *a) {
    int s0 = zv_fp_sgn0(&a->c0), z0 = zv_fp_is_zero(&a->c0), s1 = zv_fp_sgn0(&a->c1);
    return s0 | (z0 & s1);
}

#endif /* ZV_BLS12_381_FP2_CUH */
