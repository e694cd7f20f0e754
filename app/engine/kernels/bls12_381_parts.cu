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
#include "bls12_381_fp2.cuh"

enum {
    ZV_BLS_OP_ADD = 0, ZV_BLS_OP_SUB = 1, ZV_BLS_OP_MUL = 2, ZV_BLS_OP_SQR = 3, ZV_BLS_OP_NEG = 4,
    ZV_BLS_OP_INV = 5, ZV_BLS_OP_SQRT = 6, ZV_BLS_OP_DBL = 7, ZV_BLS_OP_CONJ = 8,
    ZV_BLS_OP_MUL_BY_XI = 9, ZV_BLS_OP_MUL_FP = 10, ZV_BLS_OP_SGN0 = 11, ZV_BLS_OP_EQ = 12
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
