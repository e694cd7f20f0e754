/* p256_group.cuh — points of y^2 = x^3 − 3x + b over GF(p), NIST P-256 (FIPS 186-5 /
 * SP 800-186 §3.2.1.3), coordinates in the Montgomery form of p256_field.cuh.
 *
 * Affine points (zv_p256_ge) for tables and public keys; Jacobian points (zv_p256_gej:
 * x = X/Z^2, y = Y/Z^3) for sums, with an explicit infinity flag.  Formulas from the
 * Explicit-Formulas Database (Bernstein–Lange): doubling "dbl-2001-b" (a = −3: 3M + 5S),
 * mixed addition "madd-2007-bl"'s operation order without its doubled terms (8M + 3S), full
 * addition "add-1998-cmo-2" (12M + 4S, for the public key's table only).
 *
 * Sums are complete for what a verify can meet: adding a point to itself doubles, adding
 * its negation gives infinity, and infinity is the identity on either side.  Those cases
 * cost a branch; they are rare (crafted inputs), so a warp almost never diverges there.
 * P-256 has prime order, so no finite point has Y = 0 and doubling a finite point never
 * gives infinity.
 *
 * Index (public functions, in source order; the comment at each says more):
 *   zv_p256_gej_set_ge(r, a)
 *   zv_p256_ge_on_curve(a)         y^2 = x^3 − 3x + b
 *   zv_p256_gej_double(r, a)       r = 2a (dbl-2001-b, a = −3)
 *   zv_p256_gej_add_ge(r, a, b)    r = a + b, b affine (finite)
 *   zv_p256_gej_add(r, a, b)       r = a + b, both Jacobian (add-1998-cmo-2 with the same special cases). r
 *                                  may be a or b
 *   zv_p256_odd_multiples(out, q)  out[i] = (2i + 1)·q, affine, for i < ZV_P256_Q_TABLE_SIZE (q a finite
 *                                  point)
 */
#ifndef ZV_P256_GROUP_CUH
#define ZV_P256_GROUP_CUH

#include "fields/p256_field.cuh"
#include "tables/p256_tables.cuh"

typedef struct { zv_p256_fe x, y; } zv_p256_ge;
typedef struct { zv_p256_fe x, y, z; int inf; } zv_p256_gej;

ZV_HD void zv_p256_gej_set_ge(zv_p256_gej *r, const zv_p256_ge *a) {
    r->x = a->x;
    r->y = a->y;
    zv_p256_fe_copy(&r->z, ZV_P256_ONE_MONT);
    r->inf = 0;
}

/* y^2 = x^3 − 3x + b. */
ZV_HD int zv_p256_ge_on_curve(const zv_p256_ge *a) {
    zv_p256_fe y2, rhs, t, b;
    zv_p256_fe_sqr(&y2, &a->y);
    zv_p256_fe_sqr(&rhs, &a->x);
    zv_p256_fe_mul(&rhs, &rhs, &a->x);
    zv_p256_fe_add(&t, &a->x, &a->x);
    zv_p256_fe_add(&t, &t, &a->x);
    zv_p256_fe_sub(&rhs, &rhs, &t);
    zv_p256_fe_copy(&b, ZV_P256_B_MONT);
    zv_p256_fe_add(&rhs, &rhs, &b);
    return zv_p256_fe_equal(&y2, &rhs);
}

/* r = 2a (dbl-2001-b, a = −3): δ = Z², γ = Y², β = X·γ, α = 3·(X − δ)·(X + δ),
 * X' = α² − 8β, Z' = (Y + Z)² − γ − δ, Y' = α·(4β − X') − 8γ².  r may be a. */
ZV_HD void zv_p256_gej_double(zv_p256_gej *r, const zv_p256_gej *a) {
    zv_p256_fe delta, gamma, beta, alpha, t, u;
    r->inf = a->inf;
    zv_p256_fe_sqr(&delta, &a->z);
    zv_p256_fe_sqr(&gamma, &a->y);
    zv_p256_fe_mul(&beta, &a->x, &gamma);
    zv_p256_fe_sub(&t, &a->x, &delta);
    zv_p256_fe_add(&u, &a->x, &delta);
    zv_p256_fe_mul(&alpha, &t, &u);
    zv_p256_fe_add(&t, &alpha, &alpha);
    zv_p256_fe_add(&alpha, &alpha, &t);              /* α = 3·(X − δ)·(X + δ) */
    zv_p256_fe_add(&t, &a->y, &a->z);
    zv_p256_fe_sqr(&t, &t);
    zv_p256_fe_sub(&t, &t, &gamma);
    zv_p256_fe_sub(&r->z, &t, &delta);               /* Z' (a's Y and Z are read) */
    zv_p256_fe_add(&beta, &beta, &beta);
    zv_p256_fe_add(&beta, &beta, &beta);             /* 4β */
    zv_p256_fe_sqr(&t, &alpha);
    zv_p256_fe_add(&u, &beta, &beta);                /* 8β */
    zv_p256_fe_sub(&r->x, &t, &u);                   /* X' */
    zv_p256_fe_sub(&t, &beta, &r->x);
    zv_p256_fe_mul(&t, &alpha, &t);
    zv_p256_fe_sqr(&gamma, &gamma);
    zv_p256_fe_add(&gamma, &gamma, &gamma);
    zv_p256_fe_add(&gamma, &gamma, &gamma);
    zv_p256_fe_add(&gamma, &gamma, &gamma);          /* 8γ² */
    zv_p256_fe_sub(&r->y, &t, &gamma);               /* Y' */
}

/* r = a + b, b affine (finite).  Z1Z1 = Z1², U2 = X2·Z1Z1, S2 = Y2·Z1·Z1Z1, H = U2 − X1,
 * R = S2 − Y1; H = 0 means b = ±a (double, or infinity); else X' = R² − H³ − 2·X1·H²,
 * Y' = R·(X1·H² − X') − Y1·H³, Z' = Z1·H.  r may be a. */
ZV_HD void zv_p256_gej_add_ge(zv_p256_gej *r, const zv_p256_gej *a, const zv_p256_ge *b) {
    if (a->inf) {
        zv_p256_gej_set_ge(r, b);
        return;
    }
    zv_p256_fe z1z1, u2, s2, h, rr, hh, hhh, v, t;
    zv_p256_fe_sqr(&z1z1, &a->z);
    zv_p256_fe_mul(&u2, &b->x, &z1z1);
    zv_p256_fe_mul(&s2, &b->y, &a->z);
    zv_p256_fe_mul(&s2, &s2, &z1z1);
    zv_p256_fe_sub(&h, &u2, &a->x);
    zv_p256_fe_sub(&rr, &s2, &a->y);
    if (zv_p256_fe_is_zero(&h)) {
        if (zv_p256_fe_is_zero(&rr)) {
            zv_p256_gej_double(r, a);
        } else {
            r->inf = 1;
        }
        return;
    }
    zv_p256_fe_sqr(&hh, &h);
    zv_p256_fe_mul(&hhh, &h, &hh);
    zv_p256_fe_mul(&v, &a->x, &hh);
    zv_p256_fe_mul(&r->z, &a->z, &h);
    zv_p256_fe_mul(&t, &a->y, &hhh);                 /* Y1·H³, before r->y is written */
    zv_p256_fe_sqr(&r->x, &rr);
    zv_p256_fe_sub(&r->x, &r->x, &hhh);
    zv_p256_fe_sub(&r->x, &r->x, &v);
    zv_p256_fe_sub(&r->x, &r->x, &v);
    zv_p256_fe_sub(&v, &v, &r->x);
    zv_p256_fe_mul(&v, &rr, &v);
    zv_p256_fe_sub(&r->y, &v, &t);
    r->inf = 0;
}

/* r = a + b, both Jacobian (add-1998-cmo-2 with the same special cases).  r may be a or b. */
ZV_HD void zv_p256_gej_add(zv_p256_gej *r, const zv_p256_gej *a, const zv_p256_gej *b) {
    if (a->inf) { *r = *b; return; }
    if (b->inf) { *r = *a; return; }
    zv_p256_fe z1z1, z2z2, u1, u2, s1, s2, h, rr, hh, hhh, v, t;
    zv_p256_fe_sqr(&z1z1, &a->z);
    zv_p256_fe_sqr(&z2z2, &b->z);
    zv_p256_fe_mul(&u1, &a->x, &z2z2);
    zv_p256_fe_mul(&u2, &b->x, &z1z1);
    zv_p256_fe_mul(&s1, &a->y, &b->z);
    zv_p256_fe_mul(&s1, &s1, &z2z2);
    zv_p256_fe_mul(&s2, &b->y, &a->z);
    zv_p256_fe_mul(&s2, &s2, &z1z1);
    zv_p256_fe_sub(&h, &u2, &u1);
    zv_p256_fe_sub(&rr, &s2, &s1);
    if (zv_p256_fe_is_zero(&h)) {
        if (zv_p256_fe_is_zero(&rr)) {
            zv_p256_gej_double(r, a);
        } else {
            r->inf = 1;
        }
        return;
    }
    zv_p256_fe_sqr(&hh, &h);
    zv_p256_fe_mul(&hhh, &h, &hh);
    zv_p256_fe_mul(&v, &u1, &hh);
    zv_p256_fe_mul(&t, &a->z, &b->z);
    zv_p256_fe_mul(&r->z, &t, &h);
    zv_p256_fe_sqr(&r->x, &rr);
    zv_p256_fe_sub(&r->x, &r->x, &hhh);
    zv_p256_fe_sub(&r->x, &r->x, &v);
    zv_p256_fe_sub(&r->x, &r->x, &v);
    zv_p256_fe_sub(&v, &v, &r->x);
    zv_p256_fe_mul(&v, &rr, &v);
    zv_p256_fe_mul(&t, &s1, &hhh);
    zv_p256_fe_sub(&r->y, &v, &t);
    r->inf = 0;
}

/* out[i] = (2i + 1)·q, affine, for i < ZV_P256_Q_TABLE_SIZE (q a finite point): the odd
 * multiples in Jacobian coordinates by repeated addition of 2q, then one field inversion
 * for all their Z (Montgomery's batch trick, zv_port.cuh zv_batch_invert).  q has prime
 * order n, so none of them is infinity and no addition meets a special case. */
ZV_NOINLINE void zv_p256_odd_multiples(zv_p256_ge *out, const zv_p256_ge *q) {
    const int count = ZV_P256_Q_TABLE_SIZE;
    zv_p256_gej jac[ZV_P256_Q_TABLE_SIZE], d;
    zv_p256_fe z[ZV_P256_Q_TABLE_SIZE], prefix[ZV_P256_Q_TABLE_SIZE];
    zv_p256_gej_set_ge(&jac[0], q);
    zv_p256_gej_double(&d, &jac[0]);
    for (int i = 1; i < count; i++) zv_p256_gej_add(&jac[i], &jac[i - 1], &d);
    for (int i = 0; i < count; i++) {
        ZV_CHECK(!jac[i].inf);
        z[i] = jac[i].z;
    }
    zv_batch_invert<zv_p256_fe, zv_p256_fe_mul, zv_p256_fe_inv>(z, prefix, count);
    out[0] = *q;
    for (int i = 1; i < count; i++) {
        zv_p256_fe zi2, zi3;
        zv_p256_fe_sqr(&zi2, &z[i]);
        zv_p256_fe_mul(&zi3, &zi2, &z[i]);
        zv_p256_fe_mul(&out[i].x, &jac[i].x, &zi2);
        zv_p256_fe_mul(&out[i].y, &jac[i].y, &zi3);
    }
}

#endif /* ZV_P256_GROUP_CUH */
