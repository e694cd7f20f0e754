/* secp256k1_scalar.cuh — integers mod the group order n (SEC 2 v2 §2.4.1).
 *
 * A zv_k1_sc holds eight 32-bit limbs, least significant first, of a value in [0, n) unless a
 * function says otherwise.  The arithmetic is mont.cuh's templates over zv_k1_sc_modulus
 * (below), whose contracts and bounds hold here; products use Montgomery multiplication
 * (CIOS, R = 2^256, zv_mont_mul): n has no sparse form to exploit as p does, and
 * Montgomery's reduction is the same 32-bit multiply-accumulate as the product itself.
 * Only three products per verify are needed outside the inversion (u1, u2 and the GLV
 * split), and Montgomery form costs nothing there: with w = s^−1·R (what the inversion
 * returns), mont(z, w) = z·s^−1 and mont(r, w) = r·s^−1 come out in ordinary form.
 * n's top bit is set, so a sum or a product's running value can carry one bit above the
 * eight limbs (mont.cuh's bounds allow for it).
 *
 * Inversion is Fermat's a^(n−2) in the Montgomery domain, by a sliding-window schedule
 * over the fixed exponent generated with the tables (scripts/gen_secp256k1_tables).
 * It costs ~255 squarings and ~57 products, is branch-free and the same for every thread
 * of a warp, which on a GPU beats the ~10× fewer but data-dependent steps of the
 * variable-time safegcd libsecp256k1 uses on a CPU (divergent branches, 62-bit signed
 * limbs that the GPU emulates).
 *
 * Bounds (ZV_CHECK, counted in verify host builds — zv_port.cuh): mont.cuh's contracts —
 * zv_k1_sc_mont_mul's b < n (any a < 2^256), zv_k1_sc_add's, zv_k1_sc_sub's and zv_k1_sc_neg's inputs
 * below n, every output below n.
 *
 * Index (public functions, in source order; the comment at each says more):
 *   zv_k1_sc_copy(r, a)
 *   zv_k1_sc_is_zero(a)
 *   zv_k1_u256_gt(a, b)                         a > b as 256-bit integers
 *   zv_k1_sc_set_b32(r, b)                      32 big-endian bytes
 *   zv_k1_sc_reduce_once(r, hi)                 r = a − n when a ≥ n (a < 2^256 < 2n, so once suffices),
 *                                               else a
 *   zv_k1_sc_set_b32_reduce(r, b)               32 big-endian bytes reduced mod n (a hash as ECDSA's z, SEC
 *                                               1 §4.1.4 step 5)
 *   zv_k1_sc_add(r, a, b)
 *   zv_k1_sc_neg(r, a)                          n − a for a in [1, n), 0 for a = 0
 *   zv_k1_sc_sub(r, a, b)
 *   zv_k1_sc_is_high(a)                         s > n/2: libsecp256k1's "high S" (BIP 62/146 low-S rule)
 *   zv_k1_sc_mont_mul(r, a, b)                  Montgomery product r = a·b·2^−256 mod n for a < 2^256 and b
 *                                               < n
 *   zv_k1_sc_inv_mont(r, a)                     Returns a^−1·R mod n (Montgomery form of the inverse) for a
 *                                               in [1, n); 0 for a = 0
 *   zv_k1_sc_mul_mont(r, a, b)                  Montgomery-domain product and inverse of zv_k1_sc values, in
 *                                               the shape zv_port.cuh's batched …
 *   zv_k1_sc_inv_of_mont(r, x)
 *   zv_k1_sc_block_batch_inv_mont(m, prefix, count, tops, tops_prefix)
 *                                               Batched scalar inversion over a block chunk
 */
#ifndef ZV_SECP256K1_SCALAR_CUH
#define ZV_SECP256K1_SCALAR_CUH

#include "zv_port.cuh"
#include "fields/mont.cuh"
#include "tables/secp256k1_tables.cuh"

typedef struct { zv_u32 v[8]; } zv_k1_sc;

/* n for the templates of mont.cuh (N = 8 limbs, read from constant memory). */
struct zv_k1_sc_modulus {
    static constexpr int N = 8;
    static constexpr zv_u32 N0 = ZV_SECP256K1_N_N0INV;  /* −n^−1 mod 2^32 */
    static ZV_HD_MEMBER void modulus(zv_u32 m[8]) {
        for (int i = 0; i < 8; i++) m[i] = ZV_SECP256K1_N[i];
    }
    static ZV_HD_MEMBER const zv_u32 *r2() { return ZV_SECP256K1_N_R2; }
};

ZV_HD void zv_k1_sc_copy(zv_k1_sc *r, const zv_u32 a[8]) {
    for (int i = 0; i < 8; i++) r->v[i] = a[i];
}

ZV_HD int zv_k1_sc_is_zero(const zv_k1_sc *a) { return zv_mp_is_zero<8>(a->v); }

/* a > b as 256-bit integers. */
ZV_HD int zv_k1_u256_gt(const zv_u32 a[8], const zv_u32 b[8]) { return zv_mp_lt<8>(b, a); }

/* 32 big-endian bytes; returns 1 when the value is ≥ n (then r is left unreduced), as
 * libsecp256k1's scalar_set_b32 reports an overflow. */
ZV_HD int zv_k1_sc_set_b32(zv_k1_sc *r, const zv_u8 *b) {
    for (int i = 0; i < 8; i++) r->v[i] = zv_load_be32(b + 4 * (7 - i));
    return !zv_mont_lt_m<zv_k1_sc_modulus>(r->v);
}

/* r = a − n when a ≥ n (a < 2^256 < 2n, so once suffices), else a; hi is a carry bit above
 * a that, when set, forces the subtraction. */
ZV_HD void zv_k1_sc_reduce_once(zv_u32 r[8], zv_u32 hi) { zv_mont_reduce_once<zv_k1_sc_modulus>(r, r, hi); }

/* 32 big-endian bytes reduced mod n (a hash as ECDSA's z, SEC 1 §4.1.4 step 5). */
ZV_HD void zv_k1_sc_set_b32_reduce(zv_k1_sc *r, const zv_u8 *b) {
    for (int i = 0; i < 8; i++) r->v[i] = zv_load_be32(b + 4 * (7 - i));
    zv_k1_sc_reduce_once(r->v, 0);
}

ZV_HD void zv_k1_sc_add(zv_k1_sc *r, const zv_k1_sc *a, const zv_k1_sc *b) { zv_mont_add<zv_k1_sc_modulus>(r->v, a->v, b->v); }

/* n − a for a in [1, n), 0 for a = 0. */
ZV_HD void zv_k1_sc_neg(zv_k1_sc *r, const zv_k1_sc *a) { zv_mont_neg<zv_k1_sc_modulus>(r->v, a->v); }

ZV_HD void zv_k1_sc_sub(zv_k1_sc *r, const zv_k1_sc *a, const zv_k1_sc *b) { zv_mont_sub<zv_k1_sc_modulus>(r->v, a->v, b->v); }

/* s > n/2: libsecp256k1's "high S" (BIP 62/146 low-S rule). */
ZV_HD int zv_k1_sc_is_high(const zv_k1_sc *a) {
    return zv_k1_u256_gt(a->v, ZV_SECP256K1_N_HALF);
}

/* Montgomery product r = a·b·2^−256 mod n for a < 2^256 and b < n (mont.cuh's CIOS; the
 * running sum stays below a + n < 2^257, the result below n). */
ZV_HD void zv_k1_sc_mont_mul(zv_k1_sc *r, const zv_u32 a[8], const zv_u32 b[8]) {
    ZV_COUNT(ZV_OP_K1_SC_MONT_MUL);
    zv_mont_mul<zv_k1_sc_modulus>(r->v, a, b);
}

/* Returns a^−1·R mod n (Montgomery form of the inverse) for a in [1, n); 0 for a = 0. */
ZV_HD void zv_k1_sc_inv_mont(zv_k1_sc *r, const zv_k1_sc *a) {
    zv_k1_sc pw[ZV_SECP256K1_INV_ODD_POWERS];  /* x^1, x^3, ..., x^15 with x = a·R */
    zv_k1_sc x2;
    zv_k1_sc_mont_mul(&pw[0], a->v, ZV_SECP256K1_N_R2);
    zv_k1_sc_mont_mul(&x2, pw[0].v, pw[0].v);
    for (int i = 1; i < ZV_SECP256K1_INV_ODD_POWERS; i++) zv_k1_sc_mont_mul(&pw[i], pw[i - 1].v, x2.v);
    zv_k1_sc acc = pw[ZV_SECP256K1_INV_IDX[0]];  /* the first step starts from 1: its squarings are moot */
    for (int s = 1; s < ZV_SECP256K1_INV_STEPS; s++) {
        for (int q = 0; q < ZV_SECP256K1_INV_SQ[s]; q++) zv_k1_sc_mont_mul(&acc, acc.v, acc.v);
        int idx = ZV_SECP256K1_INV_IDX[s];
        if (idx >= 0) zv_k1_sc_mont_mul(&acc, acc.v, pw[idx].v);
    }
    *r = acc;
}

/* Montgomery-domain product and inverse of zv_k1_sc values, in the shape zv_port.cuh's
 * batched inversion takes: for x = a·R, zv_k1_sc_inv_of_mont gives a^−1·R. */
ZV_HD void zv_k1_sc_mul_mont(zv_k1_sc *r, const zv_k1_sc *a, const zv_k1_sc *b) { zv_k1_sc_mont_mul(r, a->v, b->v); }

ZV_HD void zv_k1_sc_inv_of_mont(zv_k1_sc *r, const zv_k1_sc *x) {
    zv_k1_sc plain, one;
    for (int i = 0; i < 8; i++) one.v[i] = (zv_u32)(i == 0);
    zv_k1_sc_mont_mul(&plain, x->v, one.v);  /* a */
    zv_k1_sc_inv_mont(r, &plain);            /* a^−1·R */
}

/* Batched scalar inversion over a block chunk: m[i] = s_i·R in (each thread converts its own
 * s with zv_k1_sc_mont_mul(·, s, ZV_SECP256K1_N_R2)), s_i^−1·R out — what zv_k1_sc_inv_mont gives
 * for s_i.  Every s_i in [1, n) (callers substitute 1 for an invalid signature's s). */
ZV_HD void zv_k1_sc_block_batch_inv_mont(zv_k1_sc *m, zv_k1_sc *prefix, int count, zv_k1_sc *tops, zv_k1_sc *tops_prefix) {
    zv_block_batch_invert<zv_k1_sc, zv_k1_sc_mul_mont, zv_k1_sc_inv_of_mont>(m, prefix, count, tops, tops_prefix);
}

#endif /* ZV_SECP256K1_SCALAR_CUH */
