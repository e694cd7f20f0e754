/* merkle.cuh — the batch Merkle commitment of DESIGN.md section 5, shared by host and device.
 *
 * Semantics (RFC 6962 §2.1 over our leaf data):
 *   leaf i = SHA-256(0x00 ‖ code ‖ verdict ‖ SHA-256(pk) ‖ SHA-256(msg) ‖ SHA-256(sig))
 *            with code the scheme's one-byte wire code and verdict 1 (valid) or 0;
 *   node   = SHA-256(0x01 ‖ left ‖ right).
 * The tree of n leaves splits at the largest power of two below n; built bottom-up, that is
 * "hash adjacent pairs, carry an odd last node up unchanged" at every level, which is what
 * the kernels in merkle.cu do.  app/engine/merkle.py is the CPU reference.
 *
 * Index (public functions, in source order; the comment at each says more):
 *   zv_merkle_leaf(code, verdict, pk, pk_len, msg, msg_len, sig, sig_len, out)
 *   zv_merkle_node(left, right, out)
 *   zv_merkle_parent(in, n, j, out)             Node j of the level above `in` (n nodes): a pair's hash, or
 *                                               the odd last node carried up
 */
#ifndef ZV_MERKLE_CUH
#define ZV_MERKLE_CUH

#include "zv_port.cuh"
#include "hashes/sha2.cuh"

ZV_HD void zv_merkle_leaf(zv_u32 code, zv_u8 verdict, const zv_u8 *pk, zv_u64 pk_len, const zv_u8 *msg,
                          zv_u64 msg_len, const zv_u8 *sig, zv_u64 sig_len, zv_u8 out[32]) {
    zv_u8 data[3 + 96];
    data[0] = 0x00;
    data[1] = (zv_u8)code;
    data[2] = verdict ? 1 : 0;
    zv_sha256(pk, pk_len, data + 3);
    zv_sha256(msg, msg_len, data + 35);
    zv_sha256(sig, sig_len, data + 67);
    zv_sha256(data, sizeof data, out);
}

ZV_HD void zv_merkle_node(const zv_u8 *left, const zv_u8 *right, zv_u8 out[32]) {
    zv_sha256_ctx c;
    const zv_u8 prefix = 0x01;
    zv_sha256_init(&c);
    zv_sha256_update(&c, &prefix, 1);
    zv_sha256_update(&c, left, 32);
    zv_sha256_update(&c, right, 32);
    zv_sha256_final(&c, out);
}

/* Node j of the level above `in` (n nodes): a pair's hash, or the odd last node carried up. */
ZV_HD void zv_merkle_parent(const zv_u8 *in, zv_u64 n, zv_u64 j, zv_u8 *out) {
    if (2 * j + 1 < n) {
        zv_merkle_node(in + 64 * j, in + 64 * j + 32, out + 32 * j);
    } else {
        zv_memcpy(out + 32 * j, in + 64 * j, 32);
    }
}

#endif /* ZV_MERKLE_CUH */
