/* bls12_381_serde.cuh — ZCash-format compressed points of BLS12-381 (G1: 48 bytes,
 * G2: 96 bytes) as the BLS ciphersuites use them (draft-irtf-cfrg-pairing-friendly-
 * curves-11 Appendix C; draft-irtf-cfrg-bls-signature-05 §1.3 and §2.5 KeyValidate).
 *
 * The three high bits of the first byte are flags: 0x80 compression (C), 0x40 infinity (I),
 * 0x20 sign (S).  The rest is x big-endian (for G2 x = x.c1 || x.c0, c1 first).  Decoding
 * rejects, with blst's error names and numbers:
 *   BAD_ENCODING        C = 0 (an uncompressed encoding needs twice the bytes); I = 1 with
 *                       any other bit set (the one infinity encoding is 0xc0 00 … 00);
 *                       a coordinate of x ≥ p (non-canonical);
 *   POINT_NOT_ON_CURVE  x^3 + b has no square root;
 *   POINT_NOT_IN_GROUP  on the curve but not in G1 / G2 (the large cofactors make this a
 *                       real case; bls12_381_curve.cuh says which check and why).
 * y is the root whose sign matches S: the lexicographically larger of y and −y (for Fp2:
 * compare c1, and c0 when c1 = 0).  KeyValidate also rejects the identity (PK_IS_INFINITY).
 *
 * Index (public functions, in source order; the comment at each says more):
 *   zv_bls_read_flags(in, len, x_be, inf, sign) The flags and x of an encoding of `len` bytes (48 or 96)
 *   zv_fp2_is_lex_largest(y)                    Whether y is the lexicographically larger root in Fp2: by
 *                                               c1, or by c0 when c1 = 0
 *   zv_bls_g1_decompress_on_curve(r, in)        Decoding without the subgroup check: flags, x < p, on the
 *                                               curve
 *   zv_bls_g2_decompress_on_curve(r, in)
 *   zv_bls_key_validate(pk, in)                 KeyValidate (draft-irtf-cfrg-bls-signature-05 §2.5)
 *   zv_bls_g1_compress(out, a)                  Compressed encodings (the inverse of decoding), used to
 *                                               compare with published points
 *   zv_bls_g2_compress(out, a)
 */
#ifndef ZV_BLS12_381_SERDE_CUH
#define ZV_BLS12_381_SERDE_CUH

#include "curves/bls12_381_curve.cuh"

#define ZV_BLS_OK 0
#define ZV_BLS_BAD_ENCODING 1
#define ZV_BLS_POINT_NOT_ON_CURVE 2
#define ZV_BLS_POINT_NOT_IN_GROUP 3
#define ZV_BLS_PK_IS_INFINITY 6

#define ZV_BLS_FLAG_COMPRESSED 0x80u
#define ZV_BLS_FLAG_INFINITY 0x40u
#define ZV_BLS_FLAG_SIGN 0x20u

/* The flags and x of an encoding of `len` bytes (48 or 96): BAD_ENCODING, or OK with *inf
 * set for the canonical infinity, or OK with the field bytes in x_be (flags cleared). */
ZV_HD int zv_bls_read_flags(const zv_u8 *in, int len, zv_u8 *x_be, int *inf, int *sign) {
    zv_u8 f = in[0];
    if (!(f & ZV_BLS_FLAG_COMPRESSED)) return ZV_BLS_BAD_ENCODING;
    *sign = (f & ZV_BLS_FLAG_SIGN) != 0;
    *inf = (f & ZV_BLS_FLAG_INFINITY) != 0;
    zv_u8 rest = (zv_u8)(f & 0x3Fu);
    for (int i = 0; i < len; i++) x_be[i] = i == 0 ? (zv_u8)(f & 0x1Fu) : in[i];
    if (*inf) {
        for (int i = 1; i < len; i++) rest |= in[i];
        return rest == 0 ? ZV_BLS_OK : ZV_BLS_BAD_ENCODING;  /* sign and x must be 0 */
    }
    return ZV_BLS_OK;
}

/* Whether y is the lexicographically larger root in Fp2: by c1, or by c0 when c1 = 0. */
ZV_HD int zv_fp2_is_lex_largest(const zv_fp2 *y) {
    return zv_fp_is_zero(&y->c1) ? zv_fp_is_lex_largest(&y->c0) : zv_fp_is_lex_largest(&y->c1);
}

/* Decoding without the subgroup check: flags, x < p, on the curve. */
ZV_HD int zv_bls_g1_decompress_on_curve(zv_g1_affine *r, const zv_u8 in[48]) {
    zv_u8 xb[48];
    int inf, sign;
    int err = zv_bls_read_flags(in, 48, xb, &inf, &sign);
    r->infinity = 1;
    zv_fp_zero(&r->x);
    zv_fp_zero(&r->y);
    if (err != ZV_BLS_OK || inf) return err;
    if (!zv_fp_from_be48(&r->x, xb)) return ZV_BLS_BAD_ENCODING;
    zv_fp rhs;
    zv_fp_sqr(&rhs, &r->x);
    zv_fp_mul(&rhs, &rhs, &r->x);
    zv_fp_add(&rhs, &rhs, &ZV_BLS_B1);
    if (!zv_fp_sqrt(&r->y, &rhs)) return ZV_BLS_POINT_NOT_ON_CURVE;
    if (zv_fp_is_lex_largest(&r->y) != sign) zv_fp_neg(&r->y, &r->y);
    r->infinity = 0;
    return ZV_BLS_OK;
}

ZV_HD int zv_bls_g2_decompress_on_curve(zv_g2_affine *r, const zv_u8 in[96]) {
    zv_u8 xb[96];
    int inf, sign;
    int err = zv_bls_read_flags(in, 96, xb, &inf, &sign);
    r->infinity = 1;
    zv_fp2_zero(&r->x);
    zv_fp2_zero(&r->y);
    if (err != ZV_BLS_OK || inf) return err;
    if (!(zv_fp_from_be48(&r->x.c1, xb) & zv_fp_from_be48(&r->x.c0, xb + 48))) return ZV_BLS_BAD_ENCODING;
    zv_fp2 rhs;
    zv_fp2_sqr(&rhs, &r->x);
    zv_fp2_mul(&rhs, &rhs, &r->x);
    zv_fp2_add(&rhs, &rhs, &ZV_BLS_B2);
    if (!zv_fp2_sqrt(&r->y, &rhs)) return ZV_BLS_POINT_NOT_ON_CURVE;
    if (zv_fp2_is_lex_largest(&r->y) != sign) zv_fp2_neg(&r->y, &r->y);
    r->infinity = 0;
    return ZV_BLS_OK;
}

/* Full decoding (subgroup-checked).  On an error r is the point at infinity. */
ZV_BLS_NOINLINE int zv_bls_g1_decompress(zv_g1_affine *r, const zv_u8 in[48]) {
    int err = zv_bls_g1_decompress_on_curve(r, in);
    if (err != ZV_BLS_OK || r->infinity) return err;
    zv_g1_jac j;
    zv_g1_from_affine(&j, r);
    if (!zv_g1_in_group(&j)) { r->infinity = 1; return ZV_BLS_POINT_NOT_IN_GROUP; }
    return ZV_BLS_OK;
}

ZV_BLS_NOINLINE int zv_bls_g2_decompress(zv_g2_affine *r, const zv_u8 in[96]) {
    int err = zv_bls_g2_decompress_on_curve(r, in);
    if (err != ZV_BLS_OK || r->infinity) return err;
    zv_g2_jac j;
    zv_g2_from_affine(&j, r);
    if (!zv_g2_in_group(&j)) { r->infinity = 1; return ZV_BLS_POINT_NOT_IN_GROUP; }
    return ZV_BLS_OK;
}

/* KeyValidate (draft-irtf-cfrg-bls-signature-05 §2.5): a G1 public key that decodes, is in
 * G1 and is not the identity. */
ZV_HD int zv_bls_key_validate(zv_g1_affine *pk, const zv_u8 in[48]) {
    int err = zv_bls_g1_decompress(pk, in);
    if (err == ZV_BLS_OK && pk->infinity) return ZV_BLS_PK_IS_INFINITY;
    return err;
}

/* Compressed encodings (the inverse of decoding), used to compare with published points. */
ZV_HD void zv_bls_g1_compress(zv_u8 out[48], const zv_g1_affine *a) {
    if (a->infinity) {
        zv_memset(out, 0, 48);
        out[0] = (zv_u8)(ZV_BLS_FLAG_COMPRESSED | ZV_BLS_FLAG_INFINITY);
        return;
    }
    zv_fp_to_be48(out, &a->x);
    out[0] |= (zv_u8)(ZV_BLS_FLAG_COMPRESSED | (zv_fp_is_lex_largest(&a->y) ? ZV_BLS_FLAG_SIGN : 0u));
}

ZV_HD void zv_bls_g2_compress(zv_u8 out[96], const zv_g2_affine *a) {
    if (a->infinity) {
        zv_memset(out, 0, 96);
        out[0] = (zv_u8)(ZV_BLS_FLAG_COMPRESSED | ZV_BLS_FLAG_INFINITY);
        return;
    }
    zv_fp_to_be48(out, &a->x.c1);
    zv_fp_to_be48(out + 48, &a->x.c0);
    out[0] |= (zv_u8)(ZV_BLS_FLAG_COMPRESSED | (zv_fp2_is_lex_largest(&a->y) ? ZV_BLS_FLAG_SIGN : 0u));
}

#endif /* ZV_BLS12_381_SERDE_CUH */
