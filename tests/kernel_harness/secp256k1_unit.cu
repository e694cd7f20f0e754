/* Test harness: exposes the secp256k1 kernel's internal routines to
 * tests/test_kernel_secp256k1.py (host build only; never part of the service).
 * Field elements and scalars are 8 little-endian 32-bit limbs; a Jacobian point is
 * X, Y, Z (24 limbs) then the infinity flag (1 limb); an affine point is x, y (16 limbs).
 */
#include "zv_port.cuh"
#include "schemes/secp256k1.cuh"

static void load_fe(zv_k1_fe *r, const zv_u32 *a) { zv_k1_fe_copy(r, a); }
static void store_fe(zv_u32 *o, const zv_k1_fe *a) { for (int i = 0; i < 8; i++) o[i] = a->v[i]; }
static void load_sc(zv_k1_sc *r, const zv_u32 *a) { zv_k1_sc_copy(r, a); }
static void store_sc(zv_u32 *o, const zv_k1_sc *a) { for (int i = 0; i < 8; i++) o[i] = a->v[i]; }
static void load_ge(zv_k1_ge *r, const zv_u32 *a) { load_fe(&r->x, a); load_fe(&r->y, a + 8); }
static void store_ge(zv_u32 *o, const zv_k1_ge *a) { store_fe(o, &a->x); store_fe(o + 8, &a->y); }
static void load_gej(zv_k1_gej *r, const zv_u32 *a) {
    load_fe(&r->x, a); load_fe(&r->y, a + 8); load_fe(&r->z, a + 16); r->inf = (int)a[24];
}
static void store_gej(zv_u32 *o, const zv_k1_gej *a) {
    store_fe(o, &a->x); store_fe(o + 8, &a->y); store_fe(o + 16, &a->z); o[24] = (zv_u32)a->inf;
}

/* op: 0 add, 1 sub, 2 mul, 3 sqr, 4 neg, 5 mul_int(b[0]), 6 normalize, 7 inv, 8 sqrt
 * (returns is-square), 9 is_zero, 10 equal, 11 is_odd, 12 set_b32_limit (a as 32 bytes). */
ZV_KERNEL int k1t_fe(int op, const zv_u32 *a, const zv_u32 *b, zv_u32 *out) {
    zv_k1_fe x, y, r;
    load_fe(&x, a);
    load_fe(&y, b);
    int ret = 0;
    switch (op) {
    case 0: zv_k1_fe_add(&r, &x, &y); break;
    case 1: zv_k1_fe_sub(&r, &x, &y); break;
    case 2: zv_k1_fe_mul(&r, &x, &y); break;
    case 3: zv_k1_fe_sqr(&r, &x); break;
    case 4: zv_k1_fe_neg(&r, &x); break;
    case 5: zv_k1_fe_mul_int(&r, &x, b[0]); break;
    case 6: r = x; zv_k1_fe_normalize(&r); break;
    case 7: zv_k1_fe_inv(&r, &x); break;
    case 8: ret = zv_k1_fe_sqrt(&r, &x); break;
    case 9: r = x; ret = zv_k1_fe_is_zero(&x); break;
    case 10: r = x; ret = zv_k1_fe_equal(&x, &y); break;
    case 11: r = x; ret = zv_k1_fe_is_odd(&x); break;
    case 12: ret = zv_k1_fe_set_b32_limit(&r, (const zv_u8 *)a); break;
    default: return -1;
    }
    store_fe(out, &r);
    return ret;
}

/* op: 0 mont_mul, 1 inv_mont, 2 add, 3 neg, 4 sub, 5 is_high, 6 glv_split (out: k1, k2),
 * 7 set_b32 (a as 32 bytes; returns overflow), 8 set_b32_reduce (a as 32 bytes). */
ZV_KERNEL int k1t_sc(int op, const zv_u32 *a, const zv_u32 *b, zv_u32 *out) {
    zv_k1_sc x, y, r, r2;
    load_sc(&x, a);
    load_sc(&y, b);
    int ret = 0;
    switch (op) {
    case 0: zv_k1_sc_mont_mul(&r, x.v, y.v); break;
    case 1: zv_k1_sc_inv_mont(&r, &x); break;
    case 2: zv_k1_sc_add(&r, &x, &y); break;
    case 3: zv_k1_sc_neg(&r, &x); break;
    case 4: zv_k1_sc_sub(&r, &x, &y); break;
    case 5: r = x; ret = zv_k1_sc_is_high(&x); break;
    case 6: zv_k1_glv_split(&r, &r2, &x); store_sc(out + 8, &r2); break;
    case 7: ret = zv_k1_sc_set_b32(&r, (const zv_u8 *)a); break;
    case 8: zv_k1_sc_set_b32_reduce(&r, (const zv_u8 *)a); break;
    default: return -1;
    }
    store_sc(out, &r);
    return ret;
}

ZV_KERNEL void k1t_gej_add_ge(const zv_u32 *a, const zv_u32 *b, zv_u32 *out) {
    zv_k1_gej x, r;
    zv_k1_ge y;
    load_gej(&x, a);
    load_ge(&y, b);
    zv_k1_gej_add_ge(&r, &x, &y);
    store_gej(out, &r);
}

ZV_KERNEL void k1t_gej_double(const zv_u32 *a, zv_u32 *out) {
    zv_k1_gej x, r;
    load_gej(&x, a);
    zv_k1_gej_double(&r, &x);
    store_gej(out, &r);
}

ZV_KERNEL void k1t_odd_multiples(const zv_u32 *q, zv_u32 *out) {
    zv_k1_ge g, t[ZV_SECP256K1_Q_TABLE_SIZE];
    load_ge(&g, q);
    zv_k1_odd_multiples(t, &g);
    for (int i = 0; i < ZV_SECP256K1_Q_TABLE_SIZE; i++) store_ge(out + 16 * i, &t[i]);
}

ZV_KERNEL void k1t_ecmult(const zv_u32 *q, const zv_u32 *u1, const zv_u32 *u2, zv_u32 *out) {
    zv_k1_ge g;
    zv_k1_sc a, b;
    zv_k1_gej r;
    load_ge(&g, q);
    load_sc(&a, u1);
    load_sc(&b, u2);
    zv_k1_ecmult_double_base(&r, &g, &a, &b);
    store_gej(out, &r);
}

ZV_KERNEL int k1t_pubkey_parse(const zv_u8 *pk, zv_u32 len, zv_u32 *out) {
    zv_k1_ge q;
    int ok = zv_k1_pubkey_parse(&q, pk, len);
    if (ok) store_ge(out, &q);
    return ok;
}

/* s[i] -> s[i]^-1·R mod n for count (<= 256) scalars by the kernel's batched inversion
 * (each s converted to s·R first, as the kernel's threads do). */
ZV_KERNEL void k1t_sc_batch_inv(int count, const zv_u32 *in, zv_u32 *out) {
    zv_k1_sc s[256], prefix[256], tops[ZV_BATCH_LANES], tops_prefix[ZV_BATCH_LANES];
    for (int i = 0; i < count; i++) {
        load_sc(&s[i], in + 8 * i);
        zv_k1_sc_mont_mul(&s[i], s[i].v, ZV_SECP256K1_N_R2);
    }
    zv_k1_sc_block_batch_inv_mont(s, prefix, count, tops, tops_prefix);
    for (int i = 0; i < count; i++) store_sc(out + 8 * i, &s[i]);
}

/* One item with its own scalar inversion, for comparison with the chunked kernel. */
ZV_KERNEL int k1t_verify_one(const zv_u8 *pk, zv_u32 pk_len, const zv_u8 *sig, zv_u32 sig_len,
                             const zv_u8 *msg, zv_u64 msg_len, zv_u32 options) {
    return zv_k1_verify_one(pk, pk_len, sig, sig_len, msg, msg_len, options);
}
