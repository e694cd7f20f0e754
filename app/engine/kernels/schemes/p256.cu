/* p256.cu — batch entry point for ECDSA over NIST P-256 with SHA-256 (semantics: p256.cuh).
 *
 * The kernel contract's shape (docs/kernels.md, "Entry points"): one thread per signature;
 * item i's message is msgs[offsets[i] .. offsets[i+1]).  ctx is unused (ECDSA has no
 * context string).  options: bit0 prehashed, bit2 low_s (app/core/schemes.py OPTIONS).
 *
 * Chunks, as secp256k1.cu: items go ZV_P256_CHUNK at a time per block; each thread parses
 * its signature's s (1 for an invalid signature, which is then rejected anyway), the block
 * inverts every s of the chunk at once (zv_p256_sc_block_batch_inv_mont), and each thread
 * finishes its item with its w.  Signatures are read with 16-byte vector loads.
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

ZV_KERNEL ZV_P256_MAXNREG void zv_verify_p256(const zv_u8 *pks, zv_u32 pk_len,
                                              const zv_u8 *sigs, zv_u32 sig_len,
                                              const zv_u8 *msgs, const zv_u64 *offsets,
                                              const zv_u8 *ctx, zv_u32 ctx_len,
                                              zv_u32 options, zv_u64 n, zv_u8 *verdicts) {
    (void)ctx;
    (void)ctx_len;
    ZV_SHARED zv_p256_sc ws[ZV_P256_CHUNK], prefix[ZV_P256_CHUNK];
    ZV_SHARED zv_p256_sc tops[ZV_BATCH_LANES], tops_prefix[ZV_BATCH_LANES];
    int low_s = (options & ZV_P256_OPT_LOW_S) != 0;
    ZV_CHUNK_FOR(base, n, ZV_P256_CHUNK) {
        zv_u64 count = n - base < ZV_P256_CHUNK ? n - base : ZV_P256_CHUNK;
        ZV_BLOCK_FOR(j, count) {
            zv_u64 i = base + j;
            zv_p256_sc r, s;
            int ok = 0;
            if (sig_len == 64) {
                alignas(16) zv_u8 sig[64];
                zv_load_item(sig, sigs + i * 64, 64);
                ok = zv_p256_sig_parse(&r, &s, sig, low_s);
            }
            if (!ok) for (int k = 0; k < 8; k++) s.v[k] = (zv_u32)(k == 0);
            zv_p256_sc_mont_mul(&ws[j], s.v, ZV_P256_N_R2);  /* s·R, in parallel */
        }
        ZV_SYNC();
        zv_p256_sc_block_batch_inv_mont(ws, prefix, (int)count, tops, tops_prefix);
        ZV_SYNC();
        ZV_BLOCK_FOR(j, count) {
            zv_u64 i = base + j, lo = offsets[i], hi = offsets[i + 1];
            int ok = 0;
            if (hi >= lo && sig_len == 64) {  /* decreasing offsets are a malformed item, not a huge read */
                alignas(16) zv_u8 sig[64];
                zv_load_item(sig, sigs + i * 64, 64);
                ok = zv_p256_verify_with_w(pks + i * pk_len, pk_len, sig, sig_len, msgs + lo, hi - lo, options, &ws[j]);
            }
            verdicts[i] = (zv_u8)ok;
        }
        ZV_SYNC();  /* the next chunk reuses the shared arrays */
    }
}
