/* bls12_381_h2c.cuh — hash_to_curve for the suite BLS12381G2_XMD:SHA-256_SSWU_RO_
 * (RFC 9380 §8.8.2), the hash of the BLS signature ciphersuites on G2; with the DST
 * "BLS_SIG_BLS12381G2_XMD:SHA-256_SSWU_RO_POP_" it is Ethereum's message hash.
 *
 *   hash_to_curve(msg) (§3):  u0, u1 = hash_to_field(msg, 2)
 *                             Q0 = map_to_curve(u0); Q1 = map_to_curve(u1)
 *                             P = clear_cofactor(Q0 + Q1)
 *   hash_to_field (§5.2, m = 2, L = 64): expand_message_xmd (§5.3.1, SHA-256 of sha2.cuh) to
 *     256 bytes; each 64-byte chunk, read big-endian, reduced mod p (zv_fp_from_be64).
 *   map_to_curve (§6.6.3): simplified SWU (§6.6.2) on the 3-isogenous curve
 *     E2': y^2 = x^3 + A'x + B' (A' = 240u, B' = 1012(1 + u), Z = −(2 + u)), then the
 *     3-isogeny E2' -> E2 (Appendix E.3) in Jacobian coordinates, so it needs no inversion.
 *   clear_cofactor (§7, §8.8.2): [h_eff]P computed as in Appendix G.3 (Budroni–Pintore):
 *     [x^2 − x − 1]P + [x − 1]ψ(P) + ψ^2(2P), two 64-bit multiplications by x instead of a
 *     636-bit one; tests compare it with the plain [h_eff]P (zv_bls_clear_cofactor_plain).
 * The straight-line SWU of §6.6.2 is used as written: its square root may come from any
 * algorithm because step 7 fixes the sign of y by sgn0(u).  Constants: bls12_381_tables.cuh
 * (scripts/gen_bls12_381_tables, with their RFC sections).
 *
 * Index (public functions, in source order; the comment at each says more):
 *   zv_bls_hash_to_field_fp2(u, msg, msg_len, dst, dst_len)
 *                                               hash_to_field(msg, count = 2) into Fp2 (§5.2): u[i] = (chunk
 *                                               2i, chunk 2i + 1) mod p
 *   zv_bls_sswu_g(r, x)                         g(x) = x^3 + A'x + B' on E2'
 *   zv_bls_iso_poly(r, k, n, monic, x)          Σ_{i<n} k_i·x^i with the leading coefficient 1 when monic
 *                                               (Horner)
 *   zv_bls_map_to_curve_g2(r, u)
 *   zv_bls_clear_cofactor_plain(r, p)           [h_eff]P by plain double-and-add over the 636-bit h_eff (the
 *                                               reference for the above)
 */
#ifndef ZV_BLS12_381_H2C_CUH
#define ZV_BLS12_381_H2C_CUH

#include "hashes/sha2.cuh"
#include "curves/bls12_381_curve.cuh"

/* expand_message_xmd output for two Fp2 elements: count·m·L = 2·2·64 bytes. */
#define ZV_BLS_H2C_LEN 256

/* RFC 9380 §5.3.1 with H = SHA-256 (b_in_bytes = 32, s_in_bytes = 64) and len_in_bytes =
 * 256 (ell = 8).  A DST longer than 255 bytes is first replaced by
 * H("H2C-OVERSIZE-DST-" || DST) (§5.3.3). */
ZV_BLS_NOINLINE void zv_bls_expand_message_xmd(zv_u8 out[ZV_BLS_H2C_LEN], const zv_u8 *msg, zv_u64 msg_len,
                                               const zv_u8 *dst, zv_u32 dst_len) {
    zv_u8 dst_hashed[32];
    if (dst_len > 255) {
        const zv_u8 prefix[17] = {'H', '2', 'C', '-', 'O', 'V', 'E', 'R', 'S', 'I', 'Z', 'E', '-', 'D', 'S', 'T', '-'};
        zv_sha256_ctx c;
        zv_sha256_init(&c);
        zv_sha256_update(&c, prefix, 17);
        zv_sha256_update(&c, dst, dst_len);
        zv_sha256_final(&c, dst_hashed);
        dst = dst_hashed;
        dst_len = 32;
    }
    const zv_u8 dst_len_byte = (zv_u8)dst_len;  /* DST_prime = DST || I2OSP(len(DST), 1) */
    zv_u8 zpad[64];
    zv_memset(zpad, 0, 64);
    const zv_u8 tail[3] = {(zv_u8)(ZV_BLS_H2C_LEN >> 8), (zv_u8)(ZV_BLS_H2C_LEN & 0xFF), 0};
    zv_sha256_ctx c;
    zv_u8 b0[32], bi[32];
    zv_sha256_init(&c);                      /* b_0 = H(Z_pad || msg || l_i_b_str || 0 || DST_prime) */
    zv_sha256_update(&c, zpad, 64);
    zv_sha256_update(&c, msg, msg_len);
    zv_sha256_update(&c, tail, 3);
    zv_sha256_update(&c, dst, dst_len);
    zv_sha256_update(&c, &dst_len_byte, 1);
    zv_sha256_final(&c, b0);
    for (int i = 1; i <= ZV_BLS_H2C_LEN / 32; i++) {
        zv_u8 x[32], idx = (zv_u8)i;         /* b_i = H((b_0 xor b_(i−1)) || i || DST_prime), b_0 xor "b_0" = b_0 for i = 1 */
        for (int j = 0; j < 32; j++) x[j] = (zv_u8)(b0[j] ^ (i == 1 ? 0 : bi[j]));
        zv_sha256_init(&c);
        zv_sha256_update(&c, x, 32);
        zv_sha256_update(&c, &idx, 1);
        zv_sha256_update(&c, dst, dst_len);
        zv_sha256_update(&c, &dst_len_byte, 1);
        zv_sha256_final(&c, bi);
        zv_memcpy(out + 32 * (i - 1), bi, 32);
    }
}

/* hash_to_field(msg, count = 2) into Fp2 (§5.2): u[i] = (chunk 2i, chunk 2i + 1) mod p. */
ZV_HD void zv_bls_hash_to_field_fp2(zv_fp2 u[2], const zv_u8 *msg, zv_u64 msg_len, const zv_u8 *dst,
                                    zv_u32 dst_len) {
    zv_u8 bytes[ZV_BLS_H2C_LEN];
    zv_bls_expand_message_xmd(bytes, msg, msg_len, dst, dst_len);
    for (int i = 0; i < 2; i++) {
        zv_fp_from_be64(&u[i].c0, bytes + 128 * i);
        zv_fp_from_be64(&u[i].c1, bytes + 128 * i + 64);
    }
}

/* g(x) = x^3 + A'x + B' on E2'. */
ZV_HD void zv_bls_sswu_g(zv_fp2 *r, const zv_fp2 *x) {
    zv_fp2 t;
    zv_fp2_sqr(&t, x);
    zv_fp2_add(&t, &t, &ZV_BLS_SSWU_A);
    zv_fp2_mul(&t, &t, x);
    zv_fp2_add(r, &t, &ZV_BLS_SSWU_B);
}

/* Simplified SWU (§6.6.2, the straight-line steps 1–7) on E2': an affine point (x, y). */
ZV_BLS_NOINLINE void zv_bls_map_to_e2_prime(zv_fp2 *x, zv_fp2 *y, const zv_fp2 *u) {
    zv_fp2 u2, zu2, tv1, x1, gx1, x2, gx2, t;
    zv_fp2_sqr(&u2, u);
    zv_fp2_mul(&zu2, &ZV_BLS_SSWU_Z, &u2);   /* Z·u^2 */
    zv_fp2_sqr(&tv1, &zu2);
    zv_fp2_add(&tv1, &tv1, &zu2);            /* Z^2·u^4 + Z·u^2 */
    zv_fp2_inv(&tv1, &tv1);                  /* inv0 */
    if (zv_fp2_is_zero(&tv1)) {
        x1 = ZV_BLS_SSWU_B_OVER_ZA;          /* exceptional case: x1 = B/(Z·A) */
    } else {
        zv_fp2_one(&t);
        zv_fp2_add(&t, &t, &tv1);
        zv_fp2_mul(&x1, &ZV_BLS_SSWU_MINUS_B_OVER_A, &t);  /* x1 = (−B/A)(1 + tv1) */
    }
    zv_bls_sswu_g(&gx1, &x1);
    /* Step 6 decides by is_square (cheap, norm-based) so only one square root is taken. */
    int ok;
    if (zv_fp2_is_square(&gx1)) {
        ok = zv_fp2_sqrt(y, &gx1);
        *x = x1;
    } else {
        zv_fp2_mul(&x2, &zu2, &x1);          /* x2 = Z·u^2·x1; g(x2) is then a square */
        zv_bls_sswu_g(&gx2, &x2);
        ok = zv_fp2_sqrt(y, &gx2);
        *x = x2;
    }
    ZV_CHECK(ok);
    (void)ok;
    if (zv_fp2_sgn0(u) != zv_fp2_sgn0(y)) zv_fp2_neg(y, y);
}

/* Σ_{i<n} k_i·x^i with the leading coefficient 1 when monic (Horner). */
ZV_HD void zv_bls_iso_poly(zv_fp2 *r, const zv_fp2 *k, int n, int monic, const zv_fp2 *x) {
    if (monic) zv_fp2_one(r); else *r = k[n - 1];
    for (int i = monic ? n - 1 : n - 2; i >= 0; i--) {
        zv_fp2_mul(r, r, x);
        zv_fp2_add(r, r, &k[i]);
    }
}

/* The 3-isogeny E2' -> E2 (Appendix E.3): x = x_num/x_den, y = y'·y_num/y_den, returned in
 * Jacobian form with Z = x_den·y_den: X = x_num·x_den·y_den^2, Y = y'·y_num·x_den^3·y_den^2.
 * A zero denominator gives Z = 0, the identity, as §6.6.3 specifies. */
ZV_BLS_NOINLINE void zv_bls_iso_map(zv_g2_jac *r, const zv_fp2 *xp, const zv_fp2 *yp) {
    zv_fp2 xn, xd, yn, yd, t;
    zv_bls_iso_poly(&xn, ZV_BLS_ISO_K[0], 4, 0, xp);
    zv_bls_iso_poly(&xd, ZV_BLS_ISO_K[1], 2, 1, xp);
    zv_bls_iso_poly(&yn, ZV_BLS_ISO_K[2], 4, 0, xp);
    zv_bls_iso_poly(&yd, ZV_BLS_ISO_K[3], 3, 1, xp);
    zv_fp2_mul(&r->z, &xd, &yd);
    zv_fp2_sqr(&t, &yd);
    zv_fp2_mul(&t, &t, &xd);
    zv_fp2_mul(&r->x, &xn, &t);              /* x_num·x_den·y_den^2 */
    zv_fp2_sqr(&t, &r->z);
    zv_fp2_mul(&t, &t, &xd);                 /* x_den^3·y_den^2 */
    zv_fp2_mul(&t, &t, &yn);
    zv_fp2_mul(&r->y, &t, yp);
}

ZV_HD void zv_bls_map_to_curve_g2(zv_g2_jac *r, const zv_fp2 *u) {
    zv_fp2 x, y;
    zv_bls_map_to_e2_prime(&x, &y, u);
    zv_bls_iso_map(r, &x, &y);
}

/* [h_eff]P by Appendix G.3: with c1 = x (the curve parameter, negative),
 * t1 = c1·P, t2 = ψ(P), t3 = ψ^2(2P) − t2, t2 = c1·(t1 + t2), t3 = t3 + t2 − t1 − P. */
ZV_BLS_NOINLINE void zv_bls_clear_cofactor(zv_g2_jac *r, const zv_g2_jac *p) {
    zv_g2_jac t1, t2, t3, m;
    zv_jac_mul_x_abs<zv_fp2, zv_g2_jac>(&t1, p);
    zv_g2_neg(&t1, &t1);                     /* c1·P, c1 = x < 0 */
    zv_g2_psi(&t2, p);
    zv_g2_dbl(&t3, p);
    zv_g2_psi(&t3, &t3);
    zv_g2_psi(&t3, &t3);
    zv_g2_neg(&m, &t2);
    zv_g2_add(&t3, &t3, &m);
    zv_g2_add(&t2, &t1, &t2);
    zv_jac_mul_x_abs<zv_fp2, zv_g2_jac>(&t2, &t2);
    zv_g2_neg(&t2, &t2);
    zv_g2_add(&t3, &t3, &t2);
    zv_g2_neg(&m, &t1);
    zv_g2_add(&t3, &t3, &m);
    zv_g2_neg(&m, p);
    zv_g2_add(r, &t3, &m);
}

/* [h_eff]P by plain double-and-add over the 636-bit h_eff (the reference for the above). */
ZV_HD void zv_bls_clear_cofactor_plain(zv_g2_jac *r, const zv_g2_jac *p) {
    zv_g2_mul(r, p, ZV_BLS_H_EFF, ZV_BLS_H_EFF_BITS);
}

/* hash_to_curve (§3) into G2, affine. */
ZV_BLS_NOINLINE void zv_bls_hash_to_g2(zv_g2_affine *r, const zv_u8 *msg, zv_u64 msg_len, const zv_u8 *dst,
                                       zv_u32 dst_len) {
    zv_fp2 u[2];
    zv_g2_jac q0, q1;
    zv_bls_hash_to_field_fp2(u, msg, msg_len, dst, dst_len);
    zv_bls_map_to_curve_g2(&q0, &u[0]);
    zv_bls_map_to_curve_g2(&q1, &u[1]);
    zv_g2_add(&q0, &q0, &q1);
    zv_bls_clear_cofactor(&q0, &q0);
    zv_g2_to_affine(r, &q0);
}

#endif /* ZV_BLS12_381_H2C_CUH */
