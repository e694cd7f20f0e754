// native_ml_dsa.cpp — the CPU backend's own ML-DSA-44/65/87 verify (FIPS 204 Alg. 3
// ML-DSA.Verify, pure interface, over Alg. 8 ML-DSA.Verify_internal), vectorized, with the
// verdicts of OpenSSL (app/engine/reference/reference.py make_verify_mldsa), item for item.
//
// What is shared with the kernels (app/engine/kernels/schemes/ml_dsa.cuh): the parameter
// sets and sizes, HintBitUnpack's checks (zv_mldsa_hint_is_valid), UseHint as the reference
// the vector one is checked against, SampleInBall where one block of its stream does not
// suffice, the tables, and the whole scalar verify, which is the portable path
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
//   - ExpandA's rejection sampling (Alg. 30/14) 16 (AVX-512: compress-store) or 8 (AVX2: a
//     permutation looked up by the accept mask) three-byte groups at a time;
//   - the hashes of each item — tr = H(pk), μ, SampleInBall's stream, c̃′ = H(μ ‖ w1) — run
//     across a group of 4 or 8 items, one item per Keccak lane (inputs of different lengths
//     side by side, each lane read out after its own last block);
//   - z decoded by whole byte groups (2 coefficients per 5 bytes, or 4 per 9) with the norm
//     check branch-free, the same verdict as zv_mldsa_unpack_z;
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

// For the AVX2 rejection sampler: idx[m] lists the set bits of the 8-bit mask m in order
// (the lanes to keep), padded with zeros; a permutation by it packs the kept lanes first.
struct zv_mldsa_compress_table {
    alignas(8) zv_u8 idx[256][8];
    zv_mldsa_compress_table() {
        for (int m = 0; m < 256; m++) {
            int k = 0;
            for (int b = 0; b < 8; b++)
                if (m >> b & 1) idx[m][k++] = (zv_u8)b;
            while (k < 8) idx[m][k++] = 0;
        }
    }
};
static const zv_mldsa_compress_table zv_mldsa_compress;

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

// Items [0, n) of a chunk with checked lengths (the columns as zv_cpu_ml_dsa's), on path
// `isa`: the vector paths take them in groups of their Keccak width, whose hashes run across
// the group; the portable path is the kernels' zv_mldsa_verify, item by item.
template <int LEVEL>
static void zv_mldsa_cpu_chunk(int isa, const zv_u8 *pks, const zv_u8 *sigs, const zv_u8 *msgs, size_t msgs_len,
                               const zv_u64 *offsets, size_t n, const zv_u8 *ctx, zv_u32 ctx_len, zv_u8 *verdicts) {
    typedef zv_mldsa_params<LEVEL> P;
    typedef zv_mldsa_sizes<P> S;
    enum { MAX_GROUP = 8 };
    const size_t group = isa >= 2 ? 8 : isa == 1 ? 4 : 1;
    for (size_t i0 = 0; i0 < n; i0 += group) {
        const int g = (int)(n - i0 < group ? n - i0 : group);
        const zv_u8 *pk[MAX_GROUP], *sig[MAX_GROUP], *msg[MAX_GROUP];
        zv_u64 len[MAX_GROUP];
        int ok[MAX_GROUP];
        for (int w = 0; w < g; w++) {
            const size_t i = i0 + w;
            const zv_u64 lo = offsets[i] < msgs_len ? offsets[i] : msgs_len;
            const zv_u64 hi = offsets[i + 1] < msgs_len ? offsets[i + 1] : msgs_len;
            pk[w] = pks + i * S::PK_BYTES;
            sig[w] = sigs + i * S::SIG_BYTES;
            msg[w] = msgs + lo;
            len[w] = hi > lo ? hi - lo : 0;
        }
#if ZV_MLDSA_X86
        if (isa >= 2)
            zv_mldsa_avx512::verify_group<P>(g, pk, sig, msg, len, ctx, ctx_len, ok);
        else if (isa == 1)
            zv_mldsa_avx2::verify_group<P>(g, pk, sig, msg, len, ctx, ctx_len, ok);
        else
#endif
            ok[0] = zv_mldsa_verify<LEVEL>(pk[0], S::PK_BYTES, sig[0], S::SIG_BYTES, msg[0], len[0], ctx, ctx_len);
        for (int w = 0; w < g; w++) verdicts[i0 + w] = (zv_u8)ok[w];
    }
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
    if (!want_pk || pk_len != want_pk || sig_len != want_sig || ctx_len > ZV_MLDSA_MAX_CTX) {
        memset(verdicts, 0, n);
        return;
    }
    const zv_u32 cl = (zv_u32)ctx_len;
    if (level == 44)
        zv_mldsa_cpu_chunk<44>(isa, pks, sigs, msgs, msgs_len, offsets, n, ctx, cl, verdicts);
    else if (level == 65)
        zv_mldsa_cpu_chunk<65>(isa, pks, sigs, msgs, msgs_len, offsets, n, ctx, cl, verdicts);
    else
        zv_mldsa_cpu_chunk<87>(isa, pks, sigs, msgs, msgs_len, offsets, n, ctx, cl, verdicts);
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
