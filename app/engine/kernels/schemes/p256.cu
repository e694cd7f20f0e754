/* p256.cu — batch entry point for ECDSA over NIST P-256 with SHA-256 (semantics: p256.cuh).
 *
 * The kernel contract's shape (docs/kernels.md, "Entry points"): one thread per signature;
 * item i's message is msgs[offsets[i] .. offsets[i+1]).  ctx is unused (ECDSA has no
 * context string).  options: bit0 prehashed, bit2 low_s (app/core/schemes.py OPTIONS).
 *
 * Chunks of ZV_P256_CHUNK items per block with one batched inversion of their s
 * (zv_p256_sc_block_batch_inv_mont): zv_ecdsa_verify_chunks (schemes/ecdsa.cuh), shared
 * with the secp256k1 kernel.
 */
#include "zv_port.cuh"
#include "schemes/p256.cuh"

/* Register cap for the GPU build (0: the compiler's choice); scripts/ptxas compares caps. */
#ifndef ZV_P256_MAX_REGISTERS
#define ZV_P256_MAX_REGISTERS 168
#endif
#if ZV_CUDA_COMPILER && ZV_P256_MAX_REGISTERS > 0
#define ZV_P256_MAXNREG __maxnreg__(ZV_P256_MAX_REGISTERS)
#else
#define ZV_P256_MAXNREG
#endif

/* Items per block chunk: the block size the registry launches (app/engine/device/registry.py). */
#define ZV_P256_CHUNK 128

/* The curve's side of zv_ecdsa_verify_chunks (schemes/ecdsa.cuh). */
struct zv_p256_ecdsa {
    typedef zv_p256_sc sc;
    static ZV_HD_MEMBER int sig_parse(sc *r, sc *s, const zv_u8 *sig, zv_u32 options) {
        return zv_p256_sig_parse(r, s, sig, (options & ZV_P256_OPT_LOW_S) != 0);
    }
    static ZV_HD_MEMBER void to_mont(sc *w, const sc *s) { zv_p256_sc_mont_mul(w, s->v, ZV_P256_N_R2); }
    static ZV_HD_MEMBER void batch_inv(sc *ws, sc *prefix, int count, sc *tops, sc *tops_prefix) {
        zv_p256_sc_block_batch_inv_mont(ws, prefix, count, tops, tops_prefix);
    }
    static ZV_HD_MEMBER int verify_with_w(const zv_u8 *pk, zv_u32 pk_len, const zv_u8 *sig, zv_u32 sig_len,
                                          const zv_u8 *msg, zv_u64 msg_len, zv_u32 options, const sc *w) {
        return zv_p256_verify_with_w(pk, pk_len, sig, sig_len, msg, msg_len, options, w);
    }
};

ZV_KERNEL ZV_P256_MAXNREG void zv_verify_p256(const zv_u8 *pks, zv_u32 pk_len,
                                   const zv_u8 *sigs, zv_u32 sig_len,
                                   const zv_u8 *msgs, const zv_u64 *offsets,
                                   const zv_u8 *ctx, zv_u32 ctx_len,
                                   zv_u32 options, zv_u64 n, zv_u8 *verdicts) {
    (void)ctx;
    (void)ctx_len;
    ZV_SHARED zv_p256_sc ws[ZV_P256_CHUNK], prefix[ZV_P256_CHUNK];
    ZV_SHARED zv_p256_sc tops[ZV_BATCH_LANES], tops_prefix[ZV_BATCH_LANES];
    zv_ecdsa_verify_chunks<zv_p256_ecdsa, ZV_P256_CHUNK>(pks, pk_len, sigs, sig_len, msgs, offsets, options,
                                                         n, verdicts, ws, prefix, tops, tops_prefix);
}
