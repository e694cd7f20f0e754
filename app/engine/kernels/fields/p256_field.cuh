/* p256_field.cuh — arithmetic in GF(p), p = 2^256 − 2^224 + 2^192 + 2^96 − 1, the field of
 * NIST P-256 (FIPS 186-5 / SP 800-186 §3.2.1.3).
 *
 * Representation: zv_p256_fe holds eight 32-bit limbs, least significant first, of x·R mod p
 * (Montgomery form, R = 2^256), always fully reduced (< p), so equality is limb equality.
 * Every operation is mont.cuh's template over zv_p256_fe_modulus, whose contracts and
 * ZV_CHECK bounds hold here (p's top bit is set: sums and CIOS rows may carry one bit above
 * the eight limbs, which mont.cuh allows for).  −p^−1 mod 2^32 is 1 for this p, so each
 * CIOS reduction row's multiplier is the low limb itself.
 *
 * Why Montgomery and not the Solinas reduction p's shape allows (FIPS 186-5's "fast
 * reduction", nine signed 256-bit terms): one template serves every field of the kernels
 * (docs/kernels.md), and the CIOS row is the same 32 × 32 → 64 multiply-accumulate as the
 * product itself; the Solinas form trades those 64 multiply-adds for ~40 additions with
 * signed carries.  No side-by-side measurement was made for this unit (see the ptxas report
 * and gpu_model for its cost).
 *
 * Inversion (Fermat, a^(p−2)) and the square root (a^((p+1)/4), p ≡ 3 mod 4) run generated
 * sliding-window schedules (tables/p256_tables.cuh, scripts/gen_p256_tables) by
 * zv_mont_pow_schedule: branch-free and the same for every thread of a warp.  A verify needs
 * one inversion (normalising the public key's table) and, for a 33-byte key, one root.
 *
 * Index (public functions, in source order; the comment at each says more):
 *   zv_p256_fe_copy(r, a)
 *   zv_p256_fe_add(r, a, b)
 *   zv_p256_fe_sub(r, a, b)
 *   zv_p256_fe_neg(r, a)
 *   zv_p256_fe_mul(r, a, b)
 *   zv_p256_fe_sqr(r, a)
 *   zv_p256_fe_equal(a, b)
 *   zv_p256_fe_is_zero(a)
 *   zv_p256_fe_from_int(r, x)  The Montgomery form of an integer x < 2^256 given as limbs (x reduced mod p
 *                              on the way)
 *   zv_p256_fe_set_b32(r, b)   32 big-endian bytes (SEC 1 §2.3.6 field-element-to-integer)
 *   zv_p256_fe_is_odd(a)       The parity of the element's integer value (SEC 1's ỹ bit): out of Montgomery
 *                              form first
 *   zv_p256_fe_inv(r, a)       a^−1 (Montgomery form in and out); 0 for a = 0
 *   zv_p256_fe_sqrt(r, a)      A square root of a when a is a square: returns 1 with r·r = a, else 0 (r then
 *                              unspecified)
 */
#ifndef ZV_P256_FIELD_CUH
#define ZV_P256_FIELD_CUH

#include "zv_port.cuh"
#include "fields/mont.cuh"
#include "tables/p256_tables.cuh"

typedef struct { zv_u32 v[8]; } zv_p256_fe;

/* p for the templates of mont.cuh (N = 8 limbs). */
struct zv_p256_fe_modulus {
    static constexpr int N = 8;
    static constexpr zv_u32 N0 = ZV_P256_P_N0INV;  /* −p^−1 mod 2^32 */
    static ZV_HD_MEMBER void modulus(zv_u32 m[8]) {
        for (int i = 0; i < 8; i++) m[i] = ZV_P256_P[i];
    }
    static ZV_HD_MEMBER const zv_u32 *r2() { return ZV_P256_P_R2; }
};

typedef zv_p256_fe_modulus zv_p256_fm;

ZV_HD void zv_p256_fe_copy(zv_p256_fe *r, const zv_u32 a[8]) {
    for (int i = 0; i < 8; i++) r->v[i] = a[i];
}

ZV_HD void zv_p256_fe_add(zv_p256_fe *r, const zv_p256_fe *a, const zv_p256_fe *b) {
    ZV_COUNT(ZV_OP_P256_FE_ADD);
    zv_mont_add<zv_p256_fm>(r->v, a->v, b->v);
}
ZV_HD void zv_p256_fe_sub(zv_p256_fe *r, const zv_p256_fe *a, const zv_p256_fe *b) {
    ZV_COUNT(ZV_OP_P256_FE_SUB);
    zv_mont_sub<zv_p256_fm>(r->v, a->v, b->v);
}
ZV_HD void zv_p256_fe_neg(zv_p256_fe *r, const zv_p256_fe *a) {
    ZV_COUNT(ZV_OP_P256_FE_SUB);
    zv_mont_neg<zv_p256_fm>(r->v, a->v);
}
ZV_HD void zv_p256_fe_mul(zv_p256_fe *r, const zv_p256_fe *a, const zv_p256_fe *b) {
    ZV_COUNT(ZV_OP_P256_FE_MUL);
    zv_mont_mul<zv_p256_fm>(r->v, a->v, b->v);
}
ZV_HD void zv_p256_fe_sqr(zv_p256_fe *r, const zv_p256_fe *a) {
    ZV_COUNT(ZV_OP_P256_FE_SQR);
    zv_mont_sqr<zv_p256_fm>(r->v, a->v);
}

ZV_HD int zv_p256_fe_equal(const zv_p256_fe *a, const zv_p256_fe *b) { return zv_mp_eq<8>(a->v, b->v); }
ZV_HD int zv_p256_fe_is_zero(const zv_p256_fe *a) { return zv_mp_is_zero<8>(a->v); }

/* The Montgomery form of an integer x < 2^256 given as limbs (x reduced mod p on the way). */
ZV_HD void zv_p256_fe_from_int(zv_p256_fe *r, const zv_u32 x[8]) { zv_mont_to<zv_p256_fm>(r->v, x); }

/* 32 big-endian bytes (SEC 1 §2.3.6 field-element-to-integer): returns 0, leaving r unset,
 * when the value is ≥ p (not a field element), else 1 with r its Montgomery form. */
ZV_HD int zv_p256_fe_set_b32(zv_p256_fe *r, const zv_u8 *b) {
    zv_u32 x[8];
    for (int i = 0; i < 8; i++) x[i] = zv_load_be32(b + 4 * (7 - i));
    if (!zv_mont_lt_m<zv_p256_fm>(x)) return 0;
    zv_p256_fe_from_int(r, x);
    return 1;
}

/* The parity of the element's integer value (SEC 1's ỹ bit): out of Montgomery form first. */
ZV_HD int zv_p256_fe_is_odd(const zv_p256_fe *a) {
    zv_u32 x[8];
    zv_mont_from<zv_p256_fm>(x, a->v);
    return (int)(x[0] & 1);
}

/* a^−1 (Montgomery form in and out); 0 for a = 0. */
ZV_NOINLINE void zv_p256_fe_inv(zv_p256_fe *r, const zv_p256_fe *a) {
    zv_mont_pow_schedule<zv_p256_fm, ZV_P256_FE_INV_ODD_POWERS>(r->v, a->v, ZV_P256_FE_INV_SQ, ZV_P256_FE_INV_IDX,
                                                               ZV_P256_FE_INV_STEPS);
}

/* A square root of a when a is a square: returns 1 with r·r = a, else 0 (r then unspecified). */
ZV_NOINLINE int zv_p256_fe_sqrt(zv_p256_fe *r, const zv_p256_fe *a) {
    zv_mont_pow_schedule<zv_p256_fm, ZV_P256_FE_SQRT_ODD_POWERS>(r->v, a->v, ZV_P256_FE_SQRT_SQ, ZV_P256_FE_SQRT_IDX,
                                                                ZV_P256_FE_SQRT_STEPS);
    zv_p256_fe check;
    zv_p256_fe_sqr(&check, r);
    return zv_p256_fe_equal(&check, a);
}

#endif /* ZV_P256_FIELD_CUH */
