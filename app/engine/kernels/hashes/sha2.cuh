/* sha2.cuh — SHA-256 and SHA-512 (FIPS 180-4 §6.2 and §6.4), shared by host and device.
 *
 * Semantics: byte-oriented, big-endian words, messages of any length below 2^61 bytes.
 * Incremental (init / update / final) so callers hash R ‖ A ‖ M (Ed25519) or the 98-byte
 * Merkle leaf data without building a concatenated copy; one-shot zv_sha256 / zv_sha512
 * for whole buffers.  Constants are FIPS 180-4 §4.2.2 and §4.2.3 (first bits of the
 * fractional parts of the cube roots of the first 64 / 80 primes) and initial values
 * §5.3.3 / §5.3.5 (square roots of the first 8 primes).
 *
 * Index (public functions, in source order; the comment at each says more):
 *   zv_rotr32(x, n)
 *   zv_rotr64(x, n)
 *   zv_rotr(x, n)
 *   zv_sha2_block(h, p)          Compress one block (FIPS 180-4 §6.2.2 / §6.4.2)
 *   zv_sha2_init(c)
 *   zv_sha2_resume(c, h, len)    Midstate: resume from a chaining value h saved after `len` bytes
 *   zv_sha2_update(c, in, n)     Absorb n bytes
 *   zv_sha2_final(c, out)        Pad (§5.1.1 / §5.1.2) and write the digest, 4 or 8 words big-endian
 *   zv_sha256_block(h, p)
 *   zv_sha256_init(c)
 *   zv_sha256_resume(c, h, len)  FIPS 205 §11.2 reuses the state after the padded PK.seed block
 *   zv_sha256_update(c, in, n)
 *   zv_sha256_final(c, out)
 *   zv_sha512_block(h, p)
 *   zv_sha512_init(c)
 *   zv_sha512_resume(c, h, len)
 *   zv_sha512_update(c, in, n)
 *   zv_sha512_final(c, out)
 *   zv_sha2(in, n, out)          One-shot digests of a whole buffer
 *   zv_sha256(in, n, out)
 *   zv_sha512(in, n, out)
 */
#ifndef ZV_SHA2_CUH
#define ZV_SHA2_CUH

#include "zv_port.cuh"

ZV_CONSTANT zv_u32 ZV_SHA256_K[64] = {
    0x428a2f98u, 0x71374491u, 0xb5c0fbcfu, 0xe9b5dba5u, 0x3956c25bu, 0x59f111f1u, 0x923f82a4u, 0xab1c5ed5u,
    0xd807aa98u, 0x12835b01u, 0x243185beu, 0x550c7dc3u, 0x72be5d74u, 0x80deb1feu, 0x9bdc06a7u, 0xc19bf174u,
    0xe49b69c1u, 0xefbe4786u, 0x0fc19dc6u, 0x240ca1ccu, 0x2de92c6fu, 0x4a7484aau, 0x5cb0a9dcu, 0x76f988dau,
    0x983e5152u, 0xa831c66du, 0xb00327c8u, 0xbf597fc7u, 0xc6e00bf3u, 0xd5a79147u, 0x06ca6351u, 0x14292967u,
    0x27b70a85u, 0x2e1b2138u, 0x4d2c6dfcu, 0x53380d13u, 0x650a7354u, 0x766a0abbu, 0x81c2c92eu, 0x92722c85u,
    0xa2bfe8a1u, 0xa81a664bu, 0xc24b8b70u, 0xc76c51a3u, 0xd192e819u, 0xd6990624u, 0xf40e3585u, 0x106aa070u,
    0x19a4c116u, 0x1e376c08u, 0x2748774cu, 0x34b0bcb5u, 0x391c0cb3u, 0x4ed8aa4au, 0x5b9cca4fu, 0x682e6ff3u,
    0x748f82eeu, 0x78a5636fu, 0x84c87814u, 0x8cc70208u, 0x90befffau, 0xa4506cebu, 0xbef9a3f7u, 0xc67178f2u,
};

ZV_CONSTANT zv_u32 ZV_SHA256_IV[8] = {
    0x6a09e667u, 0xbb67ae85u, 0x3c6ef372u, 0xa54ff53au, 0x510e527fu, 0x9b05688cu, 0x1f83d9abu, 0x5be0cd19u,
};

ZV_CONSTANT zv_u64 ZV_SHA512_K[80] = {
    0x428a2f98d728ae22ull, 0x7137449123ef65cdull, 0xb5c0fbcfec4d3b2full, 0xe9b5dba58189dbbcull,
    0x3956c25bf348b538ull, 0x59f111f1b605d019ull, 0x923f82a4af194f9bull, 0xab1c5ed5da6d8118ull,
    0xd807aa98a3030242ull, 0x12835b0145706fbeull, 0x243185be4ee4b28cull, 0x550c7dc3d5ffb4e2ull,
    0x72be5d74f27b896full, 0x80deb1fe3b1696b1ull, 0x9bdc06a725c71235ull, 0xc19bf174cf692694ull,
    0xe49b69c19ef14ad2ull, 0xefbe4786384f25e3ull, 0x0fc19dc68b8cd5b5ull, 0x240ca1cc77ac9c65ull,
    0x2de92c6f592b0275ull, 0x4a7484aa6ea6e483ull, 0x5cb0a9dcbd41fbd4ull, 0x76f988da831153b5ull,
    0x983e5152ee66dfabull, 0xa831c66d2db43210ull, 0xb00327c898fb213full, 0xbf597fc7beef0ee4ull,
    0xc6e00bf33da88fc2ull, 0xd5a79147930aa725ull, 0x06ca6351e003826full, 0x142929670a0e6e70ull,
    0x27b70a8546d22ffcull, 0x2e1b21385c26c926ull, 0x4d2c6dfc5ac42aedull, 0x53380d139d95b3dfull,
    0x650a73548baf63deull, 0x766a0abb3c77b2a8ull, 0x81c2c92e47edaee6ull, 0x92722c851482353bull,
    0xa2bfe8a14cf10364ull, 0xa81a664bbc423001ull, 0xc24b8b70d0f89791ull, 0xc76c51a30654be30ull,
    0xd192e819d6ef5218ull, 0xd69906245565a910ull, 0xf40e35855771202aull, 0x106aa07032bbd1b8ull,
    0x19a4c116b8d2d0c8ull, 0x1e376c085141ab53ull, 0x2748774cdf8eeb99ull, 0x34b0bcb5e19b48a8ull,
    0x391c0cb3c5c95a63ull, 0x4ed8aa4ae3418acbull, 0x5b9cca4f7763e373ull, 0x682e6ff3d6b2b8a3ull,
    0x748f82ee5defb2fcull, 0x78a5636f43172f60ull, 0x84c87814a1f0ab72ull, 0x8cc702081a6439ecull,
    0x90befffa23631e28ull, 0xa4506cebde82bde9ull, 0xbef9a3f7b2c67915ull, 0xc67178f2e372532bull,
    0xca273eceea26619cull, 0xd186b8c721c0c207ull, 0xeada7dd6cde0eb1eull, 0xf57d4f7fee6ed178ull,
    0x06f067aa72176fbaull, 0x0a637dc5a2c898a6ull, 0x113f9804bef90daeull, 0x1b710b35131c471bull,
    0x28db77f523047d84ull, 0x32caab7b40c72493ull, 0x3c9ebe0a15c9bebcull, 0x431d67c49c100d4cull,
    0x4cc5d4becb3e42b6ull, 0x597f299cfc657e2aull, 0x5fcb6fab3ad6faecull, 0x6c44198c4a475817ull,
};

ZV_CONSTANT zv_u64 ZV_SHA512_IV[8] = {
    0x6a09e667f3bcc908ull, 0xbb67ae8584caa73bull, 0x3c6ef372fe94f82bull, 0xa54ff53a5f1d36f1ull,
    0x510e527fade682d1ull, 0x9b05688c2b3e6c1full, 0x1f83d9abfb41bd6bull, 0x5be0cd19137e2179ull,
};

/* One compression function, one buffer walk, one padding for both widths (FIPS 180-4
 * §6.2.2 and §6.4.2 differ only in the word, the round count, the rotation amounts and
 * the constants).  A parameter type P names them (blst's fields.h style: the public
 * zv_sha256_* / zv_sha512_* below are thin wrappers over the templates):
 *   struct P {
 *       typedef ... word;                          // zv_u32 or zv_u64
 *       static constexpr int ROUNDS, BLOCK, LEN;   // rounds; block and length field, bytes
 *       static constexpr int S0a, S0b, S0c, S1a, S1b, S1c;       // Σ0, Σ1 rotations (§4.1.2/3)
 *       static constexpr int s0a, s0b, s0r, s1a, s1b, s1r;       // σ0, σ1 rotations and shift
 *       static constexpr int OP;                   // ZV_OP_SHA*_BLOCK, for ZV_COUNT
 *       static ZV_HD_MEMBER word k(int t);         // K_t
 *       static ZV_HD_MEMBER word iv(int i);        // H(0)_i
 *       static ZV_HD_MEMBER word load(const zv_u8 *p);      // big-endian word
 *       static ZV_HD_MEMBER void store(zv_u8 *p, word w);
 *   };
 * Every amount is a compile-time constant and the round loop is unrolled, so each width
 * compiles to the code it had when written out by hand (the ring indices of w[] constant:
 * it stays in registers on the GPU). */
ZV_HD zv_u32 zv_rotr32(zv_u32 x, int n) { return (x >> n) | (x << (32 - n)); }
ZV_HD zv_u64 zv_rotr64(zv_u64 x, int n) { return (x >> n) | (x << (64 - n)); }
ZV_HD zv_u32 zv_rotr(zv_u32 x, int n) { return zv_rotr32(x, n); }
ZV_HD zv_u64 zv_rotr(zv_u64 x, int n) { return zv_rotr64(x, n); }

struct zv_sha256_params {
    typedef zv_u32 word;
    static constexpr int ROUNDS = 64, BLOCK = 64, LEN = 8;
    static constexpr int S0a = 2, S0b = 13, S0c = 22, S1a = 6, S1b = 11, S1c = 25;
    static constexpr int s0a = 7, s0b = 18, s0r = 3, s1a = 17, s1b = 19, s1r = 10;
    static constexpr int OP = ZV_OP_SHA256_BLOCK;
    static ZV_HD_MEMBER word k(int t) { return ZV_SHA256_K[t]; }
    static ZV_HD_MEMBER word iv(int i) { return ZV_SHA256_IV[i]; }
    static ZV_HD_MEMBER word load(const zv_u8 *p) { return zv_load_be32(p); }
    static ZV_HD_MEMBER void store(zv_u8 *p, word w) { zv_store_be32(p, w); }
};

struct zv_sha512_params {
    typedef zv_u64 word;
    static constexpr int ROUNDS = 80, BLOCK = 128, LEN = 16;
    static constexpr int S0a = 28, S0b = 34, S0c = 39, S1a = 14, S1b = 18, S1c = 41;
    static constexpr int s0a = 1, s0b = 8, s0r = 7, s1a = 19, s1b = 61, s1r = 6;
    static constexpr int OP = ZV_OP_SHA512_BLOCK;
    static ZV_HD_MEMBER word k(int t) { return ZV_SHA512_K[t]; }
    static ZV_HD_MEMBER word iv(int i) { return ZV_SHA512_IV[i]; }
    static ZV_HD_MEMBER word load(const zv_u8 *p) { return zv_load_be64(p); }
    static ZV_HD_MEMBER void store(zv_u8 *p, word w) { zv_store_be64(p, w); }
};

/* The running state: chaining value, the partial block, and the bytes absorbed so far. */
template <class P> struct zv_sha2_ctx {
    typename P::word h[8];
    zv_u8 buf[P::BLOCK];
    zv_u64 len;   /* bytes absorbed so far */
};
typedef zv_sha2_ctx<zv_sha256_params> zv_sha256_ctx;
typedef zv_sha2_ctx<zv_sha512_params> zv_sha512_ctx;

/* Compress one block (FIPS 180-4 §6.2.2 / §6.4.2).
 * On input: h holds the chaining value; p points at P::BLOCK readable bytes.
 * On output: h holds the next chaining value. */
template <class P> ZV_HD void zv_sha2_block(typename P::word h[8], const zv_u8 *p) {
    typedef typename P::word W;
    ZV_COUNT(P::OP);
    W w[16];
    ZV_UNROLL
    for (int i = 0; i < 16; i++) w[i] = P::load(p + (int)sizeof(W) * i);
    W a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    ZV_UNROLL  /* constant ring indices keep w[] in registers on the GPU */
    for (int t = 0; t < P::ROUNDS; t++) {
        W wt;
        if (t < 16) {
            wt = w[t];
        } else {  /* message schedule kept in a 16-word ring to save registers */
            W w15 = w[(t - 15) & 15], w2 = w[(t - 2) & 15];
            W s0 = zv_rotr(w15, P::s0a) ^ zv_rotr(w15, P::s0b) ^ (w15 >> P::s0r);
            W s1 = zv_rotr(w2, P::s1a) ^ zv_rotr(w2, P::s1b) ^ (w2 >> P::s1r);
            wt = w[t & 15] = w[t & 15] + s0 + w[(t - 7) & 15] + s1;
        }
        W S1 = zv_rotr(e, P::S1a) ^ zv_rotr(e, P::S1b) ^ zv_rotr(e, P::S1c);
        W ch = (e & f) ^ (~e & g);
        W t1 = hh + S1 + ch + P::k(t) + wt;
        W S0 = zv_rotr(a, P::S0a) ^ zv_rotr(a, P::S0b) ^ zv_rotr(a, P::S0c);
        W maj = (a & b) ^ (a & c) ^ (b & c);
        W t2 = S0 + maj;
        hh = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
}

template <class P> ZV_HD void zv_sha2_init(zv_sha2_ctx<P> *c) {
    for (int i = 0; i < 8; i++) c->h[i] = P::iv(i);
    c->len = 0;
}

/* Midstate: resume from a chaining value h saved after `len` bytes.
 * On input: len is a whole number of blocks (a multiple of P::BLOCK). */
template <class P> ZV_HD void zv_sha2_resume(zv_sha2_ctx<P> *c, const typename P::word h[8], zv_u64 len) {
    for (int i = 0; i < 8; i++) c->h[i] = h[i];
    c->len = len;
}

/* Absorb n bytes.
 * On input: c->len + n < 2^61 (the bit length fits the 64 bits final writes). */
template <class P> ZV_HD void zv_sha2_update(zv_sha2_ctx<P> *c, const zv_u8 *in, zv_u64 n) {
    zv_u32 fill = (zv_u32)(c->len & (P::BLOCK - 1));
    c->len += n;
    if (fill) {
        zv_u64 take = P::BLOCK - fill < n ? P::BLOCK - fill : n;
        zv_memcpy(c->buf + fill, in, take);
        in += take; n -= take; fill += (zv_u32)take;
        if (fill < (zv_u32)P::BLOCK) return;
        zv_sha2_block<P>(c->h, c->buf);
    }
    for (; n >= (zv_u64)P::BLOCK; in += P::BLOCK, n -= P::BLOCK) zv_sha2_block<P>(c->h, in);
    zv_memcpy(c->buf, in, n);
}

/* Pad (§5.1.1 / §5.1.2) and write the digest, 4 or 8 words big-endian.
 * On output: out holds 8·sizeof(word) bytes; c is spent (init or resume it again to reuse). */
template <class P> ZV_HD void zv_sha2_final(zv_sha2_ctx<P> *c, zv_u8 *out) {
    const zv_u32 end = P::BLOCK - 8;  /* the low 64 bits of the length; any higher ones are zero */
    zv_u32 fill = (zv_u32)(c->len & (P::BLOCK - 1));
    zv_u64 bits = c->len << 3;
    c->buf[fill++] = 0x80;
    if (fill > (zv_u32)(P::BLOCK - P::LEN)) {
        zv_memset(c->buf + fill, 0, P::BLOCK - fill);
        zv_sha2_block<P>(c->h, c->buf);
        fill = 0;
    }
    zv_memset(c->buf + fill, 0, end - fill);
    zv_store_be64(c->buf + end, bits);
    zv_sha2_block<P>(c->h, c->buf);
    for (int i = 0; i < 8; i++) P::store(out + (int)sizeof(typename P::word) * i, c->h[i]);
}

/* ------------------------------------------------------------------ SHA-256 */
ZV_HD void zv_sha256_block(zv_u32 h[8], const zv_u8 *p) { zv_sha2_block<zv_sha256_params>(h, p); }
ZV_HD void zv_sha256_init(zv_sha256_ctx *c) { zv_sha2_init(c); }
/* FIPS 205 §11.2 reuses the state after the padded PK.seed block. */
ZV_HD void zv_sha256_resume(zv_sha256_ctx *c, const zv_u32 h[8], zv_u64 len) { zv_sha2_resume(c, h, len); }
ZV_HD void zv_sha256_update(zv_sha256_ctx *c, const zv_u8 *in, zv_u64 n) { zv_sha2_update(c, in, n); }
ZV_HD void zv_sha256_final(zv_sha256_ctx *c, zv_u8 out[32]) { zv_sha2_final(c, out); }

/* ------------------------------------------------------------------ SHA-512 */
ZV_HD void zv_sha512_block(zv_u64 h[8], const zv_u8 *p) { zv_sha2_block<zv_sha512_params>(h, p); }
ZV_HD void zv_sha512_init(zv_sha512_ctx *c) { zv_sha2_init(c); }
ZV_HD void zv_sha512_resume(zv_sha512_ctx *c, const zv_u64 h[8], zv_u64 len) { zv_sha2_resume(c, h, len); }
ZV_HD void zv_sha512_update(zv_sha512_ctx *c, const zv_u8 *in, zv_u64 n) { zv_sha2_update(c, in, n); }
ZV_HD void zv_sha512_final(zv_sha512_ctx *c, zv_u8 out[64]) { zv_sha2_final(c, out); }

/* One-shot digests of a whole buffer. */
template <class P> ZV_HD void zv_sha2(const zv_u8 *in, zv_u64 n, zv_u8 *out) {
    zv_sha2_ctx<P> c;
    zv_sha2_init(&c);
    zv_sha2_update(&c, in, n);
    zv_sha2_final(&c, out);
}
ZV_HD void zv_sha256(const zv_u8 *in, zv_u64 n, zv_u8 out[32]) { zv_sha2<zv_sha256_params>(in, n, out); }
ZV_HD void zv_sha512(const zv_u8 *in, zv_u64 n, zv_u8 out[64]) { zv_sha2<zv_sha512_params>(in, n, out); }

#endif /* ZV_SHA2_CUH */
