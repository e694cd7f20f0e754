// Native chunk loops of the CPU backend for the sub-100 µs libraries (docs/architecture.md,
// "CPU backend"): a whole chunk of columns is verified and leaf-hashed in one C call, so
// Python is entered once per chunk instead of once per item, and ctypes releases the GIL
// for the whole call, so every thread of the pool runs a core at the library's own speed.
//
// The libraries are not linked here: the caller passes the addresses of their own entry
// points (libsodium inside PyNaCl, libsecp256k1 inside coincurve), so the verdicts are the
// very functions app/engine/verify/reference.py calls, item for item:
//   Ed25519    crypto_sign_ed25519_verify_detached (RFC 8032 §5.1.7, libsodium's rules;
//              crypto_sign_open, which the reference calls, runs the same check);
//   secp256k1  secp256k1_ec_pubkey_parse, secp256k1_ecdsa_signature_parse_compact,
//              secp256k1_ecdsa_signature_normalize (only when high S is allowed) and
//              secp256k1_ecdsa_verify (SEC 1 §4.1.4, low S required) on SHA-256(msg), or on
//              msg itself when prehashed (then msg must be 32 bytes).
// Leaf hashes follow docs/architecture.md, "Merkle leaf and receipts" (app/engine/commit/
// merkle.py): SHA-256(0x00 ‖ code ‖ verdict ‖ SHA-256(pk) ‖ SHA-256(msg) ‖ SHA-256(sig)),
// with libsodium's crypto_hash_sha256.
//
// Column layout (all C-contiguous): pks uint8[n, pk_len], sigs uint8[n, sig_len], msgs uint8[...],
// offsets uint64[n + 1] relative to msgs (msgs_len bytes); out: verdicts uint8[n] (0/1),
// leaves uint8[n, 32].  Offsets are clamped to [0, msgs_len] as a Python slice would be, so
// columns overwritten under us (a caller's bug) give wrong verdicts, never a read outside msgs.

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef int (*zv_sha256_fn)(unsigned char *out, const unsigned char *in, unsigned long long inlen);
typedef int (*zv_ed25519_verify_fn)(const unsigned char *sig, const unsigned char *m,
                                    unsigned long long mlen, const unsigned char *pk);
// libsecp256k1 opaque types are 64 bytes (secp256k1.h: secp256k1_pubkey, secp256k1_ecdsa_signature).
typedef struct { unsigned char data[64]; } zv_k1_blob;
typedef int (*zv_k1_pubkey_parse_fn)(const void *ctx, zv_k1_blob *pubkey, const unsigned char *in, size_t inlen);
typedef int (*zv_k1_sig_parse_fn)(const void *ctx, zv_k1_blob *sig, const unsigned char *in64);
typedef int (*zv_k1_sig_normalize_fn)(const void *ctx, zv_k1_blob *out, const zv_k1_blob *in);
typedef int (*zv_k1_verify_fn)(const void *ctx, const zv_k1_blob *sig, const unsigned char *msghash32,
                               const zv_k1_blob *pubkey);

#define ZV_LEAF_DATA_BYTES 99  // 0x00 prefix + the 98-byte leaf data

// Message i as msgs[offsets[i]:offsets[i + 1]] with Python's slice clamping.
static const unsigned char *zv_message(const unsigned char *msgs, size_t msgs_len, const uint64_t *offsets,
                                       size_t i, size_t *len) {
    const uint64_t lo = offsets[i] < msgs_len ? offsets[i] : msgs_len;
    const uint64_t hi = offsets[i + 1] < msgs_len ? offsets[i + 1] : msgs_len;
    *len = hi > lo ? (size_t)(hi - lo) : 0;
    return msgs + lo;
}

static void zv_leaf(zv_sha256_fn sha256, unsigned char code, int ok, const unsigned char *pk, size_t pk_len,
                    const unsigned char *msg, size_t msg_len, const unsigned char *sig, size_t sig_len,
                    unsigned char *leaf) {
    unsigned char data[ZV_LEAF_DATA_BYTES];
    data[0] = 0x00;
    data[1] = code;
    data[2] = ok ? 1 : 0;
    sha256(data + 3, pk, pk_len);
    sha256(data + 35, msg, msg_len);
    sha256(data + 67, sig, sig_len);
    sha256(leaf, data, ZV_LEAF_DATA_BYTES);
}

extern "C" void zv_cpu_ed25519(zv_ed25519_verify_fn verify, zv_sha256_fn sha256, unsigned char code,
                               const unsigned char *pks, size_t pk_len, const unsigned char *sigs, size_t sig_len,
                               const unsigned char *msgs, size_t msgs_len, const uint64_t *offsets, size_t n,
                               unsigned char *verdicts, unsigned char *leaves) {
    // The reference rejects any other length before calling libsodium.
    const int sizes_ok = pk_len == 32 && sig_len == 64;
    for (size_t i = 0; i < n; i++) {
        const unsigned char *pk = pks + i * pk_len, *sig = sigs + i * sig_len;
        size_t msg_len;
        const unsigned char *msg = zv_message(msgs, msgs_len, offsets, i, &msg_len);
        const int ok = sizes_ok && verify(sig, msg, msg_len, pk) == 0;
        verdicts[i] = (unsigned char)ok;
        zv_leaf(sha256, code, ok, pk, pk_len, msg, msg_len, sig, sig_len, leaves + 32 * i);
    }
}

extern "C" void zv_cpu_secp256k1(zv_k1_pubkey_parse_fn pubkey_parse, zv_k1_sig_parse_fn sig_parse,
                                 zv_k1_sig_normalize_fn sig_normalize, zv_k1_verify_fn ecdsa_verify,
                                 const void *ctx, zv_sha256_fn sha256, unsigned char code, int prehashed,
                                 int allow_high_s, const unsigned char *pks, size_t pk_len,
                                 const unsigned char *sigs, size_t sig_len, const unsigned char *msgs,
                                 size_t msgs_len, const uint64_t *offsets, size_t n, unsigned char *verdicts,
                                 unsigned char *leaves) {
    const int sizes_ok = (pk_len == 33 || pk_len == 65) && sig_len == 64;
    for (size_t i = 0; i < n; i++) {
        const unsigned char *pk = pks + i * pk_len, *sig = sigs + i * sig_len;
        size_t msg_len;
        const unsigned char *msg = zv_message(msgs, msgs_len, offsets, i, &msg_len);
        int ok = sizes_ok && (!prehashed || msg_len == 32);
        if (ok) {
            unsigned char digest[32];
            if (prehashed)
                memcpy(digest, msg, 32);
            else
                sha256(digest, msg, msg_len);
            zv_k1_blob pubkey, s;
            ok = pubkey_parse(ctx, &pubkey, pk, pk_len) && sig_parse(ctx, &s, sig);  // r, s < n
            if (ok && allow_high_s)
                sig_normalize(ctx, &s, &s);
            ok = ok && ecdsa_verify(ctx, &s, digest, &pubkey) == 1;
        }
        verdicts[i] = (unsigned char)ok;
        zv_leaf(sha256, code, ok, pk, pk_len, msg, msg_len, sig, sig_len, leaves + 32 * i);
    }
}
