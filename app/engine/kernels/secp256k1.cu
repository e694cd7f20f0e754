/* secp256k1.cu — batch entry point for ECDSA over secp256k1 (semantics: secp256k1.cuh).
 *
 * The kernel contract's shape (docs/kernels.md, "Entry points"):
 * one thread per signature; item i's message is msgs[offsets[i] .. offsets[i+1]).  ctx is
 * unused (ECDSA has no context string).  options: bit0 prehashed, bit1 allow_high_s.
 */
#include "zv_port.cuh"
#include "secp256k1.cuh"

ZV_KERNEL void zv_verify_secp256k1(const zv_u8 *pks, zv_u32 pk_len,
                                   const zv_u8 *sigs, zv_u32 sig_len,
                                   const zv_u8 *msgs, const zv_u64 *offsets,
                                   const zv_u8 *ctx, zv_u32 ctx_len,
                                   zv_u32 options, zv_u64 n, zv_u8 *verdicts) {
    (void)ctx;
    (void)ctx_len;
    ZV_FOR_EACH(i, n) {
        zv_u64 lo = offsets[i], hi = offsets[i + 1];
        int ok = 0;
        if (hi >= lo) {  /* decreasing offsets are a malformed item, not a huge read */
            ok = k1_verify_one(pks + i * pk_len, pk_len, sigs + i * sig_len, sig_len,
                               msgs + lo, hi - lo, options);
        }
        verdicts[i] = (zv_u8)ok;
    }
}
