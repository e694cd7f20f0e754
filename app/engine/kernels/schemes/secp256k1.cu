/* secp256k1.cu — batch entry point for ECDSA over secp256k1 (semantics: secp256k1.cuh).
 *
 * The kernel contract's shape (docs/kernels.md, "Entry points"): one thread per signature; item i's message
 * is msgs[offsets[i] .. offsets[i+1]).  ctx is unused (ECDSA has no context string).
 * options: bit0 prehashed, bit1 allow_high_s.
 *
 * Chunks of ZV_SECP256K1_CHUNK items per block with one batched inversion of their s
 * (zv_k1_sc_block_batch_inv_mont): zv_ecdsa_verify_chunks (schemes/ecdsa.cuh), shared with
 * the P-256 kernel.
 */
#include "zv_port.cuh"
#include "schemes/secp256k1.cuh"

/* Register cap for the GPU build.  With the group operations inlined ptxas takes 172
 * registers, which fits two 128-thread blocks (8 warps) per SM; at 168 three fit (12 warps),
 * which hides more of the carry chains' latency (bench/results/gpu_model.md), for a few
 * dozen bytes of spill outside the field arithmetic (bench/results/kernels_ptxas.txt). */
#ifndef ZV_SECP256K1_MAX_REGISTERS
#define ZV_SECP256K1_MAX_REGISTERS 168
#endif
#if ZV_CUDA_COMPILER && ZV_SECP256K1_MAX_REGISTERS > 0
#define ZV_SECP256K1_MAXNREG __maxnreg__(ZV_SECP256K1_MAX_REGISTERS)
#else
#define ZV_SECP256K1_MAXNREG
#endif

/* Items per block chunk: the block size the registry launches (app/engine/device/registry.py). */
#define ZV_SECP256K1_CHUNK 128

/* The curve's side of zv_ecdsa_verify_chunks (schemes/ecdsa.cuh). */
struct zv_k1_ecdsa {
    typedef zv_k1_sc sc;
    static ZV_HD_MEMBER int sig_parse(sc *r, sc *s, const zv_u8 *sig, zv_u32 options) {
        return zv_k1_sig_parse(r, s, sig, (options & ZV_SECP256K1_OPT_ALLOW_HIGH_S) != 0);
    }
    static ZV_HD_MEMBER void to_mont(sc *w, const sc *s) { zv_k1_sc_mont_mul(w, s->v, ZV_SECP256K1_N_R2); }
    static ZV_HD_MEMBER void batch_inv(sc *ws, sc *prefix, int count, sc *tops, sc *tops_prefix) {
        zv_k1_sc_block_batch_inv_mont(ws, prefix, count, tops, tops_prefix);
    }
    static ZV_HD_MEMBER int verify_with_w(const zv_u8 *pk, zv_u32 pk_len, const zv_u8 *sig, zv_u32 sig_len,
                                          const zv_u8 *msg, zv_u64 msg_len, zv_u32 options, const sc *w) {
        return zv_k1_verify_with_w(pk, pk_len, sig, sig_len, msg, msg_len, options, w);
    }
};

ZV_KERNEL ZV_SECP256K1_MAXNREG void zv_verify_secp256k1(const zv_u8 *pks, zv_u32 pk_len,
                                   const zv_u8 *sigs, zv_u32 sig_len,
                                   const zv_u8 *msgs, const zv_u64 *offsets,
                                   const zv_u8 *ctx, zv_u32 ctx_len,
                                   zv_u32 options, zv_u64 n, zv_u8 *verdicts) {
    (void)ctx;
    (void)ctx_len;
    ZV_SHARED zv_k1_sc ws[ZV_SECP256K1_CHUNK], prefix[ZV_SECP256K1_CHUNK];
    ZV_SHARED zv_k1_sc tops[ZV_BATCH_LANES], tops_prefix[ZV_BATCH_LANES];
    zv_ecdsa_verify_chunks<zv_k1_ecdsa, ZV_SECP256K1_CHUNK>(pks, pk_len, sigs, sig_len, msgs, offsets, options,
                                                            n, verdicts, ws, prefix, tops, tops_prefix);
}
