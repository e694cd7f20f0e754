/* hash.cu — batch hash kernels: one thread hashes one message of a columnar batch.
 *
 * Every kernel reads message i = msgs[offsets[i] .. offsets[i+1]) (offsets: N + 1
 * non-decreasing u64, as the batch of DESIGN.md section 3) and writes digest i at
 * out + i * digest_len.  They exist to test and benchmark the hash code every verify
 * kernel shares (sha2.cuh, keccak.cuh), and to hash batches on the device.
 */
#include "zv_port.cuh"
#include "hashes/sha2.cuh"
#include "hashes/keccak.cuh"

ZV_KERNEL void zv_sha256_batch(const zv_u8 *msgs, const zv_u64 *offsets, zv_u64 n, zv_u8 *out) {
    ZV_FOR_EACH(i, n) {
        zv_sha256(msgs + offsets[i], offsets[i + 1] - offsets[i], out + 32 * i);
    }
}

ZV_KERNEL void zv_sha512_batch(const zv_u8 *msgs, const zv_u64 *offsets, zv_u64 n, zv_u8 *out) {
    ZV_FOR_EACH(i, n) {
        zv_sha512(msgs + offsets[i], offsets[i + 1] - offsets[i], out + 64 * i);
    }
}

ZV_KERNEL void zv_sha3_256_batch(const zv_u8 *msgs, const zv_u64 *offsets, zv_u64 n, zv_u8 *out) {
    ZV_FOR_EACH(i, n) {
        zv_sha3_256(msgs + offsets[i], offsets[i + 1] - offsets[i], out + 32 * i);
    }
}

ZV_KERNEL void zv_sha3_512_batch(const zv_u8 *msgs, const zv_u64 *offsets, zv_u64 n, zv_u8 *out) {
    ZV_FOR_EACH(i, n) {
        zv_sha3_512(msgs + offsets[i], offsets[i + 1] - offsets[i], out + 64 * i);
    }
}

/* SHAKE: out_len bytes of output per message (any length; several blocks are squeezed). */
ZV_KERNEL void zv_shake128_batch(const zv_u8 *msgs, const zv_u64 *offsets, zv_u64 n, zv_u32 out_len,
                                 zv_u8 *out) {
    ZV_FOR_EACH(i, n) {
        zv_shake128(msgs + offsets[i], offsets[i + 1] - offsets[i], out + (zv_u64)out_len * i, out_len);
    }
}

ZV_KERNEL void zv_shake256_batch(const zv_u8 *msgs, const zv_u64 *offsets, zv_u64 n, zv_u32 out_len,
                                 zv_u8 *out) {
    ZV_FOR_EACH(i, n) {
        zv_shake256(msgs + offsets[i], offsets[i + 1] - offsets[i], out + (zv_u64)out_len * i, out_len);
    }
}
