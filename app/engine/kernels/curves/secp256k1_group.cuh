/* secp256k1_group.cuh — points of y^2 = x^3 + 7 over GF(p) (SEC 2 v2 §2.4.1).
 *
 * Affine points (zv_k1_ge) for tables and public keys; Jacobian points (zv_k1_gej: x = X/Z^2,
 * y = Y/Z^3) for sums, with an explicit infinity flag.  The formulas use a = 0 and never
 * b, so they hold unchanged on every curve y^2 = x^3 + b' isomorphic to this one by
 * (x, y) -> (c^2·x, c^3·y); zv_k1_odd_multiples relies on that.
 *
 * Sums are complete for what a verify can meet: adding a point to itself doubles, adding
 * its negation gives infinity, and infinity is the identity on either side.  Those cases
 * cost a branch; they are rare (crafted inputs), so a warp almost never diverges there.
 *
 * Index (public functions, in source order; the comment at each says more):
 *   zv_k1_gej_set_ge(r, a)
 *   zv_k1_ge_on_curve(a)          y^2 = x^3 + 7
 *   zv_k1_ge_lift_x(q, x32, odd)  lift_x
 *   zv_k1_gej_double(r, a)        r = 2a: with S = 4·X·Y^2 and M = 3·X^2 (a = 0): X' = M^2 − 2S, Y' = M·(S −
 *                                 X') − 8·Y^4, Z' = …
 *   zv_k1_gej_double_call(r, a)   The doubling as an out-of-line call, for the rare a = b case of the
 *                                 addition
 *   zv_k1_gej_add_ge(r, a, b)     r = a + b, b affine (mixed addition)
 *   zv_k1_odd_multiples(out, q)
 */
#ifndef ZV_SECP256K1_GROUP_CUH
#define ZV_SECP256K1_GROUP_CUH

#include "fields/secp256k1_field.cuh"
#include "tables/secp256k1_tables.cuh"

typedef struct { zv_k1_fe x, y; } zv_k1_ge;

/* Window of the per-signature table of Q's odd multiples 1, 3, ..., 2^ZV_SECP256K1_W_Q − 1.  With
 * the regular recoding a wider window trades table building (2^(w−1) − 1 additions and a
 * larger batch inversion) for fewer main-loop additions; w = 4 and w = 5 cost the same
 * within 2%, and w = 4 halves the per-thread table (512 bytes of local memory). */
#define ZV_SECP256K1_W_Q 4
#define ZV_SECP256K1_Q_TABLE_SIZE (1 << (ZV_SECP256K1_W_Q - 1))
typedef struct { zv_k1_fe x, y, z; int inf; } zv_k1_gej;

ZV_HD void zv_k1_gej_set_ge(zv_k1_gej *r, const zv_k1_ge *a) {
    r->x = a->x;
    r->y = a->y;
    zv_k1_fe_set_u32(&r->z, 1);
    r->inf = 0;
}

/* y^2 = x^3 + 7. */
ZV_HD int zv_k1_ge_on_curve(const zv_k1_ge *a) {
    zv_k1_fe y2, x3, seven;
    zv_k1_fe_sqr(&y2, &a->y);
    zv_k1_fe_sqr(&x3, &a->x);
    zv_k1_fe_mul(&x3, &x3, &a->x);
    zv_k1_fe_set_u32(&seven, 7);
    zv_k1_fe_add(&x3, &x3, &seven);
    return zv_k1_fe_equal(&y2, &x3);
}

/* lift_x (BIP-340; SEC 1 §2.3.4 step 2.4 for a compressed key): the point with x-coordinate
 * the 32 big-endian bytes x32 and y of parity `odd`.  Returns 0 when x ≥ p or x^3 + 7 is not
 * a square mod p (no such point); then q is unspecified.  y is normalized. */
ZV_HD int zv_k1_ge_lift_x(zv_k1_ge *q, const zv_u8 *x32, int odd) {
    if (!zv_k1_fe_set_b32_limit(&q->x, x32)) return 0;
    zv_k1_fe rhs, seven;
    zv_k1_fe_sqr(&rhs, &q->x);
    zv_k1_fe_mul(&rhs, &rhs, &q->x);
    zv_k1_fe_set_u32(&seven, 7);
    zv_k1_fe_add(&rhs, &rhs, &seven);
    if (!zv_k1_fe_sqrt(&q->y, &rhs)) return 0;
    zv_k1_fe_normalize(&q->y);
    if ((int)(q->y.v[0] & 1) != (odd & 1)) zv_k1_fe_neg(&q->y, &q->y);
    zv_k1_fe_normalize(&q->y);
    return 1;
}

/* r = 2a: with S = 4·X·Y^2 and M = 3·X^2 (a = 0): X' = M^2 − 2S, Y' = M·(S − X') − 8·Y^4,
 * Z' = 2·Y·Z.  3M + 4S.  secp256k1 has no point of order 2, so Y ≠ 0 for finite a. */
ZV_HD void zv_k1_gej_double(zv_k1_gej *r, const zv_k1_gej *a) {
    zv_k1_fe x2, y2, y4, s, m, t;
    r->inf = a->inf;
    zv_k1_fe_mul(&r->z, &a->y, &a->z);
    zv_k1_fe_add(&r->z, &r->z, &r->z);
    zv_k1_fe_sqr(&x2, &a->x);
    zv_k1_fe_mul_int(&m, &x2, 3);
    zv_k1_fe_sqr(&y2, &a->y);
    zv_k1_fe_mul(&s, &a->x, &y2);
    zv_k1_fe_mul_int(&s, &s, 4);
    zv_k1_fe_sqr(&y4, &y2);
    zv_k1_fe_sqr(&t, &m);
    zv_k1_fe_sub(&t, &t, &s);
    zv_k1_fe_sub(&r->x, &t, &s);
    zv_k1_fe_sub(&t, &s, &r->x);
    zv_k1_fe_mul(&t, &m, &t);
    zv_k1_fe_mul_int(&y4, &y4, 8);
    zv_k1_fe_sub(&r->y, &t, &y4);
}

/* The doubling as an out-of-line call, for the rare a = b case of the addition: the hot
 * paths inline both operations (their points then stay in registers; a call passes them
 * through local memory), and this keeps a second inlined doubling out of every addition. */
ZV_NOINLINE void zv_k1_gej_double_call(zv_k1_gej *r, const zv_k1_gej *a) { zv_k1_gej_double(r, a); }

/* r = a + b, b affine (mixed addition).  U2 = x_b·Z^2, S2 = y_b·Z^3, H = U2 − X, R = S2 − Y;
 * X' = R^2 − H^3 − 2·X·H^2, Y' = R·(X·H^2 − X') − Y·H^3, Z' = Z·H.  8M + 3S.
 * r may alias a. */
ZV_HD void zv_k1_gej_add_ge(zv_k1_gej *r, const zv_k1_gej *a, const zv_k1_ge *b) {
    if (a->inf) {
        zv_k1_gej_set_ge(r, b);
        return;
    }
    zv_k1_fe zz, u2, s2, h, rr, hh, hhh, v, t;
    zv_k1_fe_sqr(&zz, &a->z);
    zv_k1_fe_mul(&u2, &b->x, &zz);
    zv_k1_fe_mul(&s2, &b->y, &zz);
    zv_k1_fe_mul(&s2, &s2, &a->z);
    zv_k1_fe_sub(&h, &u2, &a->x);
    zv_k1_fe_sub(&rr, &s2, &a->y);
    if (zv_k1_fe_is_zero(&h)) {
        if (zv_k1_fe_is_zero(&rr)) {  /* b = a */
            zv_k1_gej_double_call(r, a);
        } else {                   /* b = −a */
            r->inf = 1;
        }
        return;
    }
    zv_k1_fe_sqr(&hh, &h);
    zv_k1_fe_mul(&hhh, &hh, &h);
    zv_k1_fe_mul(&v, &a->x, &hh);
    zv_k1_fe_mul(&r->z, &a->z, &h);
    zv_k1_fe_sqr(&t, &rr);
    zv_k1_fe_sub(&t, &t, &hhh);
    zv_k1_fe_sub(&t, &t, &v);
    zv_k1_fe_sub(&t, &t, &v);         /* X' */
    zv_k1_fe_sub(&v, &v, &t);
    zv_k1_fe_mul(&v, &v, &rr);
    zv_k1_fe_mul(&hhh, &hhh, &a->y);
    zv_k1_fe_sub(&r->y, &v, &hhh);
    r->x = t;
    r->inf = 0;
}

/* The odd multiples (2i+1)·q, i < ZV_SECP256K1_Q_TABLE_SIZE, as affine points, with one field inversion.
 *
 * With d = 2q = (Xd, Yd, Zd), the map (x, y) -> (Zd^2·x, Zd^3·y) takes the curve to an
 * isomorphic one on which d is the affine point (Xd, Yd); there the multiples are built
 * by mixed additions (cheaper than Jacobian + Jacobian).  A point (X', Y', Z') found
 * there is (X', Y', Z'·Zd) in Jacobian coordinates of the real curve, so one batch
 * inversion (Montgomery's trick) of the Z'·Zd brings every multiple back to affine.
 * No sum here can meet a special case: (2i+1)·q = ±2q would need a point of order ≤ 2^ZV_SECP256K1_W_Q + 1.
 */
ZV_NOINLINE void zv_k1_odd_multiples(zv_k1_ge *out, const zv_k1_ge *q) {
    const int count = ZV_SECP256K1_Q_TABLE_SIZE;
    zv_k1_gej d, acc;
    zv_k1_gej_set_ge(&acc, q);
    zv_k1_gej_double(&d, &acc);
    zv_k1_ge d_iso;
    d_iso.x = d.x;
    d_iso.y = d.y;
    zv_k1_fe zd2, zd3;
    zv_k1_fe_sqr(&zd2, &d.z);
    zv_k1_fe_mul(&zd3, &zd2, &d.z);
    out[0] = *q;
    zv_k1_fe_mul(&acc.x, &q->x, &zd2);
    zv_k1_fe_mul(&acc.y, &q->y, &zd3);
    /* out[i] temporarily holds X', Y' of multiple i and prefix[i] the running product of
     * the real Z of multiples 1..i. */
    zv_k1_fe zs[ZV_SECP256K1_Q_TABLE_SIZE], prefix[ZV_SECP256K1_Q_TABLE_SIZE];
    for (int i = 1; i < count; i++) {
        zv_k1_gej_add_ge(&acc, &acc, &d_iso);
        out[i].x = acc.x;
        out[i].y = acc.y;
        zv_k1_fe_mul(&zs[i], &acc.z, &d.z);
        if (i == 1) prefix[1] = zs[1];
        else zv_k1_fe_mul(&prefix[i], &prefix[i - 1], &zs[i]);
    }
    zv_k1_fe inv, zinv, zinv2;
    zv_k1_fe_inv(&inv, &prefix[count - 1]);
    for (int i = count - 1; i >= 1; i--) {
        if (i > 1) {
            zv_k1_fe_mul(&zinv, &inv, &prefix[i - 1]);
            zv_k1_fe_mul(&inv, &inv, &zs[i]);
        } else {
            zinv = inv;
        }
        zv_k1_fe_sqr(&zinv2, &zinv);
        zv_k1_fe_mul(&out[i].x, &out[i].x, &zinv2);
        zv_k1_fe_mul(&zinv2, &zinv2, &zinv);
        zv_k1_fe_mul(&out[i].y, &out[i].y, &zinv2);
    }
}

#endif /* ZV_SECP256K1_GROUP_CUH */
