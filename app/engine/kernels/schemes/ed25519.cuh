/* ed25519.cuh — Ed25519 signature verification, one signature per thread.
 *
 * Semantics (exactly libsodium's crypto_sign_verify_detached, releases up to 1.0.22;
 * RFC 8032 §5.1.7, cofactorless).  pk is 32 bytes (the encoding of A), sig is 64 bytes
 * R ‖ S, M any length.  The verdict is 1 (valid) only when all of these hold, checked in
 * this order:
 *   1. pk_len == 32 and sig_len == 64 (anything else is 0, never a read past the item);
 *   2. S, read little-endian, is < L (no reduction of S; S = L and S >= 2^252 + ... fail);
 *   3. R, sign bit ignored, is not one of the seven small-order encodings (y of a point of
 *      order 1, 2, 4 or 8, canonical or y + p): ed25519_tables.cuh, ZV_ED25519_SMALL_ORDER;
 *      R itself is never decoded, so an R off the curve or with y >= p simply fails step 6;
 *   4. A is canonical (low 255 bits < p, sign bit ignored) and not small-order (same list);
 *   5. A decodes: some x has -x^2 + y^2 = 1 + d x^2 y^2 (x = 0 with the sign bit set is
 *      accepted, as libsodium does; only small-order points have x = 0);
 *   6. k = SHA-512(R ‖ A ‖ M) mod L (the bytes of R and A as given) and the RFC 8032
 *      encoding of [S]B - [k]A equals R byte for byte (so a non-canonical R never passes).
 * No multiplication by the cofactor: A may have a torsion component, and then the
 * signature passes exactly when [k] kills it, as in libsodium.  Batch options (prehashed,
 * allow_high_s) and the context do not apply to Ed25519 and are ignored.
 *
 * Cost per signature: ~1,500 field squarings and ~1,650 multiplications (decoding A: one
 * (p-5)/8 power; table [1..8]A: 7 additions; 253 doublings; 64 additions of A multiples
 * and 43 of B multiples; one inversion to encode the result); field.h-style details in
 * fe25519.cuh, the group and the double-scalar multiplication in ge25519.cuh.
 *
 * Index (public functions, in source order; the comment at each says more):
 *   zv_ed_sha512_ram(digest, R, A, M, mlen)     digest = SHA-512(R ‖ A ‖ M) (FIPS 180-4 §5.1.2 padding, §6.4
 *                                               compression from sha2.cuh)
 *   zv_ed_ed25519_verify_start(check, pk, pk_len, sig, sig_len, msg, msg_len)
 *                                               Steps 1-6 up to the final encoding
 *   zv_ed_ed25519_verify_finish(X, Y, zi, R)    Step 6's comparison: the encoding of (X : Y : Z), given zi =
 *                                               1/Z, equals R byte for byte
 *   zv_ed25519_verify(pk, pk_len, sig, sig_len, msg, msg_len)
 *                                               The verdict for one item on its own: 1 valid, 0 invalid (see
 *                                               the semantics above)
 */
#ifndef ZV_ED25519_CUH
#define ZV_ED25519_CUH

#include "zv_port.cuh"
#include "hashes/sha2.cuh"
#include "fields/fe25519.cuh"
#include "fields/sc25519.cuh"
#include "curves/ge25519.cuh"

#define ZV_ED25519_PK_BYTES 32
#define ZV_ED25519_SIG_BYTES 64

/* digest = SHA-512(R ‖ A ‖ M) (FIPS 180-4 §5.1.2 padding, §6.4 compression from sha2.cuh).
 * Rather than zv_sha512_update/final, whose inlined copies of the 80-round compression
 * (one per call site: eight here) made the GPU code large and spilled registers, each
 * 128-byte block is assembled byte by byte from R, A, M and the padding, and compressed at
 * a single call site. */
ZV_HD void zv_ed_sha512_ram(zv_u8 digest[64], const zv_u8 *R, const zv_u8 *A, const zv_u8 *M, zv_u64 mlen) {
    zv_u64 h[8];
    ZV_UNROLL for (int i = 0; i < 8; i++) h[i] = ZV_SHA512_IV[i];
    zv_u64 total = 64 + mlen;                 /* bytes hashed */
    zv_u64 blocks = (total + 16 + 1 + 127) / 128; /* + 0x80 and the 128-bit length */
    zv_u64 bits = total << 3;                 /* the length's high 64 bits are zero here */
    for (zv_u64 b = 0; b < blocks; b++) {
        zv_u8 blk[128];
        zv_u64 base = b * 128;
        for (int j = 0; j < 128; j++) {
            zv_u64 pos = base + (zv_u64)j;
            zv_u8 v;
            if (pos < 32) v = R[pos];
            else if (pos < 64) v = A[pos - 32];
            else if (pos < total) v = M[pos - 64];
            else if (pos == total) v = 0x80;
            else if (b + 1 == blocks && j >= 120) v = (zv_u8)(bits >> (8 * (127 - j)));
            else v = 0;
            blk[j] = v;
        }
        zv_sha512_block(h, blk);
    }
    ZV_UNROLL for (int i = 0; i < 8; i++) zv_store_be64(digest + 8 * i, h[i]);
}

/* Steps 1-6 up to the final encoding: returns 0 when the item is already invalid, else 1
 * with check = [S]B - [k]A, whose encoding (zv_ed_ed25519_verify_finish) decides the verdict.
 * Split there so a block can share the one inversion the encoding needs
 * (zv_ed_fe_block_batch_invert). */
ZV_HD int zv_ed_ed25519_verify_start(zv_ed_ge_p2 *check, const zv_u8 *pk, zv_u32 pk_len, const zv_u8 *sig,
                                  zv_u32 sig_len, const zv_u8 *msg, zv_u64 msg_len) {
    if (pk_len != ZV_ED25519_PK_BYTES || sig_len != ZV_ED25519_SIG_BYTES) return 0;
    const zv_u8 *R = sig, *S = sig + 32;
    if (!zv_ed_sc_is_canonical(S)) return 0;
    if (zv_ed_ge_has_small_order(R)) return 0;
    if (!zv_ed_ge_is_canonical(pk) || zv_ed_ge_has_small_order(pk)) return 0;

    /* The hash comes before decoding A (libsodium decodes first; the verdict is the same,
     * since every failure is 0) so that no point is live across SHA-512's registers. */
    zv_u8 digest[64];
    zv_ed_sha512_ram(digest, R, pk, msg, msg_len);
    zv_u32 k[8], s[8];
    zv_ed_sc_reduce512(k, digest);
    ZV_UNROLL for (int i = 0; i < 8; i++) s[i] = zv_ed_load_le32(S + 4 * i);
    zv_ed_ge_p3 neg_a;
    if (!zv_ed_ge_frombytes_negate(&neg_a, pk)) return 0;

    zv_ed_ge_double_scalarmult_vartime(check, k, &neg_a, s);
    return 1;
}

/* Step 6's comparison: the encoding of (X : Y : Z), given zi = 1/Z, equals R byte for byte. */
ZV_HD int zv_ed_ed25519_verify_finish(const zv_ed_fe *X, const zv_ed_fe *Y, const zv_ed_fe *zi, const zv_u8 *R) {
    zv_u8 enc[32];
    zv_ed_ge_tobytes_zinv(enc, X, Y, zi);
    zv_u32 diff = 0;
    ZV_UNROLL for (int i = 0; i < 32; i++) diff |= (zv_u32)(enc[i] ^ R[i]);
    return diff == 0;
}

/* The verdict for one item on its own: 1 valid, 0 invalid (see the semantics above). */
ZV_HD int zv_ed25519_verify(const zv_u8 *pk, zv_u32 pk_len, const zv_u8 *sig, zv_u32 sig_len,
                            const zv_u8 *msg, zv_u64 msg_len) {
    zv_ed_ge_p2 check;
    if (!zv_ed_ed25519_verify_start(&check, pk, pk_len, sig, sig_len, msg, msg_len)) return 0;
    zv_ed_fe zi;
    zv_ed_fe_invert(&zi, &check.Z);
    return zv_ed_ed25519_verify_finish(&check.X, &check.Y, &zi, sig);
}

#endif /* ZV_ED25519_CUH */
