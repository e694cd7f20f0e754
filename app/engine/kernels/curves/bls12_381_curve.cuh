/* bls12_381_curve.cuh — the groups G1 ⊂ E1(Fp), E1: y^2 = x^3 + 4, and G2 ⊂ E2(Fp2),
 * E2: y^2 = x^3 + 4(1 + u) (draft-irtf-cfrg-pairing-friendly-curves-11 §4.2.1).
 *
 * Representation: affine points carry an explicit infinity flag (x, y are then unused);
 * Jacobian points (X, Y, Z) stand for (X/Z^2, Y/Z^3), with Z = 0 meaning the point at
 * infinity.  Coordinates are field elements of bls12_381_fp{,2}.cuh, fully reduced.
 *
 * The formulas are the a = 0 ones of the Explicit-Formulas Database (hyperelliptic.org/EFD,
 * g1p/auto-shortw-jacobian-0): dbl-2009-l, add-2007-bl, madd-2007-bl.  They are written
 * once, as templates over the coordinate field (zv_fp or zv_fp2, through the zv_f_*
 * overloads below), and instantiated for G1 and G2.  Additions branch on the exceptional
 * cases (an input at infinity, equal inputs, opposite inputs): verification runs on public
 * data, so variable time is fine, and the branch is taken identically for almost all items.
 *
 * Subgroup checks (both groups have a large cofactor, so decoding must check):
 *   - plain: [r]P = O;
 *   - fast (used by decoding): G1: φ(P) = [−x^2]P with φ(x, y) = (βx, y); G2: ψ(P) = [x]P
 *     (Scott, "A note on group membership tests for G1, G2 and GT on BLS pairing-friendly
 *     curves", ePrint 2021/1130, §3–4, which proves both sufficient for BLS12-381).  They
 *     cost a 128-bit resp. 64-bit multiplication instead of a 255-bit one.  The tests
 *     compare them with the plain check on the Ethereum vectors and on points deliberately
 *     generated outside the subgroup (tests/test_kernel_bls12_381_arith.py).
 * ψ = twist^−1 ∘ Frobenius ∘ twist acts on E2 as (x, y) -> (conj(x)·cx, conj(y)·cy); on G2
 * it is multiplication by x (p ≡ x mod r), asserted by scripts/gen_bls12_381_tables.
 *
 * Index (public functions, in source order; the comment at each says more):
 *   zv_jac_set_infinity(r)
 *   zv_jac_is_infinity(a)
 *   zv_jac_dbl_impl(r, p)                       dbl-2009-l: 2M + 5S
 *   zv_jac_add_impl(r, p, q)                    add-2007-bl: 11M + 5S; exceptional cases by branch
 *   zv_jac_add_affine_impl(r, p, qx, qy, q_infinity)
 *                                               madd-2007-bl (Q affine, Z2 = 1): 7M + 4S
 *   zv_jac_neg(r, p)
 *   zv_jac_mul(r, p, k, bits)                   [k]P, k given as `bits` bits in little-endian 32-bit words
 *   zv_jac_mul_x_abs(r, p)                      [|x|]P for the curve parameter x = −0xd201000000010000 (64
 *                                               bits, 5 ones)
 *   zv_jac_eq(p, q)                             Projective equality: X1·Z2^2 = X2·Z1^2 and Y1·Z2^3 = Y2·Z1^3
 *                                               (or both at infinity)
 *   zv_jac_to_affine(x, y, infinity, p)         (X/Z^2, Y/Z^3): one field inversion
 *   zv_affine_on_curve(x, y, b)                 y^2 = x^3 + b for an affine point
 *   zv_bls_on_curve(x, y)
 *   zv_g1_from_affine(r, a)
 *   zv_g1_to_affine(r, p)
 *   zv_g1_is_infinity(p)
 *   zv_g1_dbl(r, p)
 *   zv_g1_add(r, p, q)
 *   zv_g1_add_affine(r, p, q)
 *   zv_g1_neg(r, p)
 *   zv_g1_eq(p, q)
 *   zv_g1_affine_on_curve(a)
 *   zv_g1_in_group_plain(p)                     [r]P = O
 *   zv_g2_from_affine(r, a)
 *   zv_g2_to_affine(r, p)
 *   zv_g2_is_infinity(p)
 *   zv_g2_dbl(r, p)
 *   zv_g2_add(r, p, q)
 *   zv_g2_add_affine(r, p, q)
 *   zv_g2_neg(r, p)
 *   zv_g2_eq(p, q)
 *   zv_g2_affine_on_curve(a)
 *   zv_g2_psi(r, p)                             ψ(X, Y, Z) = (conj(X)·cx, conj(Y)·cy, conj(Z))
 *   zv_g2_in_group_plain(p)                     [r]Q = O
 */
#ifndef ZV_BLS12_381_CURVE_CUH
#define ZV_BLS12_381_CURVE_CUH

#include "fields/bls12_381_fp2.cuh"

typedef struct { zv_fp x, y; int infinity; } zv_g1_affine;
typedef struct { zv_fp x, y, z; } zv_g1_jac;
typedef struct { zv_fp2 x, y; int infinity; } zv_g2_affine;
typedef struct { zv_fp2 x, y, z; } zv_g2_jac;

/* ------------------------------------------------------------------ field overloads */
#define ZV_BLS_F_OVERLOADS(F, pre)                                                              \
    ZV_HD void zv_f_add(F *r, const F *a, const F *b) { pre##_add(r, a, b); }                    \
    ZV_HD void zv_f_sub(F *r, const F *a, const F *b) { pre##_sub(r, a, b); }                    \
    ZV_HD void zv_f_mul(F *r, const F *a, const F *b) { pre##_mul(r, a, b); }                    \
    ZV_HD void zv_f_sqr(F *r, const F *a) { pre##_sqr(r, a); }                                  \
    ZV_HD void zv_f_dbl(F *r, const F *a) { pre##_dbl(r, a); }                                  \
    ZV_HD void zv_f_neg(F *r, const F *a) { pre##_neg(r, a); }                                  \
    ZV_HD void zv_f_inv(F *r, const F *a) { pre##_inv(r, a); }                                  \
    ZV_HD void zv_f_one(F *r) { pre##_one(r); }                                                 \
    ZV_HD void zv_f_zero(F *r) { pre##_zero(r); }                                               \
    ZV_HD int zv_f_is_zero(const F *a) { return pre##_is_zero(a); }                             \
    ZV_HD int zv_f_eq(const F *a, const F *b) { return pre##_eq(a, b); }
ZV_BLS_F_OVERLOADS(zv_fp, zv_fp)
ZV_BLS_F_OVERLOADS(zv_fp2, zv_fp2)
#undef ZV_BLS_F_OVERLOADS

/* ------------------------------------------------------------------ generic Jacobian formulas */
template <class F, class J> ZV_HD void zv_jac_set_infinity(J *r) {
    zv_f_one(&r->x);
    zv_f_one(&r->y);
    zv_f_zero(&r->z);
}

template <class F, class J> ZV_HD int zv_jac_is_infinity(const J *a) { return zv_f_is_zero(&a->z); }

/* dbl-2009-l: 2M + 5S.  Z = 0 stays 0; a point with Y = 0 (2-torsion) gives Z3 = 0 = O. */
template <class F, class J> ZV_HD void zv_jac_dbl_impl(J *r, const J *p) {
    F a, b, c, d, e, f, t;
    zv_f_sqr(&a, &p->x);
    zv_f_sqr(&b, &p->y);
    zv_f_sqr(&c, &b);
    zv_f_add(&t, &p->x, &b);
    zv_f_sqr(&t, &t);
    zv_f_sub(&t, &t, &a);
    zv_f_sub(&t, &t, &c);
    zv_f_dbl(&d, &t);                 /* D = 2((X+B)^2 − A − C) */
    zv_f_dbl(&e, &a);
    zv_f_add(&e, &e, &a);             /* E = 3A */
    zv_f_sqr(&f, &e);
    zv_f_mul(&t, &p->y, &p->z);
    zv_f_dbl(&r->z, &t);              /* Z3 = 2·Y1·Z1 (before Y is overwritten) */
    zv_f_dbl(&t, &d);
    zv_f_sub(&r->x, &f, &t);          /* X3 = F − 2D */
    zv_f_sub(&t, &d, &r->x);
    zv_f_mul(&t, &e, &t);
    zv_f_dbl(&c, &c);
    zv_f_dbl(&c, &c);
    zv_f_dbl(&c, &c);
    zv_f_sub(&r->y, &t, &c);          /* Y3 = E(D − X3) − 8C */
}

/* add-2007-bl: 11M + 5S; exceptional cases by branch. */
template <class F, class J> ZV_HD void zv_jac_add_impl(J *r, const J *p, const J *q) {
    if (zv_f_is_zero(&p->z)) { *r = *q; return; }
    if (zv_f_is_zero(&q->z)) { *r = *p; return; }
    F z1z1, z2z2, u1, u2, s1, s2, h, i, j, rr, v, t;
    zv_f_sqr(&z1z1, &p->z);
    zv_f_sqr(&z2z2, &q->z);
    zv_f_mul(&u1, &p->x, &z2z2);
    zv_f_mul(&u2, &q->x, &z1z1);
    zv_f_mul(&s1, &p->y, &q->z);
    zv_f_mul(&s1, &s1, &z2z2);
    zv_f_mul(&s2, &q->y, &p->z);
    zv_f_mul(&s2, &s2, &z1z1);
    zv_f_sub(&h, &u2, &u1);
    zv_f_sub(&rr, &s2, &s1);
    if (zv_f_is_zero(&h)) {
        if (zv_f_is_zero(&rr)) { zv_jac_dbl_impl<F, J>(r, p); return; }
        zv_jac_set_infinity<F, J>(r);  /* Q = −P */
        return;
    }
    zv_f_dbl(&rr, &rr);               /* r = 2(S2 − S1) */
    zv_f_dbl(&i, &h);
    zv_f_sqr(&i, &i);                 /* I = (2H)^2 */
    zv_f_mul(&j, &h, &i);
    zv_f_mul(&v, &u1, &i);
    zv_f_add(&t, &p->z, &q->z);
    zv_f_sqr(&t, &t);
    zv_f_sub(&t, &t, &z1z1);
    zv_f_sub(&t, &t, &z2z2);
    zv_f_mul(&r->z, &t, &h);          /* Z3 = ((Z1 + Z2)^2 − Z1Z1 − Z2Z2)·H */
    zv_f_sqr(&t, &rr);
    zv_f_sub(&t, &t, &j);
    zv_f_sub(&t, &t, &v);
    zv_f_sub(&r->x, &t, &v);          /* X3 = r^2 − J − 2V */
    zv_f_sub(&t, &v, &r->x);
    zv_f_mul(&t, &rr, &t);
    zv_f_mul(&s1, &s1, &j);
    zv_f_dbl(&s1, &s1);
    zv_f_sub(&r->y, &t, &s1);         /* Y3 = r(V − X3) − 2·S1·J */
}

/* madd-2007-bl (Q affine, Z2 = 1): 7M + 4S. */
template <class F, class J> ZV_HD void zv_jac_add_affine_impl(J *r, const J *p, const F *qx, const F *qy,
                                                              int q_infinity) {
    if (q_infinity) { *r = *p; return; }
    if (zv_f_is_zero(&p->z)) {
        r->x = *qx;
        r->y = *qy;
        zv_f_one(&r->z);
        return;
    }
    F z1z1, u2, s2, h, hh, i, j, rr, v, t;
    zv_f_sqr(&z1z1, &p->z);
    zv_f_mul(&u2, qx, &z1z1);
    zv_f_mul(&s2, qy, &p->z);
    zv_f_mul(&s2, &s2, &z1z1);
    zv_f_sub(&h, &u2, &p->x);
    zv_f_sub(&rr, &s2, &p->y);
    if (zv_f_is_zero(&h)) {
        if (zv_f_is_zero(&rr)) { zv_jac_dbl_impl<F, J>(r, p); return; }
        zv_jac_set_infinity<F, J>(r);
        return;
    }
    zv_f_dbl(&rr, &rr);
    zv_f_sqr(&hh, &h);
    zv_f_dbl(&i, &hh);
    zv_f_dbl(&i, &i);                 /* I = 4·HH */
    zv_f_mul(&j, &h, &i);
    zv_f_mul(&v, &p->x, &i);
    zv_f_add(&t, &p->z, &h);
    zv_f_sqr(&t, &t);
    zv_f_sub(&t, &t, &z1z1);
    zv_f_sub(&r->z, &t, &hh);         /* Z3 = (Z1 + H)^2 − Z1Z1 − HH */
    F y1 = p->y;
    zv_f_sqr(&t, &rr);
    zv_f_sub(&t, &t, &j);
    zv_f_sub(&t, &t, &v);
    zv_f_sub(&r->x, &t, &v);          /* X3 = r^2 − J − 2V */
    zv_f_sub(&t, &v, &r->x);
    zv_f_mul(&t, &rr, &t);
    zv_f_mul(&y1, &y1, &j);
    zv_f_dbl(&y1, &y1);
    zv_f_sub(&r->y, &t, &y1);         /* Y3 = r(V − X3) − 2·Y1·J */
}

/* The formulas instantiated once per group, out of line on the GPU: every routine below
 * (scalar multiplication, subgroup checks, hashing) calls these, so each exists once in
 * the binary instead of being inlined, product by product, into every caller. */
#define ZV_BLS_JAC_INSTANCES(F, J)                                                                    \
    ZV_BLS_NOINLINE void zv_jac_dbl(J *r, const J *p) { zv_jac_dbl_impl<F, J>(r, p); }                 \
    ZV_BLS_NOINLINE void zv_jac_add(J *r, const J *p, const J *q) { zv_jac_add_impl<F, J>(r, p, q); }  \
    ZV_BLS_NOINLINE void zv_jac_add_affine(J *r, const J *p, const F *qx, const F *qy, int q_inf) {    \
        zv_jac_add_affine_impl<F, J>(r, p, qx, qy, q_inf);                                            \
    }
ZV_BLS_JAC_INSTANCES(zv_fp, zv_g1_jac)
ZV_BLS_JAC_INSTANCES(zv_fp2, zv_g2_jac)
#undef ZV_BLS_JAC_INSTANCES

template <class F, class J> ZV_HD void zv_jac_neg(J *r, const J *p) {
    r->x = p->x;
    zv_f_neg(&r->y, &p->y);
    r->z = p->z;
}

/* [k]P, k given as `bits` bits in little-endian 32-bit words; left-to-right double and
 * add (variable time: scalars here are public — r, x, h_eff, test inputs). */
template <class F, class J> ZV_HD void zv_jac_mul(J *r, const J *p, const zv_u32 *k, int bits) {
    J acc, base = *p;
    zv_jac_set_infinity<F, J>(&acc);
    for (int i = bits - 1; i >= 0; i--) {
        zv_jac_dbl(&acc, &acc);
        if ((k[i >> 5] >> (i & 31)) & 1) zv_jac_add(&acc, &acc, &base);
    }
    *r = acc;
}

/* [|x|]P for the curve parameter x = −0xd201000000010000 (64 bits, 5 ones). */
template <class F, class J> ZV_HD void zv_jac_mul_x_abs(J *r, const J *p) {
    const zv_u32 k[2] = {(zv_u32)ZV_BLS_X_ABS, (zv_u32)(ZV_BLS_X_ABS >> 32)};
    zv_jac_mul<F, J>(r, p, k, 64);
}

/* Projective equality: X1·Z2^2 = X2·Z1^2 and Y1·Z2^3 = Y2·Z1^3 (or both at infinity). */
template <class F, class J> ZV_HD int zv_jac_eq(const J *p, const J *q) {
    int ip = zv_f_is_zero(&p->z), iq = zv_f_is_zero(&q->z);
    if (ip | iq) return ip & iq;
    F z1z1, z2z2, a, b, c, d;
    zv_f_sqr(&z1z1, &p->z);
    zv_f_sqr(&z2z2, &q->z);
    zv_f_mul(&a, &p->x, &z2z2);
    zv_f_mul(&b, &q->x, &z1z1);
    zv_f_mul(&z2z2, &z2z2, &q->z);
    zv_f_mul(&z1z1, &z1z1, &p->z);
    zv_f_mul(&c, &p->y, &z2z2);
    zv_f_mul(&d, &q->y, &z1z1);
    return zv_f_eq(&a, &b) & zv_f_eq(&c, &d);
}

/* (X/Z^2, Y/Z^3): one field inversion. */
template <class F, class J> ZV_HD void zv_jac_to_affine(F *x, F *y, int *infinity, const J *p) {
    *infinity = zv_f_is_zero(&p->z);
    F zi, zi2;
    zv_f_inv(&zi, &p->z);
    zv_f_sqr(&zi2, &zi);
    zv_f_mul(x, &p->x, &zi2);
    zv_f_mul(&zi2, &zi2, &zi);
    zv_f_mul(y, &p->y, &zi2);
}

/* y^2 = x^3 + b for an affine point. */
template <class F> ZV_HD int zv_affine_on_curve(const F *x, const F *y, const F *b) {
    F l, r;
    zv_f_sqr(&l, y);
    zv_f_sqr(&r, x);
    zv_f_mul(&r, &r, x);
    zv_f_add(&r, &r, b);
    return zv_f_eq(&l, &r);
}

ZV_HD int zv_bls_on_curve(const zv_fp *x, const zv_fp *y) { return zv_affine_on_curve<zv_fp>(x, y, &ZV_BLS_B1); }
ZV_HD int zv_bls_on_curve(const zv_fp2 *x, const zv_fp2 *y) { return zv_affine_on_curve<zv_fp2>(x, y, &ZV_BLS_B2); }

/* ------------------------------------------------------------------ G1 */
ZV_HD void zv_g1_from_affine(zv_g1_jac *r, const zv_g1_affine *a) {
    if (a->infinity) { zv_jac_set_infinity<zv_fp, zv_g1_jac>(r); return; }
    r->x = a->x;
    r->y = a->y;
    zv_fp_one(&r->z);
}

ZV_HD void zv_g1_to_affine(zv_g1_affine *r, const zv_g1_jac *p) {
    zv_jac_to_affine<zv_fp, zv_g1_jac>(&r->x, &r->y, &r->infinity, p);
}

ZV_HD int zv_g1_is_infinity(const zv_g1_jac *p) { return zv_jac_is_infinity<zv_fp, zv_g1_jac>(p); }
ZV_HD void zv_g1_dbl(zv_g1_jac *r, const zv_g1_jac *p) { zv_jac_dbl(r, p); }
ZV_HD void zv_g1_add(zv_g1_jac *r, const zv_g1_jac *p, const zv_g1_jac *q) { zv_jac_add(r, p, q); }
ZV_HD void zv_g1_add_affine(zv_g1_jac *r, const zv_g1_jac *p, const zv_g1_affine *q) {
    zv_jac_add_affine(r, p, &q->x, &q->y, q->infinity);
}
ZV_HD void zv_g1_neg(zv_g1_jac *r, const zv_g1_jac *p) { zv_jac_neg<zv_fp, zv_g1_jac>(r, p); }
ZV_BLS_NOINLINE void zv_g1_mul(zv_g1_jac *r, const zv_g1_jac *p, const zv_u32 *k, int bits) {
    zv_jac_mul<zv_fp, zv_g1_jac>(r, p, k, bits);
}
ZV_HD int zv_g1_eq(const zv_g1_jac *p, const zv_g1_jac *q) { return zv_jac_eq<zv_fp, zv_g1_jac>(p, q); }
ZV_HD int zv_g1_affine_on_curve(const zv_g1_affine *a) {
    return a->infinity || zv_bls_on_curve(&a->x, &a->y);
}

/* [r]P = O. */
ZV_HD int zv_g1_in_group_plain(const zv_g1_jac *p) {
    zv_g1_jac t;
    zv_g1_mul(&t, p, ZV_BLS_R_ORDER, 255);
    return zv_g1_is_infinity(&t);
}

/* φ(P) = [−x^2]P, φ(X, Y, Z) = (βX, Y, Z) (Scott 2021, §3). */
ZV_BLS_NOINLINE int zv_g1_in_group(const zv_g1_jac *p) {
    zv_g1_jac t, phi;
    zv_jac_mul_x_abs<zv_fp, zv_g1_jac>(&t, p);
    zv_jac_mul_x_abs<zv_fp, zv_g1_jac>(&t, &t);
    zv_g1_neg(&t, &t);
    zv_fp_mul(&phi.x, &p->x, &ZV_BLS_BETA);
    phi.y = p->y;
    phi.z = p->z;
    return zv_g1_eq(&phi, &t);
}

/* ------------------------------------------------------------------ G2 */
ZV_HD void zv_g2_from_affine(zv_g2_jac *r, const zv_g2_affine *a) {
    if (a->infinity) { zv_jac_set_infinity<zv_fp2, zv_g2_jac>(r); return; }
    r->x = a->x;
    r->y = a->y;
    zv_fp2_one(&r->z);
}

ZV_HD void zv_g2_to_affine(zv_g2_affine *r, const zv_g2_jac *p) {
    zv_jac_to_affine<zv_fp2, zv_g2_jac>(&r->x, &r->y, &r->infinity, p);
}

ZV_HD int zv_g2_is_infinity(const zv_g2_jac *p) { return zv_jac_is_infinity<zv_fp2, zv_g2_jac>(p); }
ZV_HD void zv_g2_dbl(zv_g2_jac *r, const zv_g2_jac *p) { zv_jac_dbl(r, p); }
ZV_HD void zv_g2_add(zv_g2_jac *r, const zv_g2_jac *p, const zv_g2_jac *q) { zv_jac_add(r, p, q); }
ZV_HD void zv_g2_add_affine(zv_g2_jac *r, const zv_g2_jac *p, const zv_g2_affine *q) {
    zv_jac_add_affine(r, p, &q->x, &q->y, q->infinity);
}
ZV_HD void zv_g2_neg(zv_g2_jac *r, const zv_g2_jac *p) { zv_jac_neg<zv_fp2, zv_g2_jac>(r, p); }
ZV_BLS_NOINLINE void zv_g2_mul(zv_g2_jac *r, const zv_g2_jac *p, const zv_u32 *k, int bits) {
    zv_jac_mul<zv_fp2, zv_g2_jac>(r, p, k, bits);
}
ZV_HD int zv_g2_eq(const zv_g2_jac *p, const zv_g2_jac *q) { return zv_jac_eq<zv_fp2, zv_g2_jac>(p, q); }
ZV_HD int zv_g2_affine_on_curve(const zv_g2_affine *a) {
    return a->infinity || zv_bls_on_curve(&a->x, &a->y);
}

/* ψ(X, Y, Z) = (conj(X)·cx, conj(Y)·cy, conj(Z)): the affine map (conj(x)·cx, conj(y)·cy)
 * carried through Z (conj(Z)^2 = conj(Z^2)). */
ZV_HD void zv_g2_psi(zv_g2_jac *r, const zv_g2_jac *p) {
    zv_fp2_conj(&r->x, &p->x);
    zv_fp2_mul(&r->x, &r->x, &ZV_BLS_PSI_CX);
    zv_fp2_conj(&r->y, &p->y);
    zv_fp2_mul(&r->y, &r->y, &ZV_BLS_PSI_CY);
    zv_fp2_conj(&r->z, &p->z);
}

/* [r]Q = O. */
ZV_HD int zv_g2_in_group_plain(const zv_g2_jac *p) {
    zv_g2_jac t;
    zv_g2_mul(&t, p, ZV_BLS_R_ORDER, 255);
    return zv_g2_is_infinity(&t);
}

/* ψ(Q) = [x]Q = −[|x|]Q (Scott 2021, §4). */
ZV_BLS_NOINLINE int zv_g2_in_group(const zv_g2_jac *p) {
    zv_g2_jac t, psi;
    zv_jac_mul_x_abs<zv_fp2, zv_g2_jac>(&t, p);
    zv_g2_neg(&t, &t);
    zv_g2_psi(&psi, p);
    return zv_g2_eq(&psi, &t);
}

#endif /* ZV_BLS12_381_CURVE_CUH */
