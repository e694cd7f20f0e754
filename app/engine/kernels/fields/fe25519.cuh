/* fe25519.cuh — arithmetic in GF(p), p = 2^255 - 19, for the Ed25519 kernel (RFC 8032 §5.1).
 *
 * Semantics
 *   A field element is eight 32-bit limbs, little-endian, value = sum v[i] * 2^(32 i), and
 *   any value in [0, 2^256) stands for its residue mod p ("weakly reduced").  Every function
 *   accepts any such value and returns one; only zv_ed_fe_canonical (and what is built on it:
 *   tobytes, iszero, isnegative, equal) produces the unique representative in [0, p).
 *   Outputs may alias inputs.  Nothing here branches on secret data, but the verifier has
 *   no secrets; the functions are written for speed, not constant time.
 *
 * Bounds (each checked with ZV_CHECK, counted in verify host builds — zv_port.cuh)
 *   zv_ed_fe_fold's high part c < 2^26 and its sum never carries out of limb 7;
 *   zv_ed_fe_add's output < 2^255 + 57; zv_ed_fe_reduce512's (so zv_ed_fe_mul's and zv_ed_fe_sq's)
 *   output < 2^255 + 2^13; zv_ed_fe_sub's second subtraction of 38 never borrows;
 *   zv_ed_fe_canonical's output < p.
 *
 * Why 8 x 32-bit limbs with 64-bit accumulators (and not radix 2^25.5 or 2^51)
 *   GPUs multiply 32 x 32 bits natively: IMAD.WIDE.U32 gives the 64-bit product and adds a
 *   64-bit addend in one instruction, so a schoolbook 8 x 8 product is 64 such instructions
 *   whose addend absorbs the running column (the product plus a 32-bit carry plus a 32-bit
 *   limb never exceeds 2^64 - 1, so no third accumulator word is needed).  The reduction
 *   folds the high half with 2^256 = 38 (mod p) in eight more.  Compiled for sm_90
 *   (nvcc 13.0, counted with nvdisasm) one multiplication is 76 IMAD.WIDE + 27 IMAD.X +
 *   103 IADD3/IADD3.X, one squaring 47 + 20 + 67 plus 16 moves; the radix
 *   2^25.5 layout of ref10 needs 100 wide products plus 64-bit carry chains between them
 *   (more instructions, and two registers per 64-bit column), and 2^51 limbs need 64 x 64
 *   bit products that a GPU emulates with four 32-bit ones.  A hand-written PTX carry chain
 *   (mad.lo.cc / madc.hi.cc) measured worse (~295 integer instructions), because ptxas
 *   splits every carry-flag multiply into an IMAD and an IADD3.X.  Plain C also means the
 *   host build (g++) runs exactly the code the GPU runs.
 *
 * Index (public functions, in source order; the comment at each says more):
 *   zv_ed_fe_below_2_255_plus(h, k)             Value < 2^255 + k (k < 2^31): the form of the bounds stated
 *                                               above
 *   zv_ed_fe_below_p(h)                         Value < p = 2^255 - 19, i.e. value + 19 < 2^255
 *   zv_ed_fe_set_small(h, x)
 *   zv_ed_fe_copy(h, f)
 *   zv_ed_fe_frombytes(h, s)                    Load 32 little-endian bytes; bit 255 (the sign bit of a
 *                                               point encoding) is dropped
 *   zv_ed_fe_fold(h, t, c)                      Fold bits 255.. of (c * 2^256 + t) back with 2^255 = 19 (mod
 *                                               p)
 *   zv_ed_fe_add(h, f, g)                       h = f + g
 *   zv_ed_fe_sub(h, f, g)                       h = f - g. f - g is computed mod 2^256 with a borrow b
 *   zv_ed_fe_neg(h, f)
 *   zv_ed_fe_reduce512(h, t)                    Reduce a 512-bit product t[0..15] with 2^256 = 38 (mod p)
 *   zv_ed_fe_mul(h, f, g)                       h = f * g: the operand-scanning schoolbook product of
 *                                               mont.cuh
 *   zv_ed_fe_sq(h, f)                           h = f^2: the 28 cross products once, doubled by a shift,
 *                                               plus the 8 squares
 *   zv_ed_fe_sqn(h, f, k)                       h = f^(2^k), k >= 1 (a loop, not unrolled: keeps the GPU
 *                                               code small)
 *   zv_ed_fe_canonical(h, f)                    The unique representative in [0, p)
 *   zv_ed_fe_tobytes(s, f)
 *   zv_ed_fe_iszero(f)
 *   zv_ed_fe_isnegative(f)                      RFC 8032 §5.1.2: x is "negative" when its canonical value is
 *                                               odd
 *   zv_ed_fe_equal(f, g)
 *   zv_ed_fe_pow_2_250_1(t250, z11, z)          Shared head of the two exponentiations
 *   zv_ed_fe_invert(h, z)                       h = z^(p - 2) = z^(2^255 - 21) = 1/z (0 for z = 0)
 *   zv_ed_fe_pow22523(h, z)                     h = z^((p - 5) / 8) = z^(2^252 - 3), the exponent of the
 *                                               square-root candidate
 *   zv_ed_fe_block_batch_invert(z, prefix, count, tops, tops_prefix)
 *                                               Batched inversion over a block chunk (zv_port.cuh's
 *                                               Montgomery's trick)
 *   zv_ed_fe_cswap(f, g, bit)                   Swap f and g when bit is 1 (bit is 0 or 1)
 */
#ifndef ZV_FE25519_CUH
#define ZV_FE25519_CUH

#include "zv_port.cuh"
#include "fields/mont.cuh"

typedef struct {
    zv_u32 v[8];
} zv_ed_fe;

/* Value < 2^255 + k (k < 2^31): the form of the bounds stated above. */
ZV_HD int zv_ed_fe_below_2_255_plus(const zv_ed_fe *h, zv_u32 k) {
    if (h->v[7] != 0x80000000u) return h->v[7] < 0x80000000u;
    zv_u32 mid = 0;
    ZV_UNROLL for (int i = 1; i < 7; i++) mid |= h->v[i];
    return mid == 0 && h->v[0] < k;
}

/* Value < p = 2^255 - 19, i.e. value + 19 < 2^255. */
ZV_HD int zv_ed_fe_below_p(const zv_ed_fe *h) {
    zv_u64 c = 19;
    ZV_UNROLL for (int i = 0; i < 7; i++) c = (c + h->v[i]) >> 32;
    return ((zv_u64)h->v[7] + c) < 0x80000000u;
}

ZV_HD void zv_ed_fe_set_small(zv_ed_fe *h, zv_u32 x) {
    h->v[0] = x;
    ZV_UNROLL for (int i = 1; i < 8; i++) h->v[i] = 0;
}

ZV_HD void zv_ed_fe_copy(zv_ed_fe *h, const zv_ed_fe *f) {
    ZV_UNROLL for (int i = 0; i < 8; i++) h->v[i] = f->v[i];
}

/* Load 32 little-endian bytes; bit 255 (the sign bit of a point encoding) is dropped. */
ZV_HD void zv_ed_fe_frombytes(zv_ed_fe *h, const zv_u8 s[32]) {
    ZV_UNROLL for (int i = 0; i < 8; i++)
        h->v[i] = (zv_u32)s[4 * i] | ((zv_u32)s[4 * i + 1] << 8) | ((zv_u32)s[4 * i + 2] << 16) |
                  ((zv_u32)s[4 * i + 3] << 24);
    h->v[7] &= 0x7fffffffu;
}

/* Fold bits 255.. of (c * 2^256 + t) back with 2^255 = 19 (mod p); the sum stays below 2^256
 * for every c < 2^26, so no carry leaves the last limb.
 *
 * On input: t holds any 8 limbs; c < 2^26 (ZV_CHECK).
 * On output: h ≡ c·2^256 + t (mod p) and h < 2^256 (no carry leaves limb 7).
 */
ZV_HD void zv_ed_fe_fold(zv_ed_fe *h, zv_u32 t[8], zv_u32 c) {
    ZV_CHECK(c < (1u << 26));
    zv_u32 top = (c << 1) | (t[7] >> 31);
    t[7] &= 0x7fffffffu;
    zv_u64 acc = (zv_u64)top * 19u;
    ZV_UNROLL for (int i = 0; i < 8; i++) {
        acc += t[i];
        h->v[i] = (zv_u32)acc;
        acc >>= 32;
    }
    ZV_CHECK(acc == 0);
    ZV_CHECK(zv_ed_fe_below_2_255_plus(h, 19u * top + 1u));
}

/* h = f + g.  Output < 2^255 + 57.
 *
 * On input: f, g < 2^256.
 * On output: h ≡ f + g (mod p) and h < 2^255 + 57 (ZV_CHECK).
 */
ZV_HD void zv_ed_fe_add(zv_ed_fe *h, const zv_ed_fe *f, const zv_ed_fe *g) {
    ZV_COUNT(ZV_OP_FE25519_ADD);
    zv_u32 t[8];
    zv_u64 c = 0;
    ZV_UNROLL for (int i = 0; i < 8; i++) {
        c += (zv_u64)f->v[i] + g->v[i];
        t[i] = (zv_u32)c;
        c >>= 32;
    }
    zv_ed_fe_fold(h, t, (zv_u32)c);
    ZV_CHECK(zv_ed_fe_below_2_255_plus(h, 57u));
}

/* h = f - g.  f - g is computed mod 2^256 with a borrow b; a borrow means the value is
 * t - 2^256 = t - 38 (mod p), and t - 38 may borrow once more (only when t < 38, and then
 * the second subtraction of 38 cannot borrow).
 *
 * On input: f, g < 2^256.
 * On output: h ≡ f − g (mod p) and h < 2^256.
 */
ZV_HD void zv_ed_fe_sub(zv_ed_fe *h, const zv_ed_fe *f, const zv_ed_fe *g) {
    ZV_COUNT(ZV_OP_FE25519_SUB);
    zv_u32 t[8];
    zv_u64 b = 0;
    ZV_UNROLL for (int i = 0; i < 8; i++) {
        zv_u64 d = (zv_u64)f->v[i] - g->v[i] - b;
        t[i] = (zv_u32)d;
        b = d >> 63;
    }
    zv_u64 s = 38u * b;
    ZV_UNROLL for (int i = 0; i < 8; i++) {
        zv_u64 d = (zv_u64)t[i] - s;
        t[i] = (zv_u32)d;
        s = d >> 63;
    }
    ZV_CHECK(s == 0 || t[0] >= 38u);
    t[0] -= 38u * (zv_u32)s;
    ZV_UNROLL for (int i = 0; i < 8; i++) h->v[i] = t[i];
}

ZV_HD void zv_ed_fe_neg(zv_ed_fe *h, const zv_ed_fe *f) {
    zv_ed_fe z;
    zv_ed_fe_set_small(&z, 0);
    zv_ed_fe_sub(h, &z, f);
}

/* Reduce a 512-bit product t[0..15] with 2^256 = 38 (mod p).  Output < 2^255 + 2^13.
 *
 * On input: t < 2^512 (16 limbs).
 * On output: h ≡ t (mod p) and h < 2^255 + 2^13 (ZV_CHECK).
 */
ZV_HD void zv_ed_fe_reduce512(zv_ed_fe *h, const zv_u32 t[16]) {
    zv_u32 r[8];
    zv_u64 c = 0;
    ZV_UNROLL for (int i = 0; i < 8; i++) {
        c += (zv_u64)t[8 + i] * 38u + t[i];
        r[i] = (zv_u32)c;
        c >>= 32;
    }
    zv_ed_fe_fold(h, r, (zv_u32)c);
    ZV_CHECK(zv_ed_fe_below_2_255_plus(h, 1u << 13));
}

/* h = f * g: the operand-scanning schoolbook product of mont.cuh (zv_mp_mul_wide; each step
 * is one 32x32+64 multiply-add), then the fold.
 *
 * On input: f, g < 2^256.
 * On output: h ≡ f·g (mod p) and h < 2^255 + 2^13.
 */
ZV_HD void zv_ed_fe_mul(zv_ed_fe *h, const zv_ed_fe *f, const zv_ed_fe *g) {
    ZV_COUNT(ZV_OP_FE25519_MUL);
    zv_u32 t[16];
    zv_mp_mul_wide<8>(t, f->v, g->v);
    zv_ed_fe_reduce512(h, t);
}

/* h = f^2: the 28 cross products once, doubled by a shift, plus the 8 squares.  The squares'
 * halves are added in two separate steps, not as mont.cuh's zv_mp_sqr_wide does (one
 * multiply-add per square): same value and instruction count, but the shared order needs
 * four registers more here (28 → 32, nvcc 13.0, sm_90, in a kernel of its own).
 *
 * On input: f < 2^256.
 * On output: h ≡ f² (mod p) and h < 2^255 + 2^13.
 */
ZV_HD void zv_ed_fe_sq(zv_ed_fe *h, const zv_ed_fe *f) {
    ZV_COUNT(ZV_OP_FE25519_SQ);
    zv_u32 t[16];
    ZV_UNROLL for (int i = 0; i < 16; i++) t[i] = 0;
    ZV_UNROLL for (int i = 0; i < 7; i++) {
        zv_u64 c = 0;
        ZV_UNROLL for (int j = i + 1; j < 8; j++) {
            c += (zv_u64)f->v[i] * f->v[j] + t[i + j];
            t[i + j] = (zv_u32)c;
            c >>= 32;
        }
        t[i + 8] = (zv_u32)c;
    }
    t[15] = t[14] >> 31;
    ZV_UNROLL for (int i = 14; i > 0; i--) t[i] = (t[i] << 1) | (t[i - 1] >> 31);
    t[0] <<= 1;
    zv_u64 c = 0;
    ZV_UNROLL for (int i = 0; i < 8; i++) {
        zv_u64 sq = (zv_u64)f->v[i] * f->v[i];
        c += (zv_u64)t[2 * i] + (zv_u32)sq;
        t[2 * i] = (zv_u32)c;
        c >>= 32;
        c += (zv_u64)t[2 * i + 1] + (sq >> 32);
        t[2 * i + 1] = (zv_u32)c;
        c >>= 32;
    }
    zv_ed_fe_reduce512(h, t);
}

/* h = f^(2^k), k >= 1 (a loop, not unrolled: keeps the GPU code small). */
ZV_HD void zv_ed_fe_sqn(zv_ed_fe *h, const zv_ed_fe *f, int k) {
    zv_ed_fe_sq(h, f);
    for (int i = 1; i < k; i++) zv_ed_fe_sq(h, h);
}

/* The unique representative in [0, p).
 *
 * On input: f < 2^256.
 * On output: h < p, the same residue (ZV_CHECK).
 */
ZV_HD void zv_ed_fe_canonical(zv_ed_fe *h, const zv_ed_fe *f) {
    zv_u32 t[8], u[8];
    ZV_UNROLL for (int i = 0; i < 8; i++) t[i] = f->v[i];
    /* bit 255 folded once: t < 2^255 + 19 < 2p */
    zv_u64 c = (zv_u64)(t[7] >> 31) * 19u;
    t[7] &= 0x7fffffffu;
    ZV_UNROLL for (int i = 0; i < 8; i++) {
        c += t[i];
        t[i] = (zv_u32)c;
        c >>= 32;
    }
    /* t >= p exactly when t + 19 reaches 2^255; then t - p = (t + 19) - 2^255 */
    c = 19;
    ZV_UNROLL for (int i = 0; i < 8; i++) {
        c += t[i];
        u[i] = (zv_u32)c;
        c >>= 32;
    }
    zv_u32 m = 0u - (u[7] >> 31);
    u[7] &= 0x7fffffffu;
    ZV_UNROLL for (int i = 0; i < 8; i++) h->v[i] = (u[i] & m) | (t[i] & ~m);
    ZV_CHECK(zv_ed_fe_below_p(h));
}

ZV_HD void zv_ed_fe_tobytes(zv_u8 s[32], const zv_ed_fe *f) {
    zv_ed_fe c;
    zv_ed_fe_canonical(&c, f);
    ZV_UNROLL for (int i = 0; i < 8; i++) {
        s[4 * i] = (zv_u8)c.v[i];
        s[4 * i + 1] = (zv_u8)(c.v[i] >> 8);
        s[4 * i + 2] = (zv_u8)(c.v[i] >> 16);
        s[4 * i + 3] = (zv_u8)(c.v[i] >> 24);
    }
}

ZV_HD int zv_ed_fe_iszero(const zv_ed_fe *f) {
    zv_ed_fe c;
    zv_ed_fe_canonical(&c, f);
    zv_u32 acc = 0;
    ZV_UNROLL for (int i = 0; i < 8; i++) acc |= c.v[i];
    return acc == 0;
}

/* RFC 8032 §5.1.2: x is "negative" when its canonical value is odd. */
ZV_HD int zv_ed_fe_isnegative(const zv_ed_fe *f) {
    zv_ed_fe c;
    zv_ed_fe_canonical(&c, f);
    return (int)(c.v[0] & 1u);
}

ZV_HD int zv_ed_fe_equal(const zv_ed_fe *f, const zv_ed_fe *g) {
    zv_ed_fe d;
    zv_ed_fe_sub(&d, f, g);
    return zv_ed_fe_iszero(&d);
}

/* Shared head of the two exponentiations: t250 = z^(2^250 - 1) and z11 = z^11
 * (the usual chain through z^(2^5-1), z^(2^10-1), ..., z^(2^200-1)). */
ZV_HD void zv_ed_fe_pow_2_250_1(zv_ed_fe *t250, zv_ed_fe *z11, const zv_ed_fe *z) {
    zv_ed_fe z2, z9, t, a5, a10, a20, a50, a100;
    zv_ed_fe_sq(&z2, z);            /* z^2 */
    zv_ed_fe_sqn(&t, &z2, 2);       /* z^8 */
    zv_ed_fe_mul(&z9, &t, z);       /* z^9 */
    zv_ed_fe_mul(z11, &z9, &z2);    /* z^11 */
    zv_ed_fe_sq(&t, z11);           /* z^22 */
    zv_ed_fe_mul(&a5, &t, &z9);     /* z^(2^5 - 1) */
    zv_ed_fe_sqn(&t, &a5, 5);
    zv_ed_fe_mul(&a10, &t, &a5);    /* 2^10 - 1 */
    zv_ed_fe_sqn(&t, &a10, 10);
    zv_ed_fe_mul(&a20, &t, &a10);   /* 2^20 - 1 */
    zv_ed_fe_sqn(&t, &a20, 20);
    zv_ed_fe_mul(&t, &t, &a20);     /* 2^40 - 1 */
    zv_ed_fe_sqn(&t, &t, 10);
    zv_ed_fe_mul(&a50, &t, &a10);   /* 2^50 - 1 */
    zv_ed_fe_sqn(&t, &a50, 50);
    zv_ed_fe_mul(&a100, &t, &a50);  /* 2^100 - 1 */
    zv_ed_fe_sqn(&t, &a100, 100);
    zv_ed_fe_mul(&t, &t, &a100);    /* 2^200 - 1 */
    zv_ed_fe_sqn(&t, &t, 50);
    zv_ed_fe_mul(t250, &t, &a50);   /* 2^250 - 1 */
}

/* h = z^(p - 2) = z^(2^255 - 21) = 1/z (0 for z = 0). */
ZV_HD void zv_ed_fe_invert(zv_ed_fe *h, const zv_ed_fe *z) {
    zv_ed_fe t, z11;
    zv_ed_fe_pow_2_250_1(&t, &z11, z);
    zv_ed_fe_sqn(&t, &t, 5);        /* 2^255 - 32 */
    zv_ed_fe_mul(h, &t, &z11);      /* 2^255 - 21 */
}

/* h = z^((p - 5) / 8) = z^(2^252 - 3), the exponent of the square-root candidate. */
ZV_HD void zv_ed_fe_pow22523(zv_ed_fe *h, const zv_ed_fe *z) {
    zv_ed_fe t, z11;
    zv_ed_fe_pow_2_250_1(&t, &z11, z);
    zv_ed_fe_sqn(&t, &t, 2);        /* 2^252 - 4 */
    zv_ed_fe_mul(h, &t, z);         /* 2^252 - 3 */
}

/* Batched inversion over a block chunk (zv_port.cuh's Montgomery's trick): the Ed25519
 * kernel inverts every chunk item's Z at once, one inversion per block instead of one per
 * warp.  Values must be nonzero mod p. */
ZV_HD void zv_ed_fe_block_batch_invert(zv_ed_fe *z, zv_ed_fe *prefix, int count, zv_ed_fe *tops, zv_ed_fe *tops_prefix) {
    zv_block_batch_invert<zv_ed_fe, zv_ed_fe_mul, zv_ed_fe_invert>(z, prefix, count, tops, tops_prefix);
}

/* Swap f and g when bit is 1 (bit is 0 or 1). */
ZV_HD void zv_ed_fe_cswap(zv_ed_fe *f, zv_ed_fe *g, zv_u32 bit) {
    zv_u32 m = 0u - bit;
    ZV_UNROLL for (int i = 0; i < 8; i++) {
        zv_u32 x = (f->v[i] ^ g->v[i]) & m;
        f->v[i] ^= x;
        g->v[i] ^= x;
    }
}

#endif /* ZV_FE25519_CUH */
