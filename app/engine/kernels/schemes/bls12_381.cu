/* bls12_381.cu — the BLS12-381 verify entry point (kernel contract: zv_verify_<family>).
 * Semantics and parallel layout: bls12_381.cuh.  One thread per signature; keys, signatures
 * and messages are read in place from the columnar batch (DESIGN.md section 3).  ctx and
 * options do not apply to BLS (the ciphersuite fixes the DST) and are ignored. */
#include "schemes/bls12_381.cuh"

ZV_KERNEL void zv_verify_bls12_381(const zv_u8 *pks, zv_u32 pk_len, const zv_u8 *sigs, zv_u32 sig_len,
                                   const zv_u8 *msgs, const zv_u64 *offsets, const zv_u8 *ctx,
                                   zv_u32 ctx_len, zv_u32 options, zv_u64 n, zv_u8 *verdicts) {
    (void)ctx;
    (void)ctx_len;
    (void)options;
    ZV_FOR_EACH(i, n) {
        zv_u64 lo = offsets[i], hi = offsets[i + 1];
        /* decreasing offsets are a malformed item, not a huge read */
        verdicts[i] = (zv_u8)(hi >= lo && zv_bls12_381_verify(pks + i * pk_len, pk_len, sigs + i * sig_len,
                                                              sig_len, msgs + lo, hi - lo));
    }
}

#if !ZV_CUDA_COMPILER
/* Host-build hooks for the unit tests (tests/test_kernel_bls12_381.py): the Fp12 tower and
 * the pairing checked against py_ecc.  Not part of the GPU build.
 *
 * An Fp12 element crosses as 12 Fp values of 48 big-endian bytes in tower order
 * c0.c0.c0, c0.c0.c1, c0.c1.c0, ..., c1.c2.c1 (576 bytes); a G1 point as x ‖ y (96 bytes),
 * a G2 point as x.c0 ‖ x.c1 ‖ y.c0 ‖ y.c1 (192 bytes).  Loaders return 0 for a value >= p. */

static int zv_bls_hook_load_fp12(zv_fp12 *r, const zv_u8 in[576]) {
    zv_fp *v = &r->c0.c0.c0; /* zv_fp12 is 12 consecutive zv_fp in exactly this order */
    int ok = 1;
    for (int i = 0; i < 12; i++) ok &= zv_fp_from_be48(&v[i], in + 48 * i);
    return ok;
}

static void zv_bls_hook_store_fp12(zv_u8 out[576], const zv_fp12 *a) {
    const zv_fp *v = &a->c0.c0.c0;
    for (int i = 0; i < 12; i++) zv_fp_to_be48(out + 48 * i, &v[i]);
}

/* op: 0 mul, 1 sqr, 2 inv, 3 conj, 4 Frobenius p, 5 Frobenius p^2, 6 cyclotomic sqr,
 * 7 mul by the line (b.c0.c0, b.c0.c1, b.c1.c1), 8 final exponentiation, 9 cyclotomic
 * exponentiation by x, 10 fp6 sqr of a.c0 (into out.c0; out.c1 = 0), 11 fp6 inv likewise.
 * Returns 0 (out untouched) for a non-canonical input or an unknown op. */
ZV_KERNEL int zv_bls12_381_hook_fp12(int op, zv_u8 out[576], const zv_u8 a_in[576], const zv_u8 b_in[576]) {
    zv_fp12 a, b, r;
    if (!zv_bls_hook_load_fp12(&a, a_in) || !zv_bls_hook_load_fp12(&b, b_in)) return 0;
    zv_bls_line l = {b.c0.c0, b.c0.c1, b.c1.c1};
    switch (op) {
        case 0: zv_fp12_mul(&r, &a, &b); break;
        case 1: zv_fp12_sqr(&r, &a); break;
        case 2: zv_fp12_inv(&r, &a); break;
        case 3: zv_fp12_conj(&r, &a); break;
        case 4: zv_fp12_frobenius(&r, &a, 1); break;
        case 5: zv_fp12_frobenius(&r, &a, 2); break;
        case 6: zv_fp12_cyclotomic_sqr(&r, &a); break;
        case 7: r = a; zv_fp12_mul_by_line(&r, &l); break;
        case 8: zv_bls_final_exp(&r, &a); break;
        case 9: zv_bls_cyclotomic_exp_by_x(&r, &a); break;
        case 10: zv_fp6_sqr(&r.c0, &a.c0); zv_fp6_zero(&r.c1); break;
        case 11: zv_fp6_inv(&r.c0, &a.c0); zv_fp6_zero(&r.c1); break;
        default: return 0;
    }
    zv_bls_hook_store_fp12(out, &r);
    return 1;
}

/* out = Π f_(x, Q_i)(P_i) over n <= 4 pairs (affine, none at infinity; the caller makes sure
 * they are on the curves and in G1, G2), followed by the final exponentiation when
 * final != 0.  Returns 0 for a coordinate >= p or n out of range. */
ZV_KERNEL int zv_bls12_381_hook_pairing(zv_u8 out[576], int n, const zv_u8 *p, const zv_u8 *q, int final) {
    zv_bls_miller_pair pairs[4];
    if (n < 0 || n > 4) return 0;
    for (int i = 0; i < n; i++) {
        zv_fp px, py;
        zv_fp2 qx, qy;
        const zv_u8 *pi = p + 96 * i, *qi = q + 192 * i;
        if (!zv_fp_from_be48(&px, pi) || !zv_fp_from_be48(&py, pi + 48) || !zv_fp_from_be48(&qx.c0, qi) ||
            !zv_fp_from_be48(&qx.c1, qi + 48) || !zv_fp_from_be48(&qy.c0, qi + 96) ||
            !zv_fp_from_be48(&qy.c1, qi + 144))
            return 0;
        zv_bls_miller_pair_init(&pairs[i], &px, &py, &qx, &qy);
    }
    zv_fp12 f;
    zv_bls_miller_loop(&f, pairs, n);
    if (final) zv_bls_final_exp(&f, &f);
    zv_bls_hook_store_fp12(out, &f);
    return 1;
}
#endif
