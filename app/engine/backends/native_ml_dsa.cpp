// native_ml_dsa.cpp — the CPU backend's own ML-DSA-44/65/87 verify (FIPS 204 Alg. 3
// ML-DSA.Verify, pure interface, over Alg. 8 ML-DSA.Verify_internal), vectorized, with the
// verdicts of OpenSSL (app/engine/reference/reference.py make_verify_mldsa), item for item.
//
// What is shared with the kernels (app/engine/kernels/schemes/ml_dsa.cuh): every check and
// every decoding that decides a verdict — the length and context checks, HintBitUnpack's
// checks (zv_mldsa_hint_is_valid), z's decoding with its norm check (zv_mldsa_unpack_z),
// SampleInBall, μ = H(tr ‖ M′) and the final c̃ comparison (zv_mldsa_mu,
// zv_mldsa_challenge_matches) — and the whole scalar verify, which is the portable path
// (zv_mldsa_verify).  What is new here is speed only, for the x86-64 vector units:
//   - NTT, NTT^-1 and the pointwise products on 8 signed 32-bit lanes (AVX2): layers
//     len ≥ 8 pair whole vectors under one zeta; layers len 4, 2, 1 run after an 8×8
//     transpose of each 64 coefficients, which makes them vector pairs too, with a zeta
//     per lane (tables built once from ZV_MLDSA_ZETAS).  Montgomery products as the kernel's
//     (R = 2^32, same bounds: forward outputs < 9q, NTT^-1 sums < 256q < 2^31);
//   - ExpandA's K·L SHAKE128 streams (Alg. 32/30) run several at once in a multi-lane
//     Keccak-f[1600]: 4 streams in AVX2 registers, or 8 in AVX-512 registers, where the
//     AVX-512 rotate (vprolq) and three-input logic (vpternlogq) halve the instructions of
//     a round;
//   - UseHint with Decompose by fixed-point arithmetic (no division), on 8 lanes; checked
//     against the kernel's zv_mldsa_use_hint on every r in [0, q) by zv_mldsa_cpu_check_use_hint.
// Dispatch is at run time (zv_cpu_ml_dsa's `isa`, zv_mldsa_cpu_best_isa): 2 = AVX-512
// (F, VL, BW), 1 = AVX2, 0 = portable; -DZV_MLDSA_PORTABLE compiles the vector code out.
//
// The vector code is compiled twice from one text, once per instruction set: this file
// includes itself (#include "native_ml_dsa_simd.inc") inside a namespace and a `#pragma GCC target` per pass,
// with ZV_MLDSA_PASS selecting the Keccak width; the rest of the file is compiled once.
// Built by app/engine/backends/native_ml_dsa.py through app/engine/device/hostbuild.py.

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if defined(__x86_64__) && !defined(ZV_MLDSA_PORTABLE)
#include <immintrin.h>
#define ZV_MLDSA_X86 1
#else
#define ZV_MLDSA_X86 0
#endif
#include "schemes/ml_dsa.cuh"

// zeta·q^-1 mod 2^32 (signed): the second factor of a Montgomery product by a constant.
static inline zv_i32 zv_mldsa_qinv_of(zv_i32 z) { return (zv_i32)((zv_u32)z * ZV_MLDSA_QINV); }

// Per-lane zetas of the in-vector NTT layers (len 4, 2, 1), for each group g of 64
// coefficients after its 8×8 transpose (lane l holds coefficients 64g + 8l + e, e the
// vector): forward f[g][0] (len 4), f[g][1..2] (len 2, pairs e = 0/1 and 4/5), f[g][3..6]
// (len 1, pairs e = 0, 2, 4, 6); inverse v[g][0..3] (len 1), v[g][4..5] (len 2), v[g][6]
// (len 4), already negated as Alg. 42 uses them; each with its q^-1 multiple (fq, vq).
struct zv_mldsa_lane_zetas {
    alignas(32) zv_i32 f[4][7][8], fq[4][7][8], v[4][7][8], vq[4][7][8];
    zv_mldsa_lane_zetas() {
        for (int g = 0; g < 4; g++)
            for (int l = 0; l < 8; l++) {
                const int blk = 8 * g + l; // the coefficients 8·blk .. 8·blk + 7
                f[g][0][l] = ZV_MLDSA_ZETAS[32 + blk];
                for (int h = 0; h < 2; h++) f[g][1 + h][l] = ZV_MLDSA_ZETAS[64 + 2 * blk + h];
                for (int h = 0; h < 4; h++) f[g][3 + h][l] = ZV_MLDSA_ZETAS[128 + 4 * blk + h];
                for (int h = 0; h < 4; h++) v[g][h][l] = -ZV_MLDSA_ZETAS[255 - (4 * blk + h)];
                for (int h = 0; h < 2; h++) v[g][4 + h][l] = -ZV_MLDSA_ZETAS[127 - (2 * blk + h)];
                v[g][6][l] = -ZV_MLDSA_ZETAS[63 - blk];
            }
        for (int g = 0; g < 4; g++)
            for (int i = 0; i < 7; i++)
                for (int l = 0; l < 8; l++) {
                    fq[g][i][l] = zv_mldsa_qinv_of(f[g][i][l]);
                    vq[g][i][l] = zv_mldsa_qinv_of(v[g][i][l]);
                }
    }
};
static const zv_mldsa_lane_zetas zv_mldsa_lanes;

// Bounds of the vector code's intermediates, checked where the kernel checks its own
// (ZV_CHECK counts failures in builds with -DZV_VERIFY; nothing otherwise).
static inline void zv_mldsa_check_below(const zv_i32 *a, int n, zv_i64 bound) {
#ifdef ZV_VERIFY
    for (int j = 0; j < n; j++) ZV_CHECK(a[j] < bound && a[j] > -bound);
#else
    (void)a, (void)n, (void)bound;
#endif
}

#if ZV_MLDSA_X86
#pragma GCC push_options
#pragma GCC target("avx2")
#define ZV_MLDSA_PASS 1
namespace zv_mldsa_avx2 {
#include "native_ml_dsa_simd.inc"
}
#undef ZV_MLDSA_PASS
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,avx512f,avx512vl,avx512bw")
#define ZV_MLDSA_PASS 2
namespace zv_mldsa_avx512 {
#include "native_ml_dsa_simd.inc"
}
#undef ZV_MLDSA_PASS
#pragma GCC pop_options
#endif

// The best `isa` this CPU runs: 2 AVX-512 (F, VL, BW), 1 AVX2, 0 portable.
extern "C" int zv_mldsa_cpu_best_isa(void) {
#if ZV_MLDSA_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw"))
        return 2;
    if (__builtin_cpu_supports("avx2")) return 1;
#endif
    return 0;
}

template <int LEVEL>
static int zv_mldsa_cpu_verify(int isa, const zv_u8 *pk, const zv_u8 *sig, const zv_u8 *msg, zv_u64 msg_len,
                               const zv_u8 *ctx, zv_u32 ctx_len) {
    typedef zv_mldsa_params<LEVEL> P;
    typedef zv_mldsa_sizes<P> S;
#if ZV_MLDSA_X86
    if (isa >= 2) return zv_mldsa_avx512::verify<P>(pk, sig, msg, msg_len, ctx, ctx_len);
    if (isa == 1) return zv_mldsa_avx2::verify<P>(pk, sig, msg, msg_len, ctx, ctx_len);
#endif
    (void)isa;
    return zv_mldsa_verify<LEVEL>(pk, S::PK_BYTES, sig, S::SIG_BYTES, msg, msg_len, ctx, ctx_len);
}

// Verdicts of one chunk of ML-DSA-`level` items (44, 65 or 87), as the CPU backend's
// reference decides them: verdicts[i] = 1 when item i verifies under the batch's context
// `ctx` (ctx_len bytes), else 0.  Columns as native_loops.cpp's: pks uint8[n, pk_len],
// sigs uint8[n, sig_len], msgs (msgs_len bytes) with offsets uint64[n + 1], clamped to
// [0, msgs_len] as a Python slice is.  A key or signature length other than the set's, a
// context over 255 bytes or an unknown level gives 0 for every item, reading nothing.
// `isa` picks the code path (above); more than this CPU has is lowered to what it has.
extern "C" void zv_cpu_ml_dsa(int level, int isa, const zv_u8 *pks, size_t pk_len, const zv_u8 *sigs,
                              size_t sig_len, const zv_u8 *msgs, size_t msgs_len, const zv_u64 *offsets, size_t n,
                              const zv_u8 *ctx, size_t ctx_len, zv_u8 *verdicts) {
    const int best = zv_mldsa_cpu_best_isa();
    if (isa < 0 || isa > best) isa = best;
    size_t want_pk = 0, want_sig = 0;
    switch (level) {
        case 44: want_pk = zv_mldsa_sizes<zv_mldsa_params<44>>::PK_BYTES; want_sig = zv_mldsa_sizes<zv_mldsa_params<44>>::SIG_BYTES; break;
        case 65: want_pk = zv_mldsa_sizes<zv_mldsa_params<65>>::PK_BYTES; want_sig = zv_mldsa_sizes<zv_mldsa_params<65>>::SIG_BYTES; break;
        case 87: want_pk = zv_mldsa_sizes<zv_mldsa_params<87>>::PK_BYTES; want_sig = zv_mldsa_sizes<zv_mldsa_params<87>>::SIG_BYTES; break;
        default: break;
    }
    const int sizes_ok = want_pk && pk_len == want_pk && sig_len == want_sig && ctx_len <= ZV_MLDSA_MAX_CTX;
    for (size_t i = 0; i < n; i++) {
        int ok = 0;
        if (sizes_ok) {
            const zv_u64 lo = offsets[i] < msgs_len ? offsets[i] : msgs_len;
            const zv_u64 hi = offsets[i + 1] < msgs_len ? offsets[i + 1] : msgs_len;
            const zv_u8 *pk = pks + i * pk_len, *sig = sigs + i * sig_len, *msg = msgs + lo;
            const zv_u64 len = hi > lo ? hi - lo : 0;
            const zv_u32 cl = (zv_u32)ctx_len;
            ok = level == 44   ? zv_mldsa_cpu_verify<44>(isa, pk, sig, msg, len, ctx, cl)
                 : level == 65 ? zv_mldsa_cpu_verify<65>(isa, pk, sig, msg, len, ctx, cl)
                               : zv_mldsa_cpu_verify<87>(isa, pk, sig, msg, len, ctx, cl);
        }
        verdicts[i] = (zv_u8)ok;
    }
}

// Exhaustive check of the vector UseHint (Decompose by fixed point) against the kernel's
// zv_mldsa_use_hint (Alg. 40 with Alg. 36 as written) for `level`, on every r in [0, q)
// and both hint values, with `isa`'s code: the number of mismatches (0 expected); −1 for an
// unknown level or an `isa` this CPU lacks.
extern "C" long zv_mldsa_cpu_check_use_hint(int level, int isa) {
#if ZV_MLDSA_X86
    if (isa < 1 || isa > zv_mldsa_cpu_best_isa()) return -1;
    switch (level) {
        case 44: return isa == 2 ? zv_mldsa_avx512::check_use_hint<zv_mldsa_params<44>>()
                                 : zv_mldsa_avx2::check_use_hint<zv_mldsa_params<44>>();
        case 65: return isa == 2 ? zv_mldsa_avx512::check_use_hint<zv_mldsa_params<65>>()
                                 : zv_mldsa_avx2::check_use_hint<zv_mldsa_params<65>>();
        case 87: return isa == 2 ? zv_mldsa_avx512::check_use_hint<zv_mldsa_params<87>>()
                                 : zv_mldsa_avx2::check_use_hint<zv_mldsa_params<87>>();
        default: return -1;
    }
#else
    (void)level, (void)isa;
    return -1;
#endif
}
