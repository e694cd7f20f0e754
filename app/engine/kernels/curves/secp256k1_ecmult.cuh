/* secp256k1_ecmult.cuh — R = u1·G + u2·Q on secp256k1, the double-base multiplication every
 * secp256k1 verify runs (ECDSA: schemes/secp256k1.cuh; BIP-340: schemes/bip340.cuh).
 *
 * Method (one thread per call; see the field and scalar headers for the arithmetic):
 *   - u2·Q by GLV: u2 = k1 + k2·λ (mod n) with |k1|, |k2| < 2^128 and λ·(x, y) = (β·x, y),
 *     so u2·Q = |k1|·(±Q) + |k2|·(±λQ) runs over 128 bits instead of 256.  The odd
 *     multiples 1..15 of Q are built once per call (zv_k1_odd_multiples, one inversion);
 *     λ's table is the same with x multiplied by β at lookup.
 *   - u1·G as u1 = lo + hi·2^128 with constant tables of the odd multiples 1..255 of G and
 *     of 2^128·G (secp256k1_tables.cuh, ZV_TABLE), so it also runs over 128 bits.
 *   - Shamir's trick: the four half-size products share one chain of 128 doublings.
 *   - Every scalar k is recoded in the regular signed-window form of curves/recode.cuh
 *     (shared with P-256): w = 4 for the Q halves, w = 8 for the G halves, so a warp never
 *     diverges in the main loop; an even k runs as k + 1 and the point is subtracted once
 *     at the end.
 *   - Cost per call: 128 doublings (3M + 4S) and 33·2 + 17·2 = 100 mixed additions
 *     (8M + 3S), plus the Q table (1 doubling, 7 additions, one batch inversion).
 *   - The G tables (16 KiB) sit in read-only global memory (ZV_TABLE): threads of a warp
 *     read different entries, which constant memory would serve one address at a time
 *     (~34 reads per verify serialised up to 32 ways); from global memory a warp's reads
 *     cost one request per distinct 32-byte sector, from L1/L2 (16 KiB stays resident).
 *     They stay in the module (no upload, NVRTC-friendly).
 *
 * Index (public functions, in source order; the comment at each says more):
 *   zv_k1_abs_scalar(k)                       Replace k by n − k when k > n/2; returns 1 when it did (k then
 *                                             stands for −|k|)
 *   zv_k1_glv_split(k1, k2, k)                GLV split (see secp256k1_tables.cuh): k ≡ k1 + k2·λ (mod n),
 *                                             both as values mod n
 *   zv_k1_ge_from_storage(r, s)
 *   zv_k1_ge_cneg(a, neg)                     r = −a when neg, else a (affine)
 *   zv_k1_ecmult_double_base(acc, q, u1, u2)  R = u1·G + u2·Q (u1, u2 < n; Q a parsed key), by the method of
 *                                             the header comment
 */
#ifndef ZV_SECP256K1_ECMULT_CUH
#define ZV_SECP256K1_ECMULT_CUH

#include "zv_port.cuh"
#include "fields/secp256k1_field.cuh"
#include "fields/secp256k1_scalar.cuh"
#include "curves/secp256k1_group.cuh"
#include "tables/secp256k1_tables.cuh"
#include "curves/recode.cuh"

/* Digits per 129-bit scalar (an odd k < 2^129): ceil(129 / w). */
#define ZV_SECP256K1_Q_DIGITS 33
#define ZV_SECP256K1_G_DIGITS 17

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
    for (int j = 0; j < 4; j++) {
        even[j] = zv_recode_make_odd<8>(k[j]);
        /* every half is odd and below 2^129 (GLV halves < 2^128, + 1), so its digits cover it */
        ZV_CHECK((k[j][0] & 1) && k[j][4] <= 1 && (k[j][5] | k[j][6] | k[j][7]) == 0);
    }

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
                int d = zv_recode_digit<8>(k[h], i, ZV_SECP256K1_W_G, ZV_SECP256K1_G_DIGITS);
                int a = d < 0 ? -d : d;
                ZV_CHECK((a & 1) && (a >> 1) < ZV_SECP256K1_G_TABLE_SIZE);  /* an odd digit inside the table */
                zv_k1_ge_from_storage(&pt, h ? &ZV_SECP256K1_G128_ODD[a >> 1] : &ZV_SECP256K1_G_ODD[a >> 1]);
                zv_k1_ge_cneg(&pt, d < 0);
                zv_k1_gej_add_ge(acc, acc, &pt);
            }
        }
        if (pos % ZV_SECP256K1_W_Q == 0 && pos / ZV_SECP256K1_W_Q < ZV_SECP256K1_Q_DIGITS) {
            int i = pos / ZV_SECP256K1_W_Q;
            for (int h = 0; h < 2; h++) {
                int d = zv_recode_digit<8>(k[2 + h], i, ZV_SECP256K1_W_Q, ZV_SECP256K1_Q_DIGITS);
                int a = d < 0 ? -d : d;
                ZV_CHECK((a & 1) && (a >> 1) < ZV_SECP256K1_Q_TABLE_SIZE);
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

#endif /* ZV_SECP256K1_ECMULT_CUH */
