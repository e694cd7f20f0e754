/* bls12_381_aggregate.cu — BLS12-381 aggregate shapes and batch CoreVerify by random linear
 * combination, built from the tower, curve, hash-to-G2 and pairing code that the single
 * verify (bls12_381.cuh) uses.  Ciphersuite BLS_SIG_BLS12381G2_XMD:SHA-256_SSWU_RO_POP_
 * (draft-irtf-cfrg-bls-signature-04/05), as Ethereum's consensus specs use it.
 *
 * Why several small kernels instead of one per item: an item's work is uneven (an
 * attestation carries up to 2,048 keys; AggregateVerify n messages), so the expensive, per-key
 * and per-pair steps each get their own launch with one thread per key, message or pair, and
 * only the cheap per-item steps (a sum of decoded keys, a product of Miller values) run one
 * thread per item.  app/engine/device/ops.py chains them:
 *
 *   FastAggregateVerify (§3.3.4) and AggregateVerify (§2.9), items i, keys j, messages k:
 *     zv_bls_agg_key_validate   per key:     KeyValidate (§2.5) -> G1 row, ok      (parallel)
 *     zv_bls_agg_key_sum        per pair of partial sums, ceil(log2 n) launches: the fast
 *                                            items' key sums as a tree              (parallel)
 *     zv_bls_agg_hash           per message: H(m) = hash_to_G2 (RFC 9380) -> G2 row (parallel)
 *     zv_bls_agg_items          per item:    signature decoding, the rules that decide an item
 *                                            without a pairing, and (fast) ΣPK's identity check
 *     zv_bls_agg_miller         per pair:    f = f_(x,Q)(P) of one pair             (parallel)
 *     zv_bls_agg_final          per item:    Π f over its pairs, final exponentiation, == 1
 *   An item with n keys has its pairs: fast: (ΣPK, H(m)), (−G1, σ); aggregate: (PK_j, H(m_j))
 *   for each j, then (−G1, σ): n Miller loops, their product, one final exponentiation.
 *
 *   Batch CoreVerify (§2.7) of (PK_i, m_i, σ_i) with host-drawn 64-bit scalars r_i:
 *     zv_bls_rlc_prepare        per item:    KeyValidate PK_i, decode σ_i, r_i·PK_i, r_i·σ_i
 *     zv_bls_agg_hash           per item:    H(m_i)
 *     zv_bls_rlc_group_sig      per group:   Σ r_i·σ_i over the group's decodable items
 *     zv_bls_agg_miller         per pair:    (r_i·PK_i, H(m_i)) and each group's (−G1, Σ)
 *     zv_bls_agg_final          per group:   Π f, final exponentiation, == 1
 *   so a group of s items costs s + 1 Miller loops and one final exponentiation, against 2s
 *   Miller-loop pairs and s final exponentiations one by one.
 *
 * Buffers between launches are canonical bytes, never in-memory structs, so host and device
 * builds agree on them and tests can read them: a G1 row is x ‖ y (96 bytes big-endian), a
 * G2 row x.c0 ‖ x.c1 ‖ y.c0 ‖ y.c1 (192 bytes); an all-zero row is the point at infinity
 * (no curve point has x = y = 0, since b ≠ 0).  A Jacobian G1 row (a partial key sum) is
 * X ‖ Y ‖ Z (144 bytes), Z = 0 the point at infinity: sums stay projective between the rounds
 * of the tree, so a round costs one addition and no inversion.  An Fp12 row is its 12 Fp coefficients in
 * tower order (576 bytes, bls12_381.cu's hook layout).  The conversions cost one Montgomery
 * product per coordinate, nothing beside a Miller loop.
 *
 * Item status (uint8, written by zv_bls_agg_items / zv_bls_rlc_prepare, read by the later
 * launches): 0 decided false, 1 to be decided by the pairing check, 2 decided true (only
 * the eth variant's empty case).  A pair whose item is not pending costs nothing.
 */
#include "schemes/bls12_381.cuh"

#define ZV_BLS_G1_ROW 96
#define ZV_BLS_G2_ROW 192
#define ZV_BLS_G1_JAC_ROW 144
#define ZV_BLS_FP12_ROW 576
/* A pair index or item index meaning "none": the −G1 generator as P, or a pair that belongs
 * to no item (a group's signature pair, always computed). */
#define ZV_BLS_NONE 0xFFFFFFFFFFFFFFFFull
/* Bit 63 of a point index: the row is in the second buffer of its group (keys and key sums,
 * hashes and signatures live in separate buffers, each written by its own launch). */
#define ZV_BLS_SECOND 0x8000000000000000ull

/* Item modes of zv_bls_agg_items (app/engine/device/ops.py AGG_MODE_*): 0 is an item the
 * host already decided false (a key or signature of the wrong length, a message count
 * that does not match). */
#define ZV_BLS_AGG_FALSE 0
#define ZV_BLS_AGG_FAST 1
#define ZV_BLS_AGG_AGGREGATE 2
#define ZV_BLS_AGG_FAST_ETH 3

#define ZV_BLS_PENDING 1
#define ZV_BLS_TRUE 2

/* ------------------------------------------------------------------ rows */
ZV_HD void zv_bls_g1_row_out(zv_u8 *out, const zv_g1_affine *a) {
    if (a->infinity) { zv_memset(out, 0, ZV_BLS_G1_ROW); return; }
    zv_fp_to_be48(out, &a->x);
    zv_fp_to_be48(out + 48, &a->y);
}

ZV_HD void zv_bls_g2_row_out(zv_u8 *out, const zv_g2_affine *a) {
    if (a->infinity) { zv_memset(out, 0, ZV_BLS_G2_ROW); return; }
    zv_fp_to_be48(out, &a->x.c0);
    zv_fp_to_be48(out + 48, &a->x.c1);
    zv_fp_to_be48(out + 96, &a->y.c0);
    zv_fp_to_be48(out + 144, &a->y.c1);
}

/* Rows are written only by the kernels above from reduced values, so a coordinate ≥ p
 * cannot occur; ZV_CHECK says so in host builds. */
ZV_HD void zv_bls_g1_row_in(zv_g1_affine *a, const zv_u8 *in) {
    int ok = zv_fp_from_be48(&a->x, in) & zv_fp_from_be48(&a->y, in + 48);
    ZV_CHECK(ok);
    (void)ok;
    a->infinity = zv_fp_is_zero(&a->x) & zv_fp_is_zero(&a->y);
}

ZV_HD void zv_bls_g2_row_in(zv_g2_affine *a, const zv_u8 *in) {
    int ok = zv_fp_from_be48(&a->x.c0, in) & zv_fp_from_be48(&a->x.c1, in + 48) &
             zv_fp_from_be48(&a->y.c0, in + 96) & zv_fp_from_be48(&a->y.c1, in + 144);
    ZV_CHECK(ok);
    (void)ok;
    a->infinity = zv_fp2_is_zero(&a->x) & zv_fp2_is_zero(&a->y);
}

ZV_HD void zv_bls_g1_jac_row_out(zv_u8 *out, const zv_g1_jac *a) {
    zv_fp_to_be48(out, &a->x);
    zv_fp_to_be48(out + 48, &a->y);
    zv_fp_to_be48(out + 96, &a->z);
}

ZV_HD void zv_bls_g1_jac_row_in(zv_g1_jac *a, const zv_u8 *in) {
    int ok = zv_fp_from_be48(&a->x, in) & zv_fp_from_be48(&a->y, in + 48) & zv_fp_from_be48(&a->z, in + 96);
    ZV_CHECK(ok);
    (void)ok;
}

ZV_HD void zv_bls_fp12_row_out(zv_u8 *out, const zv_fp12 *a) {
    const zv_fp *v = &a->c0.c0.c0; /* zv_fp12 is 12 consecutive zv_fp in tower order */
    for (int i = 0; i < 12; i++) zv_fp_to_be48(out + 48 * i, &v[i]);
}

ZV_HD void zv_bls_fp12_row_in(zv_fp12 *a, const zv_u8 *in) {
    zv_fp *v = &a->c0.c0.c0;
    int ok = 1;
    for (int i = 0; i < 12; i++) ok &= zv_fp_from_be48(&v[i], in + 48 * i);
    ZV_CHECK(ok);
    (void)ok;
}

/* Whether the 96 bytes are G2_POINT_AT_INFINITY of the consensus specs (0xc0, then zeros):
 * the eth variant compares the signature's bytes, not a decoded point. */
ZV_HD int zv_bls_is_g2_infinity_encoding(const zv_u8 *sig) {
    zv_u8 rest = 0;
    for (int i = 1; i < ZV_BLS12_381_SIG_BYTES; i++) rest |= sig[i];
    return sig[0] == 0xC0u && rest == 0;
}

/* ------------------------------------------------------------------ per key, per message */
/* KeyValidate (§2.5) of n 48-byte keys: points[j] = the G1 row (zero when invalid), ok[j]. */
ZV_KERNEL void zv_bls_agg_key_validate(const zv_u8 *keys, zv_u64 n, zv_u8 *points, zv_u8 *ok) {
    ZV_FOR_EACH(j, n) {
        zv_g1_affine a;
        int good = zv_bls_key_validate(&a, keys + ZV_BLS12_381_PK_BYTES * j) == ZV_BLS_OK;
        if (!good) a.infinity = 1;
        zv_bls_g1_row_out(points + ZV_BLS_G1_ROW * j, &a);
        ok[j] = (zv_u8)good;
    }
}

/* One round of the fast items' key sums, a tree over each item's key rows: n (dst[t], src[t])
 * pairs, each summing partial sum src[t] into partial sum dst[t] (sums: Jacobian rows indexed
 * like the keys).  The host (app/engine/device/ops.py, key_sum_rounds) gives, in round k with
 * stride s = 2^k, every key j of an item with keys lo..hi−1 where (j − lo) is a multiple of
 * 2s, and src = j + s where that is < hi: after ceil(log2 n) rounds, sums[lo] = ΣPK_j.  No
 * row a round reads as src is written in that round (src − lo is an odd multiple of s), and
 * rounds are separate launches, so no thread waits for another.  Round 0 (first = 1) reads
 * the affine key rows (a mixed addition) and also copies the keys without a partner
 * (src = ZV_BLS_NONE), so every item's lo row is written.  Each key was decoded and
 * subgroup-checked by its own thread (zv_bls_agg_key_validate); an invalid key's row is the
 * point at infinity and its item is decided false by zv_bls_agg_items whatever the sum. */
ZV_KERNEL void zv_bls_agg_key_sum(const zv_u8 *key_points, const zv_u64 *dst, const zv_u64 *src, zv_u64 n,
                                  zv_u32 first, zv_u8 *sums) {
    ZV_FOR_EACH(t, n) {
        zv_u64 d = dst[t], from = src[t];
        zv_g1_jac acc;
        if (first) {
            zv_g1_affine k;
            zv_bls_g1_row_in(&k, key_points + ZV_BLS_G1_ROW * d);
            zv_g1_from_affine(&acc, &k);
            if (from != ZV_BLS_NONE) {
                zv_bls_g1_row_in(&k, key_points + ZV_BLS_G1_ROW * from);
                zv_g1_add_affine(&acc, &acc, &k);
            }
        } else {
            zv_g1_jac other;
            ZV_CHECK(from != ZV_BLS_NONE);
            zv_bls_g1_jac_row_in(&acc, sums + ZV_BLS_G1_JAC_ROW * d);
            zv_bls_g1_jac_row_in(&other, sums + ZV_BLS_G1_JAC_ROW * from);
            zv_g1_add(&acc, &acc, &other); /* complete: P + P doubles, P + (−P) is infinity */
        }
        zv_bls_g1_jac_row_out(sums + ZV_BLS_G1_JAC_ROW * d, &acc);
    }
}

/* H(m_k) = hash_to_G2(m_k) under the POP DST for n messages (msgs[offsets[k] .. offsets[k+1]),
 * the kernel contract's layout) -> G2 rows. */
ZV_KERNEL void zv_bls_agg_hash(const zv_u8 *msgs, const zv_u64 *offsets, zv_u64 n, zv_u8 *points) {
    ZV_FOR_EACH(k, n) {
        zv_g2_affine h;
        zv_u64 lo = offsets[k], hi = offsets[k + 1];
        ZV_CHECK(hi >= lo);
        zv_bls_hash_to_g2(&h, msgs + lo, hi >= lo ? hi - lo : 0, ZV_BLS_POP_DST, ZV_BLS_POP_DST_LEN);
        zv_bls_g2_row_out(points + ZV_BLS_G2_ROW * k, &h);
    }
}

/* ------------------------------------------------------------------ per item */
/* The rules that decide an aggregate item without a pairing, for n items:
 *   modes[i]      ZV_BLS_AGG_*; key_off[i] .. key_off[i+1] its keys' rows in key_points/key_ok;
 *   sigs[i]       96-byte signature.
 * key_sums[key_off[i]] is ΣPK_j of a fast item (zv_bls_agg_key_sum's rounds; not read for
 * the other modes).  Writes status[i] (see the header), sig_points[i] (σ's G2 row) and, for
 * the fast modes, agg_points[i] (ΣPK_j's affine G1 row).  In order (draft-04 §3.3.4, §2.9; consensus specs altair
 * eth_fast_aggregate_verify):
 *   eth variant with no keys and σ's bytes == G2_POINT_AT_INFINITY -> true;
 *   no keys, or any key failing KeyValidate, or σ not decoding (subgroup-checked) -> false;
 *   fast: ΣPK_j the identity -> false (CoreVerify's KeyValidate of the aggregate key). */
ZV_KERNEL void zv_bls_agg_items(const zv_u8 *modes, const zv_u64 *key_off, const zv_u8 *key_ok,
                                const zv_u8 *key_sums, const zv_u8 *sigs, zv_u64 n, zv_u8 *status,
                                zv_u8 *agg_points, zv_u8 *sig_points) {
    ZV_FOR_EACH(i, n) {
        zv_u8 mode = modes[i];
        zv_u64 lo = key_off[i], hi = key_off[i + 1];
        const zv_u8 *sig = sigs + ZV_BLS12_381_SIG_BYTES * i;
        zv_g1_affine agg;
        zv_g2_affine s;
        agg.infinity = 1;
        s.infinity = 1;
        zv_u8 st = 0;
        if (mode == ZV_BLS_AGG_FAST_ETH && hi == lo && zv_bls_is_g2_infinity_encoding(sig)) {
            st = ZV_BLS_TRUE;
        } else if (mode != ZV_BLS_AGG_FALSE && mode <= ZV_BLS_AGG_FAST_ETH && hi > lo) {
            int good = 1;
            /* one byte per key (KeyValidate ran one thread per key): no field work here */
            for (zv_u64 j = lo; j < hi && good; j++) good = key_ok[j];
            good = good && zv_bls_g2_decompress(&s, sig) == ZV_BLS_OK;
            if (good && mode != ZV_BLS_AGG_AGGREGATE) {
                zv_g1_jac acc;
                zv_bls_g1_jac_row_in(&acc, key_sums + ZV_BLS_G1_JAC_ROW * lo);
                zv_g1_to_affine(&agg, &acc);
                good = !agg.infinity; /* CoreVerify's KeyValidate of the aggregate key */
            }
            st = good ? ZV_BLS_PENDING : 0;
        }
        status[i] = st;
        if (st != ZV_BLS_PENDING) { agg.infinity = 1; s.infinity = 1; }
        zv_bls_g1_row_out(agg_points + ZV_BLS_G1_ROW * i, &agg);
        zv_bls_g2_row_out(sig_points + ZV_BLS_G2_ROW * i, &s);
    }
}

/* ------------------------------------------------------------------ per pair */
/* The Miller value f_(x,Q)(P) of n pairs, each its own loop so the pairs of one item run on
 * many threads.  Pair t: P = row p_idx[t] of g1a, or of g1b with ZV_BLS_SECOND set, or −G1
 * for ZV_BLS_NONE; Q = row q_idx[t] of g2a, or of g2b with ZV_BLS_SECOND set; the pair is
 * skipped (f = 1) when pair_item[t] is an item whose status is not pending, or when P or Q
 * is the point at infinity (its pairing is 1, as in bls12_381.cuh). */
ZV_KERNEL void zv_bls_agg_miller(const zv_u8 *g1a, const zv_u8 *g1b, const zv_u8 *g2a, const zv_u8 *g2b,
                                 const zv_u64 *p_idx, const zv_u64 *q_idx, const zv_u64 *pair_item,
                                 const zv_u8 *status, zv_u64 n, zv_u8 *f_out) {
    ZV_FOR_EACH(t, n) {
        zv_fp12 f;
        zv_u64 item = pair_item[t];
        zv_g1_affine p;
        zv_g2_affine q;
        int live = item == ZV_BLS_NONE || status[item] == ZV_BLS_PENDING;
        if (live) {
            zv_u64 pi = p_idx[t], qi = q_idx[t];
            if (pi == ZV_BLS_NONE) {
                p.x = ZV_BLS_G1_X;
                zv_fp_neg(&p.y, &ZV_BLS_G1_Y);
                p.infinity = 0;
            } else {
                const zv_u8 *src = (pi & ZV_BLS_SECOND) ? g1b : g1a;
                zv_bls_g1_row_in(&p, src + ZV_BLS_G1_ROW * (pi & ~ZV_BLS_SECOND));
            }
            const zv_u8 *qsrc = (qi & ZV_BLS_SECOND) ? g2b : g2a;
            zv_bls_g2_row_in(&q, qsrc + ZV_BLS_G2_ROW * (qi & ~ZV_BLS_SECOND));
            live = !p.infinity && !q.infinity;
        }
        if (live) {
            zv_bls_miller_pair pair;
            zv_bls_miller_pair_init(&pair, &p.x, &p.y, &q.x, &q.y);
            zv_bls_miller_loop(&f, &pair, 1);
        } else {
            zv_fp12_one(&f);
        }
        zv_bls_fp12_row_out(f_out + ZV_BLS_FP12_ROW * t, &f);
    }
}

/* ------------------------------------------------------------------ per item or group */
/* verdicts[i] for n items or groups: status 2 -> 1, 0 -> 0, pending -> whether the product
 * of the Miller values f[pair_off[i] .. pair_off[i+1]) after one final exponentiation is 1. */
ZV_KERNEL void zv_bls_agg_final(const zv_u8 *f_rows, const zv_u64 *pair_off, const zv_u8 *status, zv_u64 n,
                                zv_u8 *verdicts) {
    ZV_FOR_EACH(i, n) {
        zv_u8 st = status[i];
        if (st != ZV_BLS_PENDING) { verdicts[i] = (zv_u8)(st == ZV_BLS_TRUE); continue; }
        zv_fp12 acc, f;
        zv_fp12_one(&acc);
        for (zv_u64 t = pair_off[i]; t < pair_off[i + 1]; t++) {
            zv_bls_fp12_row_in(&f, f_rows + ZV_BLS_FP12_ROW * t);
            zv_fp12_mul(&acc, &acc, &f);
        }
        zv_bls_final_exp(&acc, &acc);
        verdicts[i] = (zv_u8)zv_fp12_is_one(&acc);
    }
}

/* ------------------------------------------------------------------ random linear combination */
/* Per item of a bls12-381 batch (pk_len 48, sig_len 96, as the batch guarantees): KeyValidate
 * PK_i, decode σ_i; then r_i·PK_i (G1 row i of scaled_pks) and r_i·σ_i (G2 row i of
 * scaled_sigs) with r_i = scalars[i], a 64-bit scalar the host drew from a CSPRNG (never 0).
 * status[i] = 1 when both decode, else 0 (the item is false, as its CoreVerify would be). */
ZV_KERNEL void zv_bls_rlc_prepare(const zv_u8 *pks, const zv_u8 *sigs, const zv_u64 *scalars, zv_u64 n,
                                  zv_u8 *status, zv_u8 *scaled_pks, zv_u8 *scaled_sigs) {
    ZV_FOR_EACH(i, n) {
        zv_g1_affine a;
        zv_g2_affine s;
        int good = zv_bls_key_validate(&a, pks + ZV_BLS12_381_PK_BYTES * i) == ZV_BLS_OK;
        good = good && zv_bls_g2_decompress(&s, sigs + ZV_BLS12_381_SIG_BYTES * i) == ZV_BLS_OK;
        ZV_CHECK(!good || scalars[i] != 0); /* r_i = 0 would pass any item */
        status[i] = (zv_u8)(good ? ZV_BLS_PENDING : 0);
        if (!good) { a.infinity = 1; s.infinity = 1; }
        const zv_u32 k[2] = {(zv_u32)scalars[i], (zv_u32)(scalars[i] >> 32)};
        zv_g1_jac pj;
        zv_g2_jac sj;
        /* The inline template, not the out-of-line zv_g1_mul/zv_g2_mul: NVRTC passes those
         * their point as a .param struct and takes its address, a PTX move GPGPU-Sim cannot
         * run (scripts/gpusim); the doublings and additions inside stay out of line. */
        zv_g1_from_affine(&pj, &a);
        zv_jac_mul<zv_fp, zv_g1_jac>(&pj, &pj, k, 64);
        zv_g1_to_affine(&a, &pj);
        zv_g2_from_affine(&sj, &s);
        zv_jac_mul<zv_fp2, zv_g2_jac>(&sj, &sj, k, 64);
        zv_g2_to_affine(&s, &sj);
        zv_bls_g1_row_out(scaled_pks + ZV_BLS_G1_ROW * i, &a);
        zv_bls_g2_row_out(scaled_sigs + ZV_BLS_G2_ROW * i, &s);
    }
}

/* Per group g of n: Σ r_i·σ_i over the pending items group_items[group_off[g] ..
 * group_off[g+1]) -> G2 row g of out (zero for an empty sum). */
ZV_KERNEL void zv_bls_rlc_group_sig(const zv_u8 *scaled_sigs, const zv_u8 *status, const zv_u64 *group_off,
                                    const zv_u64 *group_items, zv_u64 n, zv_u8 *out) {
    ZV_FOR_EACH(g, n) {
        zv_g2_jac acc;
        zv_g2_affine s;
        zv_jac_set_infinity<zv_fp2, zv_g2_jac>(&acc);
        for (zv_u64 t = group_off[g]; t < group_off[g + 1]; t++) {
            zv_u64 i = group_items[t];
            if (status[i] != ZV_BLS_PENDING) continue;
            zv_bls_g2_row_in(&s, scaled_sigs + ZV_BLS_G2_ROW * i);
            zv_g2_add_affine(&acc, &acc, &s);
        }
        zv_g2_to_affine(&s, &acc);
        zv_bls_g2_row_out(out + ZV_BLS_G2_ROW * g, &s);
    }
}
