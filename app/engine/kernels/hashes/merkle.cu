/* merkle.cu — the RFC 6962 root of a verified batch (semantics in merkle.cuh).
 *
 * Three kernels, launched in this order by app/engine/device/ops.py:
 *   zv_merkle_leaves  one thread per item: the leaf hash from the batch columns and verdicts;
 *   zv_merkle_level   one thread per parent: one level of the tree, grid-wide, while the level
 *                     is wide enough to fill the device;
 *   zv_merkle_tail    ONE block: the remaining levels up to the root, the block's threads
 *                     meeting at a barrier between levels (one launch instead of ~12).
 * Buffers are 32-byte nodes back to back.  The leaves are only read, so the caller keeps them.
 */
#include "zv_port.cuh"
#include "hashes/sha2.cuh"
#include "hashes/merkle.cuh"

/* leaves[i] for item i: pk i = pks[i*pk_len ..], sig i = sigs[i*sig_len ..], message i =
 * msgs[offsets[i] .. offsets[i+1]), verdict i = verdicts[i] != 0. */
ZV_KERNEL void zv_merkle_leaves(zv_u32 code, const zv_u8 *pks, zv_u32 pk_len, const zv_u8 *sigs,
                                zv_u32 sig_len, const zv_u8 *msgs, const zv_u64 *offsets,
                                const zv_u8 *verdicts, zv_u64 n, zv_u8 *leaves) {
    ZV_FOR_EACH(i, n) {
        zv_merkle_leaf(code, verdicts[i], pks + (zv_u64)pk_len * i, pk_len, msgs + offsets[i],
                       offsets[i + 1] - offsets[i], sigs + (zv_u64)sig_len * i, sig_len, leaves + 32 * i);
    }
}

/* out[j], j < ceil(n/2): the level above the n nodes of `in` (out must not overlap in). */
ZV_KERNEL void zv_merkle_level(const zv_u8 *in, zv_u64 n, zv_u8 *out) {
    ZV_FOR_EACH(j, (n + 1) / 2) {
        zv_merkle_parent(in, n, j, out);
    }
}

/* Launch with one block.  Reduces the n nodes of `src` to the root, ping-ponging between
 * scratch a (≥ ceil(n/2) nodes, distinct from src) and b (≥ ceil(n/4) nodes; may be src,
 * which is no longer read after the first level). */
ZV_KERNEL void zv_merkle_tail(const zv_u8 *src, zv_u64 n, zv_u8 *a, zv_u8 *b, zv_u8 *root) {
    const zv_u8 *in = src;
    zv_u8 *out = a;
    while (n > 1) {
        ZV_BLOCK_FOR(j, (n + 1) / 2) {
            zv_merkle_parent(in, n, j, out);
        }
        ZV_SYNC();
        n = (n + 1) / 2;
        in = out;
        out = (out == a) ? b : a;
    }
    ZV_BLOCK_FOR(k, 32) {
        root[k] = in[k];
    }
}
