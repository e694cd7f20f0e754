/* p256_scalar.cuh — integers mod the P-256 group order n (FIPS 186-5 / SP 800-186 §3.2.1.3).
 *
 * A zv_p256_sc holds eight 32-bit limbs, least significant first, of a value in [0, n)
 * unless a function says otherwise.  As for secp256k1's scalars (secp256k1_scalar.cuh, which
 * says why), products are mont.cuh's Montgomery products (R = 2^256) and only three are
 * needed per verify outside the inversion: with w = s^−1·R, mont(z, w) = z·s^−1 and
 * mont(r, w) = r·s^−1 come out in ordinary form.  The inversion is Fermat's a^(n−2) by a
 * generated sliding-window schedule (zv_mont_pow_schedule), shared by a block's chunk of
 * signatures (zv_p256_sc_block_batch_inv_mont).
 *
 * Bounds (ZV_CHECK in verify host builds, zv_port.cuh): mont.cuh's contracts.
 *
 * Index (public functions, in source order; the comment at each says more):
 *   zv_p256_sc_mont_mul(r, a, b)                Montgomery product r = a·b·2^−256 mod n for a < 2^256 and b
 *                                               < n
 *   zv_p256_sc_inv_of_mont(r, x)                a^−1·R mod n (Montgomery form of the inverse) for x = a·R
 *                                               with a in [1, n)
 *   zv_p256_sc_inv_mont(r, s)                   s^−1·R mod n for s in [1, n) (one item on its own)
 *   zv_p256_sc_mul_mont(r, a, b)
 *   zv_p256_sc_block_batch_inv_mont(m, prefix, count, tops, tops_prefix)
 *                                               Batched inversion over a block chunk (zv_port.cuh
 *                                               zv_block_batch_invert)
 */
#ifndef ZV_P256_SCALAR_CUH
#define ZV_P256_SCALAR_CUH

#include "zv_port.cuh"
#include "fields/mont.cuh"
#include "tables/p256_tables.cuh"

typedef struct { zv_u32 v[8]; } zv_p256_sc;

/* n for the templates of mont.cuh (N = 8 limbs). */
struct zv_p256_sc_modulus {
    static constexpr int N = 8;
    static constexpr zv_u32 N0 = ZV_P256_N_N0INV;  /* −n^−1 mod 2^32 */
    static ZV_HD_MEMBER void modulus(zv_u32 m[8]) {
        for (int i = 0; i < 8; i++) m[i] = ZV_P256_N[i];
    }
    static ZV_HD_MEMBER const zv_u32 *r2() { return ZV_P256_N_R2; }
};

/* Montgomery product r = a·b·2^−256 mod n for a < 2^256 and b < n. */
ZV_HD void zv_p256_sc_mont_mul(zv_p256_sc *r, const zv_u32 a[8], const zv_u32 b[8]) {
    ZV_COUNT(ZV_OP_P256_SC_MONT_MUL);
    zv_mont_mul<zv_p256_sc_modulus>(r->v, a, b);
}

/* a^−1·R mod n (Montgomery form of the inverse) for x = a·R with a in [1, n). */
ZV_HD void zv_p256_sc_inv_of_mont(zv_p256_sc *r, const zv_p256_sc *x) {
    zv_mont_pow_schedule<zv_p256_sc_modulus, ZV_P256_SC_INV_ODD_POWERS>(r->v, x->v, ZV_P256_SC_INV_SQ,
                                                                       ZV_P256_SC_INV_IDX, ZV_P256_SC_INV_STEPS);
}

/* s^−1·R mod n for s in [1, n) (one item on its own). */
ZV_HD void zv_p256_sc_inv_mont(zv_p256_sc *r, const zv_p256_sc *s) {
    zv_p256_sc x;
    zv_p256_sc_mont_mul(&x, s->v, ZV_P256_N_R2);  /* s·R */
    zv_p256_sc_inv_of_mont(r, &x);
}

ZV_HD void zv_p256_sc_mul_mont(zv_p256_sc *r, const zv_p256_sc *a, const zv_p256_sc *b) { zv_p256_sc_mont_mul(r, a->v, b->v); }

/* Batched inversion over a block chunk (zv_port.cuh zv_block_batch_invert): m[i] = s_i·R in,
 * s_i^−1·R out; every s_i in [1, n) (callers substitute 1 for an invalid signature's s). */
ZV_HD void zv_p256_sc_block_batch_inv_mont(zv_p256_sc *m, zv_p256_sc *prefix, int count, zv_p256_sc *tops,
                                           zv_p256_sc *tops_prefix) {
    zv_block_batch_invert<zv_p256_sc, zv_p256_sc_mul_mont, zv_p256_sc_inv_of_mont>(m, prefix, count, tops, tops_prefix);
}

#endif /* ZV_P256_SCALAR_CUH */
