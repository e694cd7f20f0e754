/* sc25519.cuh — scalars modulo L = 2^252 + 27742317777372353535851937790883648493,
 * the order of the Ed25519 base point (RFC 8032 §5.1).
 *
 * Semantics
 *   A scalar is eight 32-bit limbs, little-endian.  zv_ed_sc_is_canonical says whether 32
 *   little-endian bytes encode an integer < L (RFC 8032 §5.1.7 step 1, libsodium's
 *   sc25519_is_canonical).  zv_ed_sc_reduce512 reduces a 64-byte little-endian integer (a
 *   SHA-512 digest) to its residue in [0, L).  zv_ed_sc_signed_window recodes a scalar < 2^253
 *   into m signed digits d[j] in [-2^(w-1), 2^(w-1)] with scalar = sum d[j] 2^(w j).
 *
 * Index (public functions, in source order; the comment at each says more):
 *   zv_ed_load_le32(p)
 *   zv_ed_sc_is_canonical(s)            1 when the 32 little-endian bytes s encode an integer < L
 *   zv_ed_sc_reduce512(r, x_bytes)      r = x mod L for a 512-bit x given as 64 little-endian bytes
 *   zv_ed_sc_signed_window(d, s, w, m)  Signed fixed-window recoding: m digits of width w (2 <= w <= 8)
 */
#ifndef ZV_SC25519_CUH
#define ZV_SC25519_CUH

#include "fields/fe25519.cuh"
#include "tables/ed25519_tables.cuh"


ZV_HD zv_u32 zv_ed_load_le32(const zv_u8 *p) {
    return (zv_u32)p[0] | ((zv_u32)p[1] << 8) | ((zv_u32)p[2] << 16) | ((zv_u32)p[3] << 24);
}

/* 1 when the 32 little-endian bytes s encode an integer < L. */
ZV_HD int zv_ed_sc_is_canonical(const zv_u8 s[32]) {
    zv_u64 b = 0;
    ZV_UNROLL for (int i = 0; i < 8; i++) {
        zv_u64 d = (zv_u64)zv_ed_load_le32(s + 4 * i) - ZV_ED25519_L[i] - b;
        b = d >> 63;
    }
    return (int)b; /* s - L borrowed: s < L */
}

/* r = x mod L for a 512-bit x given as 64 little-endian bytes: Barrett reduction with
 * base 2^32, k = 8 (HAC algorithm 14.42); two conditional subtractions finish it. */
ZV_HD void zv_ed_sc_reduce512(zv_u32 r[8], const zv_u8 x_bytes[64]) {
    zv_u32 x[16], q2[18], r2[9], rr[9];
    ZV_UNROLL for (int i = 0; i < 16; i++) x[i] = zv_ed_load_le32(x_bytes + 4 * i);
    /* q2 = floor(x / 2^224) * mu; only its words 9..17 are used */
    ZV_UNROLL for (int i = 0; i < 18; i++) q2[i] = 0;
    ZV_UNROLL for (int i = 0; i < 9; i++) {
        zv_u64 c = 0;
        ZV_UNROLL for (int j = 0; j < 9; j++) {
            c += (zv_u64)x[7 + i] * ZV_ED25519_MU[j] + q2[i + j];
            q2[i + j] = (zv_u32)c;
            c >>= 32;
        }
        q2[i + 9] = (zv_u32)c;
    }
    /* r2 = (q3 * L) mod 2^288, q3 = q2 / 2^288 */
    ZV_UNROLL for (int i = 0; i < 9; i++) r2[i] = 0;
    ZV_UNROLL for (int i = 0; i < 9; i++) {
        zv_u64 c = 0;
        ZV_UNROLL for (int j = 0; j + i < 9; j++) {
            c += (zv_u64)q2[9 + i] * (j < 8 ? ZV_ED25519_L[j] : 0u) + r2[i + j];
            r2[i + j] = (zv_u32)c;
            c >>= 32;
        }
    }
    /* rr = (x mod 2^288) - r2 mod 2^288, which is x - q3 L < 3L */
    zv_u64 b = 0;
    ZV_UNROLL for (int i = 0; i < 9; i++) {
        zv_u64 d = (zv_u64)x[i] - r2[i] - b;
        rr[i] = (zv_u32)d;
        b = d >> 63;
    }
    for (int pass = 0; pass < 2; pass++) {
        zv_u32 t[9];
        b = 0;
        ZV_UNROLL for (int i = 0; i < 9; i++) {
            zv_u64 d = (zv_u64)rr[i] - (i < 8 ? ZV_ED25519_L[i] : 0u) - b;
            t[i] = (zv_u32)d;
            b = d >> 63;
        }
        zv_u32 keep = 0u - (zv_u32)b; /* borrow: rr < L, keep it */
        ZV_UNROLL for (int i = 0; i < 9; i++) rr[i] = (rr[i] & keep) | (t[i] & ~keep);
    }
    ZV_UNROLL for (int i = 0; i < 8; i++) r[i] = rr[i];
}

/* Signed fixed-window recoding: m digits of width w (2 <= w <= 8).  The scalar must be
 * < 2^(w m - 1) so that the last window absorbs the final carry (true for s < 2^253 with
 * m = ceil(253 / w)). */
ZV_HD void zv_ed_sc_signed_window(signed char *d, const zv_u32 s[8], int w, int m) {
    zv_u32 carry = 0;
    ZV_UNROLL for (int j = 0; j < m; j++) {
        int pos = j * w, wi = pos >> 5, sh = pos & 31;
        zv_u32 v = wi < 8 ? s[wi] >> sh : 0u;
        if (sh + w > 32 && wi + 1 < 8) v |= s[wi + 1] << (32 - sh);
        v = (v & ((1u << w) - 1u)) + carry;
        carry = (v + (1u << (w - 1))) >> w;
        d[j] = (signed char)((int)v - (int)(carry << w));
    }
}

#endif /* ZV_SC25519_CUH */
