/* ed25519.cu — the Ed25519 verify entry point (kernel contract: zv_verify_<family>).
 * Semantics: ed25519.cuh.  One thread per signature; keys, signatures and messages are read
 * in place from the columnar batch (DESIGN.md section 3). */
#include "ed25519.cuh"

/* Register cap for the GPU build.  Uncapped, ptxas gives the kernel 255 registers (8 warps
 * per SM, no spills); at 168 it spills 24 bytes and fits 12 warps per SM, which hides more
 * of the latency of the serial carry chains in fe_mul; at 128 it spills 144 bytes in the
 * hot loop's neighbourhood.  Numbers: bench/results/kernels_ptxas_ed25519.txt. */
#ifndef ZV_ED25519_MAX_REGISTERS
#define ZV_ED25519_MAX_REGISTERS 168
#endif
#if ZV_DEVICE_BUILD && ZV_ED25519_MAX_REGISTERS > 0
#define ZV_ED25519_MAXNREG __maxnreg__(ZV_ED25519_MAX_REGISTERS)
#else
#define ZV_ED25519_MAXNREG
#endif

ZV_KERNEL ZV_ED25519_MAXNREG void zv_verify_ed25519(const zv_u8 *pks, zv_u32 pk_len, const zv_u8 *sigs, zv_u32 sig_len,
                                 const zv_u8 *msgs, const zv_u64 *offsets, const zv_u8 *ctx,
                                 zv_u32 ctx_len, zv_u32 options, zv_u64 n, zv_u8 *verdicts) {
    (void)ctx;
    (void)ctx_len;
    (void)options;
    ZV_FOR_EACH(i, n) {
        zv_u64 lo = offsets[i], hi = offsets[i + 1];
        verdicts[i] = (zv_u8)(hi >= lo && zv_ed25519_verify(pks + i * pk_len, pk_len, sigs + i * sig_len,
                                                            sig_len, msgs + lo, hi - lo));
    }
}

#if !ZV_DEVICE_BUILD
/* Host-build hooks for the unit tests (tests/test_kernel_ed25519.py): the field, scalar
 * and group layers checked one by one against Python integers.  Not part of the GPU build. */

static void ed_hook_load(ed_fe *h, const zv_u8 s[32]) {
    for (int i = 0; i < 8; i++) h->v[i] = ed_load_le32(s + 4 * i); /* all 256 bits */
}

/* op: 0 add, 1 sub, 2 mul, 3 sq, 4 invert, 5 pow22523, 6 canonical.  out = canonical bytes. */
ZV_KERNEL void zv_ed25519_hook_fe(int op, zv_u8 out[32], const zv_u8 a[32], const zv_u8 b[32]) {
    ed_fe x, y, r;
    ed_hook_load(&x, a);
    ed_hook_load(&y, b);
    switch (op) {
        case 0: ed_fe_add(&r, &x, &y); break;
        case 1: ed_fe_sub(&r, &x, &y); break;
        case 2: ed_fe_mul(&r, &x, &y); break;
        case 3: ed_fe_sq(&r, &x); break;
        case 4: ed_fe_invert(&r, &x); break;
        case 5: ed_fe_pow22523(&r, &x); break;
        default: ed_fe_copy(&r, &x); break;
    }
    ed_fe_tobytes(out, &r);
}

ZV_KERNEL void zv_ed25519_hook_sc_reduce(zv_u8 out[32], const zv_u8 in[64]) {
    zv_u32 r[8];
    ed_sc_reduce512(r, in);
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 4; j++) out[4 * i + j] = (zv_u8)(r[i] >> (8 * j));
}

/* out = encode([k](-A) + [s]B); returns 0 when a_enc does not decode. */
ZV_KERNEL int zv_ed25519_hook_dsm(zv_u8 out[32], const zv_u8 k[32], const zv_u8 a_enc[32],
                                  const zv_u8 s[32]) {
    ed_ge_p3 a;
    if (!ed_ge_frombytes_negate(&a, a_enc)) return 0;
    zv_u32 kw[8], sw[8];
    for (int i = 0; i < 8; i++) {
        kw[i] = ed_load_le32(k + 4 * i);
        sw[i] = ed_load_le32(s + 4 * i);
    }
    ed_ge_p2 r;
    ed_ge_double_scalarmult_vartime(&r, kw, &a, sw);
    ed_ge_tobytes(out, &r);
    return 1;
}
#endif
