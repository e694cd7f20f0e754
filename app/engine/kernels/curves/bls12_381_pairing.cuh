/* bls12_381_pairing.cuh — the optimal ate pairing of BLS12-381: Miller loop and final
 * exponentiation, for products of pairings (one shared Miller loop).
 *
 * Semantics.  For P ∈ G1 ⊂ E(Fp): y^2 = x^3 + 4 and Q ∈ G2 ⊂ E'(Fp2): y^2 = x^3 + 4ξ (the
 * M-type sextic twist, ξ = 1 + u), both given in affine coordinates and neither the point at
 * infinity (callers drop such a pair: its pairing is 1),
 *     zv_bls_final_exp(zv_bls_miller_loop(pairs)) = Π e(P_i, Q_i)
 * where e(P, Q) = f_(x,Q)(P)^(3(p^12 − 1)/r) with x = −0xd201000000010000 the curve parameter.
 * This e is a non-degenerate bilinear map G1 × G2 → μ_r ⊂ Fp12; it is the cube of the
 * "reduced" ate pairing f^((p^12−1)/r) (see the hard part below), and since gcd(3, r) = 1 the
 * cube changes no answer to "is the product 1?", which is all a verifier asks.  py_ecc's
 * pairing(Q, P) uses f_(|x|,Q) (x's sign ignored) and the exponent (p^12 − 1)/r, so
 * e(P, Q) = py_ecc.pairing(Q, P)^(−3) (tests/test_kernel_bls12_381.py checks exactly this).
 *
 * Miller loop.  T runs over [k]Q in homogeneous projective coordinates (x = X/Z, y = Y/Z) on
 * the twist, k through the bits of |x| from the top: T = 2T every bit (63 times), T = T + Q at
 * the five lower set bits (|x| = 2^63 + 2^62 + 2^60 + 2^57 + 2^48 + 2^16).  The line through
 * T (tangent) or through T and Q, untwisted by (x', y') -> (x'/w^2, y'/w^3) and evaluated at
 * P, is ℓ(P) = y_P − λ x_P − (y_T − λ x_T) with λ = λ'/w; times w^3 (which lies in Fp4, so
 * the final exponentiation kills it) it is −(y'_T − λ' x'_T) − λ' x_P·v + y_P·v·w: the
 * sparse shape c0 + c1 v + c4 v w of zv_bls_line.  Each line is further scaled by a
 * factor in Fp2 (also killed) to clear denominators:
 *   doubling (scale 2YZ, tangent slope 3X^2/(2YZ), using Y^2 Z = X^3 + b'Z^3):
 *     c0 = Y^2 − 3b'Z^2,  c1 = −3X^2·x_P,  c4 = 2YZ·y_P;
 *     2T = (2XY(Y^2 − 9b'Z^2), (Y^2 + 9b'Z^2)^2 − 108 b'^2 Z^4, 8Y^3 Z)  (b' = 4ξ; the
 *     projective doubling of Costello, Lange & Naehrig, PKC 2010, §5, with X, Y, Z scaled
 *     by 4 so no halving is needed);
 *   addition with affine Q (scale λ = X − x_Q Z, slope θ/λ with θ = Y − y_Q Z):
 *     c0 = θ x_Q − λ y_Q,  c1 = −θ·x_P,  c4 = λ·y_P;
 *     T + Q = (λH, θ(G − H) − YE, ZE) with D = λ^2, E = λD, F = Zθ^2, G = XD,
 *     H = E + F − 2G  (the mixed addition of Aranha et al., "Faster explicit formulas for
 *     computing pairings over ordinary curves", EUROCRYPT 2011, §4).
 * T never reaches ±Q or ∞: that would need [k]Q = ±Q or O for some 1 < k ≤ |x| < r, and Q
 * has order r (callers subgroup-check); ZV_CHECK(Z ≠ 0) says so in host builds.  Since x < 0
 * the loop ends with a conjugation: f_(x,Q) = 1/(f_(|x|,Q)·v) with v in Fp6, killed by p^6 − 1,
 * and 1/f equals conj(f) up to the same factor.  With several pairs the squarings of f are
 * shared and every pair's lines are multiplied in (a multi-Miller loop).
 *
 * Final exponentiation, exponent 3(p^12 − 1)/r = (p^6 − 1)(p^2 + 1) · 3(p^4 − p^2 + 1)/r.
 *   Easy part: m = conj(f)/f (the p^6 − 1 power), m = m^(p^2)·m.  Now m is in the cyclotomic
 *   subgroup (m^(p^4 − p^2 + 1) = 1), where the inverse is conj and squaring may use
 *   zv_fp12_cyclotomic_sqr.
 *   Hard part: the decomposition of Hayashida, Hayasaka & Teruya, "Efficient final
 *   exponentiation via cyclotomic structure for pairings over families of elliptic curves"
 *   (IACR ePrint 2020/875), §4 for BLS12:
 *     3(p^4 − p^2 + 1)/r = (x − 1)^2 (x + p) (x^2 + p^2 − 1) + 3,
 *   an identity of polynomials in x given p = (x − 1)^2 (x^4 − x^2 + 1)/3 + x and
 *   r = x^4 − x^2 + 1.  It costs 5 exponentiations by x (each 63 cyclotomic squarings, 5
 *   multiplications and a conjugation for the sign), 2 Frobenius maps and 7 multiplications.
 *
 * Cost per two-pair check (m = Fp2 multiplication): Miller loop ~3,900m (62 Fp12 squarings,
 * 136 line multiplications, 126 doublings, 10 additions), final exponentiation ~3,400m and one
 * Fp inversion.
 *
 * Index (public functions, in source order; the comment at each says more):
 *   zv_bls_miller_pair_init(s, px, py, qx, qy)  Start a pair with T = Q; P = (px, py) ∈ G1 and Q = (qx, qy)
 *                                               ∈ G2 affine, neither ∞
 */
#ifndef ZV_BLS12_381_PAIRING_CUH
#define ZV_BLS12_381_PAIRING_CUH

#include "zv_port.cuh"
#include "fields/bls12_381_fp12.cuh"

/* Operation counts (zv_port.cuh, host builds with ZV_COUNT_OPS only): the Fp products a
 * Miller loop or final exponentiation spends are added to ZV_OP_BLS_PAIRING_FP_MUL, so a
 * test can compare the pairing work of two ways of verifying the same items. */
#if !ZV_CUDA_COMPILER && defined(ZV_COUNT_OPS)
#define ZV_BLS_SPAN_BEGIN zv_u64 zv_bls_span0 = zv_op_counts[ZV_OP_BLS_FP_MUL]
#define ZV_BLS_SPAN_END (zv_op_counts[ZV_OP_BLS_PAIRING_FP_MUL] += zv_op_counts[ZV_OP_BLS_FP_MUL] - zv_bls_span0)
#else
#define ZV_BLS_SPAN_BEGIN ((void)0)
#define ZV_BLS_SPAN_END ((void)0)
#endif

/* One (P, Q) pair of a multi-Miller loop: Q affine, P's coordinates in the forms the line
 * coefficients use, and the running point T = [k]Q (homogeneous projective). */
typedef struct {
    zv_fp2 qx, qy;
    zv_fp nx3, y2, nx, y; /* −3x_P, 2y_P, −x_P, y_P */
    zv_fp2 tx, ty, tz;
} zv_bls_miller_pair;

/* Start a pair with T = Q; P = (px, py) ∈ G1 and Q = (qx, qy) ∈ G2 affine, neither ∞. */
ZV_HD void zv_bls_miller_pair_init(zv_bls_miller_pair *s, const zv_fp *px, const zv_fp *py, const zv_fp2 *qx,
                                   const zv_fp2 *qy) {
    s->qx = *qx;
    s->qy = *qy;
    zv_fp_neg(&s->nx, px);
    zv_fp_dbl(&s->nx3, &s->nx);
    zv_fp_add(&s->nx3, &s->nx3, &s->nx);
    s->y = *py;
    zv_fp_dbl(&s->y2, py);
    s->tx = *qx;
    s->ty = *qy;
    zv_fp2_one(&s->tz);
}

/* T = 2T and the tangent line at T evaluated at P (formulas in the header comment). */
ZV_BLS_NOINLINE void zv_bls_miller_double(zv_bls_miller_pair *s, zv_bls_line *l) {
    zv_fp2 xx, yy, yz, bzz, b3, b9, t, u;
    ZV_CHECK(!zv_fp2_is_zero(&s->tz));
    zv_fp2_sqr(&xx, &s->tx);
    zv_fp2_sqr(&yy, &s->ty);
    zv_fp2_mul(&yz, &s->ty, &s->tz);
    zv_fp2_sqr(&bzz, &s->tz);             /* b'Z^2 = 4ξ Z^2 */
    zv_fp2_mul_by_xi(&bzz, &bzz);
    zv_fp2_dbl(&bzz, &bzz);
    zv_fp2_dbl(&bzz, &bzz);
    zv_fp2_dbl(&b3, &bzz);                /* 3b'Z^2 */
    zv_fp2_add(&b3, &b3, &bzz);
    zv_fp2_dbl(&b9, &b3);                 /* 9b'Z^2 */
    zv_fp2_add(&b9, &b9, &b3);
    zv_fp2_sub(&l->c0, &yy, &b3);
    zv_fp2_mul_fp(&l->c1, &xx, &s->nx3);
    zv_fp2_mul_fp(&l->c4, &yz, &s->y2);
    /* X3 = 2XY(Y^2 − 9b'Z^2) */
    zv_fp2_mul(&t, &s->tx, &s->ty);
    zv_fp2_sub(&u, &yy, &b9);
    zv_fp2_mul(&t, &t, &u);
    zv_fp2_dbl(&s->tx, &t);
    /* Z3 = 8Y^3 Z = 8·Y^2·YZ */
    zv_fp2_mul(&t, &yy, &yz);
    zv_fp2_dbl(&t, &t);
    zv_fp2_dbl(&t, &t);
    zv_fp2_dbl(&s->tz, &t);
    /* Y3 = (Y^2 + 9b'Z^2)^2 − 108 b'^2 Z^4 = (Y^2 + 9b'Z^2)^2 − 12 (3b'Z^2)^2 */
    zv_fp2_add(&u, &yy, &b9);
    zv_fp2_sqr(&u, &u);
    zv_fp2_sqr(&t, &b3);
    zv_fp2_dbl(&t, &t);
    zv_fp2_dbl(&t, &t);                   /* 4(3b'Z^2)^2 */
    zv_fp2_sub(&u, &u, &t);
    zv_fp2_sub(&u, &u, &t);
    zv_fp2_sub(&s->ty, &u, &t);
}

/* T = T + Q and the line through T and Q evaluated at P (formulas in the header comment). */
ZV_BLS_NOINLINE void zv_bls_miller_add(zv_bls_miller_pair *s, zv_bls_line *l) {
    zv_fp2 th, la, d, e, f, g, h, t;
    ZV_CHECK(!zv_fp2_is_zero(&s->tz));
    zv_fp2_mul(&th, &s->qy, &s->tz);
    zv_fp2_sub(&th, &s->ty, &th);         /* θ = Y − y_Q Z */
    zv_fp2_mul(&la, &s->qx, &s->tz);
    zv_fp2_sub(&la, &s->tx, &la);         /* λ = X − x_Q Z */
    ZV_CHECK(!zv_fp2_is_zero(&la));       /* T ≠ ±Q */
    zv_fp2_mul(&l->c0, &th, &s->qx);
    zv_fp2_mul(&t, &la, &s->qy);
    zv_fp2_sub(&l->c0, &l->c0, &t);
    zv_fp2_mul_fp(&l->c1, &th, &s->nx);
    zv_fp2_mul_fp(&l->c4, &la, &s->y);
    zv_fp2_sqr(&d, &la);
    zv_fp2_mul(&e, &la, &d);
    zv_fp2_sqr(&f, &th);
    zv_fp2_mul(&f, &f, &s->tz);
    zv_fp2_mul(&g, &s->tx, &d);
    zv_fp2_add(&h, &e, &f);
    zv_fp2_sub(&h, &h, &g);
    zv_fp2_sub(&h, &h, &g);
    zv_fp2_mul(&s->tx, &la, &h);
    zv_fp2_sub(&t, &g, &h);
    zv_fp2_mul(&t, &th, &t);
    zv_fp2_mul(&g, &s->ty, &e);
    zv_fp2_sub(&s->ty, &t, &g);
    zv_fp2_mul(&s->tz, &s->tz, &e);
}

/* f = Π f_(x, Q_i)(P_i) over n pairs (n ≥ 1; every pair freshly initialised: the loop moves
 * each T to [|x|]Q).  For n = 0 the product is 1. */
ZV_BLS_NOINLINE void zv_bls_miller_loop(zv_fp12 *f, zv_bls_miller_pair *pairs, int n) {
    zv_bls_line l;
    ZV_BLS_SPAN_BEGIN;
    ZV_COUNT(ZV_OP_BLS_MILLER_LOOP);
    for (int i = 0; i < n; i++) ZV_COUNT(ZV_OP_BLS_MILLER_PAIR);
    zv_fp12_one(f);
    for (int bit = 62; bit >= 0; bit--) {
        if (bit != 62) zv_fp12_sqr(f, f); /* f = 1 before the first step */
        for (int i = 0; i < n; i++) {
            zv_bls_miller_double(&pairs[i], &l);
            zv_fp12_mul_by_line(f, &l);
        }
        if ((ZV_BLS_X_ABS >> bit) & 1) {
            for (int i = 0; i < n; i++) {
                zv_bls_miller_add(&pairs[i], &l);
                zv_fp12_mul_by_line(f, &l);
            }
        }
    }
    zv_fp12_conj(f, f); /* x < 0 */
    ZV_BLS_SPAN_END;
}

/* r = a^x for a in the cyclotomic subgroup: a^|x| by cyclotomic squarings, then conj (= the
 * inverse there) for the sign. */
ZV_BLS_NOINLINE void zv_bls_cyclotomic_exp_by_x(zv_fp12 *r, const zv_fp12 *a) {
    zv_fp12 acc = *a;
    for (int bit = 62; bit >= 0; bit--) {
        zv_fp12_cyclotomic_sqr(&acc, &acc);
        if ((ZV_BLS_X_ABS >> bit) & 1) zv_fp12_mul(&acc, &acc, a);
    }
    zv_fp12_conj(r, &acc);
}

/* r = f^(3(p^12 − 1)/r) (easy part, then the hard part of the header comment). */
ZV_BLS_NOINLINE void zv_bls_final_exp(zv_fp12 *r, const zv_fp12 *f) {
    zv_fp12 m, a, b, t;
    ZV_BLS_SPAN_BEGIN;
    ZV_COUNT(ZV_OP_BLS_FINAL_EXP);
    /* easy part: m = f^((p^6 − 1)(p^2 + 1)) */
    zv_fp12_inv(&t, f);
    zv_fp12_conj(&m, f);
    zv_fp12_mul(&m, &m, &t);
    zv_fp12_frobenius(&t, &m, 2);
    zv_fp12_mul(&m, &m, &t);
    ZV_CHECK(zv_fp12_is_cyclotomic(&m));
    /* hard part: m^((x − 1)^2 (x + p) (x^2 + p^2 − 1) + 3) */
    zv_bls_cyclotomic_exp_by_x(&a, &m);          /* a = m^(x − 1) */
    zv_fp12_conj(&t, &m);
    zv_fp12_mul(&a, &a, &t);
    zv_bls_cyclotomic_exp_by_x(&b, &a);          /* b = a^(x − 1) */
    zv_fp12_conj(&t, &a);
    zv_fp12_mul(&b, &b, &t);
    zv_bls_cyclotomic_exp_by_x(&a, &b);          /* a = b^(x + p) */
    zv_fp12_frobenius(&t, &b, 1);
    zv_fp12_mul(&a, &a, &t);
    zv_bls_cyclotomic_exp_by_x(&b, &a);          /* b = a^(x^2 + p^2 − 1) */
    zv_bls_cyclotomic_exp_by_x(&b, &b);
    zv_fp12_frobenius(&t, &a, 2);
    zv_fp12_mul(&b, &b, &t);
    zv_fp12_conj(&t, &a);
    zv_fp12_mul(&b, &b, &t);
    zv_fp12_cyclotomic_sqr(&t, &m);              /* · m^3 */
    zv_fp12_mul(&t, &t, &m);
    zv_fp12_mul(r, &b, &t);
    ZV_BLS_SPAN_END;
}

#endif /* ZV_BLS12_381_PAIRING_CUH */
