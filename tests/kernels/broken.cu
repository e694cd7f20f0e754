/* broken.cu — a test-only kernel that does not compile (a missing declaration), to check that
 * a build failure makes a scheme unavailable with the compiler's message, not a crash. */
#include "zv_port.cuh"

ZV_KERNEL void zv_verify_broken(const zv_u8 *pks, zv_u32 pk_len, const zv_u8 *sigs, zv_u32 sig_len,
                                const zv_u8 *msgs, const zv_u64 *offsets, const zv_u8 *ctx, zv_u32 ctx_len,
                                zv_u32 options, zv_u64 n, zv_u8 *verdicts) {
    ZV_FOR_EACH(i, n) { verdicts[i] = no_such_function(pks + i); }
}
