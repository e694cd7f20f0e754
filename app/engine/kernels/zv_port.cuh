/* zv_port.cuh — the portability layer every zapverify kernel header includes first.
 *
 * One source, two builds (DESIGN.md section 6):
 *   - GPU: NVRTC (cupy.RawModule) or `nvcc -arch=sm_90`; __CUDACC__ is defined.
 *   - host: g++ into a shared library loaded by ctypes, so kernel logic is tested on
 *     machines without a GPU; a kernel then runs with one "thread" that walks every item.
 *
 * Rules for code that includes this header:
 *   - fixed-width types only from here (NVRTC has no libc headers, so no <stdint.h>);
 *   - no host-only calls (malloc, printf, memcpy) in shared code: use zv_memcpy below;
 *   - block-cooperative loops are written ZV_FOR_EACH(i, n), which strides by the grid on
 *     the GPU and visits 0..n-1 once on the host;
 *   - entry points are ZV_KERNEL (extern "C": unmangled names for RawModule and ctypes).
 */
#ifndef ZV_PORT_CUH
#define ZV_PORT_CUH

typedef unsigned char zv_u8;
typedef unsigned short zv_u16;
typedef unsigned int zv_u32;
typedef unsigned long long zv_u64;
typedef signed int zv_i32;
typedef signed long long zv_i64;

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define ZV_DEVICE_BUILD 1
#define ZV_HD __host__ __device__ __forceinline__
#define ZV_KERNEL extern "C" __global__
#define ZV_CONSTANT __constant__
#define ZV_TID ((zv_u64)blockIdx.x * blockDim.x + threadIdx.x)
#define ZV_NTHREADS ((zv_u64)gridDim.x * blockDim.x)
#define ZV_RESTRICT __restrict__
#else
#define ZV_DEVICE_BUILD 0
#define ZV_HD static inline
#define ZV_KERNEL extern "C" __attribute__((visibility("default")))
#define ZV_CONSTANT static const
#define ZV_TID ((zv_u64)0)
#define ZV_NTHREADS ((zv_u64)1)
#define ZV_RESTRICT __restrict__
#endif

/* Grid-stride loop: every item once, whatever the launch shape (one thread on the host). */
#define ZV_FOR_EACH(i, n) for (zv_u64 i = ZV_TID; i < (zv_u64)(n); i += ZV_NTHREADS)

/* Block-cooperative work (one block shares a job, e.g. the top of a Merkle tree): the
 * block's threads split a loop with ZV_BLOCK_FOR and meet at ZV_SYNC between phases.
 * On the host the "block" is one thread, so the loop visits every index and the barrier
 * is empty — the phases still run in order, which is all the barrier guarantees.
 * ZV_UNROLL before a fixed-count loop lets both compilers unroll it, which turns ring and
 * lane indices (SHA-2's message schedule, Keccak's ρ/π walk) into constants: on the GPU
 * that keeps those arrays in registers instead of local memory. */
#if ZV_DEVICE_BUILD
#define ZV_BLOCK_TID ((zv_u64)threadIdx.x)
#define ZV_BLOCK_NTHREADS ((zv_u64)blockDim.x)
#define ZV_SYNC() __syncthreads()
#define ZV_UNROLL _Pragma("unroll")
#else
#define ZV_BLOCK_TID ((zv_u64)0)
#define ZV_BLOCK_NTHREADS ((zv_u64)1)
#define ZV_SYNC() ((void)0)
#define ZV_UNROLL _Pragma("GCC unroll 128")
#endif
/* Bounds checks (the analogue of libsecp256k1's VERIFY_CHECK).  Kernel headers state the
 * bounds of their limbs and intermediate values in comments and check them with
 * ZV_CHECK(cond).  In a host build with -DZV_VERIFY (hostbuild.py adds it when
 * ZAPVERIFY_KERNEL_VERIFY=1, as the test suite sets) a failed check is counted in
 * zv_verify_failures, which tests read after a run and require to be 0; in every other
 * build ZV_CHECK compiles to nothing, so the checks cost no instruction on the GPU. */
#if !ZV_DEVICE_BUILD && defined(ZV_VERIFY)
extern "C" __attribute__((visibility("default"))) zv_u64 zv_verify_failures;
zv_u64 zv_verify_failures = 0; /* one translation unit per host library */
#define ZV_CHECK(cond) do { if (!(cond)) __atomic_fetch_add(&zv_verify_failures, 1, __ATOMIC_RELAXED); } while (0)
#else
#define ZV_CHECK(cond) ((void)0)
#endif

#define ZV_BLOCK_FOR(i, n) for (zv_u64 i = ZV_BLOCK_TID; i < (zv_u64)(n); i += ZV_BLOCK_NTHREADS)

/* One block per item (a block shares one job, e.g. one SLH-DSA signature): the block walks
 * items blockIdx.x, + gridDim.x, ...; on the host the one "block" visits 0..n-1.  Block
 * state lives in ZV_SHARED variables (__shared__ on the GPU, a plain local on the host). */
#if ZV_DEVICE_BUILD
#define ZV_BLOCK_ID ((zv_u64)blockIdx.x)
#define ZV_NBLOCKS ((zv_u64)gridDim.x)
#define ZV_SHARED __shared__
#define ZV_NOINLINE __device__ __noinline__
#else
#define ZV_BLOCK_ID ((zv_u64)0)
#define ZV_NBLOCKS ((zv_u64)1)
#define ZV_SHARED
#define ZV_NOINLINE static __attribute__((noinline))
#endif
#define ZV_FOR_EACH_BLOCK(i, n) for (zv_u64 i = ZV_BLOCK_ID; i < (zv_u64)(n); i += ZV_NBLOCKS)

ZV_HD void zv_memcpy(zv_u8 *dst, const zv_u8 *src, zv_u64 n) {
    for (zv_u64 i = 0; i < n; i++) dst[i] = src[i];
}

ZV_HD void zv_memset(zv_u8 *dst, zv_u8 v, zv_u64 n) {
    for (zv_u64 i = 0; i < n; i++) dst[i] = v;
}

ZV_HD zv_u32 zv_load_be32(const zv_u8 *p) {
    return ((zv_u32)p[0] << 24) | ((zv_u32)p[1] << 16) | ((zv_u32)p[2] << 8) | (zv_u32)p[3];
}

ZV_HD void zv_store_be32(zv_u8 *p, zv_u32 v) {
    p[0] = (zv_u8)(v >> 24); p[1] = (zv_u8)(v >> 16); p[2] = (zv_u8)(v >> 8); p[3] = (zv_u8)v;
}

ZV_HD zv_u64 zv_load_be64(const zv_u8 *p) {
    return ((zv_u64)zv_load_be32(p) << 32) | zv_load_be32(p + 4);
}

ZV_HD void zv_store_be64(zv_u8 *p, zv_u64 v) {
    zv_store_be32(p, (zv_u32)(v >> 32)); zv_store_be32(p + 4, (zv_u32)v);
}

ZV_HD zv_u64 zv_load_le64(const zv_u8 *p) {
    zv_u64 v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

ZV_HD void zv_store_le64(zv_u8 *p, zv_u64 v) {
    for (int i = 0; i < 8; i++) { p[i] = (zv_u8)v; v >>= 8; }
}

#endif /* ZV_PORT_CUH */
