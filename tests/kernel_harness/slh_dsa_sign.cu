/* slh_dsa_sign.cu — a fast SLH-DSA signer (FIPS 205), for generating test items only.
 *
 * Never part of the service: tests/slh_dsa_signer.py builds it on the host (g++) so that
 * scripts/agreement --scheme slh-dsa can sign 10 000 items per parameter set; pqcrypto, our
 * reference, signs the "s" sets at 0.04–4 signatures per second per core here, which
 * makes that count a matter of days.  Every signature it makes is checked by pqcrypto
 * before it is used, so a fault here shows as an "expected-valid" failure, never as a
 * verdict the kernel is trusted with.
 *
 * What it computes: slh_keygen_internal's PK.root (FIPS 205 Alg. 18, the root of the top
 * XMSS tree) and the part of slh_sign_internal (Alg. 19) after H_msg — FORS (Alg. 14–16)
 * and the hypertree (Alg. 6, 7, 9, 10, 12) — from a digest the caller computed with
 * R = PRF_msg and H_msg (tests/slh_dsa_signer.py, hashlib).  Tweakable hashes as §11: SHAKE256
 * for the SHAKE sets; for SHA2, SHA-256 from the padded PK.seed block's midstate for F and
 * PRF (and H, T_l at n = 16), SHA-512 from its own midstate for H and T_l at n = 24, 32.
 *
 * Why it is fast: the work of a signature is ~99% independent hashes of equal length (the
 * leaves and chains of whole XMSS and FORS trees), so every hash call takes a batch of jobs
 * and runs them in SIMD lanes — 16 SHA-256 or 8 SHA-512 / Keccak-f states per vector, written
 * with GCC vector extensions (AVX-512 where the CPU has it; compiled down to narrower vectors
 * elsewhere).  The lane code is its own and not the kernel's sha2.cuh / keccak.cuh, whose
 * scalar words are laid out for one GPU thread; it takes the round constants and IVs from
 * those headers, while the rotation amounts, the ρ offsets, the padding and the parameter
 * table (SETS, a copy of slh_dsa.cuh's ZV_SLH_PARAM_SETS) are written here again: a slip in
 * any of them makes signatures pqcrypto refuses, which tests/test_slh_dsa_signer.py checks on
 * every set.  Trees of the top two layers are kept across the signatures of one call (the top
 * one is the same for every signature of a key), which saves between 1/d and 2/d of the work.
 */
#pragma GCC optimize("O3")
#if defined(ZV_SIGN_AVX512)
#pragma GCC target("avx2,avx512f,avx512bw,avx512vl")
#elif defined(ZV_SIGN_AVX2)
#pragma GCC target("avx2")
#endif

#include "hashes/sha2.cuh"
#include "hashes/keccak.cuh"

#include <cstring>
#include <map>
#include <vector>

typedef zv_u32 v32 __attribute__((vector_size(64))); /* 16 SHA-256 lanes */
typedef zv_u64 v64 __attribute__((vector_size(64))); /* 8 SHA-512 or Keccak lanes */
enum { L32 = 16, L64 = 8, MAX_LANE_BYTES = 2560 };

/* FIPS 205 §4.2 address types */
enum { WOTS_HASH = 0, WOTS_PK = 1, TREE = 2, FORS_TREE = 3, FORS_ROOTS = 4, WOTS_PRF = 5, FORS_PRF = 6 };

static inline zv_u32 ld_be32(const zv_u8 *p) { return (zv_u32)p[0] << 24 | (zv_u32)p[1] << 16 | (zv_u32)p[2] << 8 | p[3]; }
static inline zv_u64 ld_be64(const zv_u8 *p) { return (zv_u64)ld_be32(p) << 32 | ld_be32(p + 4); }
static inline zv_u64 ld_le64(const zv_u8 *p) { zv_u64 v; memcpy(&v, p, 8); return v; }
static inline void st_be32(zv_u8 *p, zv_u32 v) { p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v; }
static inline void st_be64(zv_u8 *p, zv_u64 v) { st_be32(p, v >> 32); st_be32(p + 4, (zv_u32)v); }

/* ------------------------------------------------------------------ lane compressions */
static inline v32 ror32(v32 x, int r) { return (x >> r) | (x << (32 - r)); }
static inline v64 ror64(v64 x, int r) { return (x >> r) | (x << (64 - r)); }
static inline v64 rol64(v64 x, int r) { return (x << r) | (x >> (64 - r)); }

static void sha256_lanes(v32 s[8], v32 w[16]) {
    v32 a = s[0], b = s[1], c = s[2], d = s[3], e = s[4], f = s[5], g = s[6], h = s[7];
    for (int i = 0; i < 64; i++) {
        if (i >= 16) {
            v32 x = w[(i - 15) & 15], y = w[(i - 2) & 15];
            w[i & 15] += (ror32(x, 7) ^ ror32(x, 18) ^ (x >> 3)) + w[(i - 7) & 15] +
                         (ror32(y, 17) ^ ror32(y, 19) ^ (y >> 10));
        }
        v32 t1 = h + (ror32(e, 6) ^ ror32(e, 11) ^ ror32(e, 25)) + ((e & f) ^ (~e & g)) + ZV_SHA256_K[i] + w[i & 15];
        v32 t2 = (ror32(a, 2) ^ ror32(a, 13) ^ ror32(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        h = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
    }
    s[0] += a, s[1] += b, s[2] += c, s[3] += d, s[4] += e, s[5] += f, s[6] += g, s[7] += h;
}

static void sha512_lanes(v64 s[8], v64 w[16]) {
    v64 a = s[0], b = s[1], c = s[2], d = s[3], e = s[4], f = s[5], g = s[6], h = s[7];
    for (int i = 0; i < 80; i++) {
        if (i >= 16) {
            v64 x = w[(i - 15) & 15], y = w[(i - 2) & 15];
            w[i & 15] += (ror64(x, 1) ^ ror64(x, 8) ^ (x >> 7)) + w[(i - 7) & 15] +
                         (ror64(y, 19) ^ ror64(y, 61) ^ (y >> 6));
        }
        v64 t1 = h + (ror64(e, 14) ^ ror64(e, 18) ^ ror64(e, 41)) + ((e & f) ^ (~e & g)) + ZV_SHA512_K[i] + w[i & 15];
        v64 t2 = (ror64(a, 28) ^ ror64(a, 34) ^ ror64(a, 39)) + ((a & b) ^ (a & c) ^ (b & c));
        h = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
    }
    s[0] += a, s[1] += b, s[2] += c, s[3] += d, s[4] += e, s[5] += f, s[6] += g, s[7] += h;
}

/* Keccak-f[1600] on 8 states: θ, ρ and π, χ, ι as keccak.cuh computes them on one. */
static void keccak_lanes(v64 a[25]) {
    static const int rho[25] = {0, 1, 62, 28, 27, 36, 44, 6, 55, 20, 3, 10, 43, 25, 39, 41, 45, 15, 21, 8, 18, 2, 61, 56, 14};
    for (int round = 0; round < 24; round++) {
        v64 c[5], b[25];
        for (int x = 0; x < 5; x++) c[x] = a[x] ^ a[x + 5] ^ a[x + 10] ^ a[x + 15] ^ a[x + 20];
        for (int x = 0; x < 5; x++) {
            v64 d = c[(x + 4) % 5] ^ rol64(c[(x + 1) % 5], 1);
            for (int y = 0; y < 25; y += 5) a[x + y] ^= d;
        }
        /* ρ and π: lane (x, y) moves to (y, 2x + 3y) rotated by rho[x + 5y]. */
        for (int x = 0; x < 5; x++)
            for (int y = 0; y < 5; y++) {
                int r = rho[x + 5 * y];
                b[y + 5 * ((2 * x + 3 * y) % 5)] = r ? rol64(a[x + 5 * y], r) : a[x + 5 * y];
            }
        for (int row = 0; row < 25; row += 5)
            for (int x = 0; x < 5; x++) a[row + x] = b[row + x] ^ (~b[row + (x + 1) % 5] & b[row + (x + 2) % 5]);
        a[0] ^= ZV_KECCAK_RC[round];
    }
}

/* ------------------------------------------------------------------ batched hashes
 * Each hashes `count` messages of `len` bytes (`stride` apart) and writes the first
 * `out_len` bytes of each digest `ostride` apart.  The SHA-2 ones continue from a
 * midstate `iv` after `pre` bytes (the padded PK.seed block). */
static thread_local zv_u8 lane_buf[L32][MAX_LANE_BYTES];

static void sha256_many(const zv_u32 iv[8], size_t pre, size_t count, const zv_u8 *msg, size_t stride, size_t len,
                        zv_u8 *out, size_t ostride, size_t out_len) {
    size_t blocks = (len + 9 + 63) / 64;
    for (size_t base = 0; base < count; base += L32) {
        size_t lanes = count - base < L32 ? count - base : L32;
        for (size_t l = 0; l < L32; l++) {
            zv_u8 *b = lane_buf[l];
            memcpy(b, msg + (base + (l < lanes ? l : 0)) * stride, len);
            memset(b + len, 0, blocks * 64 - len);
            b[len] = 0x80;
            st_be64(b + blocks * 64 - 8, (pre + len) * 8);
        }
        v32 s[8], w[16];
        for (int i = 0; i < 8; i++) s[i] = iv[i] + (v32){};
        for (size_t blk = 0; blk < blocks; blk++) {
            for (int t = 0; t < 16; t++)
                for (int l = 0; l < L32; l++) w[t][l] = ld_be32(lane_buf[l] + blk * 64 + 4 * t);
            sha256_lanes(s, w);
        }
        for (size_t l = 0; l < lanes; l++)
            for (size_t t = 0; t < out_len / 4; t++) st_be32(out + (base + l) * ostride + 4 * t, s[t][l]);
    }
}

static void sha512_many(const zv_u64 iv[8], size_t pre, size_t count, const zv_u8 *msg, size_t stride, size_t len,
                        zv_u8 *out, size_t ostride, size_t out_len) {
    size_t blocks = (len + 17 + 127) / 128;
    for (size_t base = 0; base < count; base += L64) {
        size_t lanes = count - base < L64 ? count - base : L64;
        for (size_t l = 0; l < L64; l++) {
            zv_u8 *b = lane_buf[l];
            memcpy(b, msg + (base + (l < lanes ? l : 0)) * stride, len);
            memset(b + len, 0, blocks * 128 - len);
            b[len] = 0x80;
            st_be64(b + blocks * 128 - 8, (pre + len) * 8); /* the upper 64 length bits stay 0 */
        }
        v64 s[8], w[16];
        for (int i = 0; i < 8; i++) s[i] = iv[i] + (v64){};
        for (size_t blk = 0; blk < blocks; blk++) {
            for (int t = 0; t < 16; t++)
                for (int l = 0; l < L64; l++) w[t][l] = ld_be64(lane_buf[l] + blk * 128 + 8 * t);
            sha512_lanes(s, w);
        }
        for (size_t l = 0; l < lanes; l++)
            for (size_t t = 0; t < out_len / 8; t++) st_be64(out + (base + l) * ostride + 8 * t, s[t][l]);
    }
}

static void shake256_many(size_t count, const zv_u8 *msg, size_t stride, size_t len, zv_u8 *out, size_t ostride,
                          size_t out_len) {
    const size_t rate = ZV_SHAKE256_RATE;
    size_t blocks = len / rate + 1;
    for (size_t base = 0; base < count; base += L64) {
        size_t lanes = count - base < L64 ? count - base : L64;
        for (size_t l = 0; l < L64; l++) {
            zv_u8 *b = lane_buf[l];
            memcpy(b, msg + (base + (l < lanes ? l : 0)) * stride, len);
            memset(b + len, 0, blocks * rate - len);
            b[len] ^= ZV_KECCAK_DS_SHAKE;
            b[blocks * rate - 1] ^= 0x80;
        }
        v64 a[25] = {};
        for (size_t blk = 0; blk < blocks; blk++) {
            for (size_t t = 0; t < rate / 8; t++)
                for (int l = 0; l < L64; l++) a[t][l] ^= ld_le64(lane_buf[l] + blk * rate + 8 * t);
            keccak_lanes(a);
        }
        for (size_t l = 0; l < lanes; l++)
            for (size_t t = 0; t < out_len / 8; t++) memcpy(out + (base + l) * ostride + 8 * t, &a[t][l], 8);
    }
}

/* ------------------------------------------------------------------ parameters, key, addresses */
struct Params { int shake, n, h, d, hp, a, k, m, len; };

static const Params SETS[12] = {
#define ZV_SIGN_SET(name, shake, n, h, d, hp, a, k, m) {shake, n, h, d, hp, a, k, m, 2 * (n) + 3},
    /* FIPS 205 Table 2, in the wire-code order of slh_dsa.cuh's ZV_SLH_PARAM_SETS */
    ZV_SIGN_SET(sha2_128s, 0, 16, 63, 7, 9, 12, 14, 30) ZV_SIGN_SET(sha2_128f, 0, 16, 66, 22, 3, 6, 33, 34)
    ZV_SIGN_SET(sha2_192s, 0, 24, 63, 7, 9, 14, 17, 39) ZV_SIGN_SET(sha2_192f, 0, 24, 66, 22, 3, 8, 33, 42)
    ZV_SIGN_SET(sha2_256s, 0, 32, 64, 8, 8, 14, 22, 47) ZV_SIGN_SET(sha2_256f, 0, 32, 68, 17, 4, 9, 35, 49)
    ZV_SIGN_SET(shake_128s, 1, 16, 63, 7, 9, 12, 14, 30) ZV_SIGN_SET(shake_128f, 1, 16, 66, 22, 3, 6, 33, 34)
    ZV_SIGN_SET(shake_192s, 1, 24, 63, 7, 9, 14, 17, 39) ZV_SIGN_SET(shake_192f, 1, 24, 66, 22, 3, 8, 33, 42)
    ZV_SIGN_SET(shake_256s, 1, 32, 64, 8, 8, 14, 22, 47) ZV_SIGN_SET(shake_256f, 1, 32, 68, 17, 4, 9, 35, 49)
#undef ZV_SIGN_SET
};

struct Adrs { zv_u8 b[32]; };

/* ADRS (§4.2): layer(4) ‖ tree(12) ‖ type(4) ‖ key pair(4) ‖ chain or tree height(4) ‖ hash or tree index(4). */
static Adrs adrs(zv_u32 layer, zv_u64 tree, zv_u32 type, zv_u32 keypair, zv_u32 word2, zv_u32 word3) {
    Adrs a;
    memset(a.b, 0, 32);
    st_be32(a.b, layer);
    st_be64(a.b + 8, tree);
    st_be32(a.b + 16, type);
    st_be32(a.b + 20, keypair);
    st_be32(a.b + 24, word2);
    st_be32(a.b + 28, word3);
    return a;
}

struct Key {
    const Params *p;
    zv_u8 sk_seed[32], pk_seed[32];
    zv_u32 mid256[8]; /* SHA-256 state after PK.seed ‖ toByte(0, 64 − n) (§11.2) */
    zv_u64 mid512[8]; /* SHA-512 state after PK.seed ‖ toByte(0, 128 − n), n ≥ 24 */

    Key(const Params *params, const zv_u8 *sk, const zv_u8 *pk) : p(params) {
        memcpy(sk_seed, sk, p->n);
        memcpy(pk_seed, pk, p->n);
        zv_u8 block[128] = {};
        memcpy(block, pk, p->n);
        for (int i = 0; i < 8; i++) mid256[i] = ZV_SHA256_IV[i], mid512[i] = ZV_SHA512_IV[i];
        zv_sha256_block(mid256, block);
        zv_sha512_block(mid512, block);
    }
};

/* A tweakable hash's input after the midstate: PK.seed ‖ ADRS ‖ M for SHAKE, ADRSc ‖ M for SHA2
 * (ADRSc, §11.2: layer(1) ‖ tree(8) ‖ type(1) ‖ the last three words(12)). */
static size_t msg_len(const Key &key, size_t inlen) { return (key.p->shake ? key.p->n + 32 : 22) + inlen; }
static size_t type_at(const Key &key) { return key.p->shake ? key.p->n + 19 : 9; }  /* low byte of the type */
static size_t hash_at(const Key &key) { return key.p->shake ? key.p->n + 31 : 21; } /* low byte of word 3 */

static void put_msg(const Key &key, zv_u8 *m, const Adrs &ad, const zv_u8 *in, size_t inlen) {
    const zv_u8 *b = ad.b;
    size_t at = 0;
    if (key.p->shake) {
        memcpy(m, key.pk_seed, key.p->n);
        memcpy(m + key.p->n, b, 32);
        at = key.p->n + 32;
    } else {
        m[0] = b[3];
        memcpy(m + 1, b + 8, 8);
        m[9] = b[19];
        memcpy(m + 10, b + 20, 12);
        at = 22;
    }
    memcpy(m + at, in, inlen);
}

/* out_j = F / PRF (short_hash) or H / T_l of the prepared inputs msgs + j·mlen. */
static void hash_msgs(const Key &key, bool short_hash, size_t count, const zv_u8 *msgs, size_t mlen, zv_u8 *out,
                      size_t ostride) {
    const int n = key.p->n;
    if (key.p->shake)
        shake256_many(count, msgs, mlen, mlen, out, ostride, n);
    else if (short_hash || n == 16)
        sha256_many(key.mid256, 64, count, msgs, mlen, mlen, out, ostride, n);
    else
        sha512_many(key.mid512, 128, count, msgs, mlen, mlen, out, ostride, n);
}

/* out_j = F / PRF (short_hash) or H / T_l of (ADRS_j, in_j) for j < count, each input `inlen`
 * bytes `in_stride` apart (0: one input shared by every job, as SK.seed is). */
static void thash(const Key &key, bool short_hash, size_t count, const Adrs *ad, const zv_u8 *in, size_t in_stride,
                  size_t inlen, zv_u8 *out, size_t ostride) {
    static thread_local std::vector<zv_u8> msgs;
    size_t mlen = msg_len(key, inlen);
    msgs.resize(count * mlen);
    for (size_t j = 0; j < count; j++) put_msg(key, &msgs[j * mlen], ad[j], in + j * in_stride, inlen);
    hash_msgs(key, short_hash, count, msgs.data(), mlen, out, ostride);
}

/* Secret values and the F steps above them, as WOTS+ chains (Alg. 5, 6) and FORS leaves
 * (Alg. 14, 15) need: job j starts from PRF(ADRS_j) (type WOTS_PRF or FORS_PRF), then takes
 * `steps` F's under the same address with type `type` — the hash address counting 0, 1, ...
 * when `count_hash`, unchanged otherwise.  Each job's input is hashed in place, so an F step
 * costs no address or message rebuild.  The results are at msgs + j·mlen + mlen − n. */
static size_t prf_then_f(const Key &key, size_t count, const Adrs *prf_adrs, zv_u32 type, int steps, bool count_hash,
                         std::vector<zv_u8> &msgs) {
    const int n = key.p->n;
    size_t mlen = msg_len(key, n), ta = type_at(key), ha = hash_at(key);
    msgs.resize(count * mlen);
    for (size_t j = 0; j < count; j++) put_msg(key, &msgs[j * mlen], prf_adrs[j], key.sk_seed, n);
    zv_u8 *val = &msgs[mlen - n];
    hash_msgs(key, true, count, msgs.data(), mlen, val, mlen);
    for (size_t j = 0; j < count; j++) msgs[j * mlen + ta] = (zv_u8)type;
    for (int s = 0; s < steps; s++) {
        if (count_hash)
            for (size_t j = 0; j < count; j++) msgs[j * mlen + ha] = (zv_u8)s;
        hash_msgs(key, true, count, msgs.data(), mlen, val, mlen);
    }
    return mlen;
}

/* ------------------------------------------------------------------ trees */
/* A Merkle tree kept whole: level z holds 2^(height − z) nodes of n bytes. */
struct Tree {
    int n = 0, height = 0;
    std::vector<zv_u8> nodes;
    std::vector<size_t> level_at;
    zv_u8 *node(int z, size_t i) { return &nodes[level_at[z] + i * n]; }
    void alloc(int n_, int height_) {
        n = n_, height = height_;
        level_at.assign(height + 1, 0);
        size_t at = 0;
        for (int z = 0; z <= height; z++) level_at[z] = at, at += ((size_t)1 << (height - z)) * n;
        nodes.assign(at, 0);
    }
    /* Levels 1..height from the leaves: node i of level z = H(ADRS(z, offset_z + i), left ‖ right). */
    template <class MakeAdrs> void build_up(const Key &key, MakeAdrs make) {
        std::vector<Adrs> ad;
        for (int z = 1; z <= height; z++) {
            size_t cnt = (size_t)1 << (height - z);
            ad.resize(cnt);
            for (size_t i = 0; i < cnt; i++) ad[i] = make(z, i);
            thash(key, false, cnt, ad.data(), node(z - 1, 0), 2 * n, 2 * n, node(z, 0), n);
        }
    }
    /* The authentication path of leaf idx (Alg. 10 line 3, Alg. 16 line 5). */
    void auth(size_t idx, zv_u8 *out) {
        for (int z = 0; z < height; z++) memcpy(out + z * n, node(z, (idx >> z) ^ 1), n);
    }
};

/* WOTS+ message digits with checksum (Alg. 7 lines 1–9; len2 = 3, lg_w = 4). */
static void wots_digits(const Params *p, const zv_u8 *msg, int *digits) {
    int csum = 0;
    for (int i = 0; i < 2 * p->n; i++) {
        digits[i] = (msg[i / 2] >> (i % 2 ? 0 : 4)) & 15;
        csum += 15 - digits[i];
    }
    csum <<= 4; /* (8 − (len2 · lg_w) mod 8) mod 8 = 4 */
    digits[2 * p->n] = (csum >> 12) & 15, digits[2 * p->n + 1] = (csum >> 8) & 15, digits[2 * p->n + 2] = (csum >> 4) & 15;
}

/* The XMSS tree (layer, tree): leaves are WOTS+ public keys (Alg. 6), built a group of
 * leaves at a time so that each F step hashes len × group chains side by side. */
static void xmss_tree(const Key &key, zv_u32 layer, zv_u64 tree, Tree &t) {
    const Params *p = key.p;
    const int n = p->n, len = p->len;
    const size_t leaves = (size_t)1 << p->hp, group = leaves < 32 ? leaves : 32;
    t.alloc(n, p->hp);
    std::vector<Adrs> ad(group * len);
    std::vector<zv_u8> msgs, tops(group * len * n);
    for (size_t first = 0; first < leaves; first += group) {
        for (size_t g = 0; g < group; g++)
            for (int i = 0; i < len; i++) ad[g * len + i] = adrs(layer, tree, WOTS_PRF, first + g, i, 0);
        size_t mlen = prf_then_f(key, group * len, ad.data(), WOTS_HASH, 15, true, msgs);
        for (size_t j = 0; j < group * len; j++) memcpy(&tops[j * n], &msgs[j * mlen + mlen - n], n);
        for (size_t g = 0; g < group; g++) ad[g] = adrs(layer, tree, WOTS_PK, first + g, 0, 0);
        thash(key, false, group, ad.data(), tops.data(), (size_t)len * n, (size_t)len * n, t.node(0, first), n);
    }
    t.build_up(key, [&](int z, size_t i) { return adrs(layer, tree, TREE, 0, z, i); });
}

/* wots_sign (Alg. 7) of the n-byte msg with key pair `leaf` of tree (layer, tree). */
static void wots_sign(const Key &key, zv_u32 layer, zv_u64 tree, zv_u32 leaf, const zv_u8 *msg, zv_u8 *sig) {
    const Params *p = key.p;
    const int n = p->n, len = p->len;
    int digits[67];
    wots_digits(p, msg, digits);
    std::vector<Adrs> ad(len);
    for (int i = 0; i < len; i++) ad[i] = adrs(layer, tree, WOTS_PRF, leaf, i, 0);
    thash(key, true, len, ad.data(), key.sk_seed, 0, n, sig, n);
    /* Step s moves every chain whose digit is above s; the others already hold their value. */
    std::vector<zv_u8> vals(len * n);
    std::vector<int> live(len);
    for (int s = 0; s < 15; s++) {
        size_t cnt = 0;
        for (int i = 0; i < len; i++)
            if (digits[i] > s) {
                live[cnt] = i;
                ad[cnt] = adrs(layer, tree, WOTS_HASH, leaf, i, s);
                memcpy(&vals[cnt * n], sig + i * n, n);
                cnt++;
            }
        if (!cnt) break;
        thash(key, true, cnt, ad.data(), vals.data(), n, n, vals.data(), n);
        for (size_t c = 0; c < cnt; c++) memcpy(sig + live[c] * n, &vals[c * n], n);
    }
}

/* One FORS tree (Alg. 14, 15): tree i of the FORS instance at key pair `leaf` of tree `tree`. */
static void fors_tree(const Key &key, zv_u64 tree, zv_u32 leaf, zv_u32 i, Tree &t) {
    const Params *p = key.p;
    const int n = p->n, a = p->a;
    const size_t leaves = (size_t)1 << a;
    t.alloc(n, a);
    std::vector<Adrs> ad(leaves);
    std::vector<zv_u8> msgs;
    for (size_t j = 0; j < leaves; j++) ad[j] = adrs(0, tree, FORS_PRF, leaf, 0, ((zv_u32)i << a) + j);
    size_t mlen = prf_then_f(key, leaves, ad.data(), FORS_TREE, 1, false, msgs);
    for (size_t j = 0; j < leaves; j++) memcpy(t.node(0, j), &msgs[j * mlen + mlen - n], n);
    t.build_up(key, [&](int z, size_t j) { return adrs(0, tree, FORS_TREE, leaf, z, ((zv_u32)i << (a - z)) + j); });
}

static int base_2b_at(const zv_u8 *x, int b, int index) { /* digit `index` of Alg. 4 */
    int bit = index * b, v = 0;
    for (int j = 0; j < b; j++, bit++) v = (v << 1) | ((x[bit / 8] >> (7 - bit % 8)) & 1);
    return v;
}

static zv_u64 be_bytes(const zv_u8 *x, int nbytes) {
    zv_u64 v = 0;
    for (int i = 0; i < nbytes; i++) v = (v << 8) | x[i];
    return v;
}

/* Trees of the layers with few trees, kept for the next signature of the same key. */
struct TreeCache {
    std::map<std::pair<zv_u32, zv_u64>, Tree> trees;
    Tree &get(const Key &key, zv_u32 layer, zv_u64 tree, Tree &scratch) {
        const Params *p = key.p;
        if ((int)layer < p->d - 2) {
            xmss_tree(key, layer, tree, scratch);
            return scratch;
        }
        auto it = trees.find({layer, tree});
        if (it == trees.end()) {
            it = trees.emplace(std::make_pair(layer, tree), Tree()).first;
            xmss_tree(key, layer, tree, it->second);
        }
        return it->second;
    }
};

/* Alg. 19 lines 5–17 for one digest: SIG_FORS ‖ SIG_HT into `sig` (the caller puts R first). */
static void sign_digest(const Key &key, TreeCache &cache, const zv_u8 *digest, zv_u8 *sig) {
    const Params *p = key.p;
    const int n = p->n, a = p->a, k = p->k;
    const int md_bytes = (k * a + 7) / 8, tree_bytes = (p->h - p->hp + 7) / 8, leaf_bytes = (p->hp + 7) / 8;
    zv_u64 idx_tree = be_bytes(digest + md_bytes, tree_bytes);
    if (p->h - p->hp < 64) idx_tree &= ((zv_u64)1 << (p->h - p->hp)) - 1;
    zv_u32 idx_leaf = (zv_u32)be_bytes(digest + md_bytes + tree_bytes, leaf_bytes) & ((1u << p->hp) - 1);

    /* FORS (Alg. 16, 17) */
    std::vector<zv_u8> roots(k * n);
    Tree t;
    zv_u8 *out = sig;
    for (int i = 0; i < k; i++) {
        int idx = base_2b_at(digest, a, i);
        fors_tree(key, idx_tree, idx_leaf, i, t);
        Adrs ska = adrs(0, idx_tree, FORS_PRF, idx_leaf, 0, ((zv_u32)i << a) + idx);
        thash(key, true, 1, &ska, key.sk_seed, 0, n, out, n);
        t.auth(idx, out + n);
        memcpy(&roots[i * n], t.node(a, 0), n);
        out += (1 + a) * n;
    }
    zv_u8 msg[32];
    Adrs pka = adrs(0, idx_tree, FORS_ROOTS, idx_leaf, 0, 0);
    thash(key, false, 1, &pka, roots.data(), 0, k * n, msg, n);

    /* Hypertree (Alg. 12): each layer signs the root below it. */
    for (int j = 0; j < p->d; j++) {
        Tree &x = cache.get(key, j, idx_tree, t);
        wots_sign(key, j, idx_tree, idx_leaf, msg, out);
        x.auth(idx_leaf, out + p->len * n);
        out += (p->len + p->hp) * n;
        memcpy(msg, x.node(p->hp, 0), n);
        idx_leaf = (zv_u32)(idx_tree & ((1u << p->hp) - 1));
        idx_tree >>= p->hp;
    }
}

/* PK.root of (SK.seed, PK.seed): the root of the top XMSS tree (Alg. 18 lines 1–3).
 * `set` is the wire-code order of ZV_SLH_PARAM_SETS; returns 0 on an unknown set. */
ZV_KERNEL int zv_slh_sign_pk_root(zv_u32 set, const zv_u8 *sk_seed, const zv_u8 *pk_seed, zv_u8 *root) {
    if (set >= 12) return 0;
    Key key(&SETS[set], sk_seed, pk_seed);
    Tree t;
    xmss_tree(key, key.p->d - 1, 0, t);
    memcpy(root, t.node(key.p->hp, 0), key.p->n);
    return 1;
}

/* `count` signatures under one key: digest j (m bytes, H_msg's output, at digests + j·m)
 * gives SIG_FORS ‖ SIG_HT at sigs + j·(sig bytes − n), i.e. the signature without R.
 * Returns 0 on an unknown set. */
ZV_KERNEL int zv_slh_sign_digests(zv_u32 set, const zv_u8 *sk_seed, const zv_u8 *pk_seed, zv_u32 count,
                                  const zv_u8 *digests, zv_u8 *sigs) {
    if (set >= 12) return 0;
    const Params *p = &SETS[set];
    Key key(p, sk_seed, pk_seed);
    TreeCache cache;
    size_t body = (size_t)(p->k * (1 + p->a) + p->h + p->d * p->len) * p->n;
    for (zv_u32 j = 0; j < count; j++) sign_digest(key, cache, digests + (size_t)j * p->m, sigs + j * body);
    return 1;
}
