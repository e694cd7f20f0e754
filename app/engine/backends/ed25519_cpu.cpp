// ed25519_cpu.cpp — the CPU backend's own Ed25519 verify (docs/architecture.md, "CPU backend"):
// libsodium's verdicts, item for item, in less time per core.
//
// Semantics: exactly those of crypto_sign_ed25519_verify_detached (libsodium 1.0.18+, RFC 8032
// §5.1.7, cofactorless), the same list the GPU kernel keeps (kernels/schemes/ed25519.cuh):
//   1. pk is 32 bytes and sig 64, else 0;
//   2. S (little-endian) < L;
//   3. R, sign bit ignored, is not one of the seven small-order encodings;
//   4. A is canonical (low 255 bits < p) and not small-order;
//   5. A decodes (x = 0 with the sign bit set is accepted, as libsodium does);
//   6. k = SHA-512(R ‖ A ‖ M) mod L and the encoding of [S]B - [k]A equals R byte for byte.
// Steps 2-4 and the reduction mod L are the kernels' byte-level code (curves/ge25519.cuh,
// fields/sc25519.cuh), so both verifiers read one list of rules.
//
// Why it is faster than libsodium's (same cofactorless equation, no batch equation):
//   - the field is radix 2^51 with 64 x 64 -> 128-bit products (5 limbs, 25 products a
//     multiplication), written so the compiler keeps everything in registers;
//   - the base point's half of [S]B - [k]A uses a width-ZV_CPU_WB signed window over a table
//     of ZV_CPU_B_ENTRIES odd multiples of B in affine (y+x, y-x, 2dxy) form built once at load
//     (libsodium: 8 entries), so about 253 / (ZV_CPU_WB + 1) mixed additions instead of 253 / 6;
//   - a chunk's final inversions (one per item, to encode the result) are shared by
//     Montgomery's trick: one inversion and three products per item;
//   - SHA-512 is OpenSSL's (SHA-NI / AVX2 assembly) when the caller hands its functions over,
//     as native_loops.cpp does for SHA-256; otherwise the kernels' portable SHA-512;
//   - where the CPU has AVX-512F and IFMA (checked at load), the double-scalar multiplication
//     runs eight signatures at once in 52-bit multiply lanes ("the AVX-512 IFMA path" below,
//     about twice the portable path's speed); the group formulas are one set of templates
//     serving both paths.
// A batch equation (random linear combination) is not used: it agrees with the cofactorless
// verdict only for torsion-free A and R, and proving R torsion-free costs about as much as a
// verify (docs/architecture.md, "CPU backend").
//
// Bounds (ZV_CHECK, counted in host builds with -DZV_VERIFY, which the agreement suite and
// the tests turn on): every multiplication input limb < 2^56, so each of the five 128-bit
// column sums stays below 2^118; a carried result has limbs < 2^51 + 2^14; a subtrahend's
// limbs are < 2^53 - 76 (the 4p that keeps a difference positive).
//
// Build: app/engine/backends/ed25519_cpu.py, through app/engine/device/hostbuild (baseline
// x86-64 / any 64-bit target with unsigned __int128; no instruction-set flag: only the IFMA
// section is compiled for AVX-512, and it runs only where the CPU has it).  -DZV_CPU_PORTABLE
// leaves that section out (the portable build the agreement suite also runs).

#include "curves/ge25519.cuh"
#include "hashes/sha2.cuh"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef unsigned __int128 zv_u128;

#if defined(__x86_64__) && !defined(ZV_CPU_PORTABLE)
#define ZV_CPU_IFMA 1
#else
#define ZV_CPU_IFMA 0
#endif

// ---------------------------------------------------------------- field GF(2^255 - 19), radix 2^51

typedef struct { uint64_t v[5]; } fe51;

static const uint64_t M51 = (1ull << 51) - 1;

static inline void fe_bounded(const fe51 *a) {
    ZV_CHECK((a->v[0] | a->v[1] | a->v[2] | a->v[3] | a->v[4]) < (1ull << 56));
}

static inline void fe_set(fe51 *h, uint64_t x) {
    h->v[0] = x;
    h->v[1] = h->v[2] = h->v[3] = h->v[4] = 0;
}

static inline void fe_add(fe51 *h, const fe51 *a, const fe51 *b) {
    for (int i = 0; i < 5; i++) h->v[i] = a->v[i] + b->v[i];
}

// a - b + 4p: b's limbs must be < 2^53 (4p's limbs are 2^53 - 76 and 2^53 - 4).
static inline void fe_sub(fe51 *h, const fe51 *a, const fe51 *b) {
    ZV_CHECK((b->v[0] | b->v[1] | b->v[2] | b->v[3] | b->v[4]) < (1ull << 53) - 76);
    h->v[0] = a->v[0] + 0x1fffffffffffb4ull - b->v[0];
    for (int i = 1; i < 5; i++) h->v[i] = a->v[i] + 0x1ffffffffffffcull - b->v[i];
}

static inline void fe_neg(fe51 *h, const fe51 *a) {
    fe51 z;
    fe_set(&z, 0);
    fe_sub(h, &z, a);
}

// Carry five 128-bit column sums (each < 2^118) into limbs < 2^51 + 2^14.
static inline void fe_carry128(fe51 *h, zv_u128 c0, zv_u128 c1, zv_u128 c2, zv_u128 c3, zv_u128 c4) {
    c1 += c0 >> 51;
    c2 += c1 >> 51;
    c3 += c2 >> 51;
    c4 += c3 >> 51;
    ZV_CHECK((c4 >> 51) < ((zv_u128)1 << 64));
    const zv_u128 f = (zv_u128)(uint64_t)(c4 >> 51) * 19 + ((uint64_t)c0 & M51);
    const uint64_t r1 = ((uint64_t)c1 & M51) + (uint64_t)(f >> 51);
    h->v[0] = (uint64_t)f & M51;
    h->v[1] = r1;
    h->v[2] = (uint64_t)c2 & M51;
    h->v[3] = (uint64_t)c3 & M51;
    h->v[4] = (uint64_t)c4 & M51;
}

// Limbs < 2^51 + 2^14 again after additions and subtractions (a weak reduction).
static inline void fe_carry(fe51 *h) {
    uint64_t c = 0;
    for (int i = 0; i < 5; i++) {
        const uint64_t t = h->v[i] + c;
        h->v[i] = t & M51;
        c = t >> 51;
    }
    h->v[0] += 19 * c;
    h->v[1] += h->v[0] >> 51;
    h->v[0] &= M51;
}

static inline void fe_mul(fe51 *h, const fe51 *a, const fe51 *b) {
    fe_bounded(a);
    fe_bounded(b);
    const uint64_t a0 = a->v[0], a1 = a->v[1], a2 = a->v[2], a3 = a->v[3], a4 = a->v[4];
    const uint64_t b0 = b->v[0], b1 = b->v[1], b2 = b->v[2], b3 = b->v[3], b4 = b->v[4];
    const uint64_t b1_19 = b1 * 19, b2_19 = b2 * 19, b3_19 = b3 * 19, b4_19 = b4 * 19;  // < 2^59
    zv_u128 c0 = (zv_u128)a0 * b0 + (zv_u128)a1 * b4_19 + (zv_u128)a2 * b3_19 + (zv_u128)a3 * b2_19 +
                 (zv_u128)a4 * b1_19;
    zv_u128 c1 = (zv_u128)a0 * b1 + (zv_u128)a1 * b0 + (zv_u128)a2 * b4_19 + (zv_u128)a3 * b3_19 +
                 (zv_u128)a4 * b2_19;
    zv_u128 c2 = (zv_u128)a0 * b2 + (zv_u128)a1 * b1 + (zv_u128)a2 * b0 + (zv_u128)a3 * b4_19 +
                 (zv_u128)a4 * b3_19;
    zv_u128 c3 = (zv_u128)a0 * b3 + (zv_u128)a1 * b2 + (zv_u128)a2 * b1 + (zv_u128)a3 * b0 +
                 (zv_u128)a4 * b4_19;
    zv_u128 c4 = (zv_u128)a0 * b4 + (zv_u128)a1 * b3 + (zv_u128)a2 * b2 + (zv_u128)a3 * b1 + (zv_u128)a4 * b0;
    fe_carry128(h, c0, c1, c2, c3, c4);
}

static inline void fe_sq(fe51 *h, const fe51 *a) {
    fe_bounded(a);
    const uint64_t a0 = a->v[0], a1 = a->v[1], a2 = a->v[2], a3 = a->v[3], a4 = a->v[4];
    const uint64_t d0 = a0 * 2, d1 = a1 * 2, d2 = a2 * 2;
    const uint64_t a3_19 = a3 * 19, a4_19 = a4 * 19;
    zv_u128 c0 = (zv_u128)a0 * a0 + (zv_u128)d1 * a4_19 + (zv_u128)d2 * a3_19;
    zv_u128 c1 = (zv_u128)d0 * a1 + (zv_u128)d2 * a4_19 + (zv_u128)a3 * a3_19;
    zv_u128 c2 = (zv_u128)d0 * a2 + (zv_u128)a1 * a1 + (zv_u128)(a3 * 2) * a4_19;
    zv_u128 c3 = (zv_u128)d0 * a3 + (zv_u128)d1 * a2 + (zv_u128)a4 * a4_19;
    zv_u128 c4 = (zv_u128)d0 * a4 + (zv_u128)d1 * a3 + (zv_u128)a2 * a2;
    fe_carry128(h, c0, c1, c2, c3, c4);
}

static inline void fe_sqn(fe51 *h, const fe51 *a, int n) {
    fe_sq(h, a);
    for (int i = 1; i < n; i++) fe_sq(h, h);
}

// Little-endian bytes, bit 255 dropped (a point encoding's sign bit).
static inline void fe_frombytes(fe51 *h, const uint8_t s[32]) {
    uint64_t w[4];
    for (int i = 0; i < 4; i++) {
        uint64_t x = 0;
        for (int j = 7; j >= 0; j--) x = (x << 8) | s[8 * i + j];
        w[i] = x;
    }
    h->v[0] = w[0] & M51;
    h->v[1] = ((w[0] >> 51) | (w[1] << 13)) & M51;
    h->v[2] = ((w[1] >> 38) | (w[2] << 26)) & M51;
    h->v[3] = ((w[2] >> 25) | (w[3] << 39)) & M51;
    h->v[4] = (w[3] >> 12) & M51;
}

// The unique representative in [0, p), as 32 little-endian bytes.
static inline void fe_tobytes(uint8_t s[32], const fe51 *a) {
    uint64_t t[5];
    for (int i = 0; i < 5; i++) t[i] = a->v[i];
    // two carry passes: limbs < 2^51, value < 2^255 + small
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < 4; i++) {
            t[i + 1] += t[i] >> 51;
            t[i] &= M51;
        }
        t[0] += 19 * (t[4] >> 51);
        t[4] &= M51;
    }
    // now value < 2^255; subtract p when value >= p, i.e. when value + 19 >= 2^255
    uint64_t q = (t[0] + 19) >> 51;
    for (int i = 1; i < 5; i++) q = (t[i] + q) >> 51;
    t[0] += 19 * q;
    for (int i = 0; i < 4; i++) {
        t[i + 1] += t[i] >> 51;
        t[i] &= M51;
    }
    t[4] &= M51;
    const uint64_t w0 = t[0] | (t[1] << 51), w1 = (t[1] >> 13) | (t[2] << 38), w2 = (t[2] >> 26) | (t[3] << 25),
                   w3 = (t[3] >> 39) | (t[4] << 12);
    const uint64_t w[4] = {w0, w1, w2, w3};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 8; j++) s[8 * i + j] = (uint8_t)(w[i] >> (8 * j));
}

static inline int fe_iszero(const fe51 *a) {
    uint8_t s[32];
    fe_tobytes(s, a);
    uint8_t d = 0;
    for (int i = 0; i < 32; i++) d |= s[i];
    return d == 0;
}

static inline int fe_isnegative(const fe51 *a) {
    uint8_t s[32];
    fe_tobytes(s, a);
    return s[0] & 1;
}

static inline int fe_equal(const fe51 *a, const fe51 *b) {
    fe51 d;
    fe_sub(&d, a, b);
    return fe_iszero(&d);
}

// z^(2^250 - 1) and z^11 (shared head of the inversion and the (p-5)/8 power).
static inline void fe_pow_2_250_1(fe51 *out, fe51 *z11, const fe51 *z) {
    fe51 z2, z9, t, z_5_0, z_10_0, z_20_0, z_50_0, z_100_0;
    fe_sq(&z2, z);                 // 2
    fe_sqn(&t, &z2, 2);            // 8
    fe_mul(&z9, &t, z);            // 9
    fe_mul(z11, &z9, &z2);         // 11
    fe_sq(&t, z11);                // 22
    fe_mul(&z_5_0, &t, &z9);       // 2^5 - 1
    fe_sqn(&t, &z_5_0, 5);
    fe_mul(&z_10_0, &t, &z_5_0);   // 2^10 - 1
    fe_sqn(&t, &z_10_0, 10);
    fe_mul(&z_20_0, &t, &z_10_0);  // 2^20 - 1
    fe_sqn(&t, &z_20_0, 20);
    fe_mul(&t, &t, &z_20_0);       // 2^40 - 1
    fe_sqn(&t, &t, 10);
    fe_mul(&z_50_0, &t, &z_10_0);  // 2^50 - 1
    fe_sqn(&t, &z_50_0, 50);
    fe_mul(&z_100_0, &t, &z_50_0); // 2^100 - 1
    fe_sqn(&t, &z_100_0, 100);
    fe_mul(&t, &t, &z_100_0);      // 2^200 - 1
    fe_sqn(&t, &t, 50);
    fe_mul(out, &t, &z_50_0);      // 2^250 - 1
}

// 1/z = z^(p - 2) = z^(2^255 - 21).
static void fe_invert(fe51 *out, const fe51 *z) {
    fe51 t, z11;
    fe_pow_2_250_1(&t, &z11, z);
    fe_sqn(&t, &t, 5);             // 2^255 - 32
    fe_mul(out, &t, &z11);         // 2^255 - 21
}

// z^((p - 5) / 8) = z^(2^252 - 3).
static void fe_pow22523(fe51 *out, const fe51 *z) {
    fe51 t, z11;
    fe_pow_2_250_1(&t, &z11, z);
    fe_sqn(&t, &t, 2);             // 2^252 - 4
    fe_mul(out, &t, z);            // 2^252 - 3
}

static void fe_from_u32(fe51 *h, const zv_u32 c[8]) {
    uint8_t s[32];
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 4; j++) s[4 * i + j] = (uint8_t)(c[i] >> (8 * j));
    fe_frombytes(h, s);
}

// ---------------------------------------------------------------- the group (a = -1 twisted Edwards)
// Extended coordinates (X : Y : Z : T), x = X/Z, y = Y/Z, T = XY/Z; the formulas are those of
// Hisil, Wong, Carter and Dawson, "Twisted Edwards curves revisited" (2008), §3.1-3.3 for a = -1.

// The formulas are written once, as templates over the field (fe51 here, one element; fe8 in
// the IFMA path, eight lanes) and the "subtract" selector (int here; a lane mask there), and
// selections are fe_select rather than branches, so that eight lanes can take different signs.

template <class Fe> struct GeP2 { Fe X, Y, Z; };
template <class Fe> struct GeP3 { Fe X, Y, Z, T; };
template <class Fe> struct GeDone { Fe E, F, G, H; };        // X = EF, Y = GH, Z = FG, T = EH
template <class Fe> struct GeCached { Fe YpX, YmX, Z, T2d; };
template <class Fe> struct GeAffine { Fe ypx, ymx, xy2d; };  // Z = 1
typedef GeP2<fe51> ge_p2;
typedef GeP3<fe51> ge_p3;
typedef GeDone<fe51> ge_done;
typedef GeCached<fe51> ge_cached;
typedef GeAffine<fe51> ge_affine;

static fe51 ED_D, ED_D2, ED_SQRTM1;

static inline void fe_select(fe51 *h, int m, const fe51 *a, const fe51 *b) { *h = m ? *b : *a; }  // b where m

template <class Fe> static inline void ge_to_p2(GeP2<Fe> *r, const GeDone<Fe> *p) {
    fe_mul(&r->X, &p->E, &p->F);
    fe_mul(&r->Y, &p->G, &p->H);
    fe_mul(&r->Z, &p->F, &p->G);
}

template <class Fe> static inline void ge_to_p3(GeP3<Fe> *r, const GeDone<Fe> *p) {
    fe_mul(&r->X, &p->E, &p->F);
    fe_mul(&r->Y, &p->G, &p->H);
    fe_mul(&r->Z, &p->F, &p->G);
    fe_mul(&r->T, &p->E, &p->H);
}

// d2 = 2d in the field's form.
template <class Fe> static inline void ge_to_cached(GeCached<Fe> *r, const GeP3<Fe> *p, const Fe *d2) {
    fe_add(&r->YpX, &p->Y, &p->X);
    fe_sub(&r->YmX, &p->Y, &p->X);
    r->Z = p->Z;
    fe_mul(&r->T2d, &p->T, d2);
}

// 2P ("dbl-2008-hwcd", a = -1): 4 squarings.
template <class Fe> static inline void ge_dbl(GeDone<Fe> *r, const GeP2<Fe> *p) {
    Fe A, B, C, s, ApB, zero;
    fe_sq(&A, &p->X);
    fe_sq(&B, &p->Y);
    fe_sq(&C, &p->Z);
    fe_add(&C, &C, &C);
    fe_add(&s, &p->X, &p->Y);
    fe_sq(&s, &s);
    fe_add(&ApB, &A, &B);
    fe_sub(&r->E, &s, &ApB);   // 2XY
    fe_sub(&r->G, &B, &A);     // B - A
    fe_sub(&r->F, &r->G, &C);  // G - 2Z^2
    fe_set(&zero, 0);
    fe_sub(&r->H, &zero, &ApB);  // -(A + B)
}

// The tail both additions share, given a = (Y1 - X1)(Y2 ∓ X2), b = (Y1 + X1)(Y2 ± X2),
// c = T1 · 2d T2 and d = 2 Z1 Z2: F and G swap where neg (P - Q).
template <class Fe, class Mask>
static inline void ge_add_finish(GeDone<Fe> *r, const Fe *a, const Fe *b, const Fe *c, const Fe *d, Mask neg) {
    Fe f, g;
    fe_sub(&r->E, b, a);
    fe_add(&r->H, b, a);
    fe_sub(&f, d, c);
    fe_add(&g, d, c);
    fe_select(&r->F, neg, &f, &g);
    fe_select(&r->G, neg, &g, &f);
}

// P ± Q for Q cached ("add-2008-hwcd-3", a = -1); neg selects P - Q.
template <class Fe, class Mask>
static inline void ge_add_cached(GeDone<Fe> *r, const GeP3<Fe> *p, const GeCached<Fe> *q, Mask neg) {
    Fe a, b, c, d, ypx, ymx, qa, qb;
    fe_add(&ypx, &p->Y, &p->X);
    fe_sub(&ymx, &p->Y, &p->X);
    fe_select(&qa, neg, &q->YmX, &q->YpX);
    fe_select(&qb, neg, &q->YpX, &q->YmX);
    fe_mul(&a, &ymx, &qa);
    fe_mul(&b, &ypx, &qb);
    fe_mul(&c, &p->T, &q->T2d);
    fe_mul(&d, &p->Z, &q->Z);
    fe_add(&d, &d, &d);
    ge_add_finish(r, &a, &b, &c, &d, neg);
}

// P ± Q for Q affine (Z = 1: one multiplication fewer).
template <class Fe, class Mask>
static inline void ge_add_affine(GeDone<Fe> *r, const GeP3<Fe> *p, const GeAffine<Fe> *q, Mask neg) {
    Fe a, b, c, d, ypx, ymx, qa, qb;
    fe_add(&ypx, &p->Y, &p->X);
    fe_sub(&ymx, &p->Y, &p->X);
    fe_select(&qa, neg, &q->ymx, &q->ypx);
    fe_select(&qb, neg, &q->ypx, &q->ymx);
    fe_mul(&a, &ymx, &qa);
    fe_mul(&b, &ypx, &qb);
    fe_mul(&c, &p->T, &q->xy2d);
    fe_add(&d, &p->Z, &p->Z);
    ge_add_finish(r, &a, &b, &c, &d, neg);
}

// -A for the encoding s of A (RFC 8032 §5.1.3 with libsodium's acceptance of x = 0 with the
// sign bit set); 0 when no point has this y.  The caller has checked s canonical.
static int ge_frombytes_negate(ge_p3 *r, const uint8_t s[32]) {
    fe51 u, v, v3, x, t, one;
    fe_set(&one, 1);
    fe_frombytes(&r->Y, s);
    fe_set(&r->Z, 1);
    fe_sq(&u, &r->Y);
    fe_mul(&v, &u, &ED_D);
    fe_sub(&u, &u, &one);  // y^2 - 1
    fe_add(&v, &v, &one);  // d y^2 + 1
    fe_carry(&u);
    fe_carry(&v);
    fe_sq(&v3, &v);
    fe_mul(&v3, &v3, &v);  // v^3
    fe_sq(&x, &v3);
    fe_mul(&x, &x, &v);
    fe_mul(&x, &x, &u);    // u v^7
    fe_pow22523(&x, &x);
    fe_mul(&x, &x, &v3);
    fe_mul(&x, &x, &u);    // u v^3 (u v^7)^((p-5)/8)
    fe_sq(&t, &x);
    fe_mul(&t, &t, &v);    // v x^2
    if (!fe_equal(&t, &u)) {
        fe51 sum;
        fe_add(&sum, &t, &u);  // v x^2 = -u?
        if (!fe_iszero(&sum)) return 0;
        fe_mul(&x, &x, &ED_SQRTM1);
    }
    if (fe_isnegative(&x) == (s[31] >> 7)) fe_neg(&x, &x);  // the negation of the decoded point
    fe_carry(&x);
    r->X = x;
    fe_mul(&r->T, &r->X, &r->Y);
    return 1;
}

// ---------------------------------------------------------------- base-point table

#ifndef ZV_CPU_WB
#define ZV_CPU_WB 8  // signed window of S: digits odd, |d| < 2^(WB-1); 64 entries = 7.5 KiB (L1)
#endif
#define ZV_CPU_B_ENTRIES (1 << (ZV_CPU_WB - 2))
#define ZV_CPU_WA 5  // signed window of k: odd multiples [1]A .. [15]A, built per item
#define ZV_CPU_A_ENTRIES (1 << (ZV_CPU_WA - 2))

static ge_affine BASE_ODD[ZV_CPU_B_ENTRIES];  // [2j + 1]B, j = 0 .. ZV_CPU_B_ENTRIES - 1

// The base point B (RFC 8032 §5.1: y = 4/5, x even): its standard encoding.
static const uint8_t BASE_ENCODING[32] = {0x58, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66,
                                          0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66,
                                          0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66};

#if ZV_CPU_IFMA
#define ZV_IFMA_B_ENTRIES 129  // [0..128]B, the IFMA path's fixed 8-bit window of S
static uint64_t BASE_FIXED[ZV_IFMA_B_ENTRIES][3][5];  // affine (y+x, y-x, 2dxy), limbs < 2^51

static void fe_store_canonical(uint64_t out[5], const fe51 *a) {
    uint8_t s[32];
    fe51 c;
    fe_tobytes(s, a);
    fe_frombytes(&c, s);
    for (int i = 0; i < 5; i++) out[i] = c.v[i];
}

static void zv_cpu_init_fixed_table(const ge_p3 *b) {
    fe51 one, zero;
    fe_set(&one, 1);
    fe_set(&zero, 0);
    fe_store_canonical(BASE_FIXED[0][0], &one);  // the identity: y + x = y - x = 1, 2dxy = 0
    fe_store_canonical(BASE_FIXED[0][1], &one);
    fe_store_canonical(BASE_FIXED[0][2], &zero);
    ge_cached cb;
    ge_to_cached(&cb, b, &ED_D2);
    ge_p3 acc = *b;
    for (int j = 1; j < ZV_IFMA_B_ENTRIES; j++) {
        if (j > 1) {
            ge_done t;
            ge_add_cached(&t, &acc, &cb, 0);
            ge_to_p3(&acc, &t);
        }
        fe51 zi, x, y, v;
        fe_invert(&zi, &acc.Z);
        fe_mul(&x, &acc.X, &zi);
        fe_mul(&y, &acc.Y, &zi);
        fe_add(&v, &y, &x);
        fe_store_canonical(BASE_FIXED[j][0], &v);
        fe_sub(&v, &y, &x);
        fe_store_canonical(BASE_FIXED[j][1], &v);
        fe_mul(&v, &x, &y);
        fe_mul(&v, &v, &ED_D2);
        fe_store_canonical(BASE_FIXED[j][2], &v);
    }
}
#endif

static void zv_cpu_init_tables(void) {
    fe_from_u32(&ED_D, ZV_ED25519_D);
    fe_from_u32(&ED_D2, ZV_ED25519_D2);
    fe_from_u32(&ED_SQRTM1, ZV_ED25519_SQRTM1);
    ge_p3 nb, b, b2;
    ge_frombytes_negate(&nb, BASE_ENCODING);  // -B
    b = nb;
    fe_neg(&b.X, &nb.X);
    fe_neg(&b.T, &nb.T);
    ge_done t;
    ge_p2 bp2 = {b.X, b.Y, b.Z};
    ge_dbl(&t, &bp2);
    ge_to_p3(&b2, &t);
    ge_cached c2;
    ge_to_cached(&c2, &b2, &ED_D2);
    static ge_p3 odd[ZV_CPU_B_ENTRIES];
    odd[0] = b;
    for (int j = 1; j < ZV_CPU_B_ENTRIES; j++) {
        ge_add_cached(&t, &odd[j - 1], &c2, 0);
        ge_to_p3(&odd[j], &t);
    }
    for (int j = 0; j < ZV_CPU_B_ENTRIES; j++) {  // once per process: one inversion each is fine
        fe51 zi, x, y;
        fe_invert(&zi, &odd[j].Z);
        fe_mul(&x, &odd[j].X, &zi);
        fe_mul(&y, &odd[j].Y, &zi);
        fe_add(&BASE_ODD[j].ypx, &y, &x);
        fe_sub(&BASE_ODD[j].ymx, &y, &x);
        fe_mul(&BASE_ODD[j].xy2d, &x, &y);
        fe_mul(&BASE_ODD[j].xy2d, &BASE_ODD[j].xy2d, &ED_D2);
    }
#if ZV_CPU_IFMA
    zv_cpu_init_fixed_table(&b);
#endif
}

// ---------------------------------------------------------------- scalars

// Signed sliding-window digits of a scalar < 2^253 (little-endian bytes): d[i] odd or 0 with
// |d[i]| <= 2^(w-1) - 1, sum d[i] 2^i = the scalar, and at least w - 1 zeros after each nonzero.
static void slide(int8_t d[256], const uint8_t s[32], int w) {
    for (int i = 0; i < 256; i++) d[i] = (int8_t)((s[i >> 3] >> (i & 7)) & 1);
    const int top = (1 << (w - 1)) - 1;
    for (int i = 0; i < 256; i++) {
        if (!d[i]) continue;
        for (int b = 1; b < w && i + b < 256; b++) {
            if (!d[i + b]) continue;
            const int add = d[i + b] << b;
            if (d[i] + add <= top) {
                d[i] = (int8_t)(d[i] + add);
                d[i + b] = 0;
            } else if (d[i] - add >= -top) {
                d[i] = (int8_t)(d[i] - add);
                for (int k = i + b; k < 256; k++) {
                    if (!d[k]) {
                        d[k] = 1;
                        break;
                    }
                    d[k] = 0;
                }
            } else {
                break;
            }
        }
    }
}

// r = [k](-A) + [s]B, with nA = -A: the double-scalar multiplication of step 6.
static void double_scalarmult(ge_p2 *r, const uint8_t k[32], const ge_p3 *nA, const uint8_t s[32]) {
    int8_t dk[256], ds[256];
    slide(dk, k, ZV_CPU_WA);
    slide(ds, s, ZV_CPU_WB);
    ge_cached ai[ZV_CPU_A_ENTRIES];  // [1, 3, ..., 15](-A)
    ge_done t;
    ge_p3 a2, u;
    ge_to_cached(&ai[0], nA, &ED_D2);
    ge_p2 na2 = {nA->X, nA->Y, nA->Z};
    ge_dbl(&t, &na2);
    ge_to_p3(&a2, &t);
    for (int j = 1; j < ZV_CPU_A_ENTRIES; j++) {
        ge_add_cached(&t, &a2, &ai[j - 1], 0);
        ge_to_p3(&u, &t);
        ge_to_cached(&ai[j], &u, &ED_D2);
    }
    fe_set(&r->X, 0);
    fe_set(&r->Y, 1);
    fe_set(&r->Z, 1);
    int i = 255;
    while (i >= 0 && !dk[i] && !ds[i]) i--;
    for (; i >= 0; i--) {
        ge_dbl(&t, r);
        if (dk[i] || ds[i]) {
            ge_to_p3(&u, &t);
            if (dk[i]) {
                ge_add_cached(&t, &u, &ai[(dk[i] > 0 ? dk[i] : -dk[i]) >> 1], dk[i] < 0);
                if (ds[i]) ge_to_p3(&u, &t);
            }
            if (ds[i]) ge_add_affine(&t, &u, &BASE_ODD[(ds[i] > 0 ? ds[i] : -ds[i]) >> 1], ds[i] < 0);
        }
        ge_to_p2(r, &t);
    }
}

#if ZV_CPU_IFMA
// GCC 12's AVX-512 headers trip its own -Wuninitialized on _mm512_undefined_epi32 (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

// ---------------------------------------------------------------- the AVX-512 IFMA path
// [S]B - [k]A for eight signatures at once, one per 64-bit lane; compiled for AVX-512F + IFMA
// by the pragma below and called only where the CPU has both (zv_cpu_ifma).  Left out of the
// portable build (-DZV_CPU_PORTABLE) and of non-x86-64 hosts.
//
// Field: the portable path's radix 2^51, five limbs, one field element per lane.  The 52-bit
// multipliers (vpmadd52luq / vpmadd52huq) take inputs below 2^52, so every operation here
// returns "lane-normal" limbs (limbs 1-4 < 2^51, limb 0 < 2^51 + 2^17): additions and
// subtractions carry too, which keeps the rule simple and checked (ZV_CHECK on every
// multiplication's inputs).  A product a_i b_j (< 2^103) splits into lo (52 bits) at weight
// 2^(51(i+j)) and hi at 2^(51(i+j)+52) = 2 · 2^(51(i+j+1)), so the hi columns are doubled
// before they join the next column; columns 5-9 fold back with 2^255 = 19 (mod p).
//
// Scalar multiplication: the lanes share one control flow, so both scalars use fixed signed
// windows (not sliding ones, whose add positions differ between lanes): k in 64 digits of
// 4 bits (-8..7) over a per-lane table of [0..8](-A), S in 32 digits of 8 bits (-128..127)
// over one shared table of [0..128]B (affine), added every second window.  252 doublings,
// 64 + 32 additions; a zero digit adds the identity (the formulas are complete for a = -1
// and non-square d, so no lane needs a branch).  Digits are selected with masked moves
// (A, per-lane tables) and gathers (B, one table).

#pragma GCC push_options
#pragma GCC target("avx512f,avx512ifma")

struct fe8 { __m512i v[5]; };
typedef GeP2<fe8> ge8_p2;
typedef GeP3<fe8> ge8_p3;
typedef GeDone<fe8> ge8_done;
typedef GeCached<fe8> ge8_cached;

static inline __m512i v_m51(void) { return _mm512_set1_epi64((long long)M51); }

static inline void fe8_lane_normal_check(const fe8 *a) {
#ifdef ZV_VERIFY
    const __m512i lim = _mm512_set1_epi64(1ll << 52);
    for (int i = 0; i < 5; i++) ZV_CHECK(_mm512_cmpge_epu64_mask(a->v[i], lim) == 0);
#else
    (void)a;
#endif
}

static inline __m512i v_times19(__m512i c) {
    return _mm512_add_epi64(_mm512_add_epi64(_mm512_slli_epi64(c, 4), _mm512_slli_epi64(c, 1)), c);
}

// Limbs < 2^63 in, lane-normal out.
static inline void fe_carry(fe8 *h) {
    const __m512i m = v_m51();
    __m512i c;
    c = _mm512_srli_epi64(h->v[0], 51);
    h->v[0] = _mm512_and_si512(h->v[0], m);
    h->v[1] = _mm512_add_epi64(h->v[1], c);
    c = _mm512_srli_epi64(h->v[1], 51);
    h->v[1] = _mm512_and_si512(h->v[1], m);
    h->v[2] = _mm512_add_epi64(h->v[2], c);
    c = _mm512_srli_epi64(h->v[2], 51);
    h->v[2] = _mm512_and_si512(h->v[2], m);
    h->v[3] = _mm512_add_epi64(h->v[3], c);
    c = _mm512_srli_epi64(h->v[3], 51);
    h->v[3] = _mm512_and_si512(h->v[3], m);
    h->v[4] = _mm512_add_epi64(h->v[4], c);
    c = _mm512_srli_epi64(h->v[4], 51);
    h->v[4] = _mm512_and_si512(h->v[4], m);
    h->v[0] = _mm512_add_epi64(h->v[0], v_times19(c));
}

static inline void fe_add(fe8 *h, const fe8 *a, const fe8 *b) {
    for (int i = 0; i < 5; i++) h->v[i] = _mm512_add_epi64(a->v[i], b->v[i]);
    fe_carry(h);
}

// a - b + 2p (2p's limbs 2^52 - 38 and 2^52 - 2 exceed any lane-normal limb of b).
static inline void fe_sub(fe8 *h, const fe8 *a, const fe8 *b) {
    const __m512i p0 = _mm512_set1_epi64((1ll << 52) - 38), pi = _mm512_set1_epi64((1ll << 52) - 2);
    h->v[0] = _mm512_sub_epi64(_mm512_add_epi64(a->v[0], p0), b->v[0]);
    for (int i = 1; i < 5; i++) h->v[i] = _mm512_sub_epi64(_mm512_add_epi64(a->v[i], pi), b->v[i]);
    fe_carry(h);
}

// The product's lo / hi column sums L[0..8], H[0..8] (each < 14 · 2^52) into lane-normal limbs:
// col[k] = L[k] + 2 H[k-1] (< 2^56), then r_k = col[k] + 19 col[k+5] (< 2^61), carried.
static inline void fe_fold(fe8 *h, const __m512i L[9], const __m512i H[9]) {
    __m512i col[10];
    col[0] = L[0];
    for (int k = 1; k < 9; k++) col[k] = _mm512_add_epi64(L[k], _mm512_slli_epi64(H[k - 1], 1));
    col[9] = _mm512_slli_epi64(H[8], 1);
    for (int k = 0; k < 5; k++) h->v[k] = _mm512_add_epi64(col[k], v_times19(col[k + 5]));
    fe_carry(h);
}

static inline void fe_mul(fe8 *h, const fe8 *a, const fe8 *b) {
    fe8_lane_normal_check(a);
    fe8_lane_normal_check(b);
    const __m512i z = _mm512_setzero_si512();
    __m512i L[9], H[9];
    for (int k = 0; k < 9; k++) L[k] = H[k] = z;
#pragma GCC unroll 5
    for (int i = 0; i < 5; i++) {
#pragma GCC unroll 5
        for (int j = 0; j < 5; j++) {
            L[i + j] = _mm512_madd52lo_epu64(L[i + j], a->v[i], b->v[j]);
            H[i + j] = _mm512_madd52hi_epu64(H[i + j], a->v[i], b->v[j]);
        }
    }
    fe_fold(h, L, H);
}

// a^2 with 15 products instead of 25: the cross products a_i a_j (i < j) once, doubled.
static inline void fe_sq(fe8 *h, const fe8 *a) {
    fe8_lane_normal_check(a);
    const __m512i z = _mm512_setzero_si512();
    __m512i L[9], H[9], Lx[9], Hx[9];
    for (int k = 0; k < 9; k++) L[k] = H[k] = Lx[k] = Hx[k] = z;
#pragma GCC unroll 5
    for (int i = 0; i < 5; i++) {
        L[2 * i] = _mm512_madd52lo_epu64(L[2 * i], a->v[i], a->v[i]);
        H[2 * i] = _mm512_madd52hi_epu64(H[2 * i], a->v[i], a->v[i]);
#pragma GCC unroll 4
        for (int j = i + 1; j < 5; j++) {
            Lx[i + j] = _mm512_madd52lo_epu64(Lx[i + j], a->v[i], a->v[j]);
            Hx[i + j] = _mm512_madd52hi_epu64(Hx[i + j], a->v[i], a->v[j]);
        }
    }
    for (int k = 1; k < 8; k++) {
        L[k] = _mm512_add_epi64(L[k], _mm512_slli_epi64(Lx[k], 1));
        H[k] = _mm512_add_epi64(H[k], _mm512_slli_epi64(Hx[k], 1));
    }
    fe_fold(h, L, H);
}

static inline void fe_set(fe8 *h, uint64_t x) {
    h->v[0] = _mm512_set1_epi64((long long)x);
    for (int i = 1; i < 5; i++) h->v[i] = _mm512_setzero_si512();
}

static inline void fe_select(fe8 *h, __mmask8 m, const fe8 *a, const fe8 *b) {  // b where m, else a
    for (int i = 0; i < 5; i++) h->v[i] = _mm512_mask_blend_epi64(m, a->v[i], b->v[i]);
}

// Lane l of h = f[l] (fe51 limbs below 2^52).
static inline void fe8_gather(fe8 *h, const fe51 *const f[8]) {
    alignas(64) uint64_t t[5][8];
    for (int l = 0; l < 8; l++)
        for (int i = 0; i < 5; i++) t[i][l] = f[l]->v[i];
    for (int i = 0; i < 5; i++) h->v[i] = _mm512_load_si512(t[i]);
}

static inline void fe8_scatter(fe51 *const f[8], const fe8 *h) {
    alignas(64) uint64_t t[5][8];
    for (int i = 0; i < 5; i++) _mm512_store_si512(t[i], h->v[i]);
    for (int l = 0; l < 8; l++)
        for (int i = 0; i < 5; i++) f[l]->v[i] = t[i][l];
}

// Fixed signed windows of a scalar < 2^253 (32 little-endian bytes): digits of w bits in
// [-2^(w-1), 2^(w-1)), count of them, sum d_i 2^(w i) = the scalar.
static void fixed_window(int64_t *d, const uint8_t s[32], int w, int count) {
    int carry = 0;
    for (int i = 0; i < count; i++) {
        const int bit = w * i;
        int v = (s[bit >> 3] >> (bit & 7)) & ((1 << w) - 1);  // w is 4 or 8: never crosses a byte
        v += carry;
        carry = v >= (1 << (w - 1));
        d[i] = v - (carry << w);
    }
    ZV_CHECK(carry == 0);
}

// r[l] = [k_l](-A_l) + [s_l]B for the eight lanes l.
// flatten: the group templates are compiled without the AVX-512 target, so the field
// operations they call are inlined only here, in a function that has it.
__attribute__((flatten)) static void double_scalarmult8(ge_p2 *const r[8], const uint8_t *const k[8], const ge_p3 *const nA[8],
                               const uint8_t *const s[8]) {
    alignas(64) int64_t dk[64][8], ds[32][8];
    for (int l = 0; l < 8; l++) {
        int64_t t[64];
        fixed_window(t, k[l], 4, 64);
        for (int i = 0; i < 64; i++) dk[i][l] = t[i];
        fixed_window(t, s[l], 8, 32);
        for (int i = 0; i < 32; i++) ds[i][l] = t[i];
    }
    fe8 d2;
    {
        const fe51 *c[8] = {&ED_D2, &ED_D2, &ED_D2, &ED_D2, &ED_D2, &ED_D2, &ED_D2, &ED_D2};
        fe8_gather(&d2, c);
    }
    // [0..8](-A) per lane, cached
    ge8_cached tab[9];
    ge8_p3 p1, pk;
    {
        const fe51 *x[8], *y[8], *z[8], *t[8];
        for (int l = 0; l < 8; l++) x[l] = &nA[l]->X, y[l] = &nA[l]->Y, z[l] = &nA[l]->Z, t[l] = &nA[l]->T;
        fe8_gather(&p1.X, x);
        fe8_gather(&p1.Y, y);
        fe8_gather(&p1.Z, z);
        fe8_gather(&p1.T, t);
    }
    fe_set(&tab[0].YpX, 1);
    fe_set(&tab[0].YmX, 1);
    fe_set(&tab[0].Z, 1);
    fe_set(&tab[0].T2d, 0);
    ge_to_cached(&tab[1], &p1, &d2);
    ge8_done t;
    {
        ge8_p2 q = {p1.X, p1.Y, p1.Z};
        ge_dbl(&t, &q);
        ge_to_p3(&pk, &t);
        ge_to_cached(&tab[2], &pk, &d2);
    }
    for (int e = 3; e <= 8; e++) {
        ge_add_cached(&t, &pk, &tab[1], (__mmask8)0);
        ge_to_p3(&pk, &t);
        ge_to_cached(&tab[e], &pk, &d2);
    }
    ge8_p2 acc;
    ge8_p3 u;
    fe_set(&acc.X, 0);
    fe_set(&acc.Y, 1);
    fe_set(&acc.Z, 1);
    const __m512i zero = _mm512_setzero_si512();
    for (int i = 63; i >= 0; i--) {
        if (i == 63) {
            u.X = acc.X, u.Y = acc.Y, u.Z = acc.Z;
            fe_set(&u.T, 0);
        } else {
            for (int j = 0; j < 3; j++) {
                ge_dbl(&t, &acc);
                ge_to_p2(&acc, &t);
            }
            ge_dbl(&t, &acc);
            ge_to_p3(&u, &t);
        }
        // A digit: masked selection of |d| from the per-lane table
        {
            const __m512i d = _mm512_load_si512(dk[i]);
            const __mmask8 neg = _mm512_cmplt_epi64_mask(d, zero);
            const __m512i ad = _mm512_abs_epi64(d);
            ge8_cached q = tab[0];
            for (int e = 1; e <= 8; e++) {
                const __mmask8 m = _mm512_cmpeq_epi64_mask(ad, _mm512_set1_epi64(e));
                if (!m) continue;
                fe_select(&q.YpX, m, &q.YpX, &tab[e].YpX);
                fe_select(&q.YmX, m, &q.YmX, &tab[e].YmX);
                fe_select(&q.Z, m, &q.Z, &tab[e].Z);
                fe_select(&q.T2d, m, &q.T2d, &tab[e].T2d);
            }
            ge_add_cached(&t, &u, &q, neg);
        }
        if ((i & 1) == 0) {  // B digit: gathered from the shared table
            ge_to_p3(&u, &t);
            const __m512i d = _mm512_load_si512(ds[i >> 1]);
            const __mmask8 neg = _mm512_cmplt_epi64_mask(d, zero);
            const __m512i ad = _mm512_abs_epi64(d);
            const __m512i base = _mm512_sub_epi64(_mm512_slli_epi64(ad, 4), ad);  // 15 |d|
            GeAffine<fe8> q;
            fe8 *coords[3] = {&q.ypx, &q.ymx, &q.xy2d};
            for (int c = 0; c < 3; c++)
                for (int limb = 0; limb < 5; limb++)
                    coords[c]->v[limb] = _mm512_i64gather_epi64(
                        _mm512_add_epi64(base, _mm512_set1_epi64(5 * c + limb)), (const long long *)&BASE_FIXED[0][0][0],
                        8);
            ge_add_affine(&t, &u, &q, neg);
        }
        ge_to_p2(&acc, &t);
    }
    fe51 *x[8], *y[8], *z[8];
    for (int l = 0; l < 8; l++) x[l] = &r[l]->X, y[l] = &r[l]->Y, z[l] = &r[l]->Z;
    fe8_scatter(x, &acc.X);
    fe8_scatter(y, &acc.Y);
    fe8_scatter(z, &acc.Z);
}

#pragma GCC pop_options
#pragma GCC diagnostic pop
#endif  // ZV_CPU_IFMA

// ---------------------------------------------------------------- SHA-512(R ‖ A ‖ M)

// OpenSSL's SHA512_Init / SHA512_Update / SHA512_Final (openssl/sha.h; SHA512_CTX is 216 bytes).
typedef int (*zv_sha512_init_fn)(void *ctx);
typedef int (*zv_sha512_update_fn)(void *ctx, const void *data, size_t len);
typedef int (*zv_sha512_final_fn)(unsigned char *md, void *ctx);
static zv_sha512_init_fn ossl_init;
static zv_sha512_update_fn ossl_update;
static zv_sha512_final_fn ossl_final;

static void sha512_ram(uint8_t out[64], const uint8_t *R, const uint8_t *A, const uint8_t *M, size_t mlen) {
    if (ossl_init) {
        alignas(64) unsigned char ctx[512];
        ossl_init(ctx);
        ossl_update(ctx, R, 32);
        ossl_update(ctx, A, 32);
        ossl_update(ctx, M, mlen);
        ossl_final(out, ctx);
        return;
    }
    zv_sha512_ctx c;
    zv_sha512_init(&c);
    zv_sha512_update(&c, R, 32);
    zv_sha512_update(&c, A, 32);
    zv_sha512_update(&c, M, mlen);
    zv_sha512_final(&c, out);
}

// Adopt OpenSSL's SHA-512 when it gives SHA-512("abc") (FIPS 180-4 example C.1); 1 when
// adopted, 0 (the portable SHA-512 stays) otherwise.  Call once, before any verify.
extern "C" int zv_ed25519_cpu_use_openssl_sha512(zv_sha512_init_fn init, zv_sha512_update_fn update,
                                                 zv_sha512_final_fn final_) {
    uint8_t want[64], got[64];
    zv_sha512((const zv_u8 *)"abc", 3, want);
    alignas(64) unsigned char ctx[512];
    if (!init || !update || !final_ || init(ctx) != 1 || update(ctx, "abc", 3) != 1 || final_(got, ctx) != 1 ||
        memcmp(got, want, 64) != 0)
        return 0;
    ossl_update = update;
    ossl_final = final_;
    ossl_init = init;
    return 1;
}

// ---------------------------------------------------------------- verify

// Steps 1-5 and the hash of step 6: 0 when the item is already invalid, else 1 with -A
// decoded and k = SHA-512(R ‖ A ‖ M) mod L (32 little-endian bytes).
static int verify_prepare(ge_p3 *nA, uint8_t k[32], const uint8_t *pk, size_t pk_len, const uint8_t *sig,
                          size_t sig_len, const uint8_t *msg, size_t msg_len) {
    if (pk_len != 32 || sig_len != 64) return 0;
    const uint8_t *R = sig, *S = sig + 32;
    if (!zv_ed_sc_is_canonical(S) || zv_ed_ge_has_small_order(R)) return 0;
    if (!zv_ed_ge_is_canonical(pk) || zv_ed_ge_has_small_order(pk)) return 0;
    if (!ge_frombytes_negate(nA, pk)) return 0;
    uint8_t h[64];
    sha512_ram(h, R, pk, msg, msg_len);
    zv_u32 kw[8];
    zv_ed_sc_reduce512(kw, h);
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 4; j++) k[4 * i + j] = (uint8_t)(kw[i] >> (8 * j));
    return 1;
}

// The encoding of (X : Y) given zi = 1/Z equals R byte for byte.
static int verify_finish(const ge_p2 *p, const fe51 *zi, const uint8_t *R) {
    fe51 x, y;
    uint8_t enc[32];
    fe_mul(&x, &p->X, zi);
    fe_mul(&y, &p->Y, zi);
    fe_tobytes(enc, &y);
    enc[31] ^= (uint8_t)(fe_isnegative(&x) << 7);
    return memcmp(enc, R, 32) == 0;
}

static int zv_cpu_ifma;  // the CPU has AVX-512F and IFMA (and this build the path)

static void zv_cpu_init_once(void) {
    static const int done = (zv_cpu_init_tables(),
#if ZV_CPU_IFMA
                             zv_cpu_ifma = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512ifma"),
#endif
                             1);  // C++ static init: once, thread-safe
    (void)done;
}

// Which code path this build runs on this CPU: "avx512ifma" or "portable".
extern "C" const char *zv_ed25519_cpu_path(void) {
    zv_cpu_init_once();
    return zv_cpu_ifma ? "avx512ifma" : "portable";
}

// One item on its own: libsodium's return convention (0 valid, -1 invalid) and argument order,
// so it can stand where crypto_sign_ed25519_verify_detached's address is passed.  Always the
// portable path (one signature fills no vector).
extern "C" int zv_ed25519_cpu_verify(const unsigned char *sig, const unsigned char *m, unsigned long long mlen,
                                     const unsigned char *pk) {
    zv_cpu_init_once();
    ge_p3 nA;
    uint8_t k[32];
    if (!verify_prepare(&nA, k, pk, 32, sig, 64, m, (size_t)mlen)) return -1;
    ge_p2 check;
    double_scalarmult(&check, k, &nA, sig + 32);
    fe51 zi;
    fe_invert(&zi, &check.Z);
    return verify_finish(&check, &zi, sig) ? 0 : -1;
}

// Message i as msgs[offsets[i]:offsets[i + 1]] with Python's slice clamping (native_loops.cpp's
// rule: columns overwritten under us give wrong verdicts, never a read outside msgs).
static const uint8_t *message(const uint8_t *msgs, size_t msgs_len, const uint64_t *offsets, size_t i, size_t *len) {
    const uint64_t lo = offsets[i] < msgs_len ? offsets[i] : msgs_len;
    const uint64_t hi = offsets[i + 1] < msgs_len ? offsets[i + 1] : msgs_len;
    *len = hi > lo ? (size_t)(hi - lo) : 0;
    return msgs + lo;
}

#define ZV_CPU_GROUP 64  // items sharing one inversion (Montgomery's trick); a multiple of 8

// [S]B - [k]A for the live items of a group: eight at a time in the IFMA lanes where the CPU
// has them (a short last group is padded with copies of its first item), else one by one.
static void group_scalarmult(ge_p2 *pts, const ge_p3 *nA, const uint8_t (*k)[32], const uint8_t *const *S,
                             int live) {
    int j = 0;
#if ZV_CPU_IFMA
    if (zv_cpu_ifma) {
        for (; j < live; j += 8) {
            ge_p2 spare[8];
            ge_p2 *r[8];
            const uint8_t *kk[8], *ss[8];
            const ge_p3 *aa[8];
            for (int l = 0; l < 8; l++) {
                const int src = j + l < live ? j + l : j;
                r[l] = j + l < live ? &pts[j + l] : &spare[l];
                kk[l] = k[src];
                ss[l] = S[src];
                aa[l] = &nA[src];
            }
            double_scalarmult8(r, kk, aa, ss);
        }
        return;
    }
#endif
    for (; j < live; j++) double_scalarmult(&pts[j], k[j], &nA[j], S[j]);
}

// Verdicts of a chunk (columns as native_loops.cpp: pks uint8[n, pk_len], sigs uint8[n, sig_len],
// messages msgs[offsets[i]:offsets[i + 1]] clamped to [0, msgs_len] like a Python slice);
// verdicts uint8[n] get 1 valid, 0 invalid.
extern "C" void zv_ed25519_cpu_verify_chunk(const unsigned char *pks, size_t pk_len, const unsigned char *sigs,
                                            size_t sig_len, const unsigned char *msgs, size_t msgs_len,
                                            const uint64_t *offsets, size_t n, unsigned char *verdicts) {
    zv_cpu_init_once();
    ge_p2 pts[ZV_CPU_GROUP];
    ge_p3 nA[ZV_CPU_GROUP];
    uint8_t k[ZV_CPU_GROUP][32];
    const uint8_t *S[ZV_CPU_GROUP];
    fe51 prefix[ZV_CPU_GROUP];
    size_t idx[ZV_CPU_GROUP];
    for (size_t base = 0; base < n; base += ZV_CPU_GROUP) {
        const size_t end = n - base < ZV_CPU_GROUP ? n : base + ZV_CPU_GROUP;
        int live = 0;
        for (size_t i = base; i < end; i++) {
            size_t mlen;
            const uint8_t *msg = message(msgs, msgs_len, offsets, i, &mlen);
            verdicts[i] = 0;
            if (verify_prepare(&nA[live], k[live], pks + i * pk_len, pk_len, sigs + i * sig_len, sig_len, msg, mlen)) {
                S[live] = sigs + i * sig_len + 32;
                idx[live++] = i;
            }
        }
        if (live == 0) continue;
        group_scalarmult(pts, nA, k, S, live);
        // prefix[j] = Z_0 ... Z_j; one inversion; then walk back peeling one Z at a time.  Z of a
        // curve point is never 0 (a zero would make every inverse of the group 0: all invalid).
        prefix[0] = pts[0].Z;
        for (int j = 1; j < live; j++) fe_mul(&prefix[j], &prefix[j - 1], &pts[j].Z);
        fe51 inv;
        fe_invert(&inv, &prefix[live - 1]);
        for (int j = live - 1; j >= 0; j--) {
            fe51 zi;
            if (j > 0) {
                fe_mul(&zi, &inv, &prefix[j - 1]);
                fe_mul(&inv, &inv, &pts[j].Z);
            } else {
                zi = inv;
            }
            verdicts[idx[j]] = (unsigned char)verify_finish(&pts[j], &zi, sigs + idx[j] * sig_len);
        }
    }
}

// The same columns through a one-item verify with libsodium's signature (crypto_sign_ed25519_
// verify_detached's address, or zv_ed25519_cpu_verify's), one call per item: the benchmark's
// like-for-like loop (bench/ed25519_cpu.py), with no leaf hashing.
typedef int (*zv_ed25519_verify_fn)(const unsigned char *sig, const unsigned char *m, unsigned long long mlen,
                                    const unsigned char *pk);
extern "C" void zv_ed25519_cpu_verify_each(zv_ed25519_verify_fn verify, const unsigned char *pks, size_t pk_len,
                                           const unsigned char *sigs, size_t sig_len, const unsigned char *msgs,
                                           size_t msgs_len, const uint64_t *offsets, size_t n,
                                           unsigned char *verdicts) {
    for (size_t i = 0; i < n; i++) {
        size_t mlen;
        const uint8_t *msg = message(msgs, msgs_len, offsets, i, &mlen);
        verdicts[i] = (unsigned char)(pk_len == 32 && sig_len == 64 && verify(sigs + i * sig_len, msg, mlen,
                                                                              pks + i * pk_len) == 0);
    }
}
