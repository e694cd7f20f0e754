/* ml_dsa.cu — the ML-DSA-44/65/87 verify entry points (kernel contract: zv_verify_<family>,
 * one per parameter set; registry.py maps scheme ids to them), in two kernels:
 * zv_verify_ml_dsa_<level> (one thread per signature) and zv_verify_ml_dsa_block_<level> (one
 * block of 128 threads per signature; registry.VERIFY_VARIANTS).  Semantics and the parallel
 * layouts: ml_dsa.cuh.  Keys, signatures and messages are read in
 * place from the columnar batch (docs/architecture.md, "Batches and routing").  The batch's
 * one context string is passed to every item's verification, which takes a context per
 * call.  Batch options
 * (prehashed, allow_high_s) do not apply to pure ML-DSA and are ignored, as the CPU
 * reference ignores them. */
#include "schemes/ml_dsa.cuh"

/* Register cap for the GPU build (0: none).  Uncapped, ptxas uses ~255 registers (most of
 * them for the scheduling freedom of the unrolled Keccak rounds) with no spills: 8 warps per
 * SM.  A cap of 128 doubles the resident warps, which hide more of the local-memory latency
 * of the polynomial arrays, at the price of spills; which wins needs a GPU to measure, so
 * the build ships uncapped.  Numbers for 0, 168 and 128: bench/results/kernels_ptxas_ml_dsa.txt. */
#ifndef ZV_MLDSA_MAX_REGISTERS
#define ZV_MLDSA_MAX_REGISTERS 0
#endif
#if ZV_CUDA_COMPILER && ZV_MLDSA_MAX_REGISTERS > 0
#define ZV_MLDSA_MAXNREG __maxnreg__(ZV_MLDSA_MAX_REGISTERS)
#else
#define ZV_MLDSA_MAXNREG
#endif

template <int LEVEL>
ZV_HD void zv_mldsa_verify_batch(const zv_u8 *pks, zv_u32 pk_len, const zv_u8 *sigs, zv_u32 sig_len, const zv_u8 *msgs,
                              const zv_u64 *offsets, const zv_u8 *ctx, zv_u32 ctx_len, zv_u64 n, zv_u8 *verdicts) {
    ZV_FOR_EACH(i, n) {
        zv_u64 lo = offsets[i], hi = offsets[i + 1];
        verdicts[i] = (zv_u8)(hi >= lo && zv_mldsa_verify<LEVEL>(pks + i * pk_len, pk_len, sigs + i * sig_len, sig_len,
                                                                   msgs + lo, hi - lo, ctx, ctx_len));
    }
}

#define ZV_MLDSA_ENTRY(LEVEL)                                                                                    \
    ZV_KERNEL ZV_MLDSA_MAXNREG void zv_verify_ml_dsa_##LEVEL(const zv_u8 *pks, zv_u32 pk_len, const zv_u8 *sigs, zv_u32 sig_len, \
                                                             const zv_u8 *msgs, const zv_u64 *offsets,            \
                                                             const zv_u8 *ctx, zv_u32 ctx_len, zv_u32 options,    \
                                                             zv_u64 n, zv_u8 *verdicts) {                         \
        (void)options;                                                                                           \
        zv_mldsa_verify_batch<LEVEL>(pks, pk_len, sigs, sig_len, msgs, offsets, ctx, ctx_len, n, verdicts);        \
    }

ZV_MLDSA_ENTRY(44)
ZV_MLDSA_ENTRY(65)
ZV_MLDSA_ENTRY(87)

/* The block kernel (ml_dsa.cuh, "one block per signature"): blocks of ZV_MLDSA_BLOCK
 * threads, one per item (registry lanes = 128; ops.verify launches n × 128 threads).
 * __launch_bounds__(128, ZV_MLDSA_BLOCK_MIN_BLOCKS): at least that many blocks per SM, so
 * ptxas keeps registers to 65536 / (128 · 4) = 128 per thread; 16 warps per SM with
 * 4 × 27 KiB of shared memory at most (ML-DSA-87).  Figures: bench/results/kernels_ptxas_ml_dsa.txt. */
#ifndef ZV_MLDSA_BLOCK_MIN_BLOCKS
#define ZV_MLDSA_BLOCK_MIN_BLOCKS 4
#endif
#if ZV_CUDA_COMPILER
#define ZV_MLDSA_BLOCK_BOUNDS __launch_bounds__(ZV_MLDSA_BLOCK, ZV_MLDSA_BLOCK_MIN_BLOCKS)
#else
#define ZV_MLDSA_BLOCK_BOUNDS
#endif

#define ZV_MLDSA_BLOCK_ENTRY(LEVEL)                                                                              \
    ZV_KERNEL ZV_MLDSA_BLOCK_BOUNDS void zv_verify_ml_dsa_block_##LEVEL(                                         \
        const zv_u8 *pks, zv_u32 pk_len, const zv_u8 *sigs, zv_u32 sig_len, const zv_u8 *msgs,                   \
        const zv_u64 *offsets, const zv_u8 *ctx, zv_u32 ctx_len, zv_u32 options, zv_u64 n, zv_u8 *verdicts) {    \
        (void)options;                                                                                           \
        ZV_SHARED zv_mldsa_block<zv_mldsa_params<LEVEL>> blk;                                                    \
        ZV_BLOCK_RUN(ZV_MLDSA_BLOCK, zv_mldsa_verify_batch_block<LEVEL>(&blk, pks, pk_len, sigs, sig_len, msgs,   \
                                                                        offsets, ctx, ctx_len, n, verdicts));    \
    }

ZV_MLDSA_BLOCK_ENTRY(44)
ZV_MLDSA_BLOCK_ENTRY(65)
ZV_MLDSA_BLOCK_ENTRY(87)

#if !ZV_CUDA_COMPILER
/* Host-build hooks for the unit tests (tests/test_kernel_ml_dsa.py): the ring arithmetic
 * and SampleInBall checked against Python.  Not part of the GPU build. */

/* out = a·b in Z_q[X]/(X^256 + 1) through NTT, pointwise Montgomery product and NTT^-1
 * (the kernel's path for Â∘ẑ); a and b have |coefficient| < q, out is in [0, q). */
ZV_KERNEL void zv_mldsa_hook_polymul(zv_i32 out[ZV_MLDSA_N], const zv_i32 a[ZV_MLDSA_N], const zv_i32 b[ZV_MLDSA_N]) {
    zv_i32 x[ZV_MLDSA_N], y[ZV_MLDSA_N];
    for (int j = 0; j < ZV_MLDSA_N; j++) {
        x[j] = a[j];
        y[j] = b[j];
    }
    zv_mldsa_ntt(x);
    zv_mldsa_ntt(y);
    for (int j = 0; j < ZV_MLDSA_N; j++) x[j] = zv_mldsa_reduce32(zv_mldsa_mont_mul(x[j], y[j]));
    zv_mldsa_invntt_tomont(x);
    for (int j = 0; j < ZV_MLDSA_N; j++) out[j] = zv_mldsa_caddq(x[j]);
}

/* out = SampleInBall(c̃) for the parameter set `level` (44, 65 or 87); 0 for another level. */
ZV_KERNEL int zv_mldsa_hook_sample_in_ball(int level, zv_i32 out[ZV_MLDSA_N], const zv_u8 *ct) {
    switch (level) {
        case 44: zv_mldsa_sample_in_ball<zv_mldsa_params<44>>(out, ct); return 1;
        case 65: zv_mldsa_sample_in_ball<zv_mldsa_params<65>>(out, ct); return 1;
        case 87: zv_mldsa_sample_in_ball<zv_mldsa_params<87>>(out, ct); return 1;
        default: return 0;
    }
}

/* n Keccak-f[1600] permutations of state, called as the sponge calls them: the per-permutation
 * time of this very build, which scripts/ml_dsa_sass sets against a whole verification. */
ZV_KERNEL void zv_mldsa_hook_keccak(zv_u64 n, zv_u64 state[25]) {
    for (zv_u64 i = 0; i < n; i++) zv_keccak_permute(state);
}

/* UseHint (Alg. 40) of r in [0, q) for `level`; −1 for another level. */
ZV_KERNEL zv_i32 zv_mldsa_hook_use_hint(int level, zv_i32 r, int hint) {
    switch (level) {
        case 44: return zv_mldsa_use_hint<zv_mldsa_params<44>>(r, hint);
        case 65: return zv_mldsa_use_hint<zv_mldsa_params<65>>(r, hint);
        case 87: return zv_mldsa_use_hint<zv_mldsa_params<87>>(r, hint);
        default: return -1;
    }
}
#endif
