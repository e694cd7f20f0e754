/* recode.cuh — the regular signed-window recoding every curve kernel reads its scalar digits
 * with (secp256k1's double-base multiplication, curves/secp256k1_ecmult.cuh, for ECDSA and
 * BIP-340; P-256's, schemes/p256.cuh).
 *
 * An odd k = Σ d_i·2^(w·i) with every d_i odd and |d_i| < 2^w:
 * d_i = 2·bits(k, w·i + 1, w) + 1 − 2^w, the top digit without the − 2^w.  Unlike wNAF,
 * whose zero digits fall at different places for each thread, a regular recoding adds at
 * the same positions in every thread, so a warp never diverges in the main loop.  Digits are
 * read straight from the bits, so no digit array is stored.  An even k runs as k + 1 and the
 * caller subtracts the point once at the end (zv_recode_make_odd says when);
 * scripts/gen_p256_tables checks the recoding.
 *
 * Index (public functions, in source order; the comment at each says more):
 *   zv_recode_bits(k, start, w)      w bits of the L-limb value k from bit `start` (bits above the L limbs
 *                                    read as zero)
 *   zv_recode_digit(k, i, w, count)  Digit i (of `count`) of the regular signed recoding of odd k with
 *                                    window w
 *   zv_recode_make_odd(k)            Make k odd: returns 1
 */
#ifndef ZV_RECODE_CUH
#define ZV_RECODE_CUH

#include "zv_port.cuh"

/* w bits of the L-limb value k from bit `start` (bits above the L limbs read as zero). */
template <int L> ZV_HD zv_u32 zv_recode_bits(const zv_u32 k[L], int start, int w) {
    int limb = start >> 5, off = start & 31;
    zv_u32 v = limb < L ? k[limb] >> off : 0;
    if (off + w > 32 && limb + 1 < L) v |= k[limb + 1] << (32 - off);
    return v & ((1u << w) - 1);
}

/* Digit i (of `count`) of the regular signed recoding of odd k with window w. */
template <int L> ZV_HD int zv_recode_digit(const zv_u32 k[L], int i, int w, int count) {
    int t = 2 * (int)zv_recode_bits<L>(k, w * i + 1, w) + 1;
    return i == count - 1 ? t : t - (1 << w);
}

/* Make k odd: returns 1 (and adds 1) when k was even.  k + 1 must fit the L limbs (it does
 * for a k < n with n odd, and for secp256k1's half-size scalars below 2^129). */
template <int L> ZV_HD int zv_recode_make_odd(zv_u32 k[L]) {
    int even = !(k[0] & 1);
    zv_u64 c = (zv_u64)k[0] + (zv_u32)even;
    k[0] = (zv_u32)c; c >>= 32;
    for (int i = 1; i < L; i++) { c += k[i]; k[i] = (zv_u32)c; c >>= 32; }
    ZV_CHECK(c == 0);
    return even;
}

#endif /* ZV_RECODE_CUH */
