/* ed25519.cu — the Ed25519 verify entry point (kernel contract: zv_verify_<family>).
 * Semantics: ed25519.cuh.  One thread per signature.
 *
 * Inputs: each item's key and signature are copied out of their device columns with
 * 16-byte vector loads (zv_load_item), so a warp reads its 32 consecutive items as whole
 * sectors; the message is read where it lies (device memory when the batch was copied,
 * see app/engine/device/cudadev.py).
 *
 * Chunks: items go ZV_ED25519_CHUNK at a time per block.  Each thread runs its item up to
 * the point [S]B - [k]A, the block then inverts every chunk item's Z at once
 * (zv_ed_fe_block_batch_invert: one inversion per block and about three products per item
 * spread over a warp, instead of one inversion per warp), and each thread compares its
 * encoding with R.  Per-item state crosses the
 * barriers in shared memory (3 x 32 bytes per item). */
#include "schemes/ed25519.cuh"

/* Register cap for the GPU build.  Uncapped, ptxas gives the kernel 255 registers (8 warps
 * per SM, no spills); at 168 it spills 24 bytes and fits 12 warps per SM, which hides more
 * of the latency of the serial carry chains in fe_mul; at 128 it spills 144 bytes in the
 * hot loop's neighbourhood.  Numbers: bench/results/kernels_ptxas_ed25519.txt. */
#ifndef ZV_ED25519_MAX_REGISTERS
#define ZV_ED25519_MAX_REGISTERS 168
#endif
#if ZV_CUDA_COMPILER && ZV_ED25519_MAX_REGISTERS > 0
#define ZV_ED25519_MAXNREG __maxnreg__(ZV_ED25519_MAX_REGISTERS)
#else
#define ZV_ED25519_MAXNREG
#endif

/* Items per block chunk: the block size the registry launches (app/engine/device/registry.py). */
#define ZV_ED25519_CHUNK 128

ZV_KERNEL ZV_ED25519_MAXNREG void zv_verify_ed25519(const zv_u8 *pks, zv_u32 pk_len, const zv_u8 *sigs, zv_u32 sig_len,
                                 const zv_u8 *msgs, const zv_u64 *offsets, const zv_u8 *ctx,
                                 zv_u32 ctx_len, zv_u32 options, zv_u64 n, zv_u8 *verdicts) {
    (void)ctx;
    (void)ctx_len;
    (void)options;
    ZV_SHARED zv_ed_fe xs[ZV_ED25519_CHUNK], ys[ZV_ED25519_CHUNK], zs[ZV_ED25519_CHUNK];
    ZV_SHARED zv_ed_fe prefix[ZV_ED25519_CHUNK], tops[ZV_BATCH_LANES], tops_prefix[ZV_BATCH_LANES];
    ZV_SHARED zv_u8 live[ZV_ED25519_CHUNK];
    ZV_CHUNK_FOR(base, n, ZV_ED25519_CHUNK) {
        zv_u64 count = n - base < ZV_ED25519_CHUNK ? n - base : ZV_ED25519_CHUNK;
        ZV_BLOCK_FOR(j, count) {
            zv_u64 i = base + j, lo = offsets[i], hi = offsets[i + 1];
            zv_ed_ge_p2 check;
            int ok = 0;
            /* wrong lengths are invalid before any byte is read (ed25519.cuh step 1) */
            if (hi >= lo && pk_len == ZV_ED25519_PK_BYTES && sig_len == ZV_ED25519_SIG_BYTES) {
                alignas(16) zv_u8 pk[ZV_ED25519_PK_BYTES], sig[ZV_ED25519_SIG_BYTES];
                zv_load_item(pk, pks + i * ZV_ED25519_PK_BYTES, ZV_ED25519_PK_BYTES);
                zv_load_item(sig, sigs + i * ZV_ED25519_SIG_BYTES, ZV_ED25519_SIG_BYTES);
                ok = zv_ed_ed25519_verify_start(&check, pk, pk_len, sig, sig_len, msgs + lo, hi - lo) &&
                     !zv_ed_fe_iszero(&check.Z);  /* never: Z of a curve point; a zero would spoil the batch */
            }
            live[j] = (zv_u8)ok;
            if (ok) {
                xs[j] = check.X;
                ys[j] = check.Y;
                zs[j] = check.Z;
            } else {
                zv_ed_fe_set_small(&zs[j], 1);
            }
        }
        ZV_SYNC();
        zv_ed_fe_block_batch_invert(zs, prefix, (int)count, tops, tops_prefix);
        ZV_SYNC();
        ZV_BLOCK_FOR(j, count) {
            zv_u64 i = base + j;
            int ok = live[j];
            if (ok) {
                alignas(16) zv_u8 R[32];
                zv_load_item(R, sigs + i * ZV_ED25519_SIG_BYTES, 32);
                ok = zv_ed_ed25519_verify_finish(&xs[j], &ys[j], &zs[j], R);
            }
            verdicts[i] = (zv_u8)ok;
        }
        ZV_SYNC();  /* the next chunk reuses the shared arrays */
    }
}

#if !ZV_CUDA_COMPILER
/* Host-build hooks for the unit tests (tests/test_kernel_ed25519.py): the field, scalar
 * and group layers checked one by one against Python integers.  Not part of the GPU build. */

static void zv_ed_hook_load(zv_ed_fe *h, const zv_u8 s[32]) {
    for (int i = 0; i < 8; i++) h->v[i] = zv_ed_load_le32(s + 4 * i); /* all 256 bits */
}

/* op: 0 add, 1 sub, 2 mul, 3 sq, 4 invert, 5 pow22523, 6 canonical.  out = canonical bytes. */
ZV_KERNEL void zv_ed25519_hook_fe(int op, zv_u8 out[32], const zv_u8 a[32], const zv_u8 b[32]) {
    zv_ed_fe x, y, r;
    zv_ed_hook_load(&x, a);
    zv_ed_hook_load(&y, b);
    switch (op) {
        case 0: zv_ed_fe_add(&r, &x, &y); break;
        case 1: zv_ed_fe_sub(&r, &x, &y); break;
        case 2: zv_ed_fe_mul(&r, &x, &y); break;
        case 3: zv_ed_fe_sq(&r, &x); break;
        case 4: zv_ed_fe_invert(&r, &x); break;
        case 5: zv_ed_fe_pow22523(&r, &x); break;
        default: zv_ed_fe_copy(&r, &x); break;
    }
    zv_ed_fe_tobytes(out, &r);
}

ZV_KERNEL void zv_ed25519_hook_sc_reduce(zv_u8 out[32], const zv_u8 in[64]) {
    zv_u32 r[8];
    zv_ed_sc_reduce512(r, in);
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 4; j++) out[4 * i + j] = (zv_u8)(r[i] >> (8 * j));
}

/* z[i] = 1/z[i] for count (<= 256) values of 32 little-endian bytes each, by the block
 * chunk's batched inversion the kernel uses; out = canonical bytes. */
ZV_KERNEL void zv_ed25519_hook_batch_invert(int count, zv_u8 *out, const zv_u8 *in) {
    zv_ed_fe z[256], prefix[256], tops[ZV_BATCH_LANES], tops_prefix[ZV_BATCH_LANES];
    for (int i = 0; i < count; i++) zv_ed_hook_load(&z[i], in + 32 * i);
    zv_ed_fe_block_batch_invert(z, prefix, count, tops, tops_prefix);
    for (int i = 0; i < count; i++) zv_ed_fe_tobytes(out + 32 * i, &z[i]);
}

/* The one-item verify (its own inversion), for comparison with the chunked kernel. */
ZV_KERNEL int zv_ed25519_hook_verify_one(const zv_u8 *pk, zv_u32 pk_len, const zv_u8 *sig, zv_u32 sig_len,
                                         const zv_u8 *msg, zv_u64 msg_len) {
    return zv_ed25519_verify(pk, pk_len, sig, sig_len, msg, msg_len);
}

/* out = encode([k](-A) + [s]B); returns 0 when a_enc does not decode. */
ZV_KERNEL int zv_ed25519_hook_dsm(zv_u8 out[32], const zv_u8 k[32], const zv_u8 a_enc[32],
                                  const zv_u8 s[32]) {
    zv_ed_ge_p3 a;
    if (!zv_ed_ge_frombytes_negate(&a, a_enc)) return 0;
    zv_u32 kw[8], sw[8];
    for (int i = 0; i < 8; i++) {
        kw[i] = zv_ed_load_le32(k + 4 * i);
        sw[i] = zv_ed_load_le32(s + 4 * i);
    }
    zv_ed_ge_p2 r;
    zv_ed_ge_double_scalarmult_vartime(&r, kw, &a, sw);
    zv_ed_ge_tobytes(out, &r);
    return 1;
}
#endif
