// BLS12-381 chunk loops of the CPU backend on blst (docs/architecture.md, "CPU backend";
// docs/bls-aggregate.md): a whole chunk of CoreVerify items, or one aggregate item, in one C
// call with the GIL released, as native_loops.cpp does for libsodium and libsecp256k1.
//
// blst is not linked here: app/engine/backends/native_bls.py passes the addresses of blst's
// own C functions (bindings/blst.h), taken from the copy the blspy wheel links statically and
// exports, to zv_bls_init once per process.  Only blst's documented C API is called; the
// structs below are blst.h's public layouts (limb_t = uint64_t, 384-bit Fp as 6 limbs).
//
// Rules, each as app/engine/reference/reference.py states them for arkworks (which the tests
// keep as the second opinion):
//   KeyValidate (draft-irtf-cfrg-bls-signature-04 §2.5): a 48-byte ZCash compressed G1 point
//     (blst_p1_uncompress: flags, x < p, on the curve), not the identity, in the prime-order
//     subgroup (blst_p1_affine_in_g1);
//   signature: a 96-byte compressed G2 point, in the subgroup; the identity is a valid point;
//   CoreVerify (§2.7) with H = RFC 9380 hash to G2 under the caller's DST (the POP suite's):
//     e(PK, H(m)) · e(−G1, σ) == 1, checked as one two-pair Miller loop and a final
//     exponentiation (a pair with the identity is 1 and is left out: blst's Miller loop is
//     not defined on the point at infinity).
// Batches (zv_bls_verify with rlc set) use the random linear combination of
// app/engine/reference/bls_batch.py: per group S, with secret r_i ∈ [1, 2^64) from the caller's
// CSPRNG bytes,
//     P_S = FE( ∏_{i∈S} ML(H(m_i), r_i·PK_i) · ML(Σ_{i∈S} r_i·σ_i, −G1) )
// is one blst_miller_loop_n over |S| + 1 pairs and one final exponentiation; P_S == 1 clears
// the group (a set with an invalid item passes with probability ≤ 2^-64), and a failing group
// is bisected (P_L == 1 clears the left half, P_L == P_S the right one), so every verdict is
// CoreVerify's for the item alone (a lone item's P is c_i^{r_i}, 1 exactly when c_i is).

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

typedef struct { uint64_t l[6]; } zv_fp;
typedef struct { zv_fp fp[2]; } zv_fp2;
typedef struct { zv_fp2 fp2[3]; } zv_fp6;
typedef struct { zv_fp6 fp6[2]; } zv_fp12;
typedef struct { zv_fp x, y, z; } zv_p1;
typedef struct { zv_fp x, y; } zv_p1_affine;
typedef struct { zv_fp2 x, y, z; } zv_p2;
typedef struct { zv_fp2 x, y; } zv_p2_affine;

// blst's entry points, in the order native_bls.py passes them (BLST_FUNCTIONS there).
struct zv_blst {
    int (*p1_uncompress)(zv_p1_affine *out, const uint8_t in[48]);
    bool (*p1_affine_in_g1)(const zv_p1_affine *p);
    bool (*p1_affine_is_inf)(const zv_p1_affine *p);
    void (*p1_from_affine)(zv_p1 *out, const zv_p1_affine *in);
    void (*p1_to_affine)(zv_p1_affine *out, const zv_p1 *in);
    void (*p1_mult)(zv_p1 *out, const zv_p1 *p, const uint8_t *scalar, size_t nbits);
    void (*p1_add_or_double_affine)(zv_p1 *out, const zv_p1 *a, const zv_p1_affine *b);
    bool (*p1_is_inf)(const zv_p1 *p);
    void (*p1_cneg)(zv_p1 *p, bool cbit);
    const zv_p1_affine *(*p1_affine_generator)(void);
    int (*p2_uncompress)(zv_p2_affine *out, const uint8_t in[96]);
    bool (*p2_affine_in_g2)(const zv_p2_affine *p);
    bool (*p2_affine_is_inf)(const zv_p2_affine *p);
    void (*p2_to_affine)(zv_p2_affine *out, const zv_p2 *in);
    void (*p2_mult)(zv_p2 *out, const zv_p2 *p, const uint8_t *scalar, size_t nbits);
    void (*p2_from_affine)(zv_p2 *out, const zv_p2_affine *in);
    bool (*p2_is_inf)(const zv_p2 *p);
    void (*p2_add_or_double)(zv_p2 *out, const zv_p2 *a, const zv_p2 *b);
    void (*hash_to_g2)(zv_p2 *out, const uint8_t *msg, size_t msg_len, const uint8_t *dst, size_t dst_len,
                       const uint8_t *aug, size_t aug_len);
    size_t (*p2s_mult_pippenger_scratch_sizeof)(size_t npoints);
    void (*p2s_mult_pippenger)(zv_p2 *ret, const zv_p2_affine *const points[], size_t npoints,
                               const uint8_t *const scalars[], size_t nbits, uint64_t *scratch);
    void (*miller_loop_n)(zv_fp12 *ret, const zv_p2_affine *const Qs[], const zv_p1_affine *const Ps[], size_t n);
    void (*final_exp)(zv_fp12 *ret, const zv_fp12 *f);
    bool (*fp12_is_one)(const zv_fp12 *a);
    bool (*fp12_is_equal)(const zv_fp12 *a, const zv_fp12 *b);
};

#define ZV_BLS_FUNCTIONS (sizeof(zv_blst) / sizeof(void *))
#define ZV_BLS_SCALAR_BITS 64
// Pippenger pays off over one blst_p2_mult per point from a few points up.
#define ZV_BLS_PIPPENGER_MIN 4

static zv_blst B;
static zv_p1_affine zv_neg_g1;
static int zv_ready;

// Take blst's functions (count pointers, ZV_BLS_FUNCTIONS of them, in struct order); returns
// how many this build expects, so a mismatched caller is refused (0 taken: nothing is set).
extern "C" size_t zv_bls_init(void *const *fns, size_t count) {
    if (count != ZV_BLS_FUNCTIONS)
        return ZV_BLS_FUNCTIONS;
    for (size_t i = 0; i < count; i++)
        if (fns[i] == NULL)
            return ZV_BLS_FUNCTIONS;
    memcpy(&B, fns, sizeof B);
    zv_p1 g;
    B.p1_from_affine(&g, B.p1_affine_generator());
    B.p1_cneg(&g, true);
    B.p1_to_affine(&zv_neg_g1, &g);
    zv_ready = 1;
    return ZV_BLS_FUNCTIONS;
}

// KeyValidate of one key; 1 and *out set when it passes.
static int zv_bls_key(const uint8_t *in, size_t len, zv_p1_affine *out) {
    return len == 48 && B.p1_uncompress(out, in) == 0 && !B.p1_affine_is_inf(out) && B.p1_affine_in_g1(out);
}

// signature_to_point with the subgroup check; the identity passes (*inf set).
static int zv_bls_sig(const uint8_t *in, size_t len, zv_p2_affine *out, int *inf) {
    if (len != 96 || B.p2_uncompress(out, in) != 0)
        return 0;
    *inf = B.p2_affine_is_inf(out);
    return *inf || B.p2_affine_in_g2(out);
}

static void zv_bls_hash(const uint8_t *msg, size_t len, const uint8_t *dst, size_t dst_len, zv_p2_affine *out) {
    zv_p2 h;
    B.hash_to_g2(&h, msg, len, dst, dst_len, NULL, 0);
    B.p2_to_affine(out, &h);
}

// Message i as msgs[offsets[i]:offsets[i + 1]] with Python's slice clamping (native_loops.cpp).
static const uint8_t *zv_bls_message(const uint8_t *msgs, size_t msgs_len, const uint64_t *offsets, size_t i,
                                     size_t *len) {
    const uint64_t lo = offsets[i] < msgs_len ? offsets[i] : msgs_len;
    const uint64_t hi = offsets[i + 1] < msgs_len ? offsets[i + 1] : msgs_len;
    *len = hi > lo ? (size_t)(hi - lo) : 0;
    return msgs + lo;
}

// The decoded, hashed items of a chunk that passed the decoding rules.
struct zv_bls_item {
    size_t index;      // position in the chunk
    zv_p1_affine pk;   // the key
    zv_p1_affine rpk;  // r·PK, set for the items of a batch's groups (zv_bls_scale)
    zv_p2_affine sig;
    zv_p2_affine h;    // H(m)
    int sig_inf;
    uint8_t r[8];      // the item's random scalar, little-endian
};

// FE(∏ ML(Q_k, P_k)) over the pairs given; n ≥ 1.
static void zv_bls_pairing(zv_fp12 *out, const zv_p2_affine *const *qs, const zv_p1_affine *const *ps, size_t n) {
    zv_fp12 f;
    B.miller_loop_n(&f, qs, ps, n);
    B.final_exp(out, &f);
}

// CoreVerify of a decoded item: e(PK, H) · e(−G1, σ) == 1.
static int zv_bls_single(const zv_bls_item *it) {
    const zv_p2_affine *qs[2] = {&it->h, &it->sig};
    const zv_p1_affine *ps[2] = {&it->pk, &zv_neg_g1};
    zv_fp12 gt;
    zv_bls_pairing(&gt, qs, ps, it->sig_inf ? 1 : 2);
    return B.fp12_is_one(&gt);
}

// Give an item its scalar r (8 little-endian bytes; 0 counts as 1) and r·PK.
static void zv_bls_scale(zv_bls_item *it, const uint8_t *r) {
    uint64_t word;
    memcpy(it->r, r, 8);
    memcpy(&word, r, 8);
    if (word == 0)
        it->r[0] = 1;
    zv_p1 p, rp;
    B.p1_from_affine(&p, &it->pk);
    B.p1_mult(&rp, &p, it->r, ZV_BLS_SCALAR_BITS);
    B.p1_to_affine(&it->rpk, &rp);
}

// The batch state of one chunk: its items (keys already scaled by r_i) and the buffers one
// group product needs, sized for the largest group once.
struct zv_bls_rlc {
    std::vector<zv_bls_item> *items;
    std::vector<const zv_p2_affine *> qs;
    std::vector<const zv_p1_affine *> ps;
    std::vector<const zv_p2_affine *> sig_pts;
    std::vector<const uint8_t *> sig_scalars;
    std::vector<uint64_t> scratch;
    size_t products;  // group products computed (multi-pairings), for the caller's counters
    uint8_t *verdicts;
};

// P_S of items [lo, hi) of the chunk's live items.
static void zv_bls_product(zv_bls_rlc *s, size_t lo, size_t hi, zv_fp12 *out) {
    std::vector<zv_bls_item> &v = *s->items;
    size_t m = 0, k = 0;
    for (size_t i = lo; i < hi; i++) {
        s->qs[m] = &v[i].h;
        s->ps[m++] = &v[i].rpk;
        if (!v[i].sig_inf) {  // r·O = O adds nothing (and Pippenger is not given the identity)
            s->sig_pts[k] = &v[i].sig;
            s->sig_scalars[k++] = v[i].r;
        }
    }
    zv_p2 agg;
    zv_p2_affine agg_affine;
    if (k >= ZV_BLS_PIPPENGER_MIN) {
        B.p2s_mult_pippenger(&agg, s->sig_pts.data(), k, s->sig_scalars.data(), ZV_BLS_SCALAR_BITS,
                             s->scratch.data());
    } else {
        for (size_t j = 0; j < k; j++) {
            zv_p2 p, t;
            B.p2_from_affine(&p, s->sig_pts[j]);
            B.p2_mult(j ? &t : &agg, &p, s->sig_scalars[j], ZV_BLS_SCALAR_BITS);
            if (j)
                B.p2_add_or_double(&agg, &agg, &t);
        }
    }
    const int agg_inf = k == 0 || B.p2_is_inf(&agg);
    if (!agg_inf) {
        B.p2_to_affine(&agg_affine, &agg);
        s->qs[m] = &agg_affine;
        s->ps[m++] = &zv_neg_g1;
    }
    zv_bls_pairing(out, s->qs.data(), s->ps.data(), m);
    s->products++;
}

static void zv_bls_mark(zv_bls_rlc *s, size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; i++)
        s->verdicts[(*s->items)[i].index] = 1;
}

// Resolve items [lo, hi), known to fail with product *p_s; returns how many are invalid.
static size_t zv_bls_bisect(zv_bls_rlc *s, size_t lo, size_t hi, const zv_fp12 *p_s) {
    if (hi - lo == 1)
        return 1;  // exact: c_i^{r_i} != 1 means c_i != 1
    const size_t mid = lo + (hi - lo) / 2;
    zv_fp12 p_l;
    zv_bls_product(s, lo, mid, &p_l);
    if (B.fp12_is_one(&p_l)) {
        zv_bls_mark(s, lo, mid);
        return zv_bls_bisect(s, mid, hi, p_s);  // P_R = P_S
    }
    if (B.fp12_is_equal(&p_l, p_s)) {
        zv_bls_mark(s, mid, hi);  // P_R = 1
        return zv_bls_bisect(s, lo, mid, &p_l);
    }
    size_t bad = zv_bls_bisect(s, lo, mid, &p_l);
    if (hi - mid == 1)
        return bad + 1;  // P_R = P_S / P_L != 1
    zv_fp12 p_r;
    zv_bls_product(s, mid, hi, &p_r);
    return bad + (B.fp12_is_one(&p_r) ? (zv_bls_mark(s, mid, hi), 0) : zv_bls_bisect(s, mid, hi, &p_r));
}

// Group size minimising expected Miller loops per item at invalid fraction p (bls_batch.py,
// group_size): g = round(√(F / p)), F = (a group's fixed cost) / (one item's), within
// [1, largest].  Counted up to largest at most: the running estimate decays towards 0 over
// valid traffic, and √(F / p) of a tiny p is astronomically large.
static size_t zv_bls_group_size(double p, double fixed_over_item, size_t largest) {
    if (!(p > 0))
        return largest;
    const double t = fixed_over_item / p;
    size_t g = 1;
    while (g < largest && (g + 0.5) * (g + 0.5) <= t)
        g++;
    return g;
}

// The batch policy of bls_batch.py's BlsBatchVerifier, in its order of fields there.
struct zv_bls_policy {
    double invalid_fraction;  // the caller's running estimate
    double fallback_fraction; // above it, single checks
    double prior_items;       // weight of the estimate against this chunk's count
    double fixed_over_item;   // F of zv_bls_group_size
    uint64_t min_batch;       // fewer live items: single checks
    uint64_t max_group;
    uint64_t first_group;
    uint64_t probe_items;     // where the estimate is above fallback_fraction: 0, one by one; else a probe group
};

// Verify a chunk of CoreVerify items (columns as native_loops.cpp: pks uint8[n, pk_len],
// sigs uint8[n, sig_len], msgs with offsets uint64[n + 1]) under DST dst; verdicts uint8[n]
// get 0/1.  With policy non-NULL the live items are checked by random linear combination
// with scalars from scalars (8·n bytes, little-endian, from the caller's CSPRNG; a zero one
// counts as 1), else one CoreVerify each.  stats gets {live items, invalid among them,
// multi-pairings computed}.  Never fails for bad items: they are 0.
extern "C" void zv_bls_verify(const uint8_t *pks, size_t pk_len, const uint8_t *sigs, size_t sig_len,
                              const uint8_t *msgs, size_t msgs_len, const uint64_t *offsets, size_t n,
                              const uint8_t *dst, size_t dst_len, const zv_bls_policy *policy,
                              const uint8_t *scalars, uint8_t *verdicts, uint64_t *stats) {
    memset(verdicts, 0, n);
    stats[0] = stats[1] = stats[2] = 0;
    if (!zv_ready)
        return;
    std::vector<zv_bls_item> v;
    v.reserve(n);
    const uint8_t *prev_msg = NULL;
    size_t prev_len = 0;
    for (size_t i = 0; i < n; i++) {
        zv_bls_item it;
        it.index = i;
        if (!zv_bls_key(pks + i * pk_len, pk_len, &it.pk) || !zv_bls_sig(sigs + i * sig_len, sig_len, &it.sig, &it.sig_inf))
            continue;
        size_t len;
        const uint8_t *msg = zv_bls_message(msgs, msgs_len, offsets, i, &len);
        if (!v.empty() && prev_msg && len == prev_len && memcmp(msg, prev_msg, len) == 0)
            it.h = v.back().h;  // a run of one message (an attestation's signers): hashed once
        else
            zv_bls_hash(msg, len, dst, dst_len, &it.h);
        prev_msg = msg;
        prev_len = len;
        v.push_back(it);
    }
    const size_t live = v.size();
    stats[0] = live;
    if (live == 0)
        return;
    size_t bad = 0, pos = 0;
    if (policy && live >= policy->min_batch) {
        const size_t largest = policy->max_group < 1 ? 1 : (size_t)policy->max_group;
        zv_bls_rlc s;
        s.items = &v;
        s.qs.resize(largest + 1);
        s.ps.resize(largest + 1);
        s.sig_pts.resize(largest);
        s.sig_scalars.resize(largest);
        s.scratch.resize(B.p2s_mult_pippenger_scratch_sizeof(largest) / sizeof(uint64_t) + 1);
        s.products = 0;
        s.verdicts = verdicts;
        size_t seen = 0;
        double prior = policy->prior_items;
        if (policy->invalid_fraction > policy->fallback_fraction) {
            // Earlier batches failed often (the estimate is over the process's recent traffic,
            // not this batch).  Without a probe the chunk is checked one by one; with one, a
            // group of probe_items decides: clean, this chunk is batched as if fresh (so a
            // valid batch after bad ones is batched again soon), failing, every item is
            // checked one by one and the probe's cost (about one CoreVerify and a half) is lost.
            const size_t size = live < policy->probe_items ? live : (size_t)policy->probe_items;
            pos = live;  // no groups: the single checks below start from item 0
            if (size) {
                for (size_t j = 0; j < size; j++)
                    zv_bls_scale(&v[j], scalars + 8 * v[j].index);
                zv_fp12 prod;
                zv_bls_product(&s, 0, size, &prod);
                if (B.fp12_is_one(&prod)) {
                    zv_bls_mark(&s, 0, size);
                    pos = seen = size;
                    prior = 0;
                }
            }
        }
        while (pos < live) {
            // The invalid fraction seen so far in this chunk, the estimate counted as prior items.
            const double p = (bad + policy->invalid_fraction * prior) / (seen + prior);
            if (p > policy->fallback_fraction)
                break;  // many failures: single checks are cheaper than bisecting
            const size_t cap = seen ? largest : (policy->first_group < largest ? (size_t)policy->first_group : largest);
            size_t size = zv_bls_group_size(p, policy->fixed_over_item, cap);
            if (size > live - pos)
                size = live - pos;
            for (size_t j = pos; j < pos + size; j++)  // once per item, for every product it joins
                zv_bls_scale(&v[j], scalars + 8 * v[j].index);
            zv_fp12 prod;
            zv_bls_product(&s, pos, pos + size, &prod);
            if (B.fp12_is_one(&prod))
                zv_bls_mark(&s, pos, pos + size);
            else
                bad += zv_bls_bisect(&s, pos, pos + size, &prod);
            pos += size;
            seen += size;
        }
        if (seen == 0)
            pos = 0;  // no groups ran (no probe, or it failed)
        stats[2] = s.products;
    }
    for (size_t j = pos; j < live; j++) {
        const int ok = zv_bls_single(&v[j]);
        verdicts[v[j].index] = (uint8_t)ok;
        bad += !ok;
        stats[2]++;
    }
    stats[1] = bad;
}

// AggregateVerify / FastAggregateVerify of one item (docs/bls-aggregate.md; reference in
// app/engine/reference/bls_aggregate.py): n_keys 48-byte keys one after another, key k signing
// message group[k] of the m messages (msgs with offsets uint64[m + 1]; the caller gives equal
// messages one group, whose keys are summed: e(A, H)·e(B, H) = e(A + B, H)), and the
// signature.  Every key passes KeyValidate, the signature decodes in the subgroup; with fast
// set the sum of the keys must not be the identity (CoreVerify's KeyValidate of the aggregate
// key).  Then ∏_g e(Σ_{k∈g} PK_k, H(m_g)) · e(−G1, σ) == 1 as one Miller loop over m + 1 pairs
// (a sum that is the identity, or an identity σ, adds a pair equal to 1 and is left out).
// Returns 1 valid, 0 not; no keys, a group index ≥ m or no compiler state: 0.
extern "C" int zv_bls_aggregate(const uint8_t *pks, size_t n_keys, const uint32_t *group, const uint8_t *msgs,
                                size_t msgs_len, const uint64_t *offsets, size_t m, const uint8_t *sig,
                                size_t sig_len, const uint8_t *dst, size_t dst_len, int fast) {
    if (!zv_ready || n_keys == 0 || m == 0)
        return 0;
    zv_p2_affine sigma;
    int sig_inf;
    if (!zv_bls_sig(sig, sig_len, &sigma, &sig_inf))
        return 0;
    std::vector<zv_p1> sums(m);
    std::vector<char> any(m, 0);
    for (size_t k = 0; k < n_keys; k++) {
        zv_p1_affine pk;
        const uint32_t g = group[k];
        if (g >= m || !zv_bls_key(pks + 48 * k, 48, &pk))
            return 0;
        if (any[g]) {
            B.p1_add_or_double_affine(&sums[g], &sums[g], &pk);
        } else {
            B.p1_from_affine(&sums[g], &pk);
            any[g] = 1;
        }
    }
    std::vector<zv_p1_affine> keys(m);
    std::vector<zv_p2_affine> hashes(m);
    std::vector<const zv_p2_affine *> qs;
    std::vector<const zv_p1_affine *> ps;
    qs.reserve(m + 1);
    ps.reserve(m + 1);
    for (size_t g = 0; g < m; g++) {
        if (!any[g] || B.p1_is_inf(&sums[g])) {
            if (fast)
                return 0;  // FastAggregateVerify: the aggregate key is the identity
            continue;      // e(O, H) = 1
        }
        size_t len;
        const uint8_t *msg = zv_bls_message(msgs, msgs_len, offsets, g, &len);
        B.p1_to_affine(&keys[g], &sums[g]);
        zv_bls_hash(msg, len, dst, dst_len, &hashes[g]);
        qs.push_back(&hashes[g]);
        ps.push_back(&keys[g]);
    }
    if (!sig_inf) {
        qs.push_back(&sigma);
        ps.push_back(&zv_neg_g1);
    }
    if (qs.empty())
        return 1;  // every factor is 1: the product is 1
    zv_fp12 gt;
    zv_bls_pairing(&gt, qs.data(), ps.data(), qs.size());
    return B.fp12_is_one(&gt);
}

// The decoding rules alone, for tests: 1 where a key passes KeyValidate / a signature decodes
// in the subgroup (the identity included), else 0.
extern "C" int zv_bls_key_valid(const uint8_t *in, size_t len) {
    zv_p1_affine pk;
    return zv_ready && zv_bls_key(in, len, &pk);
}

extern "C" int zv_bls_sig_valid(const uint8_t *in, size_t len) {
    zv_p2_affine sig;
    int inf;
    return zv_ready && zv_bls_sig(in, len, &sig, &inf);
}
