/* secp256k1.cu — batch entry point for ECDSA over secp256k1 (semantics: secp256k1.cuh).
 *
 * The kernel contract's shape (docs/kernels.md, "Entry points"): one thread per signature; item i's message
 * is msgs[offsets[i] .. offsets[i+1]).  ctx is unused (ECDSA has no context string).
 * options: bit0 prehashed, bit1 allow_high_s.
 *
 * Chunks: items go ZV_SECP256K1_CHUNK at a time per block.  Each thread parses its
 * signature's s (1 for an invalid signature, which is then rejected anyway), the block
 * inverts every s of the chunk at once (zv_k1_sc_block_batch_inv_mont: one inversion per block,
 * not one per warp), and each thread finishes its item with its w.  Signatures are
 * read with 16-byte vector loads (zv_load_item).
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

ZV_KERNEL ZV_SECP256K1_MAXNREG void zv_verify_secp256k1(const zv_u8 *pks, zv_u32 pk_len,
                                   const zv_u8 *sigs, zv_u32 sig_len,
                                   const zv_u8 *msgs, const zv_u64 *offsets,
                                   const zv_u8 *ctx, zv_u32 ctx_len,
                                   zv_u32 options, zv_u64 n, zv_u8 *verdicts) {
    (void)ctx;
    (void)ctx_len;
    ZV_SHARED zv_k1_sc ws[ZV_SECP256K1_CHUNK], prefix[ZV_SECP256K1_CHUNK];
    ZV_SHARED zv_k1_sc tops[ZV_BATCH_LANES], tops_prefix[ZV_BATCH_LANES];
    int allow_high_s = (options & ZV_SECP256K1_OPT_ALLOW_HIGH_S) != 0;
    ZV_CHUNK_FOR(base, n, ZV_SECP256K1_CHUNK) {
        zv_u64 count = n - base < ZV_SECP256K1_CHUNK ? n - base : ZV_SECP256K1_CHUNK;
        ZV_BLOCK_FOR(j, count) {
            zv_u64 i = base + j;
            zv_k1_sc r, s;
            int ok = 0;
            if (sig_len == 64) {
                alignas(16) zv_u8 sig[64];
                zv_load_item(sig, sigs + i * 64, 64);
                ok = zv_k1_sig_parse(&r, &s, sig, allow_high_s);
            }
            if (!ok) for (int k = 0; k < 8; k++) s.v[k] = (zv_u32)(k == 0);
            zv_k1_sc_mont_mul(&ws[j], s.v, ZV_SECP256K1_N_R2);  /* s·R, in parallel */
        }
        ZV_SYNC();
        zv_k1_sc_block_batch_inv_mont(ws, prefix, (int)count, tops, tops_prefix);
        ZV_SYNC();
        ZV_BLOCK_FOR(j, count) {
            zv_u64 i = base + j, lo = offsets[i], hi = offsets[i + 1];
            int ok = 0;
            if (hi >= lo && sig_len == 64) {  /* decreasing offsets are a malformed item, not a huge read */
                alignas(16) zv_u8 sig[64];
                zv_load_item(sig, sigs + i * 64, 64);
                ok = zv_k1_verify_with_w(pks + i * pk_len, pk_len, sig, sig_len, msgs + lo, hi - lo, options, &ws[j]);
            }
            verdicts[i] = (zv_u8)ok;
        }
        ZV_SYNC();  /* the next chunk reuses the shared arrays */
    }
}
