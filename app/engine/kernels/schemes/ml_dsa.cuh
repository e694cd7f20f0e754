/* ml_dsa.cuh — ML-DSA-44/65/87 signature verification (FIPS 204), shared by host and device:
 * one thread per signature (zv_mldsa_verify) or one block per signature (zv_mldsa_verify_block).
 *
 * Semantics: FIPS 204 Alg. 3 ML-DSA.Verify (the pure, "external" interface) over Alg. 8
 * ML-DSA.Verify_internal, exactly as OpenSSL 3.5 decides it (the CPU backend's reference,
 * app/engine/reference.py).  The verdict is 1 (valid) only when all of these hold:
 *   1. pk_len and sig_len are the parameter set's (Table 2: 1312/2420, 1952/3309,
 *      2592/4627 bytes) and ctx_len <= 255 (Alg. 3 step 1; anything else is 0, and
 *      nothing is read);
 *   2. the hint h decodes (Alg. 21 HintBitUnpack): the K counts y[ω+i] never decrease and
 *      never exceed ω, the indices within one polynomial strictly increase, and every byte
 *      of y[0 .. ω-1] past the last index is zero;
 *   3. ‖z‖∞ < γ1 − β, with z = BitUnpack(·, γ1 − 1, γ1) (Alg. 19), each coefficient in
 *      [−γ1 + 1, γ1];
 *   4. c̃ = H(μ ‖ w1Encode(w1'), λ/4) with, H = SHAKE256 (§3.7):
 *        tr = H(pk, 64), M′ = 0 ‖ ctx_len ‖ ctx ‖ M (Alg. 3 step 5), μ = H(tr ‖ M′, 64),
 *        c = SampleInBall(c̃) (Alg. 29), Â = ExpandA(ρ) (Alg. 32, SHAKE128 rejection
 *        sampling, Alg. 30), w′ = NTT^-1(Â ∘ NTT(z) − NTT(c) ∘ NTT(t1 · 2^d)),
 *        w1' = UseHint(h, w′) (Alg. 40 with Decompose, Alg. 36), w1Encode (Alg. 28).
 * The checks run in the order 1, 2, 3, 4 and stop at the first failure; the verdict is the
 * conjunction, so the order changes nothing but the work done on a bad item.
 *
 * Arithmetic (mod q = 8380417, signed 32-bit coefficients, Montgomery radix R = 2^32):
 *   - zv_mldsa_mont_reduce(a), |a| < 2^31·q  →  r ≡ a·R^-1, |r| < q;
 *   - NTT (Alg. 41) with zetas in Montgomery form: input |a| < q, each of the 8 layers
 *     adds at most q, output |a| < 9q;
 *   - pointwise products (one Montgomery reduction, factor R^-1): inputs |a| < 9q and
 *     0 ≤ Â < q or |b| < 9q, so |a·b| < 81q² < 2^31·q; each product is < q, the row sum
 *     of L ≤ 7 products of Â∘ẑ minus ĉ∘t̂1 is < 8q;
 *   - zv_mldsa_reduce32 brings that below q (|r| ≤ 6283009), the input bound of NTT^-1;
 *   - NTT^-1 (Alg. 42, Gentleman–Sande, no reduction of the sums): after layer L the sums
 *     are < 2^L·q, the last layer's < 256q = 2145386752 < 2^31, so int32 holds them; the
 *     final multiplication by F = R²/256 (Montgomery) gives NTT^-1(x)·R, which cancels the
 *     R^-1 of the pointwise products; output |a| < q, then lifted to [0, q) for Decompose.
 * Every bound above is checked with ZV_CHECK in host builds (zv_port.cuh).
 *
 * Parallel layout (GPU) of the thread kernel: one thread per signature, grid-stride over the
 * batch (ZV_FOR_EACH).
 *   Why: about half the instructions are Keccak-f[1600] (ML-DSA-65: 30 SHAKE128 streams of 5
 *   permutations each for Â, plus 24 for tr, μ, c and c̃′, so 174 permutations, next to 18
 *   NTTs of 1024 butterflies; bench/results/ml_dsa_sass.md), and each SHAKE stream is
 *   inherently serial; one thread per item runs them with no synchronisation, no shared
 *   memory and no divergence between items (every
 *   item of a batch has the same parameter set and, apart from rejection sampling and the
 *   message length, the same control flow).  It also keeps one source for g++ and NVRTC
 *   with no block-level protocol to emulate on the host.  The cost: the per-item
 *   polynomials live in local memory (L1/L2 backed), not registers or shared memory:
 *   ẑ (L·1 KiB), ĉ, the row accumulator and the t̂1 row (1 KiB each) and the packed w1
 *   (≤ 1 KiB) — 6 KiB (ML-DSA-44) to 11 KiB (ML-DSA-87) per thread.  Â is never stored:
 *   each coefficient is multiplied into the row accumulator as it leaves the sampler, and
 *   t1 is unpacked row by row, so memory does not grow with K·L.
 *   The other layout, one block of 128 threads per signature with the polynomials in shared
 *   memory, is the block kernel at the end of this file ("one block per signature"); a
 *   kernel backend runs whichever measures faster per parameter set (registry.VERIFY_VARIANTS).
 *   Registers and memory (nvcc 13.0, sm_90, bench/results/kernels_ptxas_ml_dsa.txt): 254
 *   registers and no spills uncapped (most registers serve the unrolled Keccak rounds), so 8
 *   warps per SM; a stack frame of 8.7 KiB (ML-DSA-44), 9.8 KiB (65), 12 KiB (87) per thread
 *   for the arrays above and the two Keccak states; no shared memory.
 *
 * Index (public functions, in source order; the comment at each says more):
 *   zv_mldsa_mont_reduce(a)                     r ≡ a·2^-32 (mod q), |r| < q, for |a| < 2^31·q
 *   zv_mldsa_mont_mul(a, b)
 *   zv_mldsa_reduce32(a)                        r ≡ a (mod q) with |r| ≤ 6283009 < q, for |a| ≤ 2^31 − 2^22
 *                                               − 1
 *   zv_mldsa_caddq(a)                           |a| < q → a mod q in [0, q)
 *   zv_mldsa_ntt_butterfly(a, lg, b)            One butterfly of the NTT's layer len = 2^lg (128, 64, ...,
 *                                               1), b in [0, 128)
 *   zv_mldsa_invntt_butterfly(a, lg, b)         One butterfly of NTT^-1's layer len = 2^lg (1, 2, ..., 128),
 *                                               b in [0, 128)
 *   zv_mldsa_ntt(a)                             Alg. 41 NTT, in place
 *   zv_mldsa_invntt_tomont(a)                   Alg. 42 NTT^-1 times R (see the header): input |a| < q,
 *                                               output |a| < q
 *   zv_mldsa_unpack_bits(p, j, bits)            Coefficient j of a little-endian packing of `bits`-bit
 *                                               values (Alg. 16-19's bit order): bits j·bits 
 *   zv_mldsa_hint_is_valid(y)
 *   zv_mldsa_z_coefficient(c, bytes, j)
 *   zv_mldsa_unpack_z(z, bytes)
 *   zv_mldsa_t1_coefficient(t1_poly, j)         Coefficient j of t1·2^d (pkEncode's 10-bit t1, Alg. 23), <
 *                                               2^23 < q
 *   zv_mldsa_sample_in_ball(c, ct)
 *   zv_mldsa_expand_a_entry(rho, r, s, emit)
 *   zv_mldsa_expand_a_mac(acc, rho, r, s, zhat) acc += Â[r][s] ∘ ẑ (Montgomery products; |Â·ẑ| < q·9q)
 *   zv_mldsa_mu(mu, pk, msg, msg_len, ctx, ctx_len)
 *   zv_mldsa_challenge_matches(ct, mu, w1)
 *   zv_mldsa_use_hint(r, hint)
 *   zv_mldsa_verify(pk, pk_len, sig, sig_len, msg, msg_len, ctx, ctx_len)
 *   zv_mldsa_verify_block(b, pk, sig, msg, msg_len, ctx, ctx_len)
 *   zv_mldsa_verify_batch_block(b, pks, pk_len, sigs, sig_len, msgs, offsets, ctx, ctx_len, n, verdicts)
 */
#ifndef ZV_MLDSA_CUH
#define ZV_MLDSA_CUH

#include "zv_port.cuh"
/* One out-of-line Keccak-f[1600] for the ~30 sponge calls of a verification (keccak.cuh). */
#define ZV_KECCAK_OUTLINE 1
#include "hashes/keccak.cuh"
#include "tables/ml_dsa_tables.cuh"

#define ZV_MLDSA_N 256
#define ZV_MLDSA_D 13            /* dropped bits of t (Table 1) */
#define ZV_MLDSA_MAX_CTX 255     /* Alg. 3 step 1 */
#define ZV_MLDSA_SEED_BYTES 32   /* ρ */
#define ZV_MLDSA_TR_BYTES 64
#define ZV_MLDSA_MU_BYTES 64
#define ZV_MLDSA_T1_POLY_BYTES 320 /* 256 coefficients of 10 bits (Alg. 23 pkEncode) */

/* FIPS 204 Table 1, per parameter set; the derived sizes are Table 2's. */
template <int LEVEL> struct zv_mldsa_params;
template <> struct zv_mldsa_params<44> {
    static constexpr int K = 4, L = 4, ETA = 2, TAU = 39, OMEGA = 80, LAMBDA = 128, GAMMA1_LOG2 = 17;
    static constexpr zv_i32 GAMMA2 = (ZV_MLDSA_Q - 1) / 88;
};
template <> struct zv_mldsa_params<65> {
    static constexpr int K = 6, L = 5, ETA = 4, TAU = 49, OMEGA = 55, LAMBDA = 192, GAMMA1_LOG2 = 19;
    static constexpr zv_i32 GAMMA2 = (ZV_MLDSA_Q - 1) / 32;
};
template <> struct zv_mldsa_params<87> {
    static constexpr int K = 8, L = 7, ETA = 2, TAU = 60, OMEGA = 75, LAMBDA = 256, GAMMA1_LOG2 = 19;
    static constexpr zv_i32 GAMMA2 = (ZV_MLDSA_Q - 1) / 32;
};

/* The sizes every routine below derives from a parameter set P. */
template <class P> struct zv_mldsa_sizes {
    static constexpr zv_i32 GAMMA1 = (zv_i32)1 << P::GAMMA1_LOG2;
    static constexpr zv_i32 BETA = P::TAU * P::ETA;
    static constexpr int CT_BYTES = P::LAMBDA / 4;                 /* c̃ */
    static constexpr int Z_BITS = P::GAMMA1_LOG2 + 1;               /* bitlen(2γ1 − 1) */
    static constexpr int Z_POLY_BYTES = 32 * Z_BITS;
    static constexpr int W1_M = (ZV_MLDSA_Q - 1) / (2 * P::GAMMA2); /* values of w1: 44 or 16 */
    static constexpr int W1_BITS = W1_M == 44 ? 6 : 4;              /* bitlen(W1_M − 1) */
    static constexpr int W1_POLY_BYTES = 32 * W1_BITS;
    static constexpr int PK_BYTES = ZV_MLDSA_SEED_BYTES + ZV_MLDSA_T1_POLY_BYTES * P::K;
    static constexpr int SIG_BYTES = CT_BYTES + P::L * Z_POLY_BYTES + P::OMEGA + P::K;
};
static_assert(zv_mldsa_sizes<zv_mldsa_params<44>>::PK_BYTES == 1312 &&
              zv_mldsa_sizes<zv_mldsa_params<44>>::SIG_BYTES == 2420, "FIPS 204 Table 2, ML-DSA-44");
static_assert(zv_mldsa_sizes<zv_mldsa_params<65>>::PK_BYTES == 1952 &&
              zv_mldsa_sizes<zv_mldsa_params<65>>::SIG_BYTES == 3309, "FIPS 204 Table 2, ML-DSA-65");
static_assert(zv_mldsa_sizes<zv_mldsa_params<87>>::PK_BYTES == 2592 &&
              zv_mldsa_sizes<zv_mldsa_params<87>>::SIG_BYTES == 4627, "FIPS 204 Table 2, ML-DSA-87");

/* ------------------------------------------------------------------ arithmetic mod q */
#define ZV_MLDSA_MONT_BOUND ((zv_i64)ZV_MLDSA_Q << 31) /* 2^31·q */

/* r ≡ a·2^-32 (mod q), |r| < q, for |a| < 2^31·q: t = a·q^-1 mod 2^32 (signed) makes
 * a − t·q divisible by 2^32, and |a − t·q| < 2^31·q + 2^31·q. */
ZV_HD zv_i32 zv_mldsa_mont_reduce(zv_i64 a) {
    ZV_CHECK(a < ZV_MLDSA_MONT_BOUND && a > -ZV_MLDSA_MONT_BOUND);
    zv_i32 t = (zv_i32)((zv_u32)(zv_u64)a * ZV_MLDSA_QINV);
    zv_i32 r = (zv_i32)((a - (zv_i64)t * ZV_MLDSA_Q) >> 32);
    ZV_CHECK(r < ZV_MLDSA_Q && r > -ZV_MLDSA_Q);
    return r;
}

ZV_HD zv_i32 zv_mldsa_mont_mul(zv_i32 a, zv_i32 b) { return zv_mldsa_mont_reduce((zv_i64)a * b); }

/* r ≡ a (mod q) with |r| ≤ 6283009 < q, for |a| ≤ 2^31 − 2^22 − 1: since q ≈ 2^23,
 * round(a / 2^23) is within one of a / q. */
ZV_HD zv_i32 zv_mldsa_reduce32(zv_i32 a) {
    ZV_CHECK(a <= (1 << 30) && a >= -(1 << 30)); /* the callers' |a| < 8q < 2^30 */
    zv_i32 t = (a + (1 << 22)) >> 23;
    zv_i32 r = a - t * ZV_MLDSA_Q;
    ZV_CHECK(r < ZV_MLDSA_Q && r > -ZV_MLDSA_Q);
    return r;
}

/* |a| < q  →  a mod q in [0, q). */
ZV_HD zv_i32 zv_mldsa_caddq(zv_i32 a) {
    ZV_CHECK(a < ZV_MLDSA_Q && a > -ZV_MLDSA_Q);
    return a + ((a >> 31) & ZV_MLDSA_Q);
}

/* One butterfly of the NTT's layer len = 2^lg (128, 64, ..., 1), b in [0, 128): the layer's
 * butterflies touch disjoint pairs, so they run in any order or at once (the block kernel
 * gives each its own thread).  Butterfly b belongs to group b / len, whose zeta is
 * ZETAS[128 / len + group] (Alg. 41's k counts the groups of all layers so far).  The
 * layer is given by its logarithm so that the index arithmetic is shifts and masks, not a
 * division by a run-time len. */
ZV_HD void zv_mldsa_ntt_butterfly(zv_i32 *a, int lg, int b) {
    int len = 1 << lg, group = b >> lg, j = (group << (lg + 1)) + (b & (len - 1));
    zv_i32 t = zv_mldsa_mont_mul(ZV_MLDSA_ZETAS[(ZV_MLDSA_N / 2 >> lg) + group], a[j + len]);
    a[j + len] = a[j] - t;
    a[j] = a[j] + t;
}

/* One butterfly of NTT^-1's layer len = 2^lg (1, 2, ..., 128), b in [0, 128): Alg. 42 counts
 * k down from 256, so group g of layer len uses −ZETAS[256 / len − 1 − g]. */
ZV_HD void zv_mldsa_invntt_butterfly(zv_i32 *a, int lg, int b) {
    int len = 1 << lg, group = b >> lg, j = (group << (lg + 1)) + (b & (len - 1));
    zv_i32 zeta = -ZV_MLDSA_ZETAS[(ZV_MLDSA_N >> lg) - 1 - group];
    zv_i32 t = a[j];
    ZV_CHECK(t < 128 * ZV_MLDSA_Q && t > -128 * ZV_MLDSA_Q); /* < 2^(layer)·q */
    ZV_CHECK(a[j + len] < 128 * ZV_MLDSA_Q && a[j + len] > -128 * ZV_MLDSA_Q);
    a[j] = t + a[j + len];
    a[j + len] = zv_mldsa_mont_mul(zeta, t - a[j + len]);
}

/* Alg. 41 NTT, in place.  Input |a| < q; output |a| < 9q (each layer adds < q). */
ZV_HD void zv_mldsa_ntt(zv_i32 a[ZV_MLDSA_N]) {
    ZV_NO_UNROLL
    for (int lg = 7; lg >= 0; lg--) {
        ZV_NO_UNROLL
        for (int b = 0; b < ZV_MLDSA_N / 2; b++) zv_mldsa_ntt_butterfly(a, lg, b);
    }
    for (int j = 0; j < ZV_MLDSA_N; j++) ZV_CHECK(a[j] < 9 * ZV_MLDSA_Q && a[j] > -9 * ZV_MLDSA_Q);
}

/* Alg. 42 NTT^-1 times R (see the header): input |a| < q, output |a| < q.  The last step,
 * the product by F, is zv_mldsa_mont_mul(ZV_MLDSA_INVNTT_F, ·) per coefficient. */
ZV_HD void zv_mldsa_invntt_tomont(zv_i32 a[ZV_MLDSA_N]) {
    ZV_NO_UNROLL
    for (int lg = 0; lg <= 7; lg++) {
        ZV_NO_UNROLL
        for (int b = 0; b < ZV_MLDSA_N / 2; b++) zv_mldsa_invntt_butterfly(a, lg, b);
    }
    for (int j = 0; j < ZV_MLDSA_N; j++) a[j] = zv_mldsa_mont_mul(ZV_MLDSA_INVNTT_F, a[j]);
}

/* ------------------------------------------------------------------ decoding */
/* Coefficient j of a little-endian packing of `bits`-bit values (Alg. 16-19's bit order):
 * bits j·bits .. (j+1)·bits − 1 of the byte string, reading only the bytes they occupy. */
ZV_HD zv_u32 zv_mldsa_unpack_bits(const zv_u8 *p, int j, int bits) {
    int bit = j * bits, byte = bit >> 3, shift = bit & 7;
    int nbytes = (shift + bits + 7) >> 3;
    zv_u32 v = 0;
    for (int b = 0; b < nbytes; b++) v |= (zv_u32)p[byte + b] << (8 * b);
    return (v >> shift) & (((zv_u32)1 << bits) - 1);
}

/* Alg. 21 HintBitUnpack's checks on y = the last ω + K bytes of sig; 1 when h decodes. */
template <class P>
ZV_HD int zv_mldsa_hint_is_valid(const zv_u8 *y) {
    /* No return inside the loops: the inner loop's length differs from item to item, and a
     * return there leaves the thread kernel's warp converging again only where the whole
     * verification ends (under GPGPU-Sim, which reconverges at the immediate post-dominator,
     * the rest of the verification ran one lane at a time; docs/kernels.md, "Timing mode: a
     * simulated second opinion").  Indices into the hint positions stay below ω whatever
     * the bytes say, and any failed check clears ok. */
    int ok = 1, index = 0;
    for (int i = 0; i < P::K; i++) {
        int end = y[P::OMEGA + i];
        ok &= (end >= index) & (end <= P::OMEGA);
        int stop = end <= P::OMEGA ? end : P::OMEGA;
        for (int p = index + 1; p < stop; p++) ok &= y[p - 1] < y[p];
        index = stop > index ? stop : index;
    }
    for (int p = index; p < P::OMEGA; p++) ok &= y[p] == 0;
    return ok;
}

/* Coefficient j of z = BitUnpack(sig bytes, γ1 − 1, γ1) (Alg. 19), each in [−γ1 + 1, γ1],
 * and the norm check of Alg. 8 step 13: returns 0 when |z_j| ≥ γ1 − β, else 1 with *c = z_j
 * (|z_j| < γ1 − β < q). */
template <class P>
ZV_HD int zv_mldsa_z_coefficient(zv_i32 *c, const zv_u8 *bytes, int j) {
    typedef zv_mldsa_sizes<P> S;
    zv_i32 v = S::GAMMA1 - (zv_i32)zv_mldsa_unpack_bits(bytes, j, S::Z_BITS);
    ZV_CHECK(v <= S::GAMMA1 && v > -S::GAMMA1);
    if (v >= S::GAMMA1 - S::BETA || v <= -(S::GAMMA1 - S::BETA)) return 0;
    *c = v;
    return 1;
}

/* z = BitUnpack(·) of one polynomial with the norm check: 0 when some |z| ≥ γ1 − β. */
template <class P>
ZV_HD int zv_mldsa_unpack_z(zv_i32 z[ZV_MLDSA_N], const zv_u8 *bytes) {
    for (int j = 0; j < ZV_MLDSA_N; j++)
        if (!zv_mldsa_z_coefficient<P>(&z[j], bytes, j)) return 0;
    return 1;
}

/* Coefficient j of t1·2^d (pkEncode's 10-bit t1, Alg. 23), < 2^23 < q. */
ZV_HD zv_i32 zv_mldsa_t1_coefficient(const zv_u8 *t1_poly, int j) {
    return (zv_i32)(zv_mldsa_unpack_bits(t1_poly, j, 10) << ZV_MLDSA_D);
}

/* ------------------------------------------------------------------ sampling */
/* Alg. 29 SampleInBall(c̃): τ coefficients ±1, the rest 0; |c| ≤ 1. */
template <class P>
ZV_HD void zv_mldsa_sample_in_ball(zv_i32 c[ZV_MLDSA_N], const zv_u8 *ct) {
    zv_keccak_ctx h;
    zv_shake256_init(&h);
    zv_keccak_absorb(&h, ct, zv_mldsa_sizes<P>::CT_BYTES);
    zv_u8 s[8];
    zv_keccak_squeeze(&h, s, 8);
    zv_u64 signs = zv_load_le64(s); /* bit k of the 64 (BytesToBits order) is h[k] */
    for (int i = 0; i < ZV_MLDSA_N; i++) c[i] = 0;
    for (int i = ZV_MLDSA_N - P::TAU; i < ZV_MLDSA_N; i++) {
        zv_u8 j;
        do {
            zv_keccak_squeeze(&h, &j, 1);
        } while (j > i);
        c[i] = c[j];
        c[j] = 1 - 2 * (zv_i32)(signs & 1);
        signs >>= 1;
    }
}

/* Â[r][s] = RejNTTPoly(ρ ‖ s ‖ r) (Alg. 32 and 30), coefficient by coefficient:
 * emit(j, a) for j = 0..255 in order, a in [0, q).  SHAKE128 output is read 3 bytes at a
 * time, CoeffFromThreeBytes (Alg. 14) keeps the 23-bit value when < q.  Nothing is stored:
 * each caller multiplies the coefficient into its accumulator as it leaves the sampler.  A
 * SHAKE128 block is 168 = 56·3 bytes, so no triple straddles two. */
template <class EMIT>
ZV_HD void zv_mldsa_expand_a_entry(const zv_u8 *rho, int r, int s, EMIT emit) {
    zv_keccak_ctx g;
    zv_shake128_init(&g);
    zv_keccak_absorb(&g, rho, ZV_MLDSA_SEED_BYTES);
    zv_u8 idx[2] = {(zv_u8)s, (zv_u8)r};
    zv_keccak_absorb(&g, idx, 2);
    zv_u8 block[ZV_SHAKE128_RATE];
    int j = 0;
    while (j < ZV_MLDSA_N) {
        zv_keccak_squeeze(&g, block, ZV_SHAKE128_RATE);
        for (int b = 0; b < (int)ZV_SHAKE128_RATE && j < ZV_MLDSA_N; b += 3) {
            zv_i32 a = (zv_i32)(block[b] | ((zv_u32)block[b + 1] << 8) | ((zv_u32)(block[b + 2] & 0x7F) << 16));
            if (a < ZV_MLDSA_Q) emit(j++, a);
        }
    }
}

/* acc += Â[r][s] ∘ ẑ (Montgomery products; |Â·ẑ| < q·9q). */
ZV_HD void zv_mldsa_expand_a_mac(zv_i32 acc[ZV_MLDSA_N], const zv_u8 rho[ZV_MLDSA_SEED_BYTES], int r, int s,
                              const zv_i32 zhat[ZV_MLDSA_N]) {
    zv_mldsa_expand_a_entry(rho, r, s, [&](int j, zv_i32 a) { acc[j] += zv_mldsa_mont_mul(a, zhat[j]); });
}

/* The mu = H(H(pk, 64) ‖ 0 ‖ ctx_len ‖ ctx ‖ M, 64) of Alg. 3 step 5 and Alg. 8 step 7. */
template <class P>
ZV_HD void zv_mldsa_mu(zv_u8 mu[ZV_MLDSA_MU_BYTES], const zv_u8 *pk, const zv_u8 *msg, zv_u64 msg_len,
                       const zv_u8 *ctx, zv_u32 ctx_len) {
    zv_keccak_ctx h;
    zv_u8 tr[ZV_MLDSA_TR_BYTES];
    zv_shake256(pk, zv_mldsa_sizes<P>::PK_BYTES, tr, ZV_MLDSA_TR_BYTES);
    zv_shake256_init(&h);
    zv_keccak_absorb(&h, tr, ZV_MLDSA_TR_BYTES);
    zv_u8 prefix[2] = {0, (zv_u8)ctx_len};
    zv_keccak_absorb(&h, prefix, 2);
    zv_keccak_absorb(&h, ctx, ctx_len);
    zv_keccak_absorb(&h, msg, msg_len);
    zv_keccak_squeeze(&h, mu, ZV_MLDSA_MU_BYTES);
}

/* c̃′ == c̃ (Alg. 8 step 13), over λ/4 bytes; 1 when equal. */
template <class P> ZV_HD int zv_mldsa_ct_equal(const zv_u8 *ct, const zv_u8 *ct2) {
    zv_u8 diff = 0;
    for (int i = 0; i < zv_mldsa_sizes<P>::CT_BYTES; i++) diff |= (zv_u8)(ct2[i] ^ ct[i]);
    return diff == 0;
}

/* c̃′ = H(μ ‖ w1Encode(w1′), λ/4) == c̃ (Alg. 8 steps 12-13); 1 when equal. */
template <class P>
ZV_HD int zv_mldsa_challenge_matches(const zv_u8 *ct, const zv_u8 mu[ZV_MLDSA_MU_BYTES], const zv_u8 *w1) {
    typedef zv_mldsa_sizes<P> S;
    zv_keccak_ctx h;
    zv_shake256_init(&h);
    zv_keccak_absorb(&h, mu, ZV_MLDSA_MU_BYTES);
    zv_keccak_absorb(&h, w1, P::K * S::W1_POLY_BYTES);
    zv_u8 ct2[S::CT_BYTES];
    zv_keccak_squeeze(&h, ct2, S::CT_BYTES);
    return zv_mldsa_ct_equal<P>(ct, ct2);
}

/* ------------------------------------------------------------------ hints and w1 */
/* Alg. 40 UseHint on r in [0, q) with Decompose (Alg. 36): r = r1·2γ2 + r0, r0 in
 * (−γ2, γ2], except that r − r0 = q − 1 gives r1 = 0, r0 − 1.  A hint moves r1 one step
 * towards r0's side, mod m = (q − 1)/(2γ2). */
template <class P>
ZV_HD zv_i32 zv_mldsa_use_hint(zv_i32 r, int hint) {
    typedef zv_mldsa_sizes<P> S;
    ZV_CHECK(r >= 0 && r < ZV_MLDSA_Q);
    zv_i32 r0 = r % (2 * P::GAMMA2);
    if (r0 > P::GAMMA2) r0 -= 2 * P::GAMMA2;
    zv_i32 r1;
    if (r - r0 == ZV_MLDSA_Q - 1) {
        r1 = 0;
        r0 -= 1;
    } else {
        r1 = (r - r0) / (2 * P::GAMMA2);
    }
    ZV_CHECK(r1 >= 0 && r1 < S::W1_M);
    if (!hint) return r1;
    return r0 > 0 ? (r1 + 1) % S::W1_M : (r1 + S::W1_M - 1) % S::W1_M;
}

/* ------------------------------------------------------------------ verification */
/* The verdict for one item (semantics in the header): 1 valid, 0 invalid.  ctx is this
 * item's context string (a batch passes the same one for every item). */
template <int LEVEL>
ZV_HD int zv_mldsa_verify(const zv_u8 *pk, zv_u32 pk_len, const zv_u8 *sig, zv_u32 sig_len, const zv_u8 *msg,
                          zv_u64 msg_len, const zv_u8 *ctx, zv_u32 ctx_len) {
    typedef zv_mldsa_params<LEVEL> P;
    typedef zv_mldsa_sizes<P> S;
    if (pk_len != (zv_u32)S::PK_BYTES || sig_len != (zv_u32)S::SIG_BYTES || ctx_len > ZV_MLDSA_MAX_CTX) return 0;
    const zv_u8 *rho = pk, *t1_bytes = pk + ZV_MLDSA_SEED_BYTES;
    const zv_u8 *ct = sig, *z_bytes = sig + S::CT_BYTES, *y = z_bytes + P::L * S::Z_POLY_BYTES;

    /* Step 2 of the semantics: the hint encoding. */
    if (!zv_mldsa_hint_is_valid<P>(y)) return 0;

    /* Step 3: z, its norm, and ẑ = NTT(z) (|z| < γ1 − β < q, so NTT's input bound holds). */
    zv_i32 zhat[P::L][ZV_MLDSA_N];
    for (int s = 0; s < P::L; s++) {
        if (!zv_mldsa_unpack_z<P>(zhat[s], z_bytes + s * S::Z_POLY_BYTES)) return 0;
        zv_mldsa_ntt(zhat[s]);
    }

    /* μ = H(H(pk, 64) ‖ 0 ‖ ctx_len ‖ ctx ‖ M, 64). */
    zv_u8 mu[ZV_MLDSA_MU_BYTES];
    zv_mldsa_mu<P>(mu, pk, msg, msg_len, ctx, ctx_len);

    /* ĉ = NTT(SampleInBall(c̃)); |c| ≤ 1. */
    zv_i32 chat[ZV_MLDSA_N];
    zv_mldsa_sample_in_ball<P>(chat, ct);
    zv_mldsa_ntt(chat);

    /* Row by row: w′_r = NTT^-1(Σ_s Â[r][s]∘ẑ_s − ĉ∘NTT(t1_r·2^d)), then UseHint and
     * w1Encode into w1 (the row's hint indices are y[start .. y[ω + r]), increasing). */
    zv_u8 w1[P::K * S::W1_POLY_BYTES];
    int hint = 0;
    for (int r = 0; r < P::K; r++) {
        zv_i32 acc[ZV_MLDSA_N], t[ZV_MLDSA_N];
        for (int j = 0; j < ZV_MLDSA_N; j++) acc[j] = 0;
        for (int s = 0; s < P::L; s++) zv_mldsa_expand_a_mac(acc, rho, r, s, zhat[s]);
        const zv_u8 *t1r = t1_bytes + r * ZV_MLDSA_T1_POLY_BYTES;
        for (int j = 0; j < ZV_MLDSA_N; j++) t[j] = zv_mldsa_t1_coefficient(t1r, j);
        zv_mldsa_ntt(t);
        for (int j = 0; j < ZV_MLDSA_N; j++) {
            ZV_CHECK(acc[j] < P::L * ZV_MLDSA_Q && acc[j] > -P::L * ZV_MLDSA_Q);
            acc[j] = zv_mldsa_reduce32(acc[j] - zv_mldsa_mont_mul(chat[j], t[j])); /* |·| < (L + 1)q ≤ 8q */
        }
        zv_mldsa_invntt_tomont(acc);

        zv_u8 *out = w1 + r * S::W1_POLY_BYTES;
        int end = y[P::OMEGA + r];
        zv_u32 bitbuf = 0;
        int nbits = 0, nout = 0;
        for (int j = 0; j < ZV_MLDSA_N; j++) {
            int h = hint < end && y[hint] == j;
            hint += h;
            zv_i32 w = zv_mldsa_use_hint<P>(zv_mldsa_caddq(acc[j]), h);
            /* SimpleBitPack (Alg. 16): little-endian, W1_BITS per coefficient. */
            bitbuf |= (zv_u32)w << nbits;
            nbits += S::W1_BITS;
            while (nbits >= 8) {
                out[nout++] = (zv_u8)bitbuf;
                bitbuf >>= 8;
                nbits -= 8;
            }
        }
        ZV_CHECK(nout == S::W1_POLY_BYTES && nbits == 0 && hint == end);
    }

    return zv_mldsa_challenge_matches<P>(ct, mu, w1);
}

/* ------------------------------------------------------------------ one block per signature
 * The block kernel (zv_verify_ml_dsa_block_<level>, ml_dsa.cu): the same verdict as
 * zv_mldsa_verify, bit for bit (the same checks in the same functions), computed by a block
 * of ZV_MLDSA_BLOCK threads that keeps the signature's polynomials in shared memory.
 *
 * Block size 128: a layer of the NTT is 128 butterflies, so every thread has exactly one per
 * polynomial per layer and no thread idles in the 16 NTT layers that dominate the
 * barriers; 256 threads would leave half of them idle there and in ExpandA (K·L ≤ 56
 * streams), and double the registers a block holds for nothing.  The phases, each ended
 * by a barrier (ZV_SYNC):
 *   1. thread 0: the hint encoding (Alg. 21's checks, zv_mldsa_hint_is_valid);
 *   2. all: z decoded with its norm check (zv_mldsa_z_coefficient) and t1·2^d
 *      (zv_mldsa_t1_coefficient) into shared memory, one coefficient per thread and
 *      step; the last thread: c = SampleInBall(c̃);  then a failed check ends the item;
 *   3. all: NTT of the L + K + 1 polynomials (ẑ, t̂1, ĉ) together, one butterfly
 *      (zv_mldsa_ntt_butterfly) per thread and step, a barrier per layer (8);
 *   4. two things at once, neither reading what the other writes: the first warp computes
 *      μ = H(tr ‖ M′) with tr = H(pk) (the longest serial hash: 11–21 permutations) by the
 *      block's sponge (keccak.cuh, "one sponge per block": 25 threads per permutation, the
 *      state in shared memory, two warp barriers per round), while the other warps sample Â:
 *      thread 32 + e one matrix entry Â[r][s] (zv_mldsa_expand_a_entry, its own SHAKE128
 *      stream, e < K·L ≤ 56), multiplied into the row accumulator as it is sampled (shared
 *      atomic adds: integer sums, exact in any order); then the one before the last thread
 *      builds the hint bitmap.  Why: run one after the other, both on the first warp, they
 *      were most of a block's time (GPGPU-Sim's timing mode: ~1.1 M cycles per item, the
 *      first warp issuing alone at ~0.12 IPC); side by side they share it.  ExpandA's Keccak
 *      stays one stream per thread: K·L independent streams already fill 16–56 threads;
 *   5. all: Σ Â∘ẑ − ĉ∘t̂1, reduced (zv_mldsa_reduce32);
 *   6. all: NTT^-1 of the K rows, one butterfly (zv_mldsa_invntt_butterfly) per thread and
 *      step, a barrier per layer (8);
 *   7. all: the factor F, UseHint (zv_mldsa_use_hint) and w1Encode, each thread a group of
 *      coefficients that fills whole bytes (2 of 4 bits, or 4 of 6 bits);
 *   8. all: c̃′ = H(μ ‖ w1) by the block's sponge; thread 0: c̃′ == c̃ (zv_mldsa_ct_equal).
 * Shared memory (zv_mldsa_block): (2K + L + 1) KiB of polynomials, K/4 KiB of hint bytes,
 * the packed w1, tr, μ, c̃′ and the sponge's 440 bytes: about 0.6 KiB over the 15,172 / 20,804 /
 * 27,716 bytes ptxas gave ML-DSA-44 / 65 / 87 before the sponge (bench/results/kernels_ptxas_ml_dsa.txt),
 * under the 48 KiB of static shared memory a block may have.  The bounds of every intermediate are those of the
 * header, checked by the same ZV_CHECKs. */
#define ZV_MLDSA_BLOCK 128

template <class P> struct zv_mldsa_block {
    zv_i32 poly[P::L + P::K + 1][ZV_MLDSA_N]; /* z → ẑ (L), t1·2^d → t̂1 (K), c → ĉ (1) */
    zv_i32 acc[P::K][ZV_MLDSA_N];             /* Σ_s Â[r][s]∘ẑ_s, then w′ */
    zv_u8 hint[P::K][ZV_MLDSA_N];             /* h as one byte per coefficient */
    zv_u8 w1[P::K * zv_mldsa_sizes<P>::W1_POLY_BYTES];
    zv_u8 tr[ZV_MLDSA_TR_BYTES];
    zv_u8 mu[ZV_MLDSA_MU_BYTES];
    zv_u8 ct2[zv_mldsa_sizes<P>::CT_BYTES];   /* c̃′ */
    zv_keccak_block_state keccak;             /* the block's sponge (keccak.cuh, "one sponge per block") */
    zv_u32 bad;                               /* a check of phases 1–2 failed */
};

/* The verdict of one item whose lengths are checked (semantics in the header), by every
 * thread of the block; thread 0's return value is the verdict (the others return 0).
 * Holds barriers: called by all threads of the block, with the same item. */
template <class P>
ZV_HD int zv_mldsa_verify_block(zv_mldsa_block<P> *b, const zv_u8 *pk, const zv_u8 *sig, const zv_u8 *msg,
                                zv_u64 msg_len, const zv_u8 *ctx, zv_u32 ctx_len) {
    typedef zv_mldsa_sizes<P> S;
    const int L = P::L, K = P::K, N = ZV_MLDSA_N, HALF = ZV_MLDSA_N / 2;
    const zv_u8 *rho = pk, *t1_bytes = pk + ZV_MLDSA_SEED_BYTES;
    const zv_u8 *ct = sig, *z_bytes = sig + S::CT_BYTES, *y = z_bytes + L * S::Z_POLY_BYTES;
    const zv_u64 tid = ZV_BLOCK_TID, last = ZV_BLOCK_NTHREADS - 1, second = last > 0 ? last - 1 : 0;

    if (tid == 0) b->bad = !zv_mldsa_hint_is_valid<P>(y);
    ZV_SYNC();
    ZV_BLOCK_FOR(x, L * N) {
        zv_i32 c = 0;
        if (!zv_mldsa_z_coefficient<P>(&c, z_bytes + (x / N) * S::Z_POLY_BYTES, (int)(x % N))) b->bad = 1;
        b->poly[x / N][x % N] = c;
    }
    ZV_BLOCK_FOR(x, K * N) {
        b->poly[L + x / N][x % N] = zv_mldsa_t1_coefficient(t1_bytes + (x / N) * ZV_MLDSA_T1_POLY_BYTES, (int)(x % N));
        b->acc[x / N][x % N] = 0;
        b->hint[x / N][x % N] = 0;
    }
    if (tid == last) zv_mldsa_sample_in_ball<P>(b->poly[L + K], ct);
    ZV_SYNC();
    if (b->bad) return 0; /* uniform; `bad` is next written after the caller's closing barrier */

    ZV_NO_UNROLL
    for (int lg = 7; lg >= 0; lg--) {
        ZV_BLOCK_FOR(x, (L + K + 1) * HALF) zv_mldsa_ntt_butterfly(b->poly[x / HALF], lg, (int)(x % HALF));
        ZV_SYNC();
    }

    ZV_BLOCK_FOR(x, (L + K + 1) * N) ZV_CHECK(b->poly[x / N][x % N] < 9 * ZV_MLDSA_Q && b->poly[x / N][x % N] > -9 * ZV_MLDSA_Q);
    if (tid < ZV_WARP_SIZE) {
        /* μ = H(tr ‖ M′, 64), tr = H(pk, 64) (Alg. 8 steps 6-7, as zv_mldsa_mu), by the block's
         * sponge on the first warp (phase 4) ... */
        const zv_bytes pk_part = {pk, (zv_u64)S::PK_BYTES};
        zv_keccak_block_sponge(&b->keccak, ZV_SHAKE256_RATE, ZV_KECCAK_DS_SHAKE, &pk_part, 1, b->tr, ZV_MLDSA_TR_BYTES);
        ZV_SYNC_WARP(); /* tr, written by threads 0..7, before μ's sponge reads it */
        const zv_u8 prefix[2] = {0, (zv_u8)ctx_len};
        const zv_bytes mu_parts[4] = {{b->tr, ZV_MLDSA_TR_BYTES}, {prefix, 2}, {ctx, ctx_len}, {msg, msg_len}};
        zv_keccak_block_sponge(&b->keccak, ZV_SHAKE256_RATE, ZV_KECCAK_DS_SHAKE, mu_parts, 4, b->mu, ZV_MLDSA_MU_BYTES);
    } else {
        /* ... while the other warps sample Â: entry e on thread ZV_WARP_SIZE + e. */
        for (zv_u64 e = tid - ZV_WARP_SIZE; e < (zv_u64)(K * L); e += ZV_BLOCK_NTHREADS - ZV_WARP_SIZE) {
            zv_i32 *acc = b->acc[e / L];
            const zv_i32 *zhat = b->poly[e % L];
            zv_mldsa_expand_a_entry(rho, (int)(e / L), (int)(e % L),
                                    [&](int j, zv_i32 a) { zv_shared_add_i32(&acc[j], zv_mldsa_mont_mul(a, zhat[j])); });
        }
    }
    if (tid == second) {
        int start = 0;
        for (int r = 0; r < K; r++) {
            int end = y[P::OMEGA + r]; /* increasing and ≤ ω (phase 1) */
            for (int p = start; p < end; p++) b->hint[r][y[p]] = 1;
            start = end;
        }
    }
    ZV_SYNC();

    ZV_BLOCK_FOR(x, K * N) {
        zv_i32 a = b->acc[x / N][x % N];
        ZV_CHECK(a < L * ZV_MLDSA_Q && a > -L * ZV_MLDSA_Q);
        b->acc[x / N][x % N] = zv_mldsa_reduce32(a - zv_mldsa_mont_mul(b->poly[L + K][x % N], b->poly[L + x / N][x % N]));
    }
    ZV_SYNC();

    ZV_NO_UNROLL
    for (int lg = 0; lg <= 7; lg++) {
        ZV_BLOCK_FOR(x, K * HALF) zv_mldsa_invntt_butterfly(b->acc[x / HALF], lg, (int)(x % HALF));
        ZV_SYNC();
    }

    /* SimpleBitPack (Alg. 16) by groups of GC coefficients = GB whole bytes. */
    const int GC = S::W1_BITS == 6 ? 4 : 2, GB = GC * S::W1_BITS / 8, GROUPS = N / GC;
    ZV_BLOCK_FOR(x, K * GROUPS) {
        int r = (int)(x / GROUPS), j0 = (int)(x % GROUPS) * GC;
        zv_u32 bits = 0;
        for (int c = 0; c < GC; c++) {
            zv_i32 w = zv_mldsa_caddq(zv_mldsa_mont_mul(ZV_MLDSA_INVNTT_F, b->acc[r][j0 + c]));
            bits |= (zv_u32)zv_mldsa_use_hint<P>(w, b->hint[r][j0 + c]) << (c * S::W1_BITS);
        }
        zv_u8 *out = b->w1 + r * S::W1_POLY_BYTES + (j0 / GC) * GB;
        for (int k = 0; k < GB; k++) out[k] = (zv_u8)(bits >> (8 * k));
    }
    ZV_SYNC();
    /* c̃′ = H(μ ‖ w1Encode(w1′), λ/4) (zv_mldsa_challenge_matches), by the block's sponge. */
    const zv_bytes ct_parts[2] = {{b->mu, ZV_MLDSA_MU_BYTES}, {b->w1, (zv_u64)K * S::W1_POLY_BYTES}};
    zv_keccak_block_hash(&b->keccak, ZV_SHAKE256_RATE, ZV_KECCAK_DS_SHAKE, ct_parts, 2, b->ct2, S::CT_BYTES);
    return tid == 0 ? zv_mldsa_ct_equal<P>(ct, b->ct2) : 0;
}

/* The batch loop of the block kernel (kernel contract, docs/kernels.md "Entry points"): one
 * block per item, grid-stride; every check of zv_mldsa_verify's step 1 (lengths, context)
 * and the contract's decreasing offsets give 0 exactly as the thread kernel does. */
template <int LEVEL>
ZV_HD void zv_mldsa_verify_batch_block(zv_mldsa_block<zv_mldsa_params<LEVEL>> *b, const zv_u8 *pks, zv_u32 pk_len,
                                       const zv_u8 *sigs, zv_u32 sig_len, const zv_u8 *msgs, const zv_u64 *offsets,
                                       const zv_u8 *ctx, zv_u32 ctx_len, zv_u64 n, zv_u8 *verdicts) {
    typedef zv_mldsa_params<LEVEL> P;
    typedef zv_mldsa_sizes<P> S;
    /* Uniform over the batch: a bad length or context reads nothing. */
    int sizes_ok = pk_len == (zv_u32)S::PK_BYTES && sig_len == (zv_u32)S::SIG_BYTES && ctx_len <= ZV_MLDSA_MAX_CTX;
    ZV_FOR_EACH_BLOCK(i, n) {
        zv_u64 lo = offsets[i], hi = offsets[i + 1];
        int ok = 0;
        if (sizes_ok && hi >= lo) /* uniform over the block: every thread skips every barrier */
            ok = zv_mldsa_verify_block<P>(b, pks + i * pk_len, sigs + i * sig_len, msgs + lo, hi - lo, ctx, ctx_len);
        if (ZV_BLOCK_TID == 0) verdicts[i] = (zv_u8)ok;
        ZV_SYNC(); /* the next item rewrites the block state */
    }
}

#endif /* ZV_MLDSA_CUH */
