/* ecdsa.cuh — the steps of ECDSA verification (SEC 1 v2 §4.1.4, FIPS 186-5 §6.4.2) that do
 * not depend on the curve, for the secp256k1 and P-256 kernels (secp256k1.cuh, p256.cuh).
 *
 * A curve's kernel supplies its scalar modulus as mont.cuh traits M (N = 8 limbs, the group
 * order n) and its own field, group law and x(R) comparison; what is here:
 *   zv_ecdsa_digest     the message digest: SHA-256(message), or under the batch option
 *                       prehashed the 32-byte message itself (any other length: invalid);
 *   zv_ecdsa_rs_parse   r ‖ s (64 bytes big-endian, IEEE P1363 / libsecp256k1's compact
 *                       form) with the range check r, s ∈ [1, n − 1] (§4.1.4 step 1);
 *   zv_ecdsa_is_high    s > ⌊n/2⌋ (the low-S rule's test, given ⌊n/2⌋);
 *   zv_ecdsa_u1_u2      e = digest mod n (§4.1.4 step 5: n has 256 bits on both curves, so
 *                       the digest is used whole), u1 = e·w and u2 = r·w for the Montgomery
 *                       inverse w = s^−1·R of a block's batched inversion;
 *   zv_ecdsa_verify_chunks  an entry point's body: chunks of a block's items, their s
 *                       inverted together, each item finished with its w.
 *
 * Index (public functions, in source order; the comment at each says more):
 *   zv_ecdsa_digest(digest, msg, msg_len, prehashed)
 *                                               The 32-byte digest of an item
 *   zv_ecdsa_load_b32(x, b)                     32 big-endian bytes as 8 limbs
 *   zv_ecdsa_rs_parse(r, s, sig)                r and s of a 64-byte r ‖ s
 *   zv_ecdsa_is_high(s, half)                   s > half (half = ⌊n/2⌋): "high S"
 *   zv_ecdsa_u1_u2(u1, u2, digest, r, w)
 *   zv_ecdsa_verify_chunks(pks, pk_len, sigs, sig_len, msgs, offsets, options, n, verdicts, ws, prefix,
 *                                               tops, tops_prefix)
 */
#ifndef ZV_ECDSA_CUH
#define ZV_ECDSA_CUH

#include "zv_port.cuh"
#include "fields/mont.cuh"
#include "hashes/sha2.cuh"

/* The 32-byte digest of an item: returns 0 when the item is invalid as such (prehashed and
 * not exactly 32 bytes). */
ZV_HD int zv_ecdsa_digest(zv_u8 digest[32], const zv_u8 *msg, zv_u64 msg_len, int prehashed) {
    if (prehashed) {
        if (msg_len != 32) return 0;
        zv_memcpy(digest, msg, 32);
    } else {
        zv_sha256(msg, msg_len, digest);
    }
    return 1;
}

/* 32 big-endian bytes as 8 limbs. */
ZV_HD void zv_ecdsa_load_b32(zv_u32 x[8], const zv_u8 *b) {
    for (int i = 0; i < 8; i++) x[i] = zv_load_be32(b + 4 * (7 - i));
}

/* r and s of a 64-byte r ‖ s: returns 1 when both are in [1, n − 1], else 0 (r, s then hold
 * the values as read). */
template <class M> ZV_HD int zv_ecdsa_rs_parse(zv_u32 r[8], zv_u32 s[8], const zv_u8 *sig) {
    zv_ecdsa_load_b32(r, sig);
    zv_ecdsa_load_b32(s, sig + 32);
    return zv_mont_lt_m<M>(r) && zv_mont_lt_m<M>(s) && !zv_mp_is_zero<8>(r) && !zv_mp_is_zero<8>(s);
}

/* s > half (half = ⌊n/2⌋): "high S". */
ZV_HD int zv_ecdsa_is_high(const zv_u32 s[8], const zv_u32 half[8]) { return zv_mp_lt<8>(half, s); }

/* u1 = (digest mod n)·s^−1 and u2 = r·s^−1 mod n, from w = s^−1·R mod n (Montgomery form,
 * < n) and r < n: each one Montgomery product, which removes the R (counted as the curve's
 * scalar product OP, zv_port.cuh's ZV_OP_ list). */
template <class M, int OP>
ZV_HD void zv_ecdsa_u1_u2(zv_u32 u1[8], zv_u32 u2[8], const zv_u8 digest[32], const zv_u32 r[8], const zv_u32 w[8]) {
    zv_u32 e[8];
    zv_ecdsa_load_b32(e, digest);
    zv_mont_reduce_once<M>(e, e, 0);  /* e < 2^256 < 2n */
    ZV_COUNT(OP);
    zv_mont_mul<M>(u1, e, w);
    ZV_COUNT(OP);
    zv_mont_mul<M>(u2, r, w);
}

/* The body of an ECDSA entry point (the kernel contract's shape, docs/kernels.md), the same
 * for every curve: items go CHUNK at a time per block; each thread parses its signature's
 * s (1 for an invalid signature, which is then rejected anyway) and puts it in Montgomery
 * form, the block inverts every s of the chunk at once (one inversion per block, not one per
 * warp), and each thread finishes its item with its w.  Signatures are read with 16-byte
 * vector loads (zv_load_item).  C is the curve's side:
 *   C::sc                                   its scalar (8 limbs, mod n);
 *   C::sig_parse(r, s, sig64, options)      r ‖ s with the range and the curve's high-S rule;
 *   C::to_mont(w, s)                        w = s·R mod n;
 *   C::batch_inv(ws, prefix, count, tops, tops_prefix)
 *                                           every ws[j] inverted, by the whole block;
 *   C::verify_with_w(pk, pk_len, sig, sig_len, msg, msg_len, options, w)
 *                                           the item's verdict given w = s^−1·R.
 * ws and prefix hold CHUNK scalars, tops and tops_prefix ZV_BATCH_LANES: the entry point's
 * shared arrays (a block's, on the GPU). */
template <class C, int CHUNK>
ZV_HD void zv_ecdsa_verify_chunks(const zv_u8 *pks, zv_u32 pk_len, const zv_u8 *sigs, zv_u32 sig_len,
                                  const zv_u8 *msgs, const zv_u64 *offsets, zv_u32 options, zv_u64 n,
                                  zv_u8 *verdicts, typename C::sc *ws, typename C::sc *prefix,
                                  typename C::sc *tops, typename C::sc *tops_prefix) {
    ZV_CHUNK_FOR(base, n, CHUNK) {
        zv_u64 count = n - base < CHUNK ? n - base : CHUNK;
        ZV_BLOCK_FOR(j, count) {
            zv_u64 i = base + j;
            typename C::sc r, s;
            int ok = 0;
            if (sig_len == 64) {
                alignas(16) zv_u8 sig[64];
                zv_load_item(sig, sigs + i * 64, 64);
                ok = C::sig_parse(&r, &s, sig, options);
            }
            if (!ok) for (int k = 0; k < 8; k++) s.v[k] = (zv_u32)(k == 0);
            C::to_mont(&ws[j], &s);  /* s·R, in parallel */
        }
        ZV_SYNC();
        C::batch_inv(ws, prefix, (int)count, tops, tops_prefix);
        ZV_SYNC();
        ZV_BLOCK_FOR(j, count) {
            zv_u64 i = base + j, lo = offsets[i], hi = offsets[i + 1];
            int ok = 0;
            if (hi >= lo && sig_len == 64) {  /* decreasing offsets are a malformed item, not a huge read */
                alignas(16) zv_u8 sig[64];
                zv_load_item(sig, sigs + i * 64, 64);
                ok = C::verify_with_w(pks + i * pk_len, pk_len, sig, sig_len, msgs + lo, hi - lo, options, &ws[j]);
            }
            verdicts[i] = (zv_u8)ok;
        }
        ZV_SYNC();  /* the next chunk reuses the shared arrays */
    }
}

#endif /* ZV_ECDSA_CUH */
