/* bls12_381_parts.cu — every BLS12-381 arithmetic piece (field, curves, point decoding,
 * hash to G2) behind small batch kernels, for two uses:
 *   - host build (g++): tests/test_kernel_bls12_381_arith.py calls them through ctypes and
 *     compares each piece with Python integers, py_ecc and arkworks;
 *   - GPU build (nvcc -arch=sm_90): the same kernels make ptxas compile every piece, so the
 *     registers and spills of each are recorded (scripts/bls12_381_ptxas).
 * They are not the verify entry point (that is bls12_381.cu); one thread per item.
 *
 * Byte conventions: an Fp element is 48 bytes big-endian (canonical, < p); an Fp2 element
 * is c0 || c1, 96 bytes.  Inputs ≥ p set ok[i] = 0 and leave out[i] zero.
 */
#include "zv_port.cuh"
#include "fields/bls12_381_fp2.cuh"

enum {
    ZV_BLS_OP_ADD = 0, ZV_BLS_OP_SUB = 1, ZV_BLS_OP_MUL = 2, ZV_BLS_OP_SQR = 3, ZV_BLS_OP_NEG = 4,
    ZV_BLS_OP_INV = 5, ZV_BLS_OP_SQRT = 6, ZV_BLS_OP_DBL = 7, ZV_BLS_OP_CONJ = 8,
    ZV_BLS_OP_MUL_BY_XI = 9, ZV_BLS_OP_MUL_FP = 10, ZV_BLS_OP_SGN0 = 11, ZV_BLS_OP_EQ = 12,
    ZV_BLS_OP_IS_SQUARE = 13
};

/* Fp: out = op(a, b); ok = 0 when an input is ≥ p or (sqrt) a is not a square;
 * SGN0 and EQ put their answer in ok. */
ZV_KERNEL void zv_bls_fp_batch(zv_u32 op, const zv_u8 *a, const zv_u8 *b, zv_u64 n, zv_u8 *out, zv_u8 *ok) {
    ZV_FOR_EACH(i, n) {
        zv_fp x, y, r;
        int good = zv_fp_from_be48(&x, a + 48 * i) & zv_fp_from_be48(&y, b + 48 * i);
        zv_fp_zero(&r);
        if (good) {
            switch (op) {
                case ZV_BLS_OP_ADD: zv_fp_add(&r, &x, &y); break;
                case ZV_BLS_OP_SUB: zv_fp_sub(&r, &x, &y); break;
                case ZV_BLS_OP_MUL: zv_fp_mul(&r, &x, &y); break;
                case ZV_BLS_OP_SQR: zv_fp_sqr(&r, &x); break;
                case ZV_BLS_OP_NEG: zv_fp_neg(&r, &x); break;
                case ZV_BLS_OP_INV: zv_fp_inv(&r, &x); break;
                case ZV_BLS_OP_SQRT: good = zv_fp_sqrt(&r, &x); break;
                case ZV_BLS_OP_DBL: zv_fp_dbl(&r, &x); break;
                case ZV_BLS_OP_SGN0: good = zv_fp_sgn0(&x); break;
                case ZV_BLS_OP_EQ: good = zv_fp_eq(&x, &y); break;
                default: good = 0; break;
            }
        }
        zv_fp_to_be48(out + 48 * i, &r);
        ok[i] = (zv_u8)good;
    }
}

/* 64-byte big-endian integers reduced mod p (hash_to_field's OS2IP(tv) mod p). */
ZV_KERNEL void zv_bls_fp_from_be64_batch(const zv_u8 *in, zv_u64 n, zv_u8 *out) {
    ZV_FOR_EACH(i, n) {
        zv_fp r;
        zv_fp_from_be64(&r, in + 64 * i);
        zv_fp_to_be48(out + 48 * i, &r);
    }
}

ZV_HD int zv_bls_fp2_from_bytes(zv_fp2 *r, const zv_u8 in[96]) {
    return zv_fp_from_be48(&r->c0, in) & zv_fp_from_be48(&r->c1, in + 48);
}

ZV_HD void zv_bls_fp2_to_bytes(zv_u8 out[96], const zv_fp2 *a) {
    zv_fp_to_be48(out, &a->c0);
    zv_fp_to_be48(out + 48, &a->c1);
}

/* Fp2: as zv_bls_fp_batch on 96-byte elements; MUL_FP multiplies by b's c0. */
ZV_KERNEL void zv_bls_fp2_batch(zv_u32 op, const zv_u8 *a, const zv_u8 *b, zv_u64 n, zv_u8 *out, zv_u8 *ok) {
    ZV_FOR_EACH(i, n) {
        zv_fp2 x, y, r;
        int good = zv_bls_fp2_from_bytes(&x, a + 96 * i) & zv_bls_fp2_from_bytes(&y, b + 96 * i);
        zv_fp2_zero(&r);
        if (good) {
            switch (op) {
                case ZV_BLS_OP_ADD: zv_fp2_add(&r, &x, &y); break;
                case ZV_BLS_OP_SUB: zv_fp2_sub(&r, &x, &y); break;
                case ZV_BLS_OP_MUL: zv_fp2_mul(&r, &x, &y); break;
                case ZV_BLS_OP_SQR: zv_fp2_sqr(&r, &x); break;
                case ZV_BLS_OP_NEG: zv_fp2_neg(&r, &x); break;
                case ZV_BLS_OP_INV: zv_fp2_inv(&r, &x); break;
                case ZV_BLS_OP_SQRT: good = zv_fp2_sqrt(&r, &x); break;
                case ZV_BLS_OP_DBL: zv_fp2_dbl(&r, &x); break;
                case ZV_BLS_OP_CONJ: zv_fp2_conj(&r, &x); break;
                case ZV_BLS_OP_MUL_BY_XI: zv_fp2_mul_by_xi(&r, &x); break;
                case ZV_BLS_OP_MUL_FP: zv_fp2_mul_fp(&r, &x, &y.c0); break;
                case ZV_BLS_OP_SGN0: good = zv_fp2_sgn0(&x); break;
                case ZV_BLS_OP_EQ: good = zv_fp2_eq(&x, &y); break;
                case ZV_BLS_OP_IS_SQUARE: good = zv_fp2_is_square(&x); break;
                default: good = 0; break;
            }
        }
        zv_bls_fp2_to_bytes(out + 96 * i, &r);
        ok[i] = (zv_u8)good;
    }
}

/* One Montgomery product per item on raw limbs: the kernel whose SASS is counted for the
 * cost of zv_fp_mul (scripts/bls12_381_ptxas). */
ZV_KERNEL void zv_bls_fp_mul_kernel(const zv_fp *a, const zv_fp *b, zv_u64 n, zv_fp *out) {
    ZV_FOR_EACH(i, n) zv_fp_mul(&out[i], &a[i], &b[i]);
}

/* ------------------------------------------------------------------ curves */
#include "curves/bls12_381_curve.cuh"

enum {
    ZV_BLS_PT_ADD = 0, ZV_BLS_PT_DBL = 1, ZV_BLS_PT_ADD_AFFINE = 2, ZV_BLS_PT_NEG = 3, ZV_BLS_PT_MUL = 4,
    ZV_BLS_PT_IN_GROUP = 5, ZV_BLS_PT_IN_GROUP_PLAIN = 6, ZV_BLS_PT_ON_CURVE = 7, ZV_BLS_PT_PSI = 8,
    ZV_BLS_PT_EQ = 9
};

ZV_HD int zv_f_from_bytes(zv_fp *r, const zv_u8 *in) { return zv_fp_from_be48(r, in); }
ZV_HD int zv_f_from_bytes(zv_fp2 *r, const zv_u8 *in) { return zv_bls_fp2_from_bytes(r, in); }
ZV_HD void zv_f_to_bytes(zv_u8 *out, const zv_fp *a) { zv_fp_to_be48(out, a); }
ZV_HD void zv_f_to_bytes(zv_u8 *out, const zv_fp2 *a) { zv_bls_fp2_to_bytes(out, a); }
ZV_HD int zv_bls_in_group(const zv_g1_jac *p) { return zv_g1_in_group(p); }
ZV_HD int zv_bls_in_group(const zv_g2_jac *p) { return zv_g2_in_group(p); }
ZV_HD int zv_bls_in_group_plain(const zv_g1_jac *p) { return zv_g1_in_group_plain(p); }
ZV_HD int zv_bls_in_group_plain(const zv_g2_jac *p) { return zv_g2_in_group_plain(p); }
ZV_HD void zv_bls_psi(zv_g1_jac *r, const zv_g1_jac *p) { *r = *p; } /* G1 has no ψ */
ZV_HD void zv_bls_psi(zv_g2_jac *r, const zv_g2_jac *p) { zv_g2_psi(r, p); }

/* An affine point as bytes x || y (all zero: infinity, which no curve point is since b ≠ 0).
 * Returns 0 when a coordinate is ≥ p.  `lambda` ≠ 0 scales it to the Jacobian
 * (λ^2·x, λ^3·y, λ), so the formulas meet Z ≠ 1. */
template <class F, class J> ZV_HD int zv_bls_point_in(J *r, F *ax, F *ay, int *inf, const zv_u8 *in,
                                                      const F *lambda) {
    const int fb = (int)(sizeof(F) / sizeof(zv_fp)) * 48;
    int ok = zv_f_from_bytes(ax, in) & zv_f_from_bytes(ay, in + fb);
    *inf = zv_f_is_zero(ax) & zv_f_is_zero(ay);
    if (*inf) { zv_jac_set_infinity<F, J>(r); return ok; }
    F l2;
    zv_f_sqr(&l2, lambda);
    zv_f_mul(&r->x, ax, &l2);
    zv_f_mul(&l2, &l2, lambda);
    zv_f_mul(&r->y, ay, &l2);
    r->z = *lambda;
    return ok;
}

template <class F, class J> ZV_HD void zv_bls_point_out(zv_u8 *out, const J *p) {
    const int fb = (int)(sizeof(F) / sizeof(zv_fp)) * 48;
    F x, y;
    int inf;
    zv_jac_to_affine<F, J>(&x, &y, &inf, p);
    if (inf) { zv_f_zero(&x); zv_f_zero(&y); }
    zv_f_to_bytes(out, &x);
    zv_f_to_bytes(out + fb, &y);
}

/* out = op(P, Q) (affine bytes); k: 32-byte big-endian scalars for MUL; ok: 0 when an input
 * coordinate is ≥ p, else the answer of the predicates (IN_GROUP*, ON_CURVE, EQ) or 1. */
template <class F, class J> ZV_HD void zv_bls_point_op(zv_u32 op, const zv_u8 *a, const zv_u8 *b,
                                                       const zv_u8 *k, zv_u8 *out, zv_u8 *ok) {
    F ax, ay, bx, by, l1, l2;
    int ainf, binf;
    J p, q, r;
    zv_f_one(&l1);
    zv_f_dbl(&l1, &l1);
    zv_f_add(&l2, &l1, &l1);
    zv_f_add(&l2, &l2, &l1);                     /* λ_P = 2, λ_Q = 6: Z ≠ 1 and Z_P ≠ Z_Q */
    int good = zv_bls_point_in<F, J>(&p, &ax, &ay, &ainf, a, &l1);
    good &= zv_bls_point_in<F, J>(&q, &bx, &by, &binf, b, &l2);
    zv_jac_set_infinity<F, J>(&r);
    if (good) {
        switch (op) {
            case ZV_BLS_PT_ADD: zv_jac_add(&r, &p, &q); break;
            case ZV_BLS_PT_DBL: zv_jac_dbl(&r, &p); break;
            case ZV_BLS_PT_ADD_AFFINE: zv_jac_add_affine(&r, &p, &bx, &by, binf); break;
            case ZV_BLS_PT_NEG: zv_jac_neg<F, J>(&r, &p); break;
            case ZV_BLS_PT_MUL: {
                zv_u32 kw[8];
                for (int i = 0; i < 8; i++) kw[i] = zv_load_be32(k + 4 * (7 - i));
                zv_jac_mul<F, J>(&r, &p, kw, 256);
                break;
            }
            case ZV_BLS_PT_IN_GROUP: good = zv_bls_in_group(&p); break;
            case ZV_BLS_PT_IN_GROUP_PLAIN: good = zv_bls_in_group_plain(&p); break;
            case ZV_BLS_PT_ON_CURVE: good = ainf || zv_bls_on_curve(&ax, &ay); break;
            case ZV_BLS_PT_PSI: zv_bls_psi(&r, &p); break;
            case ZV_BLS_PT_EQ: good = zv_jac_eq<F, J>(&p, &q); break;
            default: good = 0; break;
        }
    }
    zv_bls_point_out<F, J>(out, &r);
    *ok = (zv_u8)good;
}

/* G1 points: 96 bytes each; G2 points: 192 bytes each (x.c0 || x.c1 || y.c0 || y.c1). */
ZV_KERNEL void zv_bls_g1_batch(zv_u32 op, const zv_u8 *a, const zv_u8 *b, const zv_u8 *k, zv_u64 n,
                               zv_u8 *out, zv_u8 *ok) {
    ZV_FOR_EACH(i, n) zv_bls_point_op<zv_fp, zv_g1_jac>(op, a + 96 * i, b + 96 * i, k + 32 * i, out + 96 * i, ok + i);
}

ZV_KERNEL void zv_bls_g2_batch(zv_u32 op, const zv_u8 *a, const zv_u8 *b, const zv_u8 *k, zv_u64 n,
                               zv_u8 *out, zv_u8 *ok) {
    ZV_FOR_EACH(i, n) zv_bls_point_op<zv_fp2, zv_g2_jac>(op, a + 192 * i, b + 192 * i, k + 32 * i, out + 192 * i, ok + i);
}

/* ------------------------------------------------------------------ point decoding */
#include "curves/bls12_381_serde.cuh"

enum { ZV_BLS_DEC_FULL = 0, ZV_BLS_DEC_ON_CURVE = 1, ZV_BLS_DEC_KEY_VALIDATE = 2 };

ZV_HD void zv_bls_affine_out(zv_u8 *out, const zv_g1_affine *a) {
    zv_fp z;
    zv_fp_zero(&z);
    zv_fp_to_be48(out, a->infinity ? &z : &a->x);
    zv_fp_to_be48(out + 48, a->infinity ? &z : &a->y);
}

ZV_HD void zv_bls_affine_out(zv_u8 *out, const zv_g2_affine *a) {
    zv_fp2 z;
    zv_fp2_zero(&z);
    zv_bls_fp2_to_bytes(out, a->infinity ? &z : &a->x);
    zv_bls_fp2_to_bytes(out + 96, a->infinity ? &z : &a->y);
}

/* Decode 48-byte encodings (mode: FULL = zv_bls_g1_decompress, ON_CURVE = without the
 * subgroup check, KEY_VALIDATE); err[i] = the ZV_BLS_* code, out[i] = the affine point
 * (zv_bls_g1_batch's layout) and its re-encoding in enc[i]. */
ZV_KERNEL void zv_bls_g1_decode_batch(zv_u32 mode, const zv_u8 *in, zv_u64 n, zv_u8 *out, zv_u8 *enc, zv_u8 *err) {
    ZV_FOR_EACH(i, n) {
        zv_g1_affine a;
        int e = mode == ZV_BLS_DEC_ON_CURVE ? zv_bls_g1_decompress_on_curve(&a, in + 48 * i)
              : mode == ZV_BLS_DEC_KEY_VALIDATE ? zv_bls_key_validate(&a, in + 48 * i)
              : zv_bls_g1_decompress(&a, in + 48 * i);
        zv_bls_affine_out(out + 96 * i, &a);
        zv_bls_g1_compress(enc + 48 * i, &a);
        err[i] = (zv_u8)e;
    }
}

ZV_KERNEL void zv_bls_g2_decode_batch(zv_u32 mode, const zv_u8 *in, zv_u64 n, zv_u8 *out, zv_u8 *enc, zv_u8 *err) {
    ZV_FOR_EACH(i, n) {
        zv_g2_affine a;
        int e = mode == ZV_BLS_DEC_ON_CURVE ? zv_bls_g2_decompress_on_curve(&a, in + 96 * i)
                                            : zv_bls_g2_decompress(&a, in + 96 * i);
        zv_bls_affine_out(out + 192 * i, &a);
        zv_bls_g2_compress(enc + 96 * i, &a);
        err[i] = (zv_u8)e;
    }
}

/* ------------------------------------------------------------------ hash to G2 */
#include "curves/bls12_381_h2c.cuh"

/* Item i's message is msgs[offsets[i] .. offsets[i+1]) (the kernel contract's layout); all
 * items share one DST.  Outputs: expand_message_xmd's 256 bytes, hash_to_field's two Fp2
 * elements (u0 || u1, 192 bytes), or the compressed hash_to_G2 point (96 bytes). */
ZV_KERNEL void zv_bls_expand_message_xmd_batch(const zv_u8 *msgs, const zv_u64 *offsets, const zv_u8 *dst,
                                               zv_u32 dst_len, zv_u64 n, zv_u8 *out) {
    ZV_FOR_EACH(i, n) {
        zv_bls_expand_message_xmd(out + ZV_BLS_H2C_LEN * i, msgs + offsets[i], offsets[i + 1] - offsets[i], dst,
                                  dst_len);
    }
}

ZV_KERNEL void zv_bls_hash_to_field_batch(const zv_u8 *msgs, const zv_u64 *offsets, const zv_u8 *dst,
                                          zv_u32 dst_len, zv_u64 n, zv_u8 *out) {
    ZV_FOR_EACH(i, n) {
        zv_fp2 u[2];
        zv_bls_hash_to_field_fp2(u, msgs + offsets[i], offsets[i + 1] - offsets[i], dst, dst_len);
        zv_bls_fp2_to_bytes(out + 192 * i, &u[0]);
        zv_bls_fp2_to_bytes(out + 192 * i + 96, &u[1]);
    }
}

ZV_KERNEL void zv_bls_hash_to_g2_batch(const zv_u8 *msgs, const zv_u64 *offsets, const zv_u8 *dst,
                                       zv_u32 dst_len, zv_u64 n, zv_u8 *out) {
    ZV_FOR_EACH(i, n) {
        zv_g2_affine q;
        zv_bls_hash_to_g2(&q, msgs + offsets[i], offsets[i + 1] - offsets[i], dst, dst_len);
        zv_bls_g2_compress(out + 96 * i, &q);
    }
}

/* map_to_curve (SWU + isogeny) of Fp2 elements u (96 bytes each) to affine E2 points; ok = 0
 * when u is not canonical. */
ZV_KERNEL void zv_bls_map_to_curve_g2_batch(const zv_u8 *u, zv_u64 n, zv_u8 *out, zv_u8 *ok) {
    ZV_FOR_EACH(i, n) {
        zv_fp2 e;
        zv_g2_jac q;
        zv_g2_affine a;
        ok[i] = (zv_u8)zv_bls_fp2_from_bytes(&e, u + 96 * i);
        zv_bls_map_to_curve_g2(&q, &e);
        zv_g2_to_affine(&a, &q);
        zv_bls_affine_out(out + 192 * i, &a);
    }
}

/* clear_cofactor of affine E2 points (zv_bls_g2_batch's layout); plain = 1: [h_eff]P by
 * double-and-add, else the ψ method of Appendix G.3. */
ZV_KERNEL void zv_bls_clear_cofactor_batch(zv_u32 plain, const zv_u8 *in, zv_u64 n, zv_u8 *out, zv_u8 *ok) {
    ZV_FOR_EACH(i, n) {
        zv_fp2 ax, ay, one;
        int inf;
        zv_g2_jac p, q;
        zv_fp2_one(&one);
        ok[i] = (zv_u8)zv_bls_point_in<zv_fp2, zv_g2_jac>(&p, &ax, &ay, &inf, in + 192 * i, &one);
        if (plain) zv_bls_clear_cofactor_plain(&q, &p); else zv_bls_clear_cofactor(&q, &p);
        zv_bls_point_out<zv_fp2, zv_g2_jac>(out + 192 * i, &q);
    }
}
