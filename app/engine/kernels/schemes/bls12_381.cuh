/* bls12_381.cuh — BLS signature verification over BLS12-381, one signature per thread.
 *
 * Semantics: CoreVerify with KeyValidate of draft-irtf-cfrg-bls-signature-05 (§2.7, §2.5),
 * minimal-pubkey-size variant (pk ∈ G1, 48 bytes; σ ∈ G2, 96 bytes), proof-of-possession
 * ciphersuite BLS_SIG_BLS12381G2_XMD:SHA-256_SSWU_RO_POP_ (§4.2.3), exactly as the CPU
 * backend (arkworks, app/engine/reference/reference.py verify_bls12_381) decides.  The verdict is 1
 * only when all of these hold, in this order:
 *   1. pk_len == 48 and sig_len == 96 (anything else is 0, never a read past the item);
 *   2. pk decodes (ZCash compressed format: flags, x < p, on the curve), is in G1 and is
 *      not the identity (KeyValidate) — bls12_381_serde.cuh;
 *   3. σ decodes and is in G2 (the identity is a valid σ: then e(−g1, σ) = 1) — same file;
 *   4. H = hash_to_G2(msg) with the DST above (RFC 9380, BLS12381G2_XMD:SHA-256_SSWU_RO_) —
 *      bls12_381_h2c.cuh;
 *   5. e(pk, H) · e(−g1, σ) == 1, by one multi-Miller loop over the two pairs and one final
 *      exponentiation, compared with 1 in Fp12 — bls12_381_pairing.cuh.  A pair with a
 *      point at infinity is left out (its pairing is 1), as arkworks does.
 * ctx and the batch options do not apply (the ciphersuite fixes the DST).
 *
 * Parallel layout: one thread per verify, decided by what ptxas reports for sm_90
 * (bench/results/bls12_381_gpu.md, written by scripts/bls12_381_gpu_predict):
 *   - ptxas gives the kernel 255 registers (the architectural maximum); the routines that
 *     want them are those that inline Fp products of 12 x 12 limbs (the out-of-line Fp2
 *     product and square hold three each, as unrolled carry chains), not those that hold
 *     Fp12 values, which keep them in the stack frame.  The tower and pairing routines
 *     spill 0 bytes except zv_fp6_mul_by_01 (24 B) and the Miller loop (24/48 B); the
 *     larger spills (<= 400 B: point decoding, hashing, the entry) run once per verify;
 *   - Fp12 values (576 B) and the two Miller pairs live in the 8 KiB stack frame (local
 *     memory, cached in L1/L2), touched once per Fp2 product of ~3,700 instructions: a few
 *     bytes of local traffic per hundred instructions.
 * So an Fp12 value is not what presses on the register file; one Fp product is.  Spreading
 * a verify over k cooperating threads (each owning 12/k limbs of every value, exchanging
 * partial products by shuffles) would shrink the product's register need only by spreading
 * its carry chains across lanes — a shuffle and a carry resolution per limb column — to
 * divide work that a batch of independent verifies already supplies in parallel; at
 * 8 warps per SM (255 registers) each scheduler still has two independent warps plus the
 * instruction-level parallelism of the limb products.  The measured overhead of the layout
 * (SASS of the tower routines over their Fp-product census) is 0.99-1.03; the predicted
 * rate and its method are in the results file.
 *
 * Index (public functions, in source order; the comment at each says more):
 *   zv_bls_pairing_product_is_one(pairs, n)     Whether Π e(P_i, Q_i) over the pairs == 1: one Miller loop,
 *                                               one final exponentiation
 *   zv_bls12_381_verify(pk, pk_len, sig, sig_len, msg, msg_len)
 *                                               The verdict for one item: 1 valid, 0 invalid (see the
 *                                               semantics above)
 */
#ifndef ZV_BLS12_381_CUH
#define ZV_BLS12_381_CUH

#include "zv_port.cuh"
#include "curves/bls12_381_serde.cuh"
#include "curves/bls12_381_h2c.cuh"
#include "curves/bls12_381_pairing.cuh"

#define ZV_BLS12_381_PK_BYTES 48
#define ZV_BLS12_381_SIG_BYTES 96

/* draft-irtf-cfrg-bls-signature-05 §4.2.3: the proof-of-possession ciphersuite's DST for
 * signatures (43 bytes, no terminator). */
#define ZV_BLS_POP_DST_LEN 43
ZV_CONSTANT zv_u8 ZV_BLS_POP_DST[ZV_BLS_POP_DST_LEN] = {
    'B', 'L', 'S', '_', 'S', 'I', 'G', '_', 'B', 'L', 'S', '1', '2', '3', '8', '1', 'G', '2', '_', 'X', 'M', 'D',
    ':', 'S', 'H', 'A', '-', '2', '5', '6', '_', 'S', 'S', 'W', 'U', '_', 'R', 'O', '_', 'P', 'O', 'P', '_'};

/* Whether Π e(P_i, Q_i) over the pairs == 1: one Miller loop, one final exponentiation. */
ZV_HD int zv_bls_pairing_product_is_one(zv_bls_miller_pair *pairs, int n) {
    zv_fp12 f;
    zv_bls_miller_loop(&f, pairs, n);
    zv_bls_final_exp(&f, &f);
    return zv_fp12_is_one(&f);
}

/* The verdict for one item: 1 valid, 0 invalid (see the semantics above). */
ZV_HD int zv_bls12_381_verify(const zv_u8 *pk, zv_u32 pk_len, const zv_u8 *sig, zv_u32 sig_len,
                              const zv_u8 *msg, zv_u64 msg_len) {
    if (pk_len != ZV_BLS12_381_PK_BYTES || sig_len != ZV_BLS12_381_SIG_BYTES) return 0;
    zv_g1_affine a;
    if (zv_bls_key_validate(&a, pk) != ZV_BLS_OK) return 0;
    zv_g2_affine s;
    if (zv_bls_g2_decompress(&s, sig) != ZV_BLS_OK) return 0;
    zv_g2_affine h;
    zv_bls_hash_to_g2(&h, msg, msg_len, ZV_BLS_POP_DST, ZV_BLS_POP_DST_LEN);

    zv_bls_miller_pair pairs[2];
    int n = 0;
    if (!h.infinity) zv_bls_miller_pair_init(&pairs[n++], &a.x, &a.y, &h.x, &h.y);
    if (!s.infinity) {
        zv_fp g1x = ZV_BLS_G1_X, neg_g1y;
        zv_fp_neg(&neg_g1y, &ZV_BLS_G1_Y);
        zv_bls_miller_pair_init(&pairs[n++], &g1x, &neg_g1y, &s.x, &s.y);
    }
    return zv_bls_pairing_product_is_one(pairs, n);
}

#endif /* ZV_BLS12_381_CUH */
