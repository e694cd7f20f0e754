/* p256.cuh — ECDSA verification over NIST P-256 with SHA-256, with OpenSSL's verdicts.
 *
 * Semantics (FIPS 186-5 §6.4.2, SEC 1 v2 §4.1.4; exactly what ``cryptography``'s
 * EllipticCurvePublicKey.from_encoded_point then verify with OpenSSL decide — the CPU
 * reference app/engine/reference/reference.py verify_p256, app/core/schemes.py):
 *
 *   public key  33 bytes 0x02/0x03 ‖ x (SEC 1 §2.3.4): x < p, x^3 − 3x + b a square mod p,
 *               y the root whose parity is the prefix's low bit; or 65 bytes 0x04 ‖ x ‖ y
 *               (§2.3.3) with x, y < p and the point on the curve.  Any other length or
 *               prefix is invalid, the hybrid 0x06/0x07 included (cryptography refuses them).
 *   signature   64 bytes r ‖ s, big-endian (IEEE P1363).  r or s = 0 or ≥ n: invalid.
 *               s > n/2 is valid, unless the batch sets low_s: then invalid.
 *   message     e = SHA-256(message) as a big-endian integer; with the batch option
 *               prehashed the message is the digest and must be exactly 32 bytes, else
 *               invalid.  e is reduced mod n (n has 256 bits: no truncation).
 *   check       w = s^−1, u1 = e·w, u2 = r·w (mod n), R = u1·G + u2·Q.  R = ∞: invalid.
 *               Valid iff x(R) mod n = r, i.e. x(R) = r or (r + n < p and x(R) = r + n),
 *               compared in Jacobian coordinates as X = r·Z^2 (no field inversion).
 *
 * Every malformed input gives verdict 0; nothing reads outside the item's bytes.
 *
 * Method (one thread per signature; the arithmetic in fields/p256_field.cuh,
 * fields/p256_scalar.cuh, curves/p256_group.cuh; the curve-independent steps in
 * schemes/ecdsa.cuh, shared with the secp256k1 kernel):
 *   - P-256 has no efficient endomorphism (no GLV), so u2·Q runs over all 256 bits: one
 *     chain of 256 doublings serves both products (Shamir's trick).
 *   - Both scalars are recoded in the regular signed-window form of curves/recode.cuh (every
 *     digit odd and nonzero, so every thread adds at the same positions and a warp never
 *     diverges in the main loop): w = 8 for u1 against a constant table of the odd
 *     multiples 1..255 of G (tables/p256_tables.cuh, 8 KiB in read-only global memory,
 *     ZV_TABLE, as secp256k1.cuh explains), w = 4 for u2 against the odd multiples 1..15 of
 *     Q built per signature (7 additions, one batched field inversion).
 *   - Cost per verify: 256 doublings (3M + 5S), 33 + 65 = 98 mixed additions (8M + 3S),
 *     the Q table, one scalar inversion mod n shared by the block's chunk, and for 33-byte
 *     keys one square root; x(R) is compared without an inversion.
 *
 * Index (public functions, in source order; the comment at each says more):
 *   zv_p256_pubkey_parse(q, pk, len)            from_encoded_point (SEC 1 §2.3.3/2.3.4, no hybrid keys): 1
 *                                               with q on the curve, else 0
 *   zv_p256_sig_parse(r, s, sig, low_s)         The signature's r and the s to invert
 *   zv_p256_ge_from_storage(r, s)
 *   zv_p256_ge_cneg(a, neg)                     r = −a when neg, else a (affine)
 *   zv_p256_gej_x_matches(R, r)                 x(R) mod n = r for R = (X, Y, Z) finite
 *   zv_p256_ecmult_double_base(acc, q, u1, u2)  R = u1·G + u2·Q (u1, u2 < n; Q a parsed key), by the method
 *                                               of the header comment
 *   zv_p256_verify_with_w(pk, pk_len, sig, sig_len, msg, msg_len, options, w)
 *                                               The check of the header comment for one item, given w =
 *                                               s^−1·R mod n of its signature's s
 *   zv_p256_verify_one(pk, pk_len, sig, sig_len, msg, msg_len, options)
 *                                               One item on its own (its own scalar inversion): the verdict
 *                                               of the header comment
 */
#ifndef ZV_P256_CUH
#define ZV_P256_CUH

#include "zv_port.cuh"
#include "fields/p256_field.cuh"
#include "fields/p256_scalar.cuh"
#include "curves/p256_group.cuh"
#include "schemes/ecdsa.cuh"
#include "curves/recode.cuh"
#include "tables/p256_tables.cuh"

#define ZV_P256_OPT_PREHASHED 0x01u
#define ZV_P256_OPT_LOW_S 0x04u

/* from_encoded_point (SEC 1 §2.3.3/2.3.4, no hybrid keys): 1 with q on the curve, else 0. */
ZV_HD int zv_p256_pubkey_parse(zv_p256_ge *q, const zv_u8 *pk, zv_u32 len) {
    if (len == 33 && (pk[0] == 0x02 || pk[0] == 0x03)) {
        if (!zv_p256_fe_set_b32(&q->x, pk + 1)) return 0;
        zv_p256_fe rhs, t, b;
        zv_p256_fe_sqr(&rhs, &q->x);
        zv_p256_fe_mul(&rhs, &rhs, &q->x);
        zv_p256_fe_add(&t, &q->x, &q->x);
        zv_p256_fe_add(&t, &t, &q->x);
        zv_p256_fe_sub(&rhs, &rhs, &t);
        zv_p256_fe_copy(&b, ZV_P256_B_MONT);
        zv_p256_fe_add(&rhs, &rhs, &b);
        if (!zv_p256_fe_sqrt(&q->y, &rhs)) return 0;
        if (zv_p256_fe_is_odd(&q->y) != (pk[0] & 1)) zv_p256_fe_neg(&q->y, &q->y);
        return 1;
    }
    if (len == 65 && pk[0] == 0x04) {
        if (!zv_p256_fe_set_b32(&q->x, pk + 1)) return 0;
        if (!zv_p256_fe_set_b32(&q->y, pk + 33)) return 0;
        return zv_p256_ge_on_curve(q);
    }
    return 0;
}

/* The signature's r and the s to invert: 0 when the signature is invalid as such (r or s
 * out of [1, n − 1], or high under low_s). */
ZV_HD int zv_p256_sig_parse(zv_p256_sc *r, zv_p256_sc *s, const zv_u8 *sig, int low_s) {
    if (!zv_ecdsa_rs_parse<zv_p256_sc_modulus>(r->v, s->v, sig)) return 0;
    return !(low_s && zv_ecdsa_is_high(s->v, ZV_P256_N_HALF));
}

ZV_HD void zv_p256_ge_from_storage(zv_p256_ge *r, const zv_p256_ge_storage *s) {
    zv_p256_fe_copy(&r->x, s->x);
    zv_p256_fe_copy(&r->y, s->y);
}

/* r = −a when neg, else a (affine). */
ZV_HD void zv_p256_ge_cneg(zv_p256_ge *a, int neg) {
    if (neg) zv_p256_fe_neg(&a->y, &a->y);
}

/* x(R) mod n = r for R = (X, Y, Z) finite: X = r·Z² (Montgomery form, all < p), or, when
 * r + n < p, X = (r + n)·Z² (x(R) ∈ [n, p) reduces to x − n). */
ZV_HD int zv_p256_gej_x_matches(const zv_p256_gej *R, const zv_p256_sc *r) {
    zv_p256_fe zz, rx, t;
    zv_p256_fe_sqr(&zz, &R->z);
    zv_p256_fe_from_int(&rx, r->v);
    zv_p256_fe_mul(&t, &rx, &zz);
    if (zv_p256_fe_equal(&t, &R->x)) return 1;
    if (!zv_mp_lt<8>(r->v, ZV_P256_P_MINUS_N)) return 0;  /* r + n ≥ p: no x can be r + n */
    zv_u32 rn[8];
    zv_u64 c = 0;
    for (int i = 0; i < 8; i++) { c += (zv_u64)r->v[i] + ZV_P256_N[i]; rn[i] = (zv_u32)c; c >>= 32; }
    ZV_CHECK(c == 0 && zv_mont_lt_m<zv_p256_fm>(rn));
    zv_p256_fe_from_int(&rx, rn);
    zv_p256_fe_mul(&t, &rx, &zz);
    return zv_p256_fe_equal(&t, &R->x);
}

/* R = u1·G + u2·Q (u1, u2 < n; Q a parsed key), by the method of the header comment. */
ZV_HD void zv_p256_ecmult_double_base(zv_p256_gej *acc, const zv_p256_ge *q, const zv_p256_sc *u1,
                                      const zv_p256_sc *u2) {
    zv_u32 k[2][8];
    for (int i = 0; i < 8; i++) { k[0][i] = u1->v[i]; k[1][i] = u2->v[i]; }
    int even[2];
    for (int j = 0; j < 2; j++) even[j] = zv_recode_make_odd<8>(k[j]);

    zv_p256_ge qtab[ZV_P256_Q_TABLE_SIZE];
    zv_p256_odd_multiples(qtab, q);

    acc->inf = 1;
    zv_p256_ge pt;
    for (int pos = 256; pos >= 0; pos--) {
        if (pos != 256) zv_p256_gej_double(acc, acc);
        if (pos % ZV_P256_W_G == 0) {
            int d = zv_recode_digit<8>(k[0], pos / ZV_P256_W_G, ZV_P256_W_G, ZV_P256_G_DIGITS);
            int a = d < 0 ? -d : d;
            zv_p256_ge_from_storage(&pt, &ZV_P256_G_ODD[a >> 1]);
            zv_p256_ge_cneg(&pt, d < 0);
            zv_p256_gej_add_ge(acc, acc, &pt);
        }
        if (pos % ZV_P256_W_Q == 0) {
            int d = zv_recode_digit<8>(k[1], pos / ZV_P256_W_Q, ZV_P256_W_Q, ZV_P256_Q_DIGITS);
            int a = d < 0 ? -d : d;
            pt = qtab[a >> 1];
            zv_p256_ge_cneg(&pt, d < 0);
            zv_p256_gej_add_ge(acc, acc, &pt);
        }
    }
    /* Undo the + 1 that made even scalars odd: subtract that scalar's base point. */
    if (even[0]) {
        zv_p256_ge_from_storage(&pt, &ZV_P256_G_ODD[0]);
        zv_p256_ge_cneg(&pt, 1);
        zv_p256_gej_add_ge(acc, acc, &pt);
    }
    if (even[1]) {
        pt = qtab[0];
        zv_p256_ge_cneg(&pt, 1);
        zv_p256_gej_add_ge(acc, acc, &pt);
    }
}

/* The check of the header comment for one item, given w = s^−1·R mod n of its signature's s
 * (any value when the signature does not parse: it is then invalid before w is used).
 * Never reads outside pk[0..pk_len), sig[0..sig_len), msg[0..msg_len). */
ZV_HD int zv_p256_verify_with_w(const zv_u8 *pk, zv_u32 pk_len, const zv_u8 *sig, zv_u32 sig_len,
                                const zv_u8 *msg, zv_u64 msg_len, zv_u32 options, const zv_p256_sc *w) {
    zv_p256_sc r, s, u1, u2;
    if (sig_len != 64 || !zv_p256_sig_parse(&r, &s, sig, (options & ZV_P256_OPT_LOW_S) != 0)) return 0;
    zv_u8 digest[32];
    if (!zv_ecdsa_digest(digest, msg, msg_len, (options & ZV_P256_OPT_PREHASHED) != 0)) return 0;
    zv_p256_ge q;
    if (!zv_p256_pubkey_parse(&q, pk, pk_len)) return 0;
    zv_ecdsa_u1_u2<zv_p256_sc_modulus, ZV_OP_P256_SC_MONT_MUL>(u1.v, u2.v, digest, r.v, w->v);
    zv_p256_gej R;
    zv_p256_ecmult_double_base(&R, &q, &u1, &u2);
    if (R.inf) return 0;
    return zv_p256_gej_x_matches(&R, &r);
}

/* One item on its own (its own scalar inversion): the verdict of the header comment. */
ZV_HD int zv_p256_verify_one(const zv_u8 *pk, zv_u32 pk_len, const zv_u8 *sig, zv_u32 sig_len,
                             const zv_u8 *msg, zv_u64 msg_len, zv_u32 options) {
    zv_p256_sc r, s, w;
    if (sig_len != 64 || !zv_p256_sig_parse(&r, &s, sig, (options & ZV_P256_OPT_LOW_S) != 0)) return 0;
    zv_p256_sc_inv_mont(&w, &s);
    return zv_p256_verify_with_w(pk, pk_len, sig, sig_len, msg, msg_len, options, &w);
}

#endif /* ZV_P256_CUH */
