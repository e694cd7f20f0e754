/* bip340.cu — batch entry point for BIP-340 Schnorr signatures (semantics: bip340.cuh).
 *
 * The kernel contract's shape (docs/kernels.md, "Entry points"): one thread per signature;
 * item i's message is msgs[offsets[i] .. offsets[i+1]).  ctx and options are unused
 * (BIP-340 has no context string and the scheme no batch options).
 *
 * Chunks: items go ZV_BIP340_CHUNK at a time per block.  Each thread runs its item up to the
 * Jacobian R = s·G − e·P (zv_bip340_verify_start) and leaves X, Y, Z in shared memory (Z = 1
 * for an item already invalid), the block inverts every Z of the chunk at once
 * (zv_k1_fe_block_batch_inv: one field inversion per chunk instead of one per item), and
 * each thread finishes its item with its 1/Z (zv_bip340_verify_finish).  Keys and
 * signatures are read with 16-byte vector loads (zv_load_item).
 */
#include "zv_port.cuh"
#include "schemes/bip340.cuh"

/* Register cap for the GPU build, as for the ECDSA kernel, which runs the same
 * multiplication (secp256k1.cu says why 168: three 128-thread blocks per SM). */
#ifndef ZV_BIP340_MAX_REGISTERS
#define ZV_BIP340_MAX_REGISTERS 168
#endif
#if ZV_CUDA_COMPILER && ZV_BIP340_MAX_REGISTERS > 0
#define ZV_BIP340_MAXNREG __maxnreg__(ZV_BIP340_MAX_REGISTERS)
#else
#define ZV_BIP340_MAXNREG
#endif

/* Items per block chunk: the block size the registry launches (app/engine/device/registry.py). */
#define ZV_BIP340_CHUNK 128

ZV_KERNEL ZV_BIP340_MAXNREG void zv_verify_bip340(const zv_u8 *pks, zv_u32 pk_len,
                                                  const zv_u8 *sigs, zv_u32 sig_len,
                                                  const zv_u8 *msgs, const zv_u64 *offsets,
                                                  const zv_u8 *ctx, zv_u32 ctx_len,
                                                  zv_u32 options, zv_u64 n, zv_u8 *verdicts) {
    (void)ctx;
    (void)ctx_len;
    (void)options;
    ZV_SHARED zv_k1_fe xs[ZV_BIP340_CHUNK], ys[ZV_BIP340_CHUNK], zs[ZV_BIP340_CHUNK];
    ZV_SHARED zv_k1_fe prefix[ZV_BIP340_CHUNK], tops[ZV_BATCH_LANES], tops_prefix[ZV_BATCH_LANES];
    ZV_SHARED zv_u8 live[ZV_BIP340_CHUNK];
    ZV_CHUNK_FOR(base, n, ZV_BIP340_CHUNK) {
        zv_u64 count = n - base < ZV_BIP340_CHUNK ? n - base : ZV_BIP340_CHUNK;
        ZV_BLOCK_FOR(j, count) {
            zv_u64 i = base + j, lo = offsets[i], hi = offsets[i + 1];
            zv_k1_gej R;
            int ok = 0;
            /* wrong lengths are invalid before any byte is read; decreasing offsets are a
             * malformed item, not a huge read */
            if (hi >= lo && pk_len == ZV_BIP340_PK_BYTES && sig_len == ZV_BIP340_SIG_BYTES) {
                alignas(16) zv_u8 pk[ZV_BIP340_PK_BYTES], sig[ZV_BIP340_SIG_BYTES];
                zv_load_item(pk, pks + i * ZV_BIP340_PK_BYTES, ZV_BIP340_PK_BYTES);
                zv_load_item(sig, sigs + i * ZV_BIP340_SIG_BYTES, ZV_BIP340_SIG_BYTES);
                ok = zv_bip340_verify_start(&R, pk, pk_len, sig, sig_len, msgs + lo, hi - lo);
            }
            live[j] = (zv_u8)ok;
            if (ok) {
                xs[j] = R.x;
                ys[j] = R.y;
                zs[j] = R.z;
            } else {
                zv_k1_fe_set_u32(&zs[j], 1);  /* a zero would spoil the chunk's inversion */
            }
        }
        ZV_SYNC();
        zv_k1_fe_block_batch_inv(zs, prefix, (int)count, tops, tops_prefix);
        ZV_SYNC();
        ZV_BLOCK_FOR(j, count) {
            zv_u64 i = base + j;
            int ok = live[j];
            if (ok) {
                alignas(16) zv_u8 r[32];
                zv_load_item(r, sigs + i * ZV_BIP340_SIG_BYTES, 32);
                ok = zv_bip340_verify_finish(&xs[j], &ys[j], &zs[j], r);  /* zs[j] is 1/Z now */
            }
            verdicts[i] = (zv_u8)ok;
        }
        ZV_SYNC();  /* the next chunk reuses the shared arrays */
    }
}
