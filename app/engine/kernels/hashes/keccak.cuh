/* keccak.cuh — Keccak-f[1600] and the FIPS 202 sponges (SHA3-256, SHA3-512, SHAKE128,
 * SHAKE256), shared by host and device.
 *
 * Semantics (FIPS 202): the state is 25 little-endian 64-bit lanes, lane (x, y) at index
 * x + 5y (§3.1.2, §3.1.3 with w = 64); one permutation is 24 rounds of θ ρ π χ ι (§3.2,
 * §3.3).  The sponge (§4) absorbs at rate r bytes and pads with pad10*1 after the
 * domain-separation bits, which as one byte are 0x06 for SHA-3 (suffix 01) and 0x1F for
 * SHAKE (suffix 1111) (§6.1, §6.2, and Appendix B.2 for the byte order).  Rates:
 * SHAKE128 168, SHAKE256 136, SHA3-256 136, SHA3-512 72 bytes.
 *
 * Use: zv_keccak_init → zv_keccak_absorb (any number of times) → zv_keccak_squeeze (any
 * number of times, any lengths: the output is one XOF stream).  The first squeeze pads.
 * The round constants ι are FIPS 202 §3.2.5 (rc(t) LFSR outputs, tabulated in the
 * Keccak reference); the ρ offsets and π positions are computed in the loops from their
 * definitions (§3.2.2 and §3.2.3), so an unrolled GPU build folds them into constants.
 *
 * Index (public functions, in source order; the comment at each says more):
 *   zv_rotl64(x, n)
 *   zv_keccak_f1600(a)
 *   zv_keccak_init(c, rate, ds)
 *   zv_keccak_xor_byte(c, pos, v)
 *   zv_keccak_absorb(c, in, n)        Absorb n bytes (before the first squeeze)
 *   zv_keccak_squeeze(c, out, n)      Squeeze n bytes of output; the first call pads the input (pad10*1
 *                                     after the suffix)
 *   zv_shake128_init(c)
 *   zv_shake256_init(c)
 *   zv_shake128(in, n, out, out_len)
 *   zv_shake256(in, n, out, out_len)
 *   zv_sha3_256(in, n, out)
 *   zv_sha3_512(in, n, out)
 *   zv_keccak_rho(x, y)                 ρ's offset of lane (x, y) (§3.2.2)
 *   zv_keccak_block_permute(s)          Keccak-f[1600] by a block's first warp: 25 threads, state in shared
 *                                       memory
 *   zv_bytes_at(parts, nparts, off)     Byte `off` of the concatenation of parts[0..nparts)
 *   zv_keccak_block_sponge(s, rate, ds, parts, nparts, out, out_len)
 *                                       zv_keccak_block_hash's sponge, by the first warp
 *   zv_keccak_block_hash(s, rate, ds, parts, nparts, out, out_len)
 *                                       One-squeeze sponge over parts by the block's first warp, called by the
 *                                       whole block
 */
#ifndef ZV_KECCAK_CUH
#define ZV_KECCAK_CUH

#include "zv_port.cuh"

#define ZV_SHAKE128_RATE 168u
#define ZV_SHAKE256_RATE 136u
#define ZV_SHA3_256_RATE 136u
#define ZV_SHA3_512_RATE 72u
#define ZV_KECCAK_DS_SHA3 0x06u
#define ZV_KECCAK_DS_SHAKE 0x1Fu

ZV_CONSTANT zv_u64 ZV_KECCAK_RC[24] = {
    0x0000000000000001ull, 0x0000000000008082ull, 0x800000000000808Aull, 0x8000000080008000ull,
    0x000000000000808Bull, 0x0000000080000001ull, 0x8000000080008081ull, 0x8000000000008009ull,
    0x000000000000008Aull, 0x0000000000000088ull, 0x0000000080008009ull, 0x000000008000000Aull,
    0x000000008000808Bull, 0x800000000000008Bull, 0x8000000000008089ull, 0x8000000000008003ull,
    0x8000000000008002ull, 0x8000000000000080ull, 0x000000000000800Aull, 0x800000008000000Aull,
    0x8000000080008081ull, 0x8000000000008080ull, 0x0000000080000001ull, 0x8000000080008008ull,
};

typedef struct {
    zv_u64 a[25];
    zv_u32 rate;     /* bytes */
    zv_u32 pos;      /* next byte of the rate to absorb into or squeeze from */
    zv_u8 ds;        /* domain-separation byte (0x06 SHA-3, 0x1F SHAKE) */
    zv_u8 squeezing;
} zv_keccak_ctx;

ZV_HD zv_u64 zv_rotl64(zv_u64 x, int n) { return n ? (x << n) | (x >> (64 - n)) : x; }

ZV_HD void zv_keccak_f1600(zv_u64 a[25]) {
    ZV_COUNT(ZV_OP_KECCAK_F1600);
    ZV_UNROLL
    for (int round = 0; round < 24; round++) {
        /* θ: each lane takes the parity of two neighbouring columns. */
        zv_u64 c[5];
        ZV_UNROLL
        for (int x = 0; x < 5; x++) c[x] = a[x] ^ a[x + 5] ^ a[x + 10] ^ a[x + 15] ^ a[x + 20];
        ZV_UNROLL
        for (int x = 0; x < 5; x++) {
            zv_u64 d = c[(x + 4) % 5] ^ zv_rotl64(c[(x + 1) % 5], 1);
            ZV_UNROLL
            for (int y = 0; y < 25; y += 5) a[x + y] ^= d;
        }
        /* ρ and π together: walk the 24 lanes other than (0,0) along π's cycle, moving each
         * lane to (y, 2x + 3y) rotated by the ρ offset (t+1)(t+2)/2 of step t. */
        zv_u64 cur = a[1];
        int x = 1, y = 0;
        ZV_UNROLL
        for (int t = 0; t < 24; t++) {
            int nx = y, ny = (2 * x + 3 * y) % 5;
            zv_u64 next = a[nx + 5 * ny];
            a[nx + 5 * ny] = zv_rotl64(cur, ((t + 1) * (t + 2) / 2) % 64);
            cur = next;
            x = nx;
            y = ny;
        }
        /* χ: a non-linear mix along each row. */
        ZV_UNROLL
        for (int row = 0; row < 25; row += 5) {
            zv_u64 r0 = a[row], r1 = a[row + 1], r2 = a[row + 2], r3 = a[row + 3], r4 = a[row + 4];
            a[row] = r0 ^ (~r1 & r2);
            a[row + 1] = r1 ^ (~r2 & r3);
            a[row + 2] = r2 ^ (~r3 & r4);
            a[row + 3] = r3 ^ (~r4 & r0);
            a[row + 4] = r4 ^ (~r0 & r1);
        }
        /* ι */
        a[0] ^= ZV_KECCAK_RC[round];
    }
}

/* The permutation as the sponge functions below call it.  Inlined by default: the hash
 * kernels keep the state in registers.  A kernel that calls the sponge from many places
 * per thread (ML-DSA: about thirty per parameter set) defines ZV_KECCAK_OUTLINE before its
 * first include of this header, so that every site calls one out-of-line copy instead of
 * inlining the unrolled 24 rounds again (which multiplies the code size and ptxas's time). */
#if defined(ZV_KECCAK_OUTLINE) && ZV_CUDA_COMPILER
#define ZV_KECCAK_PERMUTE_FN __host__ __device__ __noinline__
#else
#define ZV_KECCAK_PERMUTE_FN ZV_HD
#endif
ZV_KECCAK_PERMUTE_FN void zv_keccak_permute(zv_u64 a[25]) { zv_keccak_f1600(a); }

ZV_HD void zv_keccak_init(zv_keccak_ctx *c, zv_u32 rate, zv_u8 ds) {
    for (int i = 0; i < 25; i++) c->a[i] = 0;
    c->rate = rate;
    c->pos = 0;
    c->ds = ds;
    c->squeezing = 0;
}

ZV_HD void zv_keccak_xor_byte(zv_keccak_ctx *c, zv_u32 pos, zv_u8 v) {
    c->a[pos >> 3] ^= (zv_u64)v << (8 * (pos & 7));
}

/* Absorb n bytes (before the first squeeze). */
ZV_HD void zv_keccak_absorb(zv_keccak_ctx *c, const zv_u8 *in, zv_u64 n) {
    while (n) {
        if (c->pos == 0) {
            /* Whole blocks go in a lane at a time. */
            while (n >= c->rate) {
                for (zv_u32 i = 0; i < c->rate / 8; i++) c->a[i] ^= zv_load_le64(in + 8 * i);
                zv_keccak_permute(c->a);
                in += c->rate;
                n -= c->rate;
            }
            if (!n) break;
        }
        zv_keccak_xor_byte(c, c->pos++, *in++);
        n--;
        if (c->pos == c->rate) {
            zv_keccak_permute(c->a);
            c->pos = 0;
        }
    }
}

/* Squeeze n bytes of output; the first call pads the input (pad10*1 after the suffix). */
ZV_HD void zv_keccak_squeeze(zv_keccak_ctx *c, zv_u8 *out, zv_u64 n) {
    if (!c->squeezing) {
        zv_keccak_xor_byte(c, c->pos, c->ds);
        zv_keccak_xor_byte(c, c->rate - 1, 0x80);
        zv_keccak_permute(c->a);
        c->pos = 0;
        c->squeezing = 1;
    }
    while (n) {
        if (c->pos == c->rate) {
            zv_keccak_permute(c->a);
            c->pos = 0;
        }
        *out++ = (zv_u8)(c->a[c->pos >> 3] >> (8 * (c->pos & 7)));
        c->pos++;
        n--;
    }
}

ZV_HD void zv_shake128_init(zv_keccak_ctx *c) { zv_keccak_init(c, ZV_SHAKE128_RATE, ZV_KECCAK_DS_SHAKE); }
ZV_HD void zv_shake256_init(zv_keccak_ctx *c) { zv_keccak_init(c, ZV_SHAKE256_RATE, ZV_KECCAK_DS_SHAKE); }

ZV_HD void zv_shake128(const zv_u8 *in, zv_u64 n, zv_u8 *out, zv_u64 out_len) {
    zv_keccak_ctx c;
    zv_shake128_init(&c);
    zv_keccak_absorb(&c, in, n);
    zv_keccak_squeeze(&c, out, out_len);
}

ZV_HD void zv_shake256(const zv_u8 *in, zv_u64 n, zv_u8 *out, zv_u64 out_len) {
    zv_keccak_ctx c;
    zv_shake256_init(&c);
    zv_keccak_absorb(&c, in, n);
    zv_keccak_squeeze(&c, out, out_len);
}

ZV_HD void zv_sha3_256(const zv_u8 *in, zv_u64 n, zv_u8 out[32]) {
    zv_keccak_ctx c;
    zv_keccak_init(&c, ZV_SHA3_256_RATE, ZV_KECCAK_DS_SHA3);
    zv_keccak_absorb(&c, in, n);
    zv_keccak_squeeze(&c, out, 32);
}

ZV_HD void zv_sha3_512(const zv_u8 *in, zv_u64 n, zv_u8 out[64]) {
    zv_keccak_ctx c;
    zv_keccak_init(&c, ZV_SHA3_512_RATE, ZV_KECCAK_DS_SHA3);
    zv_keccak_absorb(&c, in, n);
    zv_keccak_squeeze(&c, out, 64);
}

/* ------------------------------------------------------------------ one sponge per block
 * A block of threads that needs one long serial hash (ML-DSA's tr, μ and c̃) runs it on
 * its first warp: the permutation by 25 threads, thread t = x + 5y computing lane (x, y) of
 * each round, with the state in shared memory (zv_keccak_block_state, double-buffered:
 * round r reads a[r & 1] and writes a[(r + 1) & 1], so after 24 rounds the state is back in
 * a[0]).  A round is two steps, each ended by a warp barrier (ZV_SYNC_WARP): threads 0..4
 * compute θ's D[x] = C[x − 1] ⊕ rot(C[x + 1], 1) from the column parities; then each of the
 * 25 computes its output lane by χ from the three lanes B[x..x+2, y] of its row, each B =
 * ρπ of a θ-ed input lane (B[y, 2x + 3y] = rot(A[x, y] ⊕ D[x], r[x, y]), FIPS 202
 * §3.2.1–3.2.4), and thread 0 adds ι.  Why a warp barrier: the 25 threads are one warp's,
 * so the ~48 barriers of a permutation need not stop the block's other warps — they go
 * straight to the one block barrier that ends zv_keccak_block_hash (on the GPU a
 * __syncwarp instead of a __syncthreads per step; in the host build 32 fiber switches per
 * step instead of 128).  Every thread of the block calls zv_keccak_block_hash (it ends with
 * a block barrier); zv_keccak_block_permute is called by the first warp's threads only.
 * Semantics are the sponge's above, bit for bit; the message is a list of byte strings
 * (zv_bytes) read in place. */
typedef struct {
    zv_u64 a[2][25];
    zv_u64 d[5];
} zv_keccak_block_state;

typedef struct {
    const zv_u8 *p;
    zv_u64 n;
} zv_bytes;

/* ρ's offset of lane (x, y) from its definition (§3.2.2): (t+1)(t+2)/2 mod 64 for the t-th
 * lane of π's walk from (1, 0); 0 for (0, 0). */
ZV_HD int zv_keccak_rho(int x, int y) {
    int cx = 1, cy = 0;
    for (int t = 0; t < 24; t++) {
        if (cx == x && cy == y) return ((t + 1) * (t + 2) / 2) % 64;
        int nx = cy, ny = (2 * cx + 3 * cy) % 5;
        cx = nx;
        cy = ny;
    }
    return 0;
}

/* Called by the ZV_WARP_SIZE threads of the block's first warp (it holds warp barriers). */
ZV_HD void zv_keccak_block_permute(zv_keccak_block_state *s) {
    const zv_u64 t = ZV_BLOCK_TID;
    int src[3] = {0, 0, 0}, rot[3] = {0, 0, 0};
    if (t < 25) {
        if (t == 0) ZV_COUNT(ZV_OP_KECCAK_F1600);
        int X = (int)(t % 5), Y = (int)(t / 5);
        for (int k = 0; k < 3; k++) {
            int bx = (X + k) % 5, x = (3 * (Y + 15 - 3 * bx)) % 5; /* B[bx, Y] comes from A[x, bx] */
            src[k] = x + 5 * bx;
            rot[k] = zv_keccak_rho(x, bx);
        }
    }
    ZV_NO_UNROLL
    for (int round = 0; round < 24; round++) {
        const zv_u64 *a = s->a[round & 1];
        if (t < 5) {
            int l = (int)(t + 4) % 5, r = (int)(t + 1) % 5;
            zv_u64 cl = a[l] ^ a[l + 5] ^ a[l + 10] ^ a[l + 15] ^ a[l + 20];
            zv_u64 cr = a[r] ^ a[r + 5] ^ a[r + 10] ^ a[r + 15] ^ a[r + 20];
            s->d[t] = cl ^ zv_rotl64(cr, 1);
        }
        ZV_SYNC_WARP();
        if (t < 25) {
            zv_u64 b0 = zv_rotl64(a[src[0]] ^ s->d[src[0] % 5], rot[0]);
            zv_u64 b1 = zv_rotl64(a[src[1]] ^ s->d[src[1] % 5], rot[1]);
            zv_u64 b2 = zv_rotl64(a[src[2]] ^ s->d[src[2] % 5], rot[2]);
            zv_u64 out = b0 ^ (~b1 & b2);
            if (t == 0) out ^= ZV_KECCAK_RC[round];
            s->a[(round + 1) & 1][t] = out;
        }
        ZV_SYNC_WARP();
    }
}

/* Byte `off` of the concatenation of parts[0..nparts) (0 past its end). */
ZV_HD zv_u8 zv_bytes_at(const zv_bytes *parts, int nparts, zv_u64 off) {
    for (int i = 0; i < nparts; i++) {
        if (off < parts[i].n) return parts[i].p[off];
        off -= parts[i].n;
    }
    return 0;
}

/* The sponge of zv_keccak_block_hash, by the ZV_WARP_SIZE threads of the block's first
 * warp (it holds warp barriers); out is written when the last of them returns. */
ZV_HD void zv_keccak_block_sponge(zv_keccak_block_state *s, zv_u32 rate, zv_u8 ds, const zv_bytes *parts, int nparts,
                                  zv_u8 *out, zv_u32 out_len) {
    const zv_u64 t = ZV_BLOCK_TID;
    zv_u64 total = 0;
    for (int i = 0; i < nparts; i++) total += parts[i].n;
    const zv_u64 blocks = total / rate + 1; /* the last holds the padding */
    for (zv_u64 blk = 0; blk < blocks; blk++) {
        if (t < 25) {
            zv_u64 w = 0;
            if (t < rate / 8) {
                for (int k = 0; k < 8; k++) {
                    zv_u64 off = blk * rate + 8 * t + k;
                    zv_u8 v = zv_bytes_at(parts, nparts, off);
                    if (off == total) v ^= ds;                /* pad10*1 after the suffix bits */
                    if (off == blocks * rate - 1) v ^= 0x80u;
                    w |= (zv_u64)v << (8 * k);
                }
            }
            s->a[0][t] = blk ? s->a[0][t] ^ w : w;
        }
        ZV_SYNC_WARP();
        zv_keccak_block_permute(s);
    }
    if (t < (out_len + 7) / 8)
        for (zv_u32 k = 0; k < 8 && 8 * t + k < out_len; k++) out[8 * t + k] = (zv_u8)(s->a[0][t] >> (8 * k));
}

/* out[0 .. out_len) = the sponge of rate `rate` and domain byte `ds` over the concatenation of
 * parts[0..nparts), out_len ≤ rate (one squeeze block), by the block's first warp (see
 * above; the block needs at least ZV_WARP_SIZE threads); called by every thread of the
 * block, with the same arguments; out is written by threads 0 .. ⌈out_len/8⌉ − 1 and
 * visible to every thread on return (a block barrier ends it). */
ZV_HD void zv_keccak_block_hash(zv_keccak_block_state *s, zv_u32 rate, zv_u8 ds, const zv_bytes *parts, int nparts,
                                zv_u8 *out, zv_u32 out_len) {
    if (ZV_BLOCK_TID < ZV_WARP_SIZE) zv_keccak_block_sponge(s, rate, ds, parts, nparts, out, out_len);
    ZV_SYNC();
}

#endif /* ZV_KECCAK_CUH */
