/* slh_dsa.cu — the SLH-DSA verify entry points, one per parameter set (kernel contract:
 * zv_verify_slh_dsa_<set>(pks, pk_len, sigs, sig_len, msgs, offsets, ctx, ctx_len, options,
 * n, verdicts)).  Semantics and the parallel layout: slh_dsa.cuh.  The SHA2 and SHAKE sets
 * share key and signature sizes, so the set is the entry point, not a run-time argument
 * (app/engine/device/registry.py maps each slh-dsa-* id to its entry).  Launch: blocks of
 * ZV_SLH_LANES threads, one block per item (ops.verify launches n × lanes threads). */
#include "schemes/slh_dsa.cuh"

/* At least ZV_SLH_MIN_BLOCKS blocks (warps) per SM: ptxas keeps registers to 65536 /
 * (32 · 16) = 128 per thread.  Numbers: bench/results/kernels_ptxas_slh_dsa.txt. */
#ifndef ZV_SLH_MIN_BLOCKS
#define ZV_SLH_MIN_BLOCKS 16
#endif
#if ZV_CUDA_COMPILER
#define ZV_SLH_LAUNCH_BOUNDS __launch_bounds__(ZV_SLH_LANES, ZV_SLH_MIN_BLOCKS)
#else
#define ZV_SLH_LAUNCH_BOUNDS
#endif

/* Threads of the host build's emulated block (ZV_BLOCK_RUN): the launch's 32, except in the
 * hash-count builds (ZV_SLH_STATS), whose bookkeeping models the 32 lanes on one thread. */
#ifdef ZV_SLH_STATS
#define ZV_SLH_HOST_LANES 1
#else
#define ZV_SLH_HOST_LANES ZV_SLH_LANES
#endif

#define ZV_SLH_ENTRY(name, shake, n_, h, d, hp, a, k, m)                                                      \
    typedef zv_slh_params<shake, n_, h, d, hp, a, k, m> zv_slh_##name;                                        \
    ZV_KERNEL ZV_SLH_LAUNCH_BOUNDS void zv_verify_slh_dsa_##name(                                             \
        const zv_u8 *pks, zv_u32 pk_len, const zv_u8 *sigs, zv_u32 sig_len, const zv_u8 *msgs,                \
        const zv_u64 *offsets, const zv_u8 *ctx, zv_u32 ctx_len, zv_u32 options, zv_u64 count,                \
        zv_u8 *verdicts) {                                                                                    \
        (void)options;                                                                                        \
        ZV_SHARED zv_slh_block<zv_slh_##name> blk;                                                            \
        ZV_BLOCK_RUN(ZV_SLH_HOST_LANES, zv_slh_verify_batch<zv_slh_##name>(&blk, pks, pk_len, sigs, sig_len,   \
                                                                           msgs, offsets, ctx, ctx_len,       \
                                                                           count, verdicts));                 \
    }
ZV_SLH_PARAM_SETS(ZV_SLH_ENTRY)
#undef ZV_SLH_ENTRY

#if !ZV_CUDA_COMPILER
/* Host-build hook for the tests (tests/test_kernel_slh_dsa.py): slh_verify_internal
 * (Alg. 20, M' = M) of set number `set` (ZV_SLH_PARAM_SETS order), for the ACVP vectors,
 * which sign M directly.  Returns 0/1, or -1 for an unknown set.  Not in the GPU build. */
ZV_KERNEL int zv_slh_dsa_hook_verify_internal(zv_u32 set, const zv_u8 *pk, zv_u32 pk_len, const zv_u8 *sig,
                                              zv_u32 sig_len, const zv_u8 *msg, zv_u64 mlen) {
    zv_u32 at = 0;
#define ZV_SLH_HOOK(name, ...)                                                                                \
    if (set == at++) {                                                                                        \
        zv_slh_block<zv_slh_##name> blk;                                                                      \
        if (pk_len != zv_slh_##name::pk_bytes || sig_len != zv_slh_##name::sig_bytes) return 0;               \
        int ok = 0;                                                                                           \
        ZV_BLOCK_RUN(ZV_SLH_HOST_LANES, {                                                                     \
            int v = zv_slh_verify<zv_slh_##name>(&blk, pk, sig, msg, mlen, (const zv_u8 *)0, 0, 1);           \
            if (ZV_BLOCK_TID == 0) ok = v;                                                                    \
        });                                                                                                   \
        return ok;                                                                                            \
    }
    ZV_SLH_PARAM_SETS(ZV_SLH_HOOK)
#undef ZV_SLH_HOOK
    return -1;
}
#endif
