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
 * Method (one thread per signature; see the field and scalar headers for the arithmetic):
 *   - u2·Q by GLV: u2 = k1 + k2·λ (mod n) with |k1|, |k2| < 2^128 and λ·(x, y) = (β·x, y),
 *     so u2·Q = |k1|·(±Q) + |k2|·(±λQ) runs over 128 bits instead of 256.  The odd
 *     multiples 1..15 of Q are built once per signature (zv_k1_odd_multiples, one inversion);
 *     λ's table is the same with x multiplied by β at lookup.
 *   - u1·G as u1 = lo + hi·2^128 with constant tables of the odd multiples 1..255 of G and
 *     of 2^128·G (secp256k1_tables.cuh, ZV_TABLE), so it also runs over 128 bits.
 *   - Shamir's trick: the four half-size products share one chain of 128 doublings.
 *   - Every scalar k is recoded in the regular signed-window form of schemes/ecdsa.cuh
 *     (shared with the P-256 kernel, as are the digest, the r/s range check and u1, u2):
 *     k = Σ d_i·2^(w·i) with
 *     every d_i odd and nonzero (|d_i| < 2^w): w = 4 for the Q halves, w = 8 for the G
 *     halves.  Unlike wNAF, whose zero digits fall at different places for each thread,
 *     a regular recoding adds at the same positions in every thread, so a warp never
 *     diverges in the main loop.  The recoding needs k odd: an even k runs as k + 1 and
 *     the point is subtracted once at the end.  Digits are read straight from the bits
 *     (d_i = 2·bits(k, w·i + 1, w) + 1 − 2^w, the top digit without the − 2^w), so no
 *     digit array is stored.
 *   - Cost per verify: 128 doublings (3M + 4S) and 33·2 + 17·2 = 100 mixed additions
 *     (8M + 3S), the Q table (1 doubling, 7 additions, one batch inversion), one scalar
 *     inversion mod n, and for 33-byte keys one square root; x(R) is compared without an
 *     inversion.  Inversions and the square root are Fermat exponentiations with fixed
 *     addition chains or windows (field and scalar headers say why: branch-free, the same
 *     for every thread of a warp, no 62-bit arithmetic that a GPU would emulate).
 *   - The G tables (16 KiB) sit in read-only global memory (ZV_TABLE): threads of a warp
 *     read different entries, which constant memory would serve one address at a time
 *     (~34 reads per verify serialised up to 32 ways); from global memory a warp's reads
 *     cost one request per distinct 32-byte sector, from L1/L2 (16 KiB stays resident).
 *     They stay in the module (no upload, NVRTC-friendly).
 *   - The scalar inversion is shared by a block (secp256k1.cu: zv_k1_sc_block_batch_inv_mont over a
 *     chunk of items) and the group operations are inlined, so the accumulator stays in
 *     registers.
 */
#ifndef ZV_SECP256K1_CUH
#define ZV_SECP256K1_CUH

#include "zv_port.cuh"
#include "hashes/sha2.cuh"
#include "fields/secp256k1_field.cuh"
#include "fields/secp256k1_scalar.cuh"
#include "curves/secp256k1_group.cuh"
#include "tables/secp256k1_tables.cuh"
#include "schemes/ecdsa.cuh"

#define ZV_SECP256K1_OPT_PREHASHED 0x01u
#define ZV_SECP256K1_OPT_ALLOW_HIGH_S 0x02u

/* Digits per 129-bit scalar (an odd k < 2^129): ceil(129 / w). */
#define ZV_SECP256K1_Q_DIGITS 33
#define ZV_SECP256K1_G_DIGITS 17

/* ec_pubkey_parse (SEC 1 §2.3.4 with libsecp256k1's hybrid keys). */
ZV_HD int zv_k1_pubkey_parse(zv_k1_ge *q, const zv_u8 *pk, zv_u32 len) {
    if (len == 33 && (pk[0] == 0x02 || pk[0] == 0x03)) {
        if (!zv_k1_fe_set_b32_limit(&q->x, pk + 1)) return 0;
        zv_k1_fe rhs, seven;
        zv_k1_fe_sqr(&rhs, &q->x);
        zv_k1_fe_mul(&rhs, &rhs, &q->x);
        zv_k1_fe_set_u32(&seven, 7);
        zv_k1_fe_add(&rhs, &rhs, &seven);
        if (!zv_k1_fe_sqrt(&q->y, &rhs)) return 0;
        zv_k1_fe_normalize(&q->y);
        if ((int)(q->y.v[0] & 1) != (pk[0] & 1)) zv_k1_fe_neg(&q->y, &q->y);
        zv_k1_fe_normalize(&q->y);
        return 1;
    }
    if (len == 65 && (pk[0] == 0x04 || pk[0] == 0x06 || pk[0] == 0x07)) {
        if (!zv_k1_fe_set_b32_limit(&q->x, pk + 1)) return 0;
        if (!zv_k1_fe_set_b32_limit(&q->y, pk + 33)) return 0;
        if (pk[0] != 0x04 && (int)(q->y.v[0] & 1) != (pk[0] & 1)) return 0;
        return zv_k1_ge_on_curve(q);
    }
    return 0;
}

/* Replace k by n − k when k > n/2; returns 1 when it did (k then stands for −|k|). */
ZV_HD int zv_k1_abs_scalar(zv_k1_sc *k) {
    int neg = zv_k1_sc_is_high(k);
    if (neg) zv_k1_sc_neg(k, k);
    return neg;
}

/* GLV split (see secp256k1_tables.cuh): k ≡ k1 + k2·λ (mod n), both as values mod n. */
ZV_HD void zv_k1_glv_split(zv_k1_sc *k1, zv_k1_sc *k2, const zv_k1_sc *k) {
    zv_k1_sc c1, c2, t;
    for (int half = 0; half < 2; half++) {
        const zv_u32 *g = half ? ZV_SECP256K1_GLV_G2 : ZV_SECP256K1_GLV_G1;
        zv_u32 prod[16];
        zv_mp_mul_wide<8>(prod, k->v, g);
        /* round(prod / 2^384): bits 384.. plus bit 383.  The result is below 2^128. */
        zv_k1_sc *out = half ? &c2 : &c1;
        zv_u64 c = (zv_u64)(prod[11] >> 31);
        for (int i = 0; i < 4; i++) { c += prod[12 + i]; out->v[i] = (zv_u32)c; c >>= 32; }
        for (int i = 4; i < 8; i++) out->v[i] = 0;
    }
    zv_k1_sc_mont_mul(k2, c1.v, ZV_SECP256K1_MINUS_B1_R);
    zv_k1_sc_mont_mul(&t, c2.v, ZV_SECP256K1_MINUS_B2_R);
    zv_k1_sc_add(k2, k2, &t);
    zv_k1_sc_mont_mul(&t, k2->v, ZV_SECP256K1_LAMBDA_R);
    zv_k1_sc_sub(k1, k, &t);
}

ZV_HD void zv_k1_ge_from_storage(zv_k1_ge *r, const zv_k1_ge_storage *s) {
    zv_k1_fe_copy(&r->x, s->x);
    zv_k1_fe_copy(&r->y, s->y);
}

/* r = −a when neg, else a (affine). */
ZV_HD void zv_k1_ge_cneg(zv_k1_ge *a, int neg) {
    if (neg) zv_k1_fe_neg(&a->y, &a->y);
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

/* R = u1·G + u2·Q (u1, u2 < n; Q a parsed key), by the method of the header comment. */
ZV_HD void zv_k1_ecmult_double_base(zv_k1_gej *acc, const zv_k1_ge *q, const zv_k1_sc *u1, const zv_k1_sc *u2) {
    /* The four half-size scalars: [0] = low and [1] = high 128 bits of u1 (for G and
     * 2^128·G), [2] = |q1| (for ±Q) and [3] = |q2| (for ±λQ). */
    zv_u32 k[4][8];
    for (int i = 0; i < 8; i++) {
        k[0][i] = i < 4 ? u1->v[i] : 0;
        k[1][i] = i < 4 ? u1->v[i + 4] : 0;
    }
    zv_k1_sc q1, q2;
    zv_k1_glv_split(&q1, &q2, u2);
    int neg1 = zv_k1_abs_scalar(&q1);
    int neg2 = zv_k1_abs_scalar(&q2);
    for (int i = 0; i < 8; i++) { k[2][i] = q1.v[i]; k[3][i] = q2.v[i]; }
    int even[4];
    for (int j = 0; j < 4; j++) even[j] = zv_ecdsa_make_odd<8>(k[j]);

    zv_k1_ge qtab[ZV_SECP256K1_Q_TABLE_SIZE];
    zv_k1_odd_multiples(qtab, q);
    zv_k1_fe beta;
    zv_k1_fe_copy(&beta, ZV_SECP256K1_BETA);

    acc->inf = 1;
    zv_k1_ge pt;
    for (int pos = 128; pos >= 0; pos--) {
        if (pos != 128) zv_k1_gej_double(acc, acc);
        if ((pos & 7) == 0) {
            int i = pos >> 3;
            for (int h = 0; h < 2; h++) {
                int d = zv_ecdsa_digit<8>(k[h], i, ZV_SECP256K1_W_G, ZV_SECP256K1_G_DIGITS);
                int a = d < 0 ? -d : d;
                zv_k1_ge_from_storage(&pt, h ? &ZV_SECP256K1_G128_ODD[a >> 1] : &ZV_SECP256K1_G_ODD[a >> 1]);
                zv_k1_ge_cneg(&pt, d < 0);
                zv_k1_gej_add_ge(acc, acc, &pt);
            }
        }
        if (pos % ZV_SECP256K1_W_Q == 0 && pos / ZV_SECP256K1_W_Q < ZV_SECP256K1_Q_DIGITS) {
            int i = pos / ZV_SECP256K1_W_Q;
            for (int h = 0; h < 2; h++) {
                int d = zv_ecdsa_digit<8>(k[2 + h], i, ZV_SECP256K1_W_Q, ZV_SECP256K1_Q_DIGITS);
                int a = d < 0 ? -d : d;
                pt = qtab[a >> 1];
                if (h) zv_k1_fe_mul(&pt.x, &pt.x, &beta);
                zv_k1_ge_cneg(&pt, (d < 0) ^ (h ? neg2 : neg1));
                zv_k1_gej_add_ge(acc, acc, &pt);
            }
        }
    }
    /* Undo the + 1 that made even scalars odd: subtract that scalar's base point. */
    for (int j = 0; j < 4; j++) {
        if (!even[j]) continue;
        if (j < 2) {
            zv_k1_ge_from_storage(&pt, j ? &ZV_SECP256K1_G128_ODD[0] : &ZV_SECP256K1_G_ODD[0]);
            zv_k1_ge_cneg(&pt, 1);
        } else {
            pt = qtab[0];
            if (j == 3) zv_k1_fe_mul(&pt.x, &pt.x, &beta);
            zv_k1_ge_cneg(&pt, !(j == 2 ? neg1 : neg2));
        }
        zv_k1_gej_add_ge(acc, acc, &pt);
    }
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
