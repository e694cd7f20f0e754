/* bls12_381_fp12.cuh — the degree-12 extension of BLS12-381's base field, where pairings live.
 *
 * Tower (the one zkcrypto/bls12_381, blst and arkworks use; py_ecc's FQ12 is the same field
 * in the basis 1, w, .., w^11 with u = w^6 − 1):
 *   Fp2  = Fp[u]  / (u^2 + 1)                   bls12_381_fp2.cuh
 *   Fp6  = Fp2[v] / (v^3 − ξ),  ξ = 1 + u        zv_fp6 {c0, c1, c2} = c0 + c1·v + c2·v^2
 *   Fp12 = Fp6[w] / (w^2 − v)                    zv_fp12 {c0, c1} = c0 + c1·w
 * so w^6 = ξ, and the Fp2 coefficient of w^k is c(k mod 2).c(k / 2).
 *
 * Every function takes its output pointer first; outputs may alias inputs (results are
 * built in locals and stored last).  Values are whatever the Fp layer keeps (Montgomery
 * form, every Fp limb vector < p), so no bound here is new: each Fp2 operation is called on
 * reduced operands and returns reduced ones.  What this layer checks (ZV_CHECK, host
 * builds) is the algebra's own precondition: cyclotomic squaring is only called on
 * elements of the cyclotomic subgroup (bls12_381_pairing.cuh checks that once per final
 * exponentiation, where elements enter the subgroup).
 *
 * Operation counts (m = Fp2 multiplication or squaring):
 *   fp6 mul 6m (Karatsuba), fp6 sqr 5m (Chung–Hasan SQR2), fp12 mul 18m, fp12 sqr 12m
 *   (complex squaring), line multiplication 13m, cyclotomic squaring 9m (Granger–Scott),
 *   Frobenius 5 Fp2 products by constants, inverse 1 Fp inversion + ~36 Fp products.
 *
 * On the GPU the larger functions are out of line (ZV_BLS_NOINLINE): inlined, a pairing
 * would be a few hundred thousand straight-line instructions per call site, which blows
 * up compile time and the instruction cache for no gain (each call already costs
 * thousands of instructions, a call/return is two).
 *
 * Index (public functions, in source order; the comment at each says more):
 *   zv_fp6_zero(r)
 *   zv_fp6_one(r)
 *   zv_fp6_add(r, a, b)
 *   zv_fp6_sub(r, a, b)
 *   zv_fp6_neg(r, a)
 *   zv_fp6_mul_by_v(r, a)            r = a·v = ξ·a2 + a0·v + a1·v^2 (v^3 = ξ)
 *   zv_fp6_mul_by_1(r, a, d1)        r = a·(d1·v) (3m) = ξ a2 d1 + a0 d1·v + a1 d1·v^2
 *   zv_fp12_one(r)
 *   zv_fp12_eq(a, b)
 *   zv_fp12_is_one(a)
 *   zv_fp12_conj(r, a)               Conjugation a0 + a1 w -> a0 − a1 w, the p^6-power Frobenius
 *   zv_fp4_sqr(r0, r1, a, b)         (a + b s)^2 in Fp4 = Fp2[s]/(s^2 − ξ): (a^2 + ξ b^2, 2ab computed as (a
 *                                    + b)^2 − a^2 − b^2)
 *   zv_fp12_cyc_combine(z, t, plus)  3t − 2z (sign −1) or 3t + 2z (sign +1), as 2(t ∓ z) + t
 *   zv_fp12_is_cyclotomic(a)         Whether a is in the cyclotomic subgroup: a^(p^4)·a == a^(p^2) (Φ12(p) =
 *                                    p^4 − p^2 + 1)
 */
#ifndef ZV_BLS12_381_FP12_CUH
#define ZV_BLS12_381_FP12_CUH

#include "zv_port.cuh"
#include "fields/bls12_381_fp2.cuh"
#include "tables/bls12_381_pairing_tables.cuh"

#ifndef ZV_BLS_NOINLINE
#if ZV_CUDA_COMPILER
#define ZV_BLS_NOINLINE __device__ __noinline__
#else
#define ZV_BLS_NOINLINE static
#endif
#endif

typedef struct { zv_fp2 c0, c1, c2; } zv_fp6;
typedef struct { zv_fp6 c0, c1; } zv_fp12;

/* A line of the Miller loop evaluated at P, in the sparse shape an M-type twist gives:
 * c0 + c1·v + c4·v·w, i.e. Fp12 {c0 = (c0, c1, 0), c1 = (0, c4, 0)} (bls12_381_pairing.cuh). */
typedef struct { zv_fp2 c0, c1, c4; } zv_bls_line;

/* ------------------------------------------------------------------ Fp6 */
ZV_HD void zv_fp6_zero(zv_fp6 *r) { zv_fp2_zero(&r->c0); zv_fp2_zero(&r->c1); zv_fp2_zero(&r->c2); }
ZV_HD void zv_fp6_one(zv_fp6 *r) { zv_fp2_one(&r->c0); zv_fp2_zero(&r->c1); zv_fp2_zero(&r->c2); }

ZV_HD void zv_fp6_add(zv_fp6 *r, const zv_fp6 *a, const zv_fp6 *b) {
    zv_fp2_add(&r->c0, &a->c0, &b->c0); zv_fp2_add(&r->c1, &a->c1, &b->c1); zv_fp2_add(&r->c2, &a->c2, &b->c2);
}
ZV_HD void zv_fp6_sub(zv_fp6 *r, const zv_fp6 *a, const zv_fp6 *b) {
    zv_fp2_sub(&r->c0, &a->c0, &b->c0); zv_fp2_sub(&r->c1, &a->c1, &b->c1); zv_fp2_sub(&r->c2, &a->c2, &b->c2);
}
ZV_HD void zv_fp6_neg(zv_fp6 *r, const zv_fp6 *a) {
    zv_fp2_neg(&r->c0, &a->c0); zv_fp2_neg(&r->c1, &a->c1); zv_fp2_neg(&r->c2, &a->c2);
}

/* r = a·v = ξ·a2 + a0·v + a1·v^2 (v^3 = ξ). */
ZV_HD void zv_fp6_mul_by_v(zv_fp6 *r, const zv_fp6 *a) {
    zv_fp2 t;
    zv_fp2_mul_by_xi(&t, &a->c2);
    r->c2 = a->c1;
    r->c1 = a->c0;
    r->c0 = t;
}

/* Karatsuba over the three coefficients (6m):
 *   r0 = a0b0 + ξ((a1+a2)(b1+b2) − a1b1 − a2b2), r1 = (a0+a1)(b0+b1) − a0b0 − a1b1 + ξ a2b2,
 *   r2 = (a0+a2)(b0+b2) − a0b0 − a2b2 + a1b1. */
ZV_BLS_NOINLINE void zv_fp6_mul(zv_fp6 *r, const zv_fp6 *a, const zv_fp6 *b) {
    zv_fp2 t0, t1, t2, s, u, r0, r1, r2;
    zv_fp2_mul(&t0, &a->c0, &b->c0);
    zv_fp2_mul(&t1, &a->c1, &b->c1);
    zv_fp2_mul(&t2, &a->c2, &b->c2);
    zv_fp2_add(&s, &a->c1, &a->c2); zv_fp2_add(&u, &b->c1, &b->c2); zv_fp2_mul(&r0, &s, &u);
    zv_fp2_sub(&r0, &r0, &t1); zv_fp2_sub(&r0, &r0, &t2); zv_fp2_mul_by_xi(&r0, &r0); zv_fp2_add(&r0, &r0, &t0);
    zv_fp2_add(&s, &a->c0, &a->c1); zv_fp2_add(&u, &b->c0, &b->c1); zv_fp2_mul(&r1, &s, &u);
    zv_fp2_sub(&r1, &r1, &t0); zv_fp2_sub(&r1, &r1, &t1); zv_fp2_mul_by_xi(&s, &t2); zv_fp2_add(&r1, &r1, &s);
    zv_fp2_add(&s, &a->c0, &a->c2); zv_fp2_add(&u, &b->c0, &b->c2); zv_fp2_mul(&r2, &s, &u);
    zv_fp2_sub(&r2, &r2, &t0); zv_fp2_sub(&r2, &r2, &t2); zv_fp2_add(&r2, &r2, &t1);
    r->c0 = r0; r->c1 = r1; r->c2 = r2;
}

/* Chung–Hasan SQR2 (5m): s0 = a0^2, s1 = 2a0a1, s2 = (a0 − a1 + a2)^2, s3 = 2a1a2, s4 = a2^2;
 * r0 = s0 + ξ s3, r1 = s1 + ξ s4, r2 = s1 + s2 + s3 − s0 − s4. */
ZV_BLS_NOINLINE void zv_fp6_sqr(zv_fp6 *r, const zv_fp6 *a) {
    zv_fp2 s0, s1, s2, s3, s4, t;
    zv_fp2_sqr(&s0, &a->c0);
    zv_fp2_mul(&s1, &a->c0, &a->c1); zv_fp2_dbl(&s1, &s1);
    zv_fp2_sub(&s2, &a->c0, &a->c1); zv_fp2_add(&s2, &s2, &a->c2); zv_fp2_sqr(&s2, &s2);
    zv_fp2_mul(&s3, &a->c1, &a->c2); zv_fp2_dbl(&s3, &s3);
    zv_fp2_sqr(&s4, &a->c2);
    zv_fp2_add(&r->c2, &s1, &s2); zv_fp2_add(&r->c2, &r->c2, &s3);
    zv_fp2_sub(&r->c2, &r->c2, &s0); zv_fp2_sub(&r->c2, &r->c2, &s4);
    zv_fp2_mul_by_xi(&t, &s3); zv_fp2_add(&r->c0, &s0, &t);
    zv_fp2_mul_by_xi(&t, &s4); zv_fp2_add(&r->c1, &s1, &t);
}

/* r = a·(d0 + d1·v) (5m): the shape of a line's first half. */
ZV_BLS_NOINLINE void zv_fp6_mul_by_01(zv_fp6 *r, const zv_fp6 *a, const zv_fp2 *d0, const zv_fp2 *d1) {
    zv_fp2 t0, t1, r0, r1, r2, s, u;
    zv_fp2_mul(&t0, &a->c0, d0);
    zv_fp2_mul(&t1, &a->c1, d1);
    zv_fp2_mul(&r0, &a->c2, d1); zv_fp2_mul_by_xi(&r0, &r0); zv_fp2_add(&r0, &r0, &t0);
    zv_fp2_add(&s, &a->c0, &a->c1); zv_fp2_add(&u, d0, d1); zv_fp2_mul(&r1, &s, &u);
    zv_fp2_sub(&r1, &r1, &t0); zv_fp2_sub(&r1, &r1, &t1);
    zv_fp2_mul(&r2, &a->c2, d0); zv_fp2_add(&r2, &r2, &t1);
    r->c0 = r0; r->c1 = r1; r->c2 = r2;
}

/* r = a·(d1·v) (3m) = ξ a2 d1 + a0 d1·v + a1 d1·v^2. */
ZV_HD void zv_fp6_mul_by_1(zv_fp6 *r, const zv_fp6 *a, const zv_fp2 *d1) {
    zv_fp2 r0, r1, r2;
    zv_fp2_mul(&r0, &a->c2, d1); zv_fp2_mul_by_xi(&r0, &r0);
    zv_fp2_mul(&r1, &a->c0, d1);
    zv_fp2_mul(&r2, &a->c1, d1);
    r->c0 = r0; r->c1 = r1; r->c2 = r2;
}

/* 1/a = (t0 + t1 v + t2 v^2)/d with t0 = a0^2 − ξ a1a2, t1 = ξ a2^2 − a0a1, t2 = a1^2 − a0a2,
 * d = a0t0 + ξ(a2t1 + a1t2) = N(a) ∈ Fp2 (0 only for a = 0; then r = 0, as zv_fp2_inv). */
ZV_BLS_NOINLINE void zv_fp6_inv(zv_fp6 *r, const zv_fp6 *a) {
    zv_fp2 t0, t1, t2, s, d;
    zv_fp2_sqr(&t0, &a->c0); zv_fp2_mul(&s, &a->c1, &a->c2); zv_fp2_mul_by_xi(&s, &s); zv_fp2_sub(&t0, &t0, &s);
    zv_fp2_sqr(&t1, &a->c2); zv_fp2_mul_by_xi(&t1, &t1); zv_fp2_mul(&s, &a->c0, &a->c1); zv_fp2_sub(&t1, &t1, &s);
    zv_fp2_sqr(&t2, &a->c1); zv_fp2_mul(&s, &a->c0, &a->c2); zv_fp2_sub(&t2, &t2, &s);
    zv_fp2_mul(&d, &a->c2, &t1); zv_fp2_mul(&s, &a->c1, &t2); zv_fp2_add(&d, &d, &s);
    zv_fp2_mul_by_xi(&d, &d); zv_fp2_mul(&s, &a->c0, &t0); zv_fp2_add(&d, &d, &s);
    zv_fp2_inv(&d, &d);
    zv_fp2_mul(&r->c0, &t0, &d); zv_fp2_mul(&r->c1, &t1, &d); zv_fp2_mul(&r->c2, &t2, &d);
}

/* ------------------------------------------------------------------ Fp12 */
ZV_HD void zv_fp12_one(zv_fp12 *r) { zv_fp6_one(&r->c0); zv_fp6_zero(&r->c1); }

ZV_HD int zv_fp12_eq(const zv_fp12 *a, const zv_fp12 *b) {
    return zv_fp2_eq(&a->c0.c0, &b->c0.c0) & zv_fp2_eq(&a->c0.c1, &b->c0.c1) & zv_fp2_eq(&a->c0.c2, &b->c0.c2) &
           zv_fp2_eq(&a->c1.c0, &b->c1.c0) & zv_fp2_eq(&a->c1.c1, &b->c1.c1) & zv_fp2_eq(&a->c1.c2, &b->c1.c2);
}

ZV_HD int zv_fp12_is_one(const zv_fp12 *a) {
    zv_fp12 one;
    zv_fp12_one(&one);
    return zv_fp12_eq(a, &one);
}

/* Conjugation a0 + a1 w -> a0 − a1 w, the p^6-power Frobenius; on the cyclotomic subgroup
 * (where the final exponentiation's easy part lands) it is the inverse. */
ZV_HD void zv_fp12_conj(zv_fp12 *r, const zv_fp12 *a) {
    r->c0 = a->c0;
    zv_fp6_neg(&r->c1, &a->c1);
}

/* Karatsuba (18m): r0 = a0b0 + v·a1b1, r1 = (a0+a1)(b0+b1) − a0b0 − a1b1. */
ZV_BLS_NOINLINE void zv_fp12_mul(zv_fp12 *r, const zv_fp12 *a, const zv_fp12 *b) {
    zv_fp6 t0, t1, s, u;
    zv_fp6_mul(&t0, &a->c0, &b->c0);
    zv_fp6_mul(&t1, &a->c1, &b->c1);
    zv_fp6_add(&s, &a->c0, &a->c1);
    zv_fp6_add(&u, &b->c0, &b->c1);
    zv_fp6_mul(&s, &s, &u);
    zv_fp6_sub(&s, &s, &t0);
    zv_fp6_sub(&r->c1, &s, &t1);
    zv_fp6_mul_by_v(&t1, &t1);
    zv_fp6_add(&r->c0, &t0, &t1);
}

/* Complex squaring (12m): with t = a0a1, r0 = (a0 + a1)(a0 + v a1) − t − v t, r1 = 2t. */
ZV_BLS_NOINLINE void zv_fp12_sqr(zv_fp12 *r, const zv_fp12 *a) {
    zv_fp6 t, s, u;
    zv_fp6_mul(&t, &a->c0, &a->c1);
    zv_fp6_add(&s, &a->c0, &a->c1);
    zv_fp6_mul_by_v(&u, &a->c1);
    zv_fp6_add(&u, &u, &a->c0);
    zv_fp6_mul(&s, &s, &u);
    zv_fp6_sub(&s, &s, &t);
    zv_fp6_mul_by_v(&u, &t);
    zv_fp6_sub(&r->c0, &s, &u);
    zv_fp6_add(&r->c1, &t, &t);
}

/* f = f·ℓ for a line ℓ = c0 + c1 v + c4 v w (13m instead of 18m): with f = a + b w,
 * L0 = c0 + c1 v, L1 = c4 v: f·ℓ = (a L0 + v·b L1) + ((a + b)(L0 + L1) − a L0 − b L1) w,
 * where L0 + L1 = c0 + (c1 + c4) v is again of the 01 shape. */
ZV_BLS_NOINLINE void zv_fp12_mul_by_line(zv_fp12 *f, const zv_bls_line *l) {
    zv_fp6 t0, t1, s;
    zv_fp2 d1;
    zv_fp6_mul_by_01(&t0, &f->c0, &l->c0, &l->c1);
    zv_fp6_mul_by_1(&t1, &f->c1, &l->c4);
    zv_fp6_add(&s, &f->c0, &f->c1);
    zv_fp2_add(&d1, &l->c1, &l->c4);
    zv_fp6_mul_by_01(&s, &s, &l->c0, &d1);
    zv_fp6_sub(&s, &s, &t0);
    zv_fp6_sub(&f->c1, &s, &t1);
    zv_fp6_mul_by_v(&t1, &t1);
    zv_fp6_add(&f->c0, &t0, &t1);
}

/* 1/a = (a0 − a1 w)/(a0^2 − v a1^2); 1/0 = 0. */
ZV_BLS_NOINLINE void zv_fp12_inv(zv_fp12 *r, const zv_fp12 *a) {
    zv_fp6 t0, t1;
    zv_fp6_sqr(&t0, &a->c0);
    zv_fp6_sqr(&t1, &a->c1);
    zv_fp6_mul_by_v(&t1, &t1);
    zv_fp6_sub(&t0, &t0, &t1);
    zv_fp6_inv(&t0, &t0);
    zv_fp6_mul(&t1, &a->c1, &t0);
    zv_fp6_mul(&r->c0, &a->c0, &t0);
    zv_fp6_neg(&r->c1, &t1);
}

/* Frobenius a -> a^(p^n) for n = 1, 2: the coefficient c_k of w^k becomes
 * frob_n(c_k)·γ_(n,k) with γ_(n,k) = ξ^(k(p^n − 1)/6) (bls12_381_pairing_tables.cuh), since
 * (w^k)^(p^n) = w^k·(w^6)^(k(p^n−1)/6).  For n = 1 the coefficient is conjugated (the p-power
 * of Fp2); for n = 2 it is not and γ lies in Fp.  γ_(n,0) = 1 is skipped. */
ZV_BLS_NOINLINE void zv_fp12_frobenius(zv_fp12 *r, const zv_fp12 *a, int n) {
    /* coefficient of w^k: k even -> c0.c(k/2), k odd -> c1.c(k/2) */
    zv_fp2 c[6] = {a->c0.c0, a->c1.c0, a->c0.c1, a->c1.c1, a->c0.c2, a->c1.c2};
    ZV_CHECK(n == 1 || n == 2);
    if (n == 1) {
        zv_fp2_conj(&c[0], &c[0]);
        ZV_UNROLL for (int k = 1; k < 6; k++) {
            zv_fp2_conj(&c[k], &c[k]);
            zv_fp2_mul(&c[k], &c[k], &ZV_BLS_FROB1[k - 1]);
        }
    } else {
        ZV_UNROLL for (int k = 1; k < 6; k++) zv_fp2_mul_fp(&c[k], &c[k], &ZV_BLS_FROB2[k - 1]);
    }
    r->c0.c0 = c[0]; r->c1.c0 = c[1]; r->c0.c1 = c[2]; r->c1.c1 = c[3]; r->c0.c2 = c[4]; r->c1.c2 = c[5];
}

/* (a + b s)^2 in Fp4 = Fp2[s]/(s^2 − ξ): (a^2 + ξ b^2, 2ab computed as (a + b)^2 − a^2 − b^2). */
ZV_HD void zv_fp4_sqr(zv_fp2 *r0, zv_fp2 *r1, const zv_fp2 *a, const zv_fp2 *b) {
    zv_fp2 t0, t1, s;
    zv_fp2_sqr(&t0, a);
    zv_fp2_sqr(&t1, b);
    zv_fp2_add(&s, a, b);
    zv_fp2_sqr(&s, &s);
    zv_fp2_sub(&s, &s, &t0);
    zv_fp2_sub(r1, &s, &t1);
    zv_fp2_mul_by_xi(&t1, &t1);
    zv_fp2_add(r0, &t1, &t0);
}

/* 3t − 2z (sign −1) or 3t + 2z (sign +1), as 2(t ∓ z) + t. */
ZV_HD void zv_fp12_cyc_combine(zv_fp2 *z, const zv_fp2 *t, int plus) {
    zv_fp2 s;
    if (plus) zv_fp2_add(&s, t, z); else zv_fp2_sub(&s, t, z);
    zv_fp2_dbl(&s, &s);
    zv_fp2_add(z, &s, t);
}

/* Squaring in the cyclotomic subgroup G_Φ6(p^2) (a^(p^4 − p^2 + 1) = 1), Granger & Scott,
 * "Faster squaring in the cyclotomic subgroup of sixth degree extensions", PKC 2010, §3.1
 * (9m instead of 12m).  Fp12 is read as Fp4^3 with Fp4 = Fp2[w^3]: the pairs
 * (z0, z1) = (c0.c0, c1.c1), (z2, z3) = (c1.c0, c0.c2), (z4, z5) = (c0.c1, c1.c2) are
 * squared in Fp4 and recombined as 3t ∓ 2z.  Wrong (silently) outside the subgroup. */
ZV_BLS_NOINLINE void zv_fp12_cyclotomic_sqr(zv_fp12 *r, const zv_fp12 *a) {
    zv_fp2 z0 = a->c0.c0, z4 = a->c0.c1, z3 = a->c0.c2, z2 = a->c1.c0, z1 = a->c1.c1, z5 = a->c1.c2;
    zv_fp2 t0, t1, t2, t3;
    zv_fp4_sqr(&t0, &t1, &z0, &z1);
    zv_fp12_cyc_combine(&z0, &t0, 0);
    zv_fp12_cyc_combine(&z1, &t1, 1);
    zv_fp4_sqr(&t0, &t1, &z2, &z3);
    zv_fp4_sqr(&t2, &t3, &z4, &z5);
    zv_fp12_cyc_combine(&z4, &t0, 0);
    zv_fp12_cyc_combine(&z5, &t1, 1);
    zv_fp2_mul_by_xi(&t0, &t3);
    zv_fp12_cyc_combine(&z2, &t0, 1);
    zv_fp12_cyc_combine(&z3, &t2, 0);
    r->c0.c0 = z0; r->c0.c1 = z4; r->c0.c2 = z3; r->c1.c0 = z2; r->c1.c1 = z1; r->c1.c2 = z5;
}

/* Whether a is in the cyclotomic subgroup: a^(p^4)·a == a^(p^2) (Φ12(p) = p^4 − p^2 + 1).
 * Costs 3 Frobenius and 1 multiplication; used by ZV_CHECK in host builds. */
ZV_HD int zv_fp12_is_cyclotomic(const zv_fp12 *a) {
    zv_fp12 p2, p4;
    zv_fp12_frobenius(&p2, a, 2);
    zv_fp12_frobenius(&p4, &p2, 2);
    zv_fp12_mul(&p4, &p4, a);
    return zv_fp12_eq(&p4, &p2);
}

#endif /* ZV_BLS12_381_FP12_CUH */
