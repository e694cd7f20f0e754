/* slh_dsa.cuh — SLH-DSA signature verification (FIPS 205), all 12 parameter sets.
 *
 * Semantics: FIPS 205 slh_verify, pure / external interface (Alg. 24) on top of
 * slh_verify_internal (Alg. 20): M' = toByte(0, 1) ‖ toByte(|ctx|, 1) ‖ ctx ‖ M.  The
 * verdict is 1 only when pk is 2n bytes, sig is exactly the set's signature size (FIPS 205
 * Table 2), the context is at most 255 bytes, and the hypertree root implied by sig
 * (H_msg → FORS → d layers of WOTS+ and XMSS) equals PK.root byte for byte.  Anything
 * else is 0; nothing is read past an item's bytes.  Batch options do not apply (prehashed
 * is secp256k1 only; HashSLH-DSA is not served) and are ignored.
 *
 * Tweakable hashes exactly as FIPS 205 §11:
 *   SHAKE sets (§11.1): F, H, T_l = SHAKE256(PK.seed ‖ ADRS ‖ M, 8n); H_msg = SHAKE256(R ‖
 *     PK.seed ‖ PK.root ‖ M', 8m).
 *   SHA2, category 1 (n = 16, §11.2.1): F, H, T_l = Trunc_n(SHA-256(PK.seed ‖ toByte(0, 64 −
 *     n) ‖ ADRSc ‖ M)); H_msg = MGF1-SHA-256(R ‖ PK.seed ‖ SHA-256(R ‖ PK.seed ‖ PK.root ‖
 *     M'), m).
 *   SHA2, categories 3 and 5 (n = 24, 32, §11.2.2): F as above with SHA-256; H and T_l with
 *     SHA-512 and PK.seed padded to 128 bytes; H_msg with SHA-512 and MGF1-SHA-512.
 *   ADRSc (§11.2) is the 22-byte compressed address: layer (1) ‖ tree (8) ‖ type (1) ‖
 *     the three last words (12).  The padded PK.seed block is compressed once per signature
 *     (zv_slh_keys: the SHA-256 and, where used, SHA-512 midstates) and every F/H/T resumes
 *     from it, so F and H cost one compression each.
 *
 * Parallel layout (GPU): one block of ZV_SLH_LANES = 32 threads — one warp — per signature;
 * blocks walk the batch grid-stride (ZV_FOR_EACH_BLOCK).  Within a signature the lanes share
 * the independent work: the k FORS trees (one lane per tree: leaf F then a H's up the auth
 * path) and, in each of the d layers, the len WOTS+ chains (up to 15 F's each, taken from a
 * queue longest first: zv_slh_wots_chains);
 * lane 0 alone does what is inherently serial (H_msg, each T_l, the h' H's of an XMSS path),
 * and layers follow each other, separated by ZV_SYNC.  Block state (midstates, digest, the
 * chain tops / FORS roots, the running root) is in shared memory: at most 2.3 KiB per block
 * (256f), so shared memory never limits occupancy.  Why a warp per signature and not a thread:
 * a thread per signature needs no barrier but holds a whole signature's progress in its
 * registers and local memory and leaves most of the GPU idle below ~100 k items in flight
 * (128f verifies ~6,000 compressions serially); a warp per signature finishes one signature
 * 10–30× sooner, keeps the per-thread state to one chain value, and reads each signature's
 * chain values coalesced.  The cost is idle lanes: a layer's chains keep the warp busy for
 * about 15–17 F's however many lanes are done, k = 33 or 35 FORS trees take two rounds, and
 * the serial T_l / auth-path steps run on one lane — scripts/slh_dsa_agreement measures this
 * "critical path" in the host build and the prediction (scripts/slh_dsa_ptxas) uses it.
 * Occupancy: one warp per block; __launch_bounds__(32, ZV_SLH_MIN_BLOCKS = 16) lets ptxas use
 * up to 128 registers, which it does (124–128, a few spilled bytes in the SHA2 sets:
 * bench/results/kernels_ptxas_slh_dsa.txt), so 16 warps per SM, 25% of the 64.  sm_90's
 * limit of 32 blocks per SM would allow 32 warps only at 64 registers, which a 64-bit SHA-512
 * or Keccak state in 32-bit halves (16 and 50 registers) plus the block under compression
 * cannot fit without heavy spilling.
 *
 * Host build: the entry points run the block as 32 fibers with real barriers (ZV_BLOCK_RUN,
 * zv_port.cuh), the block state shared by them, so a missing ZV_SYNC or a race on the block
 * state changes verdicts there too; the hash-count builds (ZV_SLH_STATS) run one fiber,
 * whose bookkeeping models the 32 lanes.
 *
 * Parameter sets: ZV_SLH_PARAM_SETS below (FIPS 205 Table 2); lg_w = 4 (w = 16) for all, so
 * len = 2n + 3 (len1 = 2n digits, len2 = 3 checksum digits).
 *
 * Index (public functions, in source order; the comment at each says more):
 *   zv_slh_adrs_make(layer, tree, type, kp, w2, w3)
 *   zv_slh_adrs_full(out, a)                    The 32-byte ADRS (SHAKE sets)
 *   zv_slh_adrs_compressed(out, a)              ADRSc, 22 bytes (SHA2 sets, §11.2): the layer and type fit a
 *                                               byte (layer < 22, type ≤ 4)
 *   zv_slh_sha256_compress(h, blk)
 *   zv_slh_sha512_compress(h, blk)
 *   zv_slh_keccak_permute(st)
 *   zv_slh_next(c)                              The next byte of the concatenation; only called while bytes
 *                                               remain
 *   zv_slh_total(seg, ns)
 *   zv_slh_sha256_stream(h_in, pre, seg, ns, out)
 *                                               out
 *   zv_slh_sha512_stream(h_in, pre, seg, ns, out)
 *                                               out
 *   zv_slh_shake256_stream(seg, ns, out, outlen)
 *                                               out (outlen ≤ 136 bytes) = SHAKE256(seg[0] ‖ … ‖ seg[ns−1])
 *   zv_slh_keys_init(ks, pk_seed)
 *   zv_slh_hash1(ks, adrs, x, xlen, y, ylen, use_sha512, out)
 *   zv_slh_F(ks, adrs, x, out)
 *   zv_slh_H(ks, adrs, left, right, out)
 *   zv_slh_T(ks, adrs, in, inlen, out)
 *   zv_slh_hmsg(digest, R, pk, msg, mlen, ctx, ctx_len, internal)
 *   zv_slh_fors_index(digest, i)
 *   zv_slh_split(digest, idx_tree, idx_leaf)
 *   zv_slh_wots_digit(node, i)
 *   zv_slh_climb(ks, adrs, node, idx, auth, height)
 *   zv_slh_take(next)                           The atomic "take a ticket" of the chain queue
 *   zv_slh_wots_chains(b, j, idx_tree, idx_leaf, sx)
 *   zv_slh_verify(b, pk, sig, msg, mlen, ctx, ctx_len, internal)
 *   zv_slh_verify_batch(b, pks, pk_len, sigs, sig_len, msgs, offsets, ctx, ctx_len, count, verdicts)
 */
#ifndef ZV_SLH_DSA_CUH
#define ZV_SLH_DSA_CUH

#include "zv_port.cuh"
#include "hashes/sha2.cuh"
#include "hashes/keccak.cuh"

#define ZV_SLH_LANES 32         /* threads per signature (the launch block) */
#define ZV_SLH_W 16             /* Winternitz parameter, lg_w = 4 */
#define ZV_SLH_MAX_CTX 255
/* FIPS 205 §4.2 address types */
#define ZV_SLH_WOTS_HASH 0u
#define ZV_SLH_WOTS_PK 1u
#define ZV_SLH_TREE 2u
#define ZV_SLH_FORS_TREE 3u
#define ZV_SLH_FORS_ROOTS 4u

/* FIPS 205 Table 2: X(name, shake, n, h, d, h', a, k, m); the order is the wire-code order
 * of app/core/schemes.py (0x20 sha2-128s ... 0x2B shake-256f) and of the hook's `set`. */
#define ZV_SLH_PARAM_SETS(X)                         \
    X(sha2_128s, 0, 16, 63, 7, 9, 12, 14, 30)        \
    X(sha2_128f, 0, 16, 66, 22, 3, 6, 33, 34)        \
    X(sha2_192s, 0, 24, 63, 7, 9, 14, 17, 39)        \
    X(sha2_192f, 0, 24, 66, 22, 3, 8, 33, 42)        \
    X(sha2_256s, 0, 32, 64, 8, 8, 14, 22, 47)        \
    X(sha2_256f, 0, 32, 68, 17, 4, 9, 35, 49)        \
    X(shake_128s, 1, 16, 63, 7, 9, 12, 14, 30)       \
    X(shake_128f, 1, 16, 66, 22, 3, 6, 33, 34)       \
    X(shake_192s, 1, 24, 63, 7, 9, 14, 17, 39)       \
    X(shake_192f, 1, 24, 66, 22, 3, 8, 33, 42)       \
    X(shake_256s, 1, 32, 64, 8, 8, 14, 22, 47)       \
    X(shake_256f, 1, 32, 68, 17, 4, 9, 35, 49)

template <int SHAKE, int N, int H, int D, int HP, int A, int K, int M>
struct zv_slh_params {
    static constexpr int shake = SHAKE, n = N, h = H, d = D, hp = HP, a = A, k = K, m = M;
    static constexpr int len1 = 2 * N, len = 2 * N + 3;
    static constexpr int wide = !SHAKE && N > 16; /* SHA-512 for H, T_l, H_msg (§11.2.2) */
    static constexpr zv_u32 pk_bytes = 2 * N;
    static constexpr zv_u32 sig_bytes = (1 + K * (1 + A) + H + D * (2 * N + 3)) * N;
    static constexpr int md_bytes = (K * A + 7) / 8, tree_bytes = (H - HP + 7) / 8, leaf_bytes = (HP + 7) / 8;
    static constexpr int nodes = (2 * N + 3) > K ? (2 * N + 3) : K; /* chain tops or FORS roots */
    static_assert(H == D * HP, "h = d h'");
    static_assert(md_bytes + tree_bytes + leaf_bytes == M, "m of FIPS 205 Table 2");
    static_assert(H - HP <= 64 && HP <= 32, "tree index fits a u64, leaf index a u32");
    static_assert(2 * N * (ZV_SLH_W - 1) < (1 << 12), "len2 = 3 (Eq. 5.2)");
};

/* ------------------------------------------------------------------ hash-operation counts
 * Host builds with -DZV_SLH_STATS (scripts/slh_dsa_agreement) count compressions —
 * SHA-256 blocks, SHA-512 blocks, Keccak-f[1600] permutations — in zv_slh_stats[0..2], and
 * the same along the critical path of a 32-lane block in zv_slh_stats[3..5]: a cooperative
 * loop's index i runs on lane i mod 32, a queue's next job on the least loaded lane (list
 * scheduling, as the GPU's queue runs), and at each barrier the phase costs its busiest lane.
 * Every other build compiles these to nothing. */
#if !ZV_CUDA_COMPILER && defined(ZV_SLH_STATS)
extern "C" __attribute__((visibility("default"))) zv_u64 zv_slh_stats[6];
zv_u64 zv_slh_stats[6];
static zv_u64 zv_slh_lane_cost[ZV_SLH_LANES][3];
static zv_u32 zv_slh_lane;
static void zv_slh_phase_end() {
    for (int kind = 0; kind < 3; kind++) {
        zv_u64 most = 0;
        for (int l = 0; l < ZV_SLH_LANES; l++) {
            if (zv_slh_lane_cost[l][kind] > most) most = zv_slh_lane_cost[l][kind];
            zv_slh_lane_cost[l][kind] = 0;
        }
        zv_slh_stats[3 + kind] += most;
    }
}
/* A queue's next job goes to the lane that is free first: the least loaded one. */
static void zv_slh_lane_next_free() {
    zv_u64 best = ~0ull;
    for (zv_u32 l = 0; l < ZV_SLH_LANES; l++) {
        zv_u64 load = zv_slh_lane_cost[l][0] + zv_slh_lane_cost[l][1] + zv_slh_lane_cost[l][2];
        if (load < best) best = load, zv_slh_lane = l;
    }
}
#define ZV_SLH_LANE(i) (zv_slh_lane = (zv_u32)((i) % ZV_SLH_LANES))
#define ZV_SLH_LANE_NEXT_FREE() zv_slh_lane_next_free()
#define ZV_SLH_COUNT(kind, c) (zv_slh_stats[kind] += (c), zv_slh_lane_cost[zv_slh_lane][kind] += (c))
#define ZV_SLH_SYNC() zv_slh_phase_end()
#else
#define ZV_SLH_LANE(i) ((void)0)
#define ZV_SLH_LANE_NEXT_FREE() ((void)0)
#define ZV_SLH_COUNT(kind, c) ((void)0)
#define ZV_SLH_SYNC() ZV_SYNC()
#endif
#define ZV_SLH_SHA256 0
#define ZV_SLH_SHA512 1
#define ZV_SLH_KECCAK 2

/* ------------------------------------------------------------------ addresses (§4.2) */
typedef struct {
    zv_u32 layer;
    zv_u64 tree;  /* the 12-byte tree address; its top 4 bytes are always 0 (h − h' ≤ 64) */
    zv_u32 type;
    zv_u32 kp;    /* key-pair address */
    zv_u32 w2;    /* chain address / tree height */
    zv_u32 w3;    /* hash address / tree index */
} zv_slh_adrs;

ZV_HD zv_slh_adrs zv_slh_adrs_make(zv_u32 layer, zv_u64 tree, zv_u32 type, zv_u32 kp, zv_u32 w2, zv_u32 w3) {
    zv_slh_adrs a;
    a.layer = layer; a.tree = tree; a.type = type; a.kp = kp; a.w2 = w2; a.w3 = w3;
    return a;
}

/* The 32-byte ADRS (SHAKE sets). */
ZV_HD void zv_slh_adrs_full(zv_u8 out[32], const zv_slh_adrs *a) {
    zv_store_be32(out, a->layer);
    zv_store_be32(out + 4, 0);
    zv_store_be64(out + 8, a->tree);
    zv_store_be32(out + 16, a->type);
    zv_store_be32(out + 20, a->kp);
    zv_store_be32(out + 24, a->w2);
    zv_store_be32(out + 28, a->w3);
}

/* ADRSc, 22 bytes (SHA2 sets, §11.2): the layer and type fit a byte (layer < 22, type ≤ 4). */
ZV_HD void zv_slh_adrs_compressed(zv_u8 out[22], const zv_slh_adrs *a) {
    ZV_CHECK(a->layer < 256 && a->type <= ZV_SLH_FORS_ROOTS);
    out[0] = (zv_u8)a->layer;
    zv_store_be64(out + 1, a->tree);
    out[9] = (zv_u8)a->type;
    zv_store_be32(out + 10, a->kp);
    zv_store_be32(out + 14, a->w2);
    zv_store_be32(out + 18, a->w3);
}

/* ------------------------------------------------------------------ compressions
 * Every SHA-256 / SHA-512 compression and Keccak-f[1600] permutation of this kernel goes
 * through these three out-of-line calls, so the unrolled primitives (sha2.cuh, keccak.cuh)
 * exist once in the module however many parameter sets and call sites use them: that keeps
 * the GPU code small enough for the instruction cache and the NVRTC / nvcc build short. */
ZV_NOINLINE void zv_slh_sha256_compress(zv_u32 h[8], const zv_u8 blk[64]) {
    zv_sha256_block(h, blk);
    ZV_SLH_COUNT(ZV_SLH_SHA256, 1);
}

ZV_NOINLINE void zv_slh_sha512_compress(zv_u64 h[8], const zv_u8 blk[128]) {
    zv_sha512_block(h, blk);
    ZV_SLH_COUNT(ZV_SLH_SHA512, 1);
}

ZV_NOINLINE void zv_slh_keccak_permute(zv_u64 st[25]) {
    zv_keccak_f1600(st);
    ZV_SLH_COUNT(ZV_SLH_KECCAK, 1);
}

/* ------------------------------------------------------------------ multi-block hashing
 * T_l, H_msg and MGF1 hash concatenations (R ‖ PK.seed ‖ PK.root ‖ 0 ‖ |ctx| ‖ ctx ‖ M,
 * ADRSc ‖ chain tops …) of a few pieces read in place; each block is
 * assembled byte by byte from the pieces and the padding (FIPS 180-4 §5.1, FIPS 202 §5.1). */
typedef struct {
    const zv_u8 *p;
    zv_u64 len;
} zv_slh_seg;

typedef struct {
    const zv_slh_seg *seg;
    int si;
    zv_u64 off;
} zv_slh_cursor;

/* The next byte of the concatenation; only called while bytes remain. */
ZV_HD zv_u8 zv_slh_next(zv_slh_cursor *c) {
    while (c->off == c->seg[c->si].len) {
        c->si++;
        c->off = 0;
    }
    return c->seg[c->si].p[c->off++];
}

ZV_HD zv_u64 zv_slh_total(const zv_slh_seg *seg, int ns) {
    zv_u64 len = 0;
    for (int i = 0; i < ns; i++) len += seg[i].len;
    return len;
}

/* out (32 bytes) = SHA-256 of X ‖ seg[0] ‖ … ‖ seg[ns−1], where X is `pre` bytes (a multiple
 * of 64) already compressed into the chaining value h (the IV when pre = 0). */
ZV_NOINLINE void zv_slh_sha256_stream(const zv_u32 h_in[8], zv_u64 pre, const zv_slh_seg *seg, int ns, zv_u8 out[32]) {
    zv_u64 len = zv_slh_total(seg, ns), bits = (pre + len) << 3;
    zv_u64 blocks = (len + 9 + 63) / 64;  /* + 0x80 and the 64-bit length */
    zv_u32 h[8];
    for (int i = 0; i < 8; i++) h[i] = h_in[i];
    zv_slh_cursor c = {seg, 0, 0};
    for (zv_u64 b = 0; b < blocks; b++) {
        zv_u8 blk[64];
        for (int j = 0; j < 64; j++) {
            zv_u64 pos = b * 64 + (zv_u64)j;
            zv_u8 v = 0;
            if (pos < len) v = zv_slh_next(&c);
            else if (pos == len) v = 0x80;
            else if (b + 1 == blocks && j >= 56) v = (zv_u8)(bits >> (8 * (63 - j)));
            blk[j] = v;
        }
        zv_slh_sha256_compress(h, blk);
    }
    for (int i = 0; i < 8; i++) zv_store_be32(out + 4 * i, h[i]);
}

/* out (64 bytes) = SHA-512 likewise (pre a multiple of 128; lengths below 2^61 bytes, so the
 * high half of the 128-bit length field is zero). */
ZV_NOINLINE void zv_slh_sha512_stream(const zv_u64 h_in[8], zv_u64 pre, const zv_slh_seg *seg, int ns, zv_u8 out[64]) {
    zv_u64 len = zv_slh_total(seg, ns), bits = (pre + len) << 3;
    zv_u64 blocks = (len + 17 + 127) / 128;
    zv_u64 h[8];
    for (int i = 0; i < 8; i++) h[i] = h_in[i];
    zv_slh_cursor c = {seg, 0, 0};
    for (zv_u64 b = 0; b < blocks; b++) {
        zv_u8 blk[128];
        for (int j = 0; j < 128; j++) {
            zv_u64 pos = b * 128 + (zv_u64)j;
            zv_u8 v = 0;
            if (pos < len) v = zv_slh_next(&c);
            else if (pos == len) v = 0x80;
            else if (b + 1 == blocks && j >= 120) v = (zv_u8)(bits >> (8 * (127 - j)));
            blk[j] = v;
        }
        zv_slh_sha512_compress(h, blk);
    }
    for (int i = 0; i < 8; i++) zv_store_be64(out + 8 * i, h[i]);
}

/* out (outlen ≤ 136 bytes) = SHAKE256(seg[0] ‖ … ‖ seg[ns−1]): pad10*1 after the suffix
 * 1111 (byte 0x1F, FIPS 202 §6.2 and Appendix B.2), one squeeze block. */
ZV_NOINLINE void zv_slh_shake256_stream(const zv_slh_seg *seg, int ns, zv_u8 *out, zv_u32 outlen) {
    zv_u64 len = zv_slh_total(seg, ns);
    zv_u64 blocks = len / ZV_SHAKE256_RATE + 1;
    zv_u64 st[25];
    for (int i = 0; i < 25; i++) st[i] = 0;
    zv_slh_cursor c = {seg, 0, 0};
    ZV_CHECK(outlen <= ZV_SHAKE256_RATE);
    for (zv_u64 b = 0; b < blocks; b++) {
        for (zv_u32 j = 0; j < ZV_SHAKE256_RATE; j++) {
            zv_u64 pos = b * ZV_SHAKE256_RATE + j;
            zv_u8 v = pos < len ? zv_slh_next(&c) : 0;
            if (pos == len) v ^= (zv_u8)ZV_KECCAK_DS_SHAKE;
            if (b + 1 == blocks && j == ZV_SHAKE256_RATE - 1) v ^= 0x80;
            st[j >> 3] ^= (zv_u64)v << (8 * (j & 7));
        }
        zv_slh_keccak_permute(st);
    }
    for (zv_u32 i = 0; i < outlen; i++) out[i] = (zv_u8)(st[i >> 3] >> (8 * (i & 7)));
}

/* ------------------------------------------------------------------ per-signature keys */
typedef struct {
    const zv_u8 *pk_seed;  /* n bytes, in the batch */
    zv_u32 mid256[8];      /* SHA-256 state after PK.seed ‖ toByte(0, 64 − n) (SHA2 sets) */
    zv_u64 mid512[8];      /* SHA-512 state after PK.seed ‖ toByte(0, 128 − n) (n > 16 SHA2) */
} zv_slh_keys;

template <class P>
ZV_HD void zv_slh_keys_init(zv_slh_keys *ks, const zv_u8 *pk_seed) {
    ks->pk_seed = pk_seed;
    if (P::shake) return;  /* SHAKE absorbs PK.seed per call: it does not fill a block */
    zv_u8 blk[128];
    zv_memset(blk, 0, sizeof blk);
    zv_memcpy(blk, pk_seed, P::n);
    for (int i = 0; i < 8; i++) ks->mid256[i] = ZV_SHA256_IV[i];
    zv_slh_sha256_compress(ks->mid256, blk);
    if (P::wide) {
        for (int i = 0; i < 8; i++) ks->mid512[i] = ZV_SHA512_IV[i];
        zv_slh_sha512_compress(ks->mid512, blk);
    }
}

/* ------------------------------------------------------------------ F and H: one compression
 * out = the tweakable hash of x ‖ y (xlen + ylen bytes: n for F, 2n for H), as SHA-256 (F;
 * H at n = 16), SHA-512 (H at n > 16) or SHAKE256.  One block / permutation suffices: after
 * the midstate, 22 + 2n ≤ 55 bytes fit SHA-256's first block only for n = 16, which is why
 * SHA2's H at n > 16 is SHA-512 (22 + 64 ≤ 111); SHAKE: n + 32 + 2n ≤ 128 < 136.  `out` may
 * alias x or y (the inputs are copied into the block first). */
template <class P>
ZV_NOINLINE void zv_slh_hash1(const zv_slh_keys *ks, const zv_slh_adrs *adrs, const zv_u8 *x, zv_u32 xlen,
                              const zv_u8 *y, zv_u32 ylen, int use_sha512, zv_u8 *out) {
    ZV_CHECK(xlen + ylen <= 2 * P::n);
    if (P::shake) {
        zv_u64 st[25];
        ZV_UNROLL for (int i = 0; i < 25; i++) st[i] = 0;
        zv_u8 ab[32];
        zv_slh_adrs_full(ab, adrs);
        zv_u32 pos = 0;
        for (zv_u32 i = 0; i < (zv_u32)P::n; i++, pos++) st[pos >> 3] ^= (zv_u64)ks->pk_seed[i] << (8 * (pos & 7));
        for (zv_u32 i = 0; i < 32; i++, pos++) st[pos >> 3] ^= (zv_u64)ab[i] << (8 * (pos & 7));
        for (zv_u32 i = 0; i < xlen; i++, pos++) st[pos >> 3] ^= (zv_u64)x[i] << (8 * (pos & 7));
        for (zv_u32 i = 0; i < ylen; i++, pos++) st[pos >> 3] ^= (zv_u64)y[i] << (8 * (pos & 7));
        ZV_CHECK(pos < ZV_SHAKE256_RATE);
        st[pos >> 3] ^= (zv_u64)ZV_KECCAK_DS_SHAKE << (8 * (pos & 7));
        st[(ZV_SHAKE256_RATE - 1) >> 3] ^= (zv_u64)0x80 << 56;
        zv_slh_keccak_permute(st);
        for (zv_u32 i = 0; i < (zv_u32)P::n; i++) out[i] = (zv_u8)(st[i >> 3] >> (8 * (i & 7)));
    } else if (!use_sha512) {
        zv_u8 blk[64];
        zv_memset(blk, 0, 64);
        zv_slh_adrs_compressed(blk, adrs);
        zv_u32 pos = 22;
        for (zv_u32 i = 0; i < xlen; i++) blk[pos++] = x[i];
        for (zv_u32 i = 0; i < ylen; i++) blk[pos++] = y[i];
        ZV_CHECK(pos <= 55);
        blk[pos] = 0x80;
        zv_store_be64(blk + 56, (zv_u64)(64 + pos) << 3);
        zv_u32 st[8];
        ZV_UNROLL for (int i = 0; i < 8; i++) st[i] = ks->mid256[i];
        zv_slh_sha256_compress(st, blk);
        for (zv_u32 i = 0; i < (zv_u32)P::n; i++) out[i] = (zv_u8)(st[i >> 2] >> (24 - 8 * (i & 3)));
    } else {
        zv_u8 blk[128];
        zv_memset(blk, 0, 128);
        zv_slh_adrs_compressed(blk, adrs);
        zv_u32 pos = 22;
        for (zv_u32 i = 0; i < xlen; i++) blk[pos++] = x[i];
        for (zv_u32 i = 0; i < ylen; i++) blk[pos++] = y[i];
        ZV_CHECK(pos <= 111);
        blk[pos] = 0x80;
        zv_store_be64(blk + 120, (zv_u64)(128 + pos) << 3);
        zv_u64 st[8];
        ZV_UNROLL for (int i = 0; i < 8; i++) st[i] = ks->mid512[i];
        zv_slh_sha512_compress(st, blk);
        for (zv_u32 i = 0; i < (zv_u32)P::n; i++) out[i] = (zv_u8)(st[i >> 3] >> (56 - 8 * (i & 7)));
    }
}

template <class P>
ZV_HD void zv_slh_F(const zv_slh_keys *ks, const zv_slh_adrs *adrs, const zv_u8 *x, zv_u8 *out) {
    zv_slh_hash1<P>(ks, adrs, x, P::n, x, 0, 0, out);
}

template <class P>
ZV_HD void zv_slh_H(const zv_slh_keys *ks, const zv_slh_adrs *adrs, const zv_u8 *left, const zv_u8 *right,
                    zv_u8 *out) {
    zv_slh_hash1<P>(ks, adrs, left, P::n, right, P::n, P::wide, out);
}

/* T_l over l·n bytes (l = len WOTS+ chain tops or k FORS roots): several blocks. */
template <class P>
ZV_HD void zv_slh_T(const zv_slh_keys *ks, const zv_slh_adrs *adrs, const zv_u8 *in, zv_u32 inlen, zv_u8 *out) {
    zv_u8 ab[32], d[64];
    if (P::shake) {
        zv_slh_adrs_full(ab, adrs);
        zv_slh_seg seg[3] = {{ks->pk_seed, (zv_u64)P::n}, {ab, 32}, {in, inlen}};
        zv_slh_shake256_stream(seg, 3, out, P::n);
        return;
    }
    zv_slh_adrs_compressed(ab, adrs);
    zv_slh_seg seg[2] = {{ab, 22}, {in, inlen}};
    if (P::wide) zv_slh_sha512_stream(ks->mid512, 128, seg, 2, d);
    else zv_slh_sha256_stream(ks->mid256, 64, seg, 2, d);
    zv_memcpy(out, d, P::n);
}

/* ------------------------------------------------------------------ H_msg (§11) */
/* digest (m bytes) = H_msg(R, PK.seed, PK.root, M'), M' = 0 ‖ |ctx| ‖ ctx ‖ M, or M' = M for
 * the internal interface (Alg. 20; the tests' ACVP hook). */
template <class P>
ZV_HD void zv_slh_hmsg(zv_u8 *digest, const zv_u8 *R, const zv_u8 *pk, const zv_u8 *msg, zv_u64 mlen,
                       const zv_u8 *ctx, zv_u32 ctx_len, int internal) {
    zv_u8 pre[2] = {0, (zv_u8)ctx_len};
    /* R ‖ PK.seed ‖ PK.root ‖ M' */
    zv_slh_seg seg[5] = {{R, (zv_u64)P::n}, {pk, 2 * (zv_u64)P::n}, {pre, 2}, {ctx, ctx_len}, {msg, mlen}};
    int ns = internal ? 2 : 4;
    seg[ns].p = msg;
    seg[ns].len = mlen;
    ns++;
    if (P::shake) {
        zv_slh_shake256_stream(seg, ns, digest, P::m);
        return;
    }
    /* MGF1 (RFC 8017 §B.2.1) with seed R ‖ PK.seed ‖ SHA-x(R ‖ PK.seed ‖ PK.root ‖ M'). */
    zv_u8 inner[64], counter[4], block[64];
    zv_u32 dlen = P::wide ? 64 : 32;
    if (P::wide) zv_slh_sha512_stream(ZV_SHA512_IV, 0, seg, ns, inner);
    else zv_slh_sha256_stream(ZV_SHA256_IV, 0, seg, ns, inner);
    zv_slh_seg mgf[4] = {{R, (zv_u64)P::n}, {pk, (zv_u64)P::n}, {inner, dlen}, {counter, 4}};
    for (zv_u32 off = 0, i = 0; off < (zv_u32)P::m; off += dlen, i++) {
        zv_store_be32(counter, i);
        if (P::wide) zv_slh_sha512_stream(ZV_SHA512_IV, 0, mgf, 4, block);
        else zv_slh_sha256_stream(ZV_SHA256_IV, 0, mgf, 4, block);
        zv_u32 take = (zv_u32)P::m - off < dlen ? (zv_u32)P::m - off : dlen;
        zv_memcpy(digest + off, block, take);
    }
}

/* ------------------------------------------------------------------ index arithmetic */
/* Digit i of base_2b(md, a, k) (Alg. 4): bits i·a .. i·a + a − 1 of md, big-endian.  The
 * 3-byte window may run past md into the digest's tree bytes; those bits are shifted out. */
template <class P>
ZV_HD zv_u32 zv_slh_fors_index(const zv_u8 *digest, zv_u32 i) {
    zv_u32 bit = i * P::a, byte = bit >> 3;
    ZV_CHECK(byte + 2 < (zv_u32)P::m && (bit & 7) + P::a <= 24);
    zv_u32 win = ((zv_u32)digest[byte] << 16) | ((zv_u32)digest[byte + 1] << 8) | digest[byte + 2];
    return (win >> (24 - (bit & 7) - P::a)) & ((1u << P::a) - 1);
}

/* idx_tree and idx_leaf from the digest (Alg. 19 lines 7–10). */
template <class P>
ZV_HD void zv_slh_split(const zv_u8 *digest, zv_u64 *idx_tree, zv_u32 *idx_leaf) {
    zv_u64 t = 0;
    for (int i = 0; i < P::tree_bytes; i++) t = (t << 8) | digest[P::md_bytes + i];
    zv_u32 l = 0;
    for (int i = 0; i < P::leaf_bytes; i++) l = (l << 8) | digest[P::md_bytes + P::tree_bytes + i];
    *idx_tree = P::h - P::hp == 64 ? t : t & ((1ull << (P::h - P::hp)) - 1);
    *idx_leaf = l & ((1u << P::hp) - 1);
}

/* Digit i of the WOTS+ message (Alg. 8): the 2n nibbles of the n-byte node, then the three
 * nibbles of csum = Σ (15 − digit) ≤ 2n·15 ≤ 960 < 2^12 (its bytes are csum << 4, Eq. 5.2). */
template <class P>
ZV_HD zv_u32 zv_slh_wots_digit(const zv_u8 *node, zv_u32 i) {
    if (i < (zv_u32)P::len1) return (node[i >> 1] >> (4 * (~i & 1))) & 15u;
    zv_u32 csum = 0;
    for (int j = 0; j < P::n; j++) csum += 30u - (node[j] >> 4) - (node[j] & 15u);
    ZV_CHECK(csum <= 15u * P::len1);
    return (csum >> (4 * (P::len - 1 - i))) & 15u;
}

/* The authentication-path climb of Alg. 11 (lines 7–17) and Alg. 17 (lines 10–20): adrs
 * holds the starting tree index; node (n bytes) becomes the root of the `height` levels. */
template <class P>
ZV_HD void zv_slh_climb(const zv_slh_keys *ks, zv_slh_adrs *adrs, zv_u8 *node, zv_u32 idx, const zv_u8 *auth,
                        zv_u32 height) {
    for (zv_u32 j = 0; j < height; j++) {
        const zv_u8 *sib = auth + j * P::n;
        adrs->w2 = j + 1;
        if (((idx >> j) & 1) == 0) {
            adrs->w3 >>= 1;
            zv_slh_H<P>(ks, adrs, node, sib, node);
        } else {
            adrs->w3 = (adrs->w3 - 1) >> 1;
            zv_slh_H<P>(ks, adrs, sib, node, node);
        }
    }
}

/* ------------------------------------------------------------------ slh_verify */
/* Block-shared state of one signature (shared memory on the GPU). */
template <class P>
struct zv_slh_block {
    zv_slh_keys keys;
    zv_u8 digest[P::m];
    zv_u8 nodes[P::nodes * P::n];  /* chain tops of one layer, or the k FORS roots */
    zv_u8 root[P::n];              /* FORS public key, then each layer's XMSS root */
    zv_u8 digit[P::len];           /* WOTS+ digits of the current layer's message */
    zv_u8 order[P::len];           /* chains by number of steps, most first */
    zv_u32 count[ZV_SLH_W];        /* chains per digit value */
    zv_u32 next;                   /* work queue: the next position of order[] to take */
};

/* The atomic "take a ticket" of the chain queue: shared-memory atomicAdd on the GPU; the
 * host's fibers run one at a time between barriers, so a plain increment is atomic there. */
ZV_HD zv_u32 zv_slh_take(zv_u32 *next) {
#if ZV_DEVICE_BUILD
    return atomicAdd(next, 1u);
#else
    return (*next)++;
#endif
}

/* Layer j's WOTS+ chains (Alg. 8 lines 1–13, Alg. 5): b->nodes[i] = chain i of the
 * signature sx run from its digit to w − 1.  The chains have 0–15 steps each, and len (35,
 * 51, 67) exceeds the 32 lanes, so a fixed chain-per-lane split leaves the warp waiting on
 * its unluckiest lanes (about 21 / 27 / 31 steps per layer on random digits).  Instead the
 * chains are sorted by steps, most first (a counting sort over the 16 digit values, digit
 * value v on lane v), and taken from a queue: lane t starts with order[t], and a lane whose
 * chain is done takes the next ticket.  That is longest-processing-time-first list
 * scheduling, about 15 / 15 / 17 steps.  The loop does one F per lane per pass and never
 * nests, so a lane that moves to its next chain does not wait for the others to reconverge.
 * Ends with b->root no longer needed (the caller's barrier follows). */
template <class P>
ZV_HD void zv_slh_wots_chains(zv_slh_block<P> *b, zv_u32 j, zv_u64 idx_tree, zv_u32 idx_leaf, const zv_u8 *sx) {
    const int n = P::n;
    ZV_BLOCK_FOR(c, P::len) b->digit[c] = (zv_u8)zv_slh_wots_digit<P>(b->root, (zv_u32)c);
    ZV_SLH_SYNC();
    ZV_BLOCK_FOR(v, ZV_SLH_W) {
        zv_u32 cnt = 0;
        for (int c = 0; c < P::len; c++) cnt += b->digit[c] == v;
        b->count[v] = cnt;
    }
    ZV_SLH_SYNC();
    ZV_BLOCK_FOR(v, ZV_SLH_W) {
        zv_u32 at = 0;
        for (zv_u32 u = 0; u < (zv_u32)v; u++) at += b->count[u];
        for (int c = 0; c < P::len; c++)
            if (b->digit[c] == v) b->order[at++] = (zv_u8)c;
    }
    if (ZV_BLOCK_TID == 0) b->next = (zv_u32)ZV_BLOCK_NTHREADS;
    ZV_SLH_SYNC();

    zv_slh_adrs adrs = zv_slh_adrs_make(j, idx_tree, ZV_SLH_WOTS_HASH, idx_leaf, 0, 0);
    zv_u8 x[P::n];
    zv_u32 pos = (zv_u32)ZV_BLOCK_TID, c = 0, step = ZV_SLH_W - 1;
    if (pos < (zv_u32)P::len) {
        c = b->order[pos];
        step = b->digit[c];
        zv_memcpy(x, sx + c * n, n);
        ZV_SLH_LANE_NEXT_FREE();
    }
    while (pos < (zv_u32)P::len) {
        ZV_CHECK(c < (zv_u32)P::len && step < ZV_SLH_W);
        if (step < ZV_SLH_W - 1) {
            adrs.w2 = c;
            adrs.w3 = step++;
            zv_slh_F<P>(&b->keys, &adrs, x, x);
        }
        if (step == ZV_SLH_W - 1) {
            zv_memcpy(b->nodes + c * n, x, n);
            pos = zv_slh_take(&b->next);
            if (pos < (zv_u32)P::len) {
                c = b->order[pos];
                step = b->digit[c];
                zv_memcpy(x, sx + c * n, n);
                ZV_SLH_LANE_NEXT_FREE();
            }
        }
    }
}

/* The verdict (1 valid) on one item whose lengths are already checked (pk 2n bytes, sig
 * P::sig_bytes, ctx ≤ 255 bytes).  Called by every thread of the block (it holds barriers);
 * all threads return the same verdict. */
template <class P>
ZV_HD int zv_slh_verify(zv_slh_block<P> *b, const zv_u8 *pk, const zv_u8 *sig, const zv_u8 *msg, zv_u64 mlen,
                        const zv_u8 *ctx, zv_u32 ctx_len, int internal) {
    const int n = P::n;
    const zv_u8 *sig_fors = sig + n;
    const zv_u8 *sig_ht = sig + (1 + P::k * (1 + P::a)) * n;
    if (ZV_BLOCK_TID == 0) {
        ZV_SLH_LANE(0);
        zv_slh_keys_init<P>(&b->keys, pk);
        zv_slh_hmsg<P>(b->digest, sig, pk, msg, mlen, ctx, ctx_len, internal);
    }
    ZV_SLH_SYNC();
    zv_u64 idx_tree;
    zv_u32 idx_leaf;
    zv_slh_split<P>(b->digest, &idx_tree, &idx_leaf);

    /* FORS (Alg. 17): one lane per tree. */
    ZV_BLOCK_FOR(t, P::k) {
        zv_u32 i = (zv_u32)t;
        ZV_SLH_LANE(i);
        zv_u32 idx = zv_slh_fors_index<P>(b->digest, i);
        ZV_CHECK(idx < (1u << P::a));
        const zv_u8 *s = sig_fors + i * (P::a + 1) * n;
        zv_slh_adrs adrs = zv_slh_adrs_make(0, idx_tree, ZV_SLH_FORS_TREE, idx_leaf, 0, (i << P::a) + idx);
        zv_u8 node[P::n];
        zv_slh_F<P>(&b->keys, &adrs, s, node);
        zv_slh_climb<P>(&b->keys, &adrs, node, idx, s + n, P::a);
        zv_memcpy(b->nodes + i * n, node, n);
    }
    ZV_SLH_SYNC();
    if (ZV_BLOCK_TID == 0) {
        ZV_SLH_LANE(0);
        zv_slh_adrs adrs = zv_slh_adrs_make(0, idx_tree, ZV_SLH_FORS_ROOTS, idx_leaf, 0, 0);
        zv_slh_T<P>(&b->keys, &adrs, b->nodes, P::k * n, b->root);
    }
    ZV_SLH_SYNC();

    /* Hypertree (Alg. 13): d layers, each WOTS+ (Alg. 8, one lane per chain) then the XMSS
     * path (Alg. 11, lane 0). */
    for (zv_u32 j = 0; j < (zv_u32)P::d; j++) {
        ZV_CHECK(idx_leaf < (1u << P::hp));
        const zv_u8 *sx = sig_ht + j * (P::hp + P::len) * n;
        zv_slh_wots_chains<P>(b, j, idx_tree, idx_leaf, sx);
        ZV_SLH_SYNC();  /* the chain tops are in b->nodes */
        if (ZV_BLOCK_TID == 0) {
            ZV_SLH_LANE(0);
            zv_u8 node[P::n];
            zv_slh_adrs adrs = zv_slh_adrs_make(j, idx_tree, ZV_SLH_WOTS_PK, idx_leaf, 0, 0);
            zv_slh_T<P>(&b->keys, &adrs, b->nodes, P::len * n, node);
            adrs = zv_slh_adrs_make(j, idx_tree, ZV_SLH_TREE, 0, 0, idx_leaf);
            zv_slh_climb<P>(&b->keys, &adrs, node, idx_leaf, sx + P::len * n, P::hp);
            zv_memcpy(b->root, node, n);
        }
        ZV_SLH_SYNC();
        idx_leaf = (zv_u32)(idx_tree & ((1ull << P::hp) - 1));
        idx_tree >>= P::hp;
    }
    zv_u32 diff = 0;
    for (int i = 0; i < n; i++) diff |= (zv_u32)(b->root[i] ^ pk[n + i]);
    /* Block state is rewritten next by lane 0 (keys, digest) before a barrier, and b->root
     * only after two more, so no barrier is needed after this read. */
    return diff == 0;
}

/* The batch loop of one parameter set (kernel contract, ed25519.cu): one block per item. */
template <class P>
ZV_HD void zv_slh_verify_batch(zv_slh_block<P> *b, const zv_u8 *pks, zv_u32 pk_len, const zv_u8 *sigs,
                               zv_u32 sig_len, const zv_u8 *msgs, const zv_u64 *offsets, const zv_u8 *ctx,
                               zv_u32 ctx_len, zv_u64 count, zv_u8 *verdicts) {
    ZV_FOR_EACH_BLOCK(i, count) {
        zv_u64 lo = offsets[i], hi = offsets[i + 1];
        /* Uniform across the block, so a skipped item skips every barrier together. */
        int ok = pk_len == P::pk_bytes && sig_len == P::sig_bytes && ctx_len <= ZV_SLH_MAX_CTX && hi >= lo;
        if (ok) ok = zv_slh_verify<P>(b, pks + i * pk_len, sigs + i * sig_len, msgs + lo, hi - lo, ctx, ctx_len, 0);
        if (ZV_BLOCK_TID == 0) verdicts[i] = (zv_u8)ok;
    }
}

#endif /* ZV_SLH_DSA_CUH */
