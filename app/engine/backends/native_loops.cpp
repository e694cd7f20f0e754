// Native chunk loops of the CPU backend for the sub-100 µs libraries (docs/architecture.md,
// "CPU backend"): a whole chunk of columns is verified and leaf-hashed in one C call, so
// Python is entered once per chunk instead of once per item, and ctypes releases the GIL
// for the whole call, so every thread of the pool runs a core at the library's own speed.
//
// The libraries are not linked here: the caller passes the addresses of their own entry
// points (libsodium inside PyNaCl, libsecp256k1 inside coincurve), so the verdicts are the
// very functions app/engine/reference/reference.py calls, item for item:
//   Ed25519    crypto_sign_ed25519_verify_detached (RFC 8032 §5.1.7, libsodium's rules;
//              crypto_sign_open, which the reference calls, runs the same check);
//   secp256k1  secp256k1_ec_pubkey_parse, secp256k1_ecdsa_signature_parse_compact,
//              secp256k1_ecdsa_signature_normalize (only when high S is allowed) and
//              secp256k1_ecdsa_verify (SEC 1 §4.1.4, low S required) on SHA-256(msg), or on
//              msg itself when prehashed (then msg must be 32 bytes).
// Leaf hashes follow docs/architecture.md, "Merkle leaf and receipts" (app/engine/commit/
// merkle.py): SHA-256(0x00 ‖ code ‖ verdict ‖ SHA-256(pk) ‖ SHA-256(msg) ‖ SHA-256(sig)), and
// zv_merkle_root builds that file's RFC 6962 tree over them.  SHA-256 is the caller's: OpenSSL's
// low-level SHA256_Init/Update/Final (the libcrypto hashlib uses: its assembly, SHA-NI where
// the CPU has it) through zv_openssl_sha256 once zv_use_openssl_sha256 has accepted them, else
// libsodium's portable crypto_hash_sha256 (measured 4-7 times slower on this project's
// build machine: some 3 µs of leaf hashing per Ed25519 item, a few per cent of a verify).
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
// secp256k1_xonly_pubkey is 64 bytes too (secp256k1_extrakeys.h).
typedef int (*zv_k1_xonly_parse_fn)(const void *ctx, zv_k1_blob *pubkey, const unsigned char *in32);
typedef int (*zv_k1_schnorr_verify_fn)(const void *ctx, const unsigned char *sig64, const unsigned char *msg,
                                       size_t msglen, const zv_k1_blob *pubkey);

#define ZV_LEAF_DATA_BYTES 99  // 0x00 prefix + the 98-byte leaf data

// OpenSSL's SHA256_Init / SHA256_Update / SHA256_Final (openssl/sha.h; SHA256_CTX is 112 bytes).
typedef int (*zv_sha256_init_fn)(void *ctx);
typedef int (*zv_sha256_update_fn)(void *ctx, const void *data, size_t len);
typedef int (*zv_sha256_final_fn)(unsigned char *md, void *ctx);
static zv_sha256_init_fn zv_ossl_init;
static zv_sha256_update_fn zv_ossl_update;
static zv_sha256_final_fn zv_ossl_final;

// One-shot SHA-256 with the zv_sha256_fn signature, on the OpenSSL functions set below.
extern "C" int zv_openssl_sha256(unsigned char *out, const unsigned char *in, unsigned long long inlen) {
    alignas(64) unsigned char ctx[256];  // room to spare over sizeof(SHA256_CTX)
    zv_ossl_init(ctx);
    zv_ossl_update(ctx, in, (size_t)inlen);
    zv_ossl_final(out, ctx);
    return 0;
}

// Adopt OpenSSL's functions for zv_openssl_sha256 when they give SHA-256("abc") (FIPS 180-4
// example, B.1); returns 1 when adopted, 0 (nothing set) otherwise.  Call once, before any loop.
extern "C" int zv_use_openssl_sha256(zv_sha256_init_fn init, zv_sha256_update_fn update, zv_sha256_final_fn final_) {
    static const unsigned char want[32] = {
        0xba, 0x78, 0x16, 0xbf, 0x8f, 0x01, 0xcf, 0xea, 0x41, 0x41, 0x40, 0xde, 0x5d, 0xae, 0x22, 0x23,
        0xb0, 0x03, 0x61, 0xa3, 0x96, 0x17, 0x7a, 0x9c, 0xb4, 0x10, 0xff, 0x61, 0xf2, 0x00, 0x15, 0xad};
    alignas(64) unsigned char ctx[256];
    unsigned char got[32];
    if (!init || !update || !final_ || init(ctx) != 1 || update(ctx, "abc", 3) != 1 || final_(got, ctx) != 1 ||
        memcmp(got, want, 32) != 0)
        return 0;
    zv_ossl_init = init;
    zv_ossl_update = update;
    zv_ossl_final = final_;
    return 1;
}

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

// BIP-340 Verify: secp256k1_xonly_pubkey_parse (lift_x) then secp256k1_schnorrsig_verify on
// the message as it is (any length), as the reference verify_bip340.  One verify per item:
// libsecp256k1 has no BIP-340 batch verification to call.
extern "C" void zv_cpu_bip340(zv_k1_xonly_parse_fn xonly_parse, zv_k1_schnorr_verify_fn schnorr_verify,
                              const void *ctx, zv_sha256_fn sha256, unsigned char code, const unsigned char *pks,
                              size_t pk_len, const unsigned char *sigs, size_t sig_len, const unsigned char *msgs,
                              size_t msgs_len, const uint64_t *offsets, size_t n, unsigned char *verdicts,
                              unsigned char *leaves) {
    const int sizes_ok = pk_len == 32 && sig_len == 64;
    for (size_t i = 0; i < n; i++) {
        const unsigned char *pk = pks + i * pk_len, *sig = sigs + i * sig_len;
        size_t msg_len;
        const unsigned char *msg = zv_message(msgs, msgs_len, offsets, i, &msg_len);
        zv_k1_blob pubkey;
        const int ok = sizes_ok && xonly_parse(ctx, &pubkey, pk) && schnorr_verify(ctx, sig, msg, msg_len, &pubkey) == 1;
        verdicts[i] = (unsigned char)ok;
        zv_leaf(sha256, code, ok, pk, pk_len, msg, msg_len, sig, sig_len, leaves + 32 * i);
    }
}

// Leaf hashes only, for the schemes verified elsewhere (the Python loop over their library):
// verdicts uint8[n] (0/1) in, leaves uint8[n, 32] out, columns as above.
extern "C" void zv_leaves(zv_sha256_fn sha256, unsigned char code, const unsigned char *verdicts,
                          const unsigned char *pks, size_t pk_len, const unsigned char *sigs, size_t sig_len,
                          const unsigned char *msgs, size_t msgs_len, const uint64_t *offsets, size_t n,
                          unsigned char *leaves) {
    for (size_t i = 0; i < n; i++) {
        size_t msg_len;
        const unsigned char *msg = zv_message(msgs, msgs_len, offsets, i, &msg_len);
        zv_leaf(sha256, code, verdicts[i], pks + i * pk_len, pk_len, msg, msg_len, sigs + i * sig_len, sig_len,
                leaves + 32 * i);
    }
}

// RFC 6962 §2.1 Merkle Tree Hash of n leaf hashes (app/engine/commit/merkle.py, root): adjacent
// pairs hashed as SHA-256(0x01 ‖ left ‖ right), an odd last node carried up unchanged.  nodes is
// uint8[n, 32] holding the leaf hashes and is overwritten (each level is written over the start
// of the one below, which it no longer needs); root gets 32 bytes.  n == 0 gives SHA-256("").
extern "C" void zv_merkle_root(zv_sha256_fn sha256, unsigned char *nodes, size_t n, unsigned char *root) {
    if (n == 0) {
        sha256(root, nodes, 0);
        return;
    }
    unsigned char pair[65];
    pair[0] = 0x01;
    for (size_t width = n; width > 1; width = (width + 1) / 2) {
        for (size_t i = 0; i + 1 < width; i += 2) {
            memcpy(pair + 1, nodes + 32 * i, 64);
            sha256(nodes + 32 * (i / 2), pair, sizeof pair);
        }
        if (width % 2)
            memmove(nodes + 32 * (width / 2), nodes + 32 * (width - 1), 32);
    }
    memcpy(root, nodes, 32);
}
