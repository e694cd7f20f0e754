/* ge25519.cuh — the edwards25519 group (RFC 8032 §5.1) for the Ed25519 kernel.
 *
 * Semantics
 *   Points are on -x^2 + y^2 = 1 + d x^2 y^2 over GF(2^255 - 19), in the coordinates of
 *   Hisil, Wong, Carter, Dawson, "Twisted Edwards Curves Revisited" (2008):
 *     p2    (X : Y : Z)            x = X/Z, y = Y/Z
 *     p3    (X : Y : Z : T)        extended, also XY = ZT
 *     p1p1  ((X : Z), (Y : T))     x = X/Z, y = Y/T: the raw output of a doubling or an
 *                                  addition, turned into p2 (3M) or p3 (4M) as needed next
 *     cached (Y+X, Y-X, Z, 2dT)    a p3 prepared as the right operand of an addition
 *     niels (y+x, y-x, 2dxy)       an affine point prepared the same way (Z = 1)
 *   Doubling is dbl-2008-hwcd (4 squarings), addition add-2008-hwcd-3 for a = -1 (4M, 3M
 *   with a Niels operand); both formulas are complete on this curve.  Subtracting a
 *   prepared point only swaps two of its coordinates and the sign of 2dT, so it is done by
 *   conditional swaps (no branch on the digit's sign, no extra negation).
 *
 *   zv_ed_ge_frombytes_negate decodes a 32-byte encoding A as libsodium's
 *   ge25519_frombytes_negate_vartime does and returns -A: y is the low 255 bits (the caller
 *   checks y < p first), x = u v^3 (u v^7)^((p-5)/8) with u = y^2 - 1, v = d y^2 + 1, times
 *   sqrt(-1) when v x^2 = -u, failure when v x^2 is neither u nor -u; x = 0 with the sign
 *   bit set is *not* rejected here (libsodium doesn't either; both such encodings are in
 *   the small-order blocklist, which the verifier checks first).
 *
 *   zv_ed_ge_double_scalarmult_vartime computes [k]A + [s]B for scalars < 2^253 (Straus,
 *   shared doublings): k in signed windows of width ZV_ED25519_WA against a per-thread table
 *   [1..8]A, s in signed windows of width ZV_ED25519_WB against [1..2^(WB-1)]B in read-only
 *   global memory (ZV_TABLE, ed25519_tables.cuh: lanes read different entries, which
 *   constant memory would serialise).  Additions happen at the same bit positions in every
 *   thread, so a warp never diverges on the schedule, only on which table entry it reads.
 *
 * Index (public functions, in source order; the comment at each says more):
 *   zv_ed_fe_from_const(h, c)
 *   zv_ed_ge_p1p1_to_p2(r, p)
 *   zv_ed_ge_p1p1_to_p3(r, p)
 *   zv_ed_ge_p3_to_cached(r, p)
 *   zv_ed_ge_dbl(r, p)                          r = 2p
 *   zv_ed_ge_add_cached(r, p, q, neg)           r = p + q (neg = 0) or p - q (neg = 1)
 *   zv_ed_ge_add_niels(r, p, q, neg)            r = p + q or p - q for an affine (Niels) q
 *   zv_ed_ge_is_canonical(s)                    1 when the low 255 bits of s are < p
 *   zv_ed_ge_has_small_order(s)                 1 when s, sign bit ignored, is one of the blocklisted
 *                                               encodings of the points of order 1, 2, 4 …
 *   zv_ed_ge_frombytes_negate(r, s)             r = -A for the encoding s of A; 0 when no point has this y
 *                                               (see the header comment)
 *   zv_ed_ge_tobytes_zinv(s, X, Y, zi)          RFC 8032 §5.1.2 encoding of
 *   zv_ed_ge_tobytes(s, p)
 *   zv_ed_ge_niels_load(q, j)
 *   zv_ed_ge_double_scalarmult_vartime(r, k, A, s)
 *                                               r = [k]A + [s]B, k and s < 2^253 as 8 little-endian 32-bit
 *                                               limbs
 */
#ifndef ZV_GE25519_CUH
#define ZV_GE25519_CUH

#include "fields/fe25519.cuh"
#include "fields/sc25519.cuh"
#include "tables/ed25519_tables.cuh"

/* Width of the signed windows of the variable point's scalar; table of 2^(WA-1) points. */
#define ZV_ED25519_WA 4
#define ZV_ED25519_A_ENTRIES (1 << (ZV_ED25519_WA - 1))
#define ZV_ED25519_MA ((253 + ZV_ED25519_WA - 1) / ZV_ED25519_WA)
#define ZV_ED25519_MB ((253 + ZV_ED25519_WB - 1) / ZV_ED25519_WB)

typedef struct { zv_ed_fe X, Y, Z; } zv_ed_ge_p2;
typedef struct { zv_ed_fe X, Y, Z, T; } zv_ed_ge_p3;
typedef struct { zv_ed_fe X, Y, Z, T; } zv_ed_ge_p1p1;
typedef struct { zv_ed_fe YpX, YmX, Z, T2d; } zv_ed_ge_cached;
typedef struct { zv_ed_fe ypx, ymx, xy2d; } zv_ed_ge_niels;

ZV_HD void zv_ed_fe_from_const(zv_ed_fe *h, const zv_u32 *c) {
    ZV_UNROLL for (int i = 0; i < 8; i++) h->v[i] = c[i];
}

ZV_HD void zv_ed_ge_p1p1_to_p2(zv_ed_ge_p2 *r, const zv_ed_ge_p1p1 *p) {
    zv_ed_fe_mul(&r->X, &p->X, &p->T);
    zv_ed_fe_mul(&r->Y, &p->Y, &p->Z);
    zv_ed_fe_mul(&r->Z, &p->Z, &p->T);
}

ZV_HD void zv_ed_ge_p1p1_to_p3(zv_ed_ge_p3 *r, const zv_ed_ge_p1p1 *p) {
    zv_ed_fe_mul(&r->X, &p->X, &p->T);
    zv_ed_fe_mul(&r->Y, &p->Y, &p->Z);
    zv_ed_fe_mul(&r->Z, &p->Z, &p->T);
    zv_ed_fe_mul(&r->T, &p->X, &p->Y);
}

ZV_HD void zv_ed_ge_p3_to_cached(zv_ed_ge_cached *r, const zv_ed_ge_p3 *p) {
    zv_ed_fe d2;
    zv_ed_fe_from_const(&d2, ZV_ED25519_D2);
    zv_ed_fe_add(&r->YpX, &p->Y, &p->X);
    zv_ed_fe_sub(&r->YmX, &p->Y, &p->X);
    zv_ed_fe_copy(&r->Z, &p->Z);
    zv_ed_fe_mul(&r->T2d, &p->T, &d2);
}

/* r = 2p.  With A = X^2, B = Y^2, C = 2Z^2 the result is stored as the p1p1
 * (2XY, A + B, B - A, C - (B - A)): the formula's (E, H, G, F) times -1 on H and F, which
 * scales every product of the conversions by -1 and so names the same point. */
ZV_HD void zv_ed_ge_dbl(zv_ed_ge_p1p1 *r, const zv_ed_ge_p2 *p) {
    zv_ed_fe a, b, c, s;
    zv_ed_fe_sq(&a, &p->X);
    zv_ed_fe_sq(&b, &p->Y);
    zv_ed_fe_sq(&c, &p->Z);
    zv_ed_fe_add(&c, &c, &c);
    zv_ed_fe_add(&s, &p->X, &p->Y);
    zv_ed_fe_sq(&s, &s);
    zv_ed_fe_add(&r->Y, &a, &b);
    zv_ed_fe_sub(&r->Z, &b, &a);
    zv_ed_fe_sub(&r->X, &s, &r->Y);
    zv_ed_fe_sub(&r->T, &c, &r->Z);
}

/* r = p + q (neg = 0) or p - q (neg = 1). */
ZV_HD void zv_ed_ge_add_cached(zv_ed_ge_p1p1 *r, const zv_ed_ge_p3 *p, const zv_ed_ge_cached *q, zv_u32 neg) {
    zv_ed_fe yp, ym, a, b, c, d;
    zv_ed_fe_copy(&yp, &q->YpX);
    zv_ed_fe_copy(&ym, &q->YmX);
    zv_ed_fe_cswap(&yp, &ym, neg);
    zv_ed_fe_sub(&a, &p->Y, &p->X);
    zv_ed_fe_mul(&a, &a, &ym);
    zv_ed_fe_add(&b, &p->Y, &p->X);
    zv_ed_fe_mul(&b, &b, &yp);
    zv_ed_fe_mul(&c, &p->T, &q->T2d);
    zv_ed_fe_mul(&d, &p->Z, &q->Z);
    zv_ed_fe_add(&d, &d, &d);
    zv_ed_fe_sub(&r->X, &b, &a);
    zv_ed_fe_add(&r->Y, &b, &a);
    zv_ed_fe_add(&r->Z, &d, &c);
    zv_ed_fe_sub(&r->T, &d, &c);
    zv_ed_fe_cswap(&r->Z, &r->T, neg);
}

/* r = p + q or p - q for an affine (Niels) q. */
ZV_HD void zv_ed_ge_add_niels(zv_ed_ge_p1p1 *r, const zv_ed_ge_p3 *p, const zv_ed_ge_niels *q, zv_u32 neg) {
    zv_ed_fe yp, ym, a, b, c, d;
    zv_ed_fe_copy(&yp, &q->ypx);
    zv_ed_fe_copy(&ym, &q->ymx);
    zv_ed_fe_cswap(&yp, &ym, neg);
    zv_ed_fe_sub(&a, &p->Y, &p->X);
    zv_ed_fe_mul(&a, &a, &ym);
    zv_ed_fe_add(&b, &p->Y, &p->X);
    zv_ed_fe_mul(&b, &b, &yp);
    zv_ed_fe_mul(&c, &p->T, &q->xy2d);
    zv_ed_fe_add(&d, &p->Z, &p->Z);
    zv_ed_fe_sub(&r->X, &b, &a);
    zv_ed_fe_add(&r->Y, &b, &a);
    zv_ed_fe_add(&r->Z, &d, &c);
    zv_ed_fe_sub(&r->T, &d, &c);
    zv_ed_fe_cswap(&r->Z, &r->T, neg);
}

/* 1 when the low 255 bits of s are < p (libsodium's ge25519_is_canonical: the sign bit
 * is not part of the test). */
ZV_HD int zv_ed_ge_is_canonical(const zv_u8 s[32]) {
    zv_u32 all_ff = (s[31] & 0x7fu) ^ 0x7fu;
    for (int i = 1; i < 31; i++) all_ff |= s[i] ^ 0xffu;
    return !(all_ff == 0 && s[0] >= 0xedu);
}

/* 1 when s, sign bit ignored, is one of the blocklisted encodings of the points of order
 * 1, 2, 4 or 8 (libsodium's ge25519_has_small_order). */
ZV_HD int zv_ed_ge_has_small_order(const zv_u8 s[32]) {
    int hit = 0;
    for (int k = 0; k < ZV_ED25519_SMALL_ORDER_COUNT; k++) {
        zv_u32 diff = (s[31] & 0x7fu) ^ ZV_ED25519_SMALL_ORDER[k][31];
        for (int i = 0; i < 31; i++) diff |= s[i] ^ ZV_ED25519_SMALL_ORDER[k][i];
        hit |= diff == 0;
    }
    return hit;
}

/* r = -A for the encoding s of A; 0 when no point has this y (see the header comment). */
ZV_HD int zv_ed_ge_frombytes_negate(zv_ed_ge_p3 *r, const zv_u8 s[32]) {
    zv_ed_fe u, v, v3, x, t, d;
    zv_ed_fe_from_const(&d, ZV_ED25519_D);
    zv_ed_fe_frombytes(&r->Y, s);
    zv_ed_fe_set_small(&r->Z, 1);
    zv_ed_fe_sq(&u, &r->Y);
    zv_ed_fe_mul(&v, &u, &d);
    zv_ed_fe_sub(&u, &u, &r->Z);        /* u = y^2 - 1 */
    zv_ed_fe_add(&v, &v, &r->Z);        /* v = d y^2 + 1 */
    zv_ed_fe_sq(&v3, &v);
    zv_ed_fe_mul(&v3, &v3, &v);         /* v^3 */
    zv_ed_fe_sq(&x, &v3);
    zv_ed_fe_mul(&x, &x, &v);
    zv_ed_fe_mul(&x, &x, &u);           /* u v^7 */
    zv_ed_fe_pow22523(&x, &x);
    zv_ed_fe_mul(&x, &x, &v3);
    zv_ed_fe_mul(&x, &x, &u);           /* u v^3 (u v^7)^((p-5)/8) */
    zv_ed_fe_sq(&t, &x);
    zv_ed_fe_mul(&t, &t, &v);           /* v x^2 */
    if (!zv_ed_fe_equal(&t, &u)) {
        zv_ed_fe_neg(&u, &u);
        if (!zv_ed_fe_equal(&t, &u)) return 0;
        zv_ed_fe sqrtm1;
        zv_ed_fe_from_const(&sqrtm1, ZV_ED25519_SQRTM1);
        zv_ed_fe_mul(&x, &x, &sqrtm1);
    }
    if (zv_ed_fe_isnegative(&x) == (s[31] >> 7)) zv_ed_fe_neg(&x, &x);
    zv_ed_fe_copy(&r->X, &x);
    zv_ed_fe_mul(&r->T, &r->X, &r->Y);
    return 1;
}

/* RFC 8032 §5.1.2 encoding of a p2 point: y, with the parity of x in bit 255. */
/* RFC 8032 §5.1.2 encoding of (X : Y : Z) given zi = 1/Z (so a caller can batch the
 * inversions of many points). */
ZV_HD void zv_ed_ge_tobytes_zinv(zv_u8 s[32], const zv_ed_fe *X, const zv_ed_fe *Y, const zv_ed_fe *zi) {
    zv_ed_fe x, y;
    zv_ed_fe_mul(&x, X, zi);
    zv_ed_fe_mul(&y, Y, zi);
    zv_ed_fe_tobytes(s, &y);
    s[31] ^= (zv_u8)(zv_ed_fe_isnegative(&x) << 7);
}

ZV_HD void zv_ed_ge_tobytes(zv_u8 s[32], const zv_ed_ge_p2 *p) {
    zv_ed_fe zi;
    zv_ed_fe_invert(&zi, &p->Z);
    zv_ed_ge_tobytes_zinv(s, &p->X, &p->Y, &zi);
}

ZV_HD void zv_ed_ge_niels_load(zv_ed_ge_niels *q, int j) {
    zv_ed_fe_from_const(&q->ypx, ZV_ED25519_BASE_NIELS[j][0]);
    zv_ed_fe_from_const(&q->ymx, ZV_ED25519_BASE_NIELS[j][1]);
    zv_ed_fe_from_const(&q->xy2d, ZV_ED25519_BASE_NIELS[j][2]);
}

/* r = [k]A + [s]B, k and s < 2^253 as 8 little-endian 32-bit limbs. */
ZV_HD void zv_ed_ge_double_scalarmult_vartime(zv_ed_ge_p2 *r, const zv_u32 k[8], const zv_ed_ge_p3 *A,
                                           const zv_u32 s[8]) {
    signed char da[ZV_ED25519_MA], db[ZV_ED25519_MB];
    zv_ed_sc_signed_window(da, k, ZV_ED25519_WA, ZV_ED25519_MA);
    zv_ed_sc_signed_window(db, s, ZV_ED25519_WB, ZV_ED25519_MB);

    /* Ai[j] = [j + 1]A */
    zv_ed_ge_cached Ai[ZV_ED25519_A_ENTRIES];
    zv_ed_ge_p1p1 t;
    zv_ed_ge_p3 u;
    zv_ed_ge_p3_to_cached(&Ai[0], A);
    u = *A;
    for (int j = 1; j < ZV_ED25519_A_ENTRIES; j++) {
        zv_ed_ge_add_cached(&t, &u, &Ai[0], 0);
        zv_ed_ge_p1p1_to_p3(&u, &t);
        zv_ed_ge_p3_to_cached(&Ai[j], &u);
    }

    /* t = identity, as the p1p1 ((0 : 1), (1 : 1)) */
    zv_ed_fe_set_small(&t.X, 0);
    zv_ed_fe_set_small(&t.Y, 1);
    zv_ed_fe_set_small(&t.Z, 1);
    zv_ed_fe_set_small(&t.T, 1);
    int top_a = (ZV_ED25519_MA - 1) * ZV_ED25519_WA, top_b = (ZV_ED25519_MB - 1) * ZV_ED25519_WB;
    int ia = ZV_ED25519_MA - 1, ib = ZV_ED25519_MB - 1;
    for (int i = top_a > top_b ? top_a : top_b; i >= 0; i--) {
        zv_ed_ge_p2 q;
        zv_ed_ge_p1p1_to_p2(&q, &t);
        zv_ed_ge_dbl(&t, &q);
        if (i == ia * ZV_ED25519_WA) {
            int d = da[ia--];
            if (d) {
                zv_ed_ge_p1p1_to_p3(&u, &t);
                zv_ed_ge_add_cached(&t, &u, &Ai[(d < 0 ? -d : d) - 1], (zv_u32)(d < 0));
            }
        }
        if (i == ib * ZV_ED25519_WB) {
            int d = db[ib--];
            if (d) {
                zv_ed_ge_niels nb;
                zv_ed_ge_niels_load(&nb, (d < 0 ? -d : d) - 1);
                zv_ed_ge_p1p1_to_p3(&u, &t);
                zv_ed_ge_add_niels(&t, &u, &nb, (zv_u32)(d < 0));
            }
        }
    }
    zv_ed_ge_p1p1_to_p2(r, &t);
}

#endif /* ZV_GE25519_CUH */
