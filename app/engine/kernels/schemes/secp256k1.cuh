/* secp256k1.cuh — ECDSA verification over secp256k1 with libsecp256k1's verdicts.
 *
 * Semantics (SEC 1 v2 §4.1.4; exactly what libsecp256k1's ec_pubkey_parse,
 * ecdsa_signature_parse_compact, optionally ecdsa_signature_normalize, then ecdsa_verify
 * decide — the CPU reference app/engine/reference.py verify_secp256k1):
 *
 *   public key  33 bytes 0x02/0x03 ‖ x: x < p, x^3 + 7 a square mod p, y the root whose
 *               parity is the prefix's low bit; or 65 bytes 0x04 ‖ x ‖ y, or the hybrid
 *               0x06/0x07 ‖ x ‖ y whose prefix's low bit equals y's parity, with x, y < p
 *               and y^2 = x^3 + 7.  Any other length or prefix is invalid.
 *   signature   64 bytes r ‖ s, big-endian.  r ≥ n or s ≥ n: invalid (parse_compact fails);
 *               r = 0 or s = 0: invalid.  s > n/2 ("high S"): invalid, unless the batch sets
 *               allow_high_s, in which case s is replaced by n − s first.
 *   message     digest = SHA-256(message); with the batch option prehashed the message is
 *               the digest and must be exactly 32 bytes, else invalid.
 *               z = digest as a big-endian integer reduced mod n.
 *   check       w = s^−1, u1 = z·w, u2 = r·w (mod n), R = u1·G + u2·Q.  R = ∞: invalid.
 *               Valid iff x(R) mod n = r, i.e. x(R) = r or (r + n < p and x(R) = r + n),
 *               compared in Jacobian coordinates as X = r·Z^2 (no field inversion).
 *
 * Every malformed input gives verdict 0; nothing reads outside the item's bytes.
 *
 * Method (one thread per signature): R = u1·G + u2·Q by zv_k1_ecmult_double_base
 * (curves/secp256k1_ecmult.cuh: GLV for Q, 2^128-split fixed tables for G, one chain of
 * 128 doublings, regular signed windows; its header comment gives the method and cost).
 * Per verify besides that: one scalar inversion mod n, for 33-byte keys one square root
 * (zv_k1_ge_lift_x); x(R) is compared without an inversion.  Inversions and the square
 * root are Fermat exponentiations with fixed addition chains or windows (field and scalar
 * headers say why: branch-free, the same for every thread of a warp, no 62-bit arithmetic
 * that a GPU would emulate).  The scalar inversion is shared by a block (secp256k1.cu:
 * zv_k1_sc_block_batch_inv_mont over a chunk of items) and the group operations are
 * inlined, so the accumulator stays in registers.
 *
 * Index (public functions, in source order; the comment at each says more):
 *   zv_k1_pubkey_parse(q, pk, len)              ec_pubkey_parse (SEC 1 §2.3.4 with libsecp256k1's hybrid
 *                                               keys)
 *   zv_k1_gej_x_matches(R, r)                   x
 *   zv_k1_sig_parse(r, s, sig, allow_high_s)    parse_compact (and normalize when allow_high_s) of a 64-byte
 *                                               r ‖ s
 *   zv_k1_ecdsa_verify(q, sig, digest, allow_high_s, w)
 *                                               ECDSA verify of a 32-byte digest against parsed key q, given
 *                                               w = s^−1·R mod n
 *   zv_k1_verify_with_w(pk, pk_len, sig, sig_len, msg, msg_len, options, w)
 *                                               The check of the header comment for one item, given w =
 *                                               s^−1·R of its signature's s
 *   zv_k1_verify_one(pk, pk_len, sig, sig_len, msg, msg_len, options)
 *                                               One item on its own (its own scalar inversion): the verdict
 *                                               of the header comment
 */
#ifndef ZV_SECP256K1_CUH
#define ZV_SECP256K1_CUH

#include "zv_port.cuh"
#include "hashes/sha2.cuh"
#include "fields/secp256k1_field.cuh"
#include "fields/secp256k1_scalar.cuh"
#include "curves/secp256k1_group.cuh"
#include "curves/secp256k1_ecmult.cuh"
#include "schemes/ecdsa.cuh"

#define ZV_SECP256K1_OPT_PREHASHED 0x01u
#define ZV_SECP256K1_OPT_ALLOW_HIGH_S 0x02u

/* ec_pubkey_parse (SEC 1 §2.3.4 with libsecp256k1's hybrid keys). */
ZV_HD int zv_k1_pubkey_parse(zv_k1_ge *q, const zv_u8 *pk, zv_u32 len) {
    if (len == 33 && (pk[0] == 0x02 || pk[0] == 0x03)) return zv_k1_ge_lift_x(q, pk + 1, pk[0] & 1);
    if (len == 65 && (pk[0] == 0x04 || pk[0] == 0x06 || pk[0] == 0x07)) {
        if (!zv_k1_fe_set_b32_limit(&q->x, pk + 1)) return 0;
        if (!zv_k1_fe_set_b32_limit(&q->y, pk + 33)) return 0;
        if (pk[0] != 0x04 && (int)(q->y.v[0] & 1) != (pk[0] & 1)) return 0;
        return zv_k1_ge_on_curve(q);
    }
    return 0;
}

/* x(R) mod n = r for R = (X, Y, Z) finite (libsecp256k1 ecdsa_sig_verify, with the
 * x ≥ n case: x(R) ∈ [n, p) reduces to x − n, so r + n must then equal x). */
ZV_HD int zv_k1_gej_x_matches(const zv_k1_gej *R, const zv_k1_sc *r) {
    zv_k1_fe zz, rx, t;
    zv_k1_fe_sqr(&zz, &R->z);
    zv_k1_fe_copy(&rx, r->v);
    zv_k1_fe_mul(&t, &rx, &zz);
    if (zv_k1_fe_equal(&t, &R->x)) return 1;
    if (!zv_k1_u256_gt(ZV_SECP256K1_P_MINUS_N, r->v)) return 0;  /* r + n ≥ p: no x can be r + n */
    zv_k1_fe nfe;
    zv_k1_fe_copy(&nfe, ZV_SECP256K1_N);
    zv_k1_fe_add(&rx, &rx, &nfe);
    zv_k1_fe_mul(&t, &rx, &zz);
    return zv_k1_fe_equal(&t, &R->x);
}

/* parse_compact (and normalize when allow_high_s) of a 64-byte r ‖ s: returns 0 when the
 * signature is invalid as such (r or s ≥ n, zero, or high s not allowed), else 1 with r and
 * the s to invert. */
ZV_HD int zv_k1_sig_parse(zv_k1_sc *r, zv_k1_sc *s, const zv_u8 *sig, int allow_high_s) {
    if (!zv_ecdsa_rs_parse<zv_k1_sc_modulus>(r->v, s->v, sig)) return 0;
    if (zv_k1_sc_is_high(s)) {
        if (!allow_high_s) return 0;
        zv_k1_sc_neg(s, s);
    }
    return 1;
}

/* ECDSA verify of a 32-byte digest against parsed key q, given w = s^−1·R mod n
 * (zv_k1_sc_inv_mont of the s zv_k1_sig_parse gives, or the batched zv_k1_sc_block_batch_inv_mont). */
ZV_HD int zv_k1_ecdsa_verify(const zv_k1_ge *q, const zv_u8 *sig, const zv_u8 *digest, int allow_high_s,
                          const zv_k1_sc *w) {
    zv_k1_sc r, s, u1, u2;
    if (!zv_k1_sig_parse(&r, &s, sig, allow_high_s)) return 0;
    zv_ecdsa_u1_u2<zv_k1_sc_modulus, ZV_OP_K1_SC_MONT_MUL>(u1.v, u2.v, digest, r.v, w->v);
    zv_k1_gej R;
    zv_k1_ecmult_double_base(&R, q, &u1, &u2);
    if (R.inf) return 0;
    return zv_k1_gej_x_matches(&R, &r);
}

/* The check of the header comment for one item, given w = s^−1·R of its signature's s (any
 * value when the signature does not parse: it is then invalid before w is used).  Never
 * reads outside pk[0..pk_len), sig[0..sig_len), msg[0..msg_len). */
ZV_HD int zv_k1_verify_with_w(const zv_u8 *pk, zv_u32 pk_len, const zv_u8 *sig, zv_u32 sig_len,
                           const zv_u8 *msg, zv_u64 msg_len, zv_u32 options, const zv_k1_sc *w) {
    if (sig_len != 64) return 0;
    zv_k1_ge q;
    if (!zv_k1_pubkey_parse(&q, pk, pk_len)) return 0;
    zv_u8 digest[32];
    if (!zv_ecdsa_digest(digest, msg, msg_len, (options & ZV_SECP256K1_OPT_PREHASHED) != 0)) return 0;
    return zv_k1_ecdsa_verify(&q, sig, digest, (options & ZV_SECP256K1_OPT_ALLOW_HIGH_S) != 0, w);
}

/* One item on its own (its own scalar inversion): the verdict of the header comment. */
ZV_HD int zv_k1_verify_one(const zv_u8 *pk, zv_u32 pk_len, const zv_u8 *sig, zv_u32 sig_len,
                        const zv_u8 *msg, zv_u64 msg_len, zv_u32 options) {
    zv_k1_sc r, s, w;
    if (sig_len != 64 || !zv_k1_sig_parse(&r, &s, sig, (options & ZV_SECP256K1_OPT_ALLOW_HIGH_S) != 0)) return 0;
    zv_k1_sc_inv_mont(&w, &s);
    return zv_k1_verify_with_w(pk, pk_len, sig, sig_len, msg, msg_len, options, &w);
}

#endif /* ZV_SECP256K1_CUH */
