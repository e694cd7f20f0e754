/* toy.cu — a test-only "signature" kernel with the verify entry shape of the kernel contract.
 *
 * Rule (the tests' CPU stand-in applies the same one in Python): item i is valid iff its
 * signature starts with SHA-256(pk ‖ ctx ‖ options byte ‖ message).  It exists so the
 * backends' control flow (discovery, launches, self-test, fallbacks, hybrid split) can be
 * tested with verdicts that a real kernel computes, before and apart from the real
 * signature kernels.  It reads every column exactly as a real verify kernel must.
 */
#include "zv_port.cuh"
#include "hashes/sha2.cuh"

ZV_KERNEL void zv_verify_toy(const zv_u8 *pks, zv_u32 pk_len, const zv_u8 *sigs, zv_u32 sig_len,
                             const zv_u8 *msgs, const zv_u64 *offsets, const zv_u8 *ctx, zv_u32 ctx_len,
                             zv_u32 options, zv_u64 n, zv_u8 *verdicts) {
    ZV_FOR_EACH(i, n) {
        zv_sha256_ctx c;
        zv_u8 d[32];
        const zv_u8 opt = (zv_u8)options;
        zv_sha256_init(&c);
        zv_sha256_update(&c, pks + (zv_u64)pk_len * i, pk_len);
        zv_sha256_update(&c, ctx, ctx_len);
        zv_sha256_update(&c, &opt, 1);
        zv_sha256_update(&c, msgs + offsets[i], offsets[i + 1] - offsets[i]);
        zv_sha256_final(&c, d);
        const zv_u8 *sig = sigs + (zv_u64)sig_len * i;
        zv_u8 diff = sig_len < 32 ? 1 : 0;
        for (int k = 0; k < 32 && !diff; k++) diff |= (zv_u8)(d[k] ^ sig[k]);
        verdicts[i] = diff ? 0 : 1;
    }
}
