/* zv_port.cuh — the portability layer every zapverify kernel header includes first.
 *
 * One source, two builds (docs/kernels.md, "Layout and names"):
 *   - GPU: NVRTC (cupy.RawModule) or `nvcc -arch=sm_90` (ZV_CUDA_COMPILER, ZV_DEVICE_BUILD below).
 *   - host: g++ into a shared library loaded by ctypes, so kernel logic is tested on
 *     machines without a GPU; a kernel then runs with one "thread" that walks every item,
 *     and a block kernel (ZV_BLOCK_RUN) with one fiber per thread of its block.
 *
 * Rules for code that includes this header:
 *   - fixed-width types only from here (NVRTC has no libc headers, so no <stdint.h>);
 *   - no host-only calls (malloc, printf, memcpy) in shared code: use zv_memcpy below;
 *   - block-cooperative loops are written ZV_FOR_EACH(i, n), which strides by the grid on
 *     the GPU and visits 0..n-1 once on the host;
 *   - entry points are ZV_KERNEL (extern "C": unmangled names for RawModule and ctypes);
 *   - shared functions are ZV_HD; a static member function (a modulus traits type of
 *     mont.cuh) is `static ZV_HD_MEMBER`, because ZV_HD is `static inline` on the host.
 *
 * Index (public functions, in source order; the comment at each says more):
 *   zv_load_item(dst, src, n)                   Copy n bytes (n a multiple of 16) of one item out of a
 *                                               column into a thread's own …
 *   zv_prefix_products(prefix, z, count)
 *   zv_unwind_inverses(z, prefix, count, inv)
 *   zv_batch_invert(z, prefix, count)
 *   zv_block_batch_invert(z, prefix, count, tops, tops_prefix)
 *   zv_shared_add_i32(p, v)                     *p += v by several threads of a block on one shared word
 *   zv_memcpy(dst, src, n)
 *   zv_memset(dst, v, n)
 *   zv_load_be32(p)
 *   zv_store_be32(p, v)
 *   zv_load_be64(p)
 *   zv_store_be64(p, v)
 *   zv_load_le64(p)
 *   zv_store_le64(p, v)
 */
#ifndef ZV_PORT_CUH
#define ZV_PORT_CUH

typedef unsigned char zv_u8;
typedef unsigned short zv_u16;
typedef unsigned int zv_u32;
typedef unsigned long long zv_u64;
typedef signed int zv_i32;
typedef signed long long zv_i64;

/* Two questions, two macros.  ZV_CUDA_COMPILER: a CUDA compiler reads this file (nvcc's
 * host and device passes, NVRTC), so functions carry __host__/__device__/__global__ and
 * their attributes.  ZV_DEVICE_BUILD: device code is being generated (nvcc's device pass,
 * NVRTC: __CUDA_ARCH__), so threads, barriers, shared and constant memory and the device
 * intrinsics exist.  nvcc's host pass has the first without the second: there a ZV_HD body
 * is host code and takes the host branches, so a kernel source compiles in one nvcc file
 * with host code (a harness) as well as alone. */
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define ZV_CUDA_COMPILER 1
#else
#define ZV_CUDA_COMPILER 0
#endif
#if defined(__CUDA_ARCH__)
#define ZV_DEVICE_BUILD 1
#else
#define ZV_DEVICE_BUILD 0
#endif

#if ZV_CUDA_COMPILER
#define ZV_HD __host__ __device__ __forceinline__
#define ZV_HD_MEMBER __host__ __device__ __forceinline__
#define ZV_KERNEL extern "C" __global__
#else
#define ZV_HD static inline
#define ZV_HD_MEMBER inline
#define ZV_KERNEL extern "C" __attribute__((visibility("default")))
#endif
#if ZV_DEVICE_BUILD
#define ZV_CONSTANT __constant__
#define ZV_TID ((zv_u64)blockIdx.x * blockDim.x + threadIdx.x)
#define ZV_NTHREADS ((zv_u64)gridDim.x * blockDim.x)
#else
#define ZV_CONSTANT static const
#define ZV_TID ((zv_u64)0)
#define ZV_NTHREADS ((zv_u64)1)
#endif
#define ZV_RESTRICT __restrict__

/* Grid-stride loop: every item once, whatever the launch shape (one thread on the host). */
#define ZV_FOR_EACH(i, n) for (zv_u64 i = ZV_TID; i < (zv_u64)(n); i += ZV_NTHREADS)

/* Block-cooperative work (one block shares a job, e.g. the top of a Merkle tree): the
 * block's threads split a loop with ZV_BLOCK_FOR and meet at ZV_SYNC between phases.
 * ZV_SYNC_WARP is the barrier of one warp (ZV_WARP_SIZE threads: __syncwarp), called by
 * every thread of that warp: for work one warp does alone while the others wait at the
 * next ZV_SYNC (the ML-DSA block kernel's sponge), its steps need not stop the block.
 * On the host, outside ZV_BLOCK_RUN, the "block" is one thread, so the loop visits every
 * index and the barrier returns at once — the phases still run in order, which is all the
 * barrier guarantees; inside ZV_BLOCK_RUN each thread is a fiber and the barrier is real.
 * ZV_UNROLL before a fixed-count loop lets both compilers unroll it, which turns ring and
 * lane indices (SHA-2's message schedule, Keccak's ρ/π walk) into constants: on the GPU
 * that keeps those arrays in registers instead of local memory.  ZV_UNROLL is the only
 * unroll spelling in kernel sources (no bare #pragma unroll), so both builds agree.
 * ZV_NOINLINE keeps a large routine out of line on the GPU, where inlining every call
 * site would multiply the code size (instruction-cache misses) for no register gain. */
#define ZV_WARP_SIZE 32
#if ZV_DEVICE_BUILD
#define ZV_BLOCK_TID ((zv_u64)threadIdx.x)
#define ZV_BLOCK_NTHREADS ((zv_u64)blockDim.x)
#define ZV_SYNC() __syncthreads()
#define ZV_SYNC_WARP() __syncwarp()
#elif !ZV_CUDA_COMPILER
/* The host build's block (ZV_BLOCK_RUN below): the fiber running and the block's size;
 * outside a ZV_BLOCK_RUN a kernel is one thread of a one-thread block. */
static thread_local zv_u32 zv_host_tid = 0;
static thread_local zv_u32 zv_host_nthreads = 1;
static void zv_host_sync(int warp);
#define ZV_BLOCK_TID ((zv_u64)zv_host_tid)
#define ZV_BLOCK_NTHREADS ((zv_u64)zv_host_nthreads)
#define ZV_SYNC() zv_host_sync(0)
#define ZV_SYNC_WARP() zv_host_sync(1)
#else /* nvcc's host pass: host code of a harness, one thread */
#define ZV_BLOCK_TID ((zv_u64)0)
#define ZV_BLOCK_NTHREADS ((zv_u64)1)
#define ZV_SYNC() ((void)0)
#define ZV_SYNC_WARP() ((void)0)
#endif
#if ZV_CUDA_COMPILER  /* nvcc's front end reads `unroll` in both passes; g++ has its own spelling */
#define ZV_UNROLL _Pragma("unroll")
#define ZV_NOINLINE __host__ __device__ __noinline__
#else
#define ZV_UNROLL _Pragma("GCC unroll 128")
#define ZV_NOINLINE static
#endif
/* ZV_NO_UNROLL before a loop keeps nvcc from unrolling it (which it does by default to a
 * loop with a constant trip count).  For loops that walk per-thread arrays in local memory
 * (ML-DSA's NTT layers) full unrolling buys no register-resident data, only code size and
 * register pressure.  The host compiler is left to decide. */
#if ZV_CUDA_COMPILER
#define ZV_NO_UNROLL _Pragma("unroll 1")
#else
#define ZV_NO_UNROLL
#endif
/* Bounds checks (the analogue of libsecp256k1's VERIFY_CHECK).  Kernel headers state the
 * bounds of their limbs and intermediate values in comments and check them with
 * ZV_CHECK(cond).  In a host build with -DZV_VERIFY (hostbuild.py adds it when
 * ZAPVERIFY_KERNEL_VERIFY=1, as the test suite sets) a failed check is counted in
 * zv_verify_failures, which tests read after a run and require to be 0; in every other
 * build ZV_CHECK compiles to nothing, so the checks cost no instruction on the GPU. */
#if !ZV_CUDA_COMPILER && defined(ZV_VERIFY)
extern "C" __attribute__((visibility("default"))) zv_u64 zv_verify_failures;
zv_u64 zv_verify_failures = 0; /* one translation unit per host library */
#define ZV_CHECK(cond) do { if (!(cond)) __atomic_fetch_add(&zv_verify_failures, 1, __ATOMIC_RELAXED); } while (0)
#else
#define ZV_CHECK(cond) ((void)0)
#endif

/* Operation counts, for the performance model (scripts/gpu_model): the primitives below
 * call ZV_COUNT(ZV_OP_...) once per call.  In a host build with -DZV_COUNT_OPS the counts
 * add up in zv_op_counts (the model divides them by the items run and multiplies by each
 * primitive's SASS instructions); in every other build ZV_COUNT compiles to nothing.
 * A new family adds its primitives to the end of this list. */
enum {
    ZV_OP_FE25519_MUL, ZV_OP_FE25519_SQ, ZV_OP_FE25519_ADD, ZV_OP_FE25519_SUB,
    ZV_OP_K1_FE_MUL, ZV_OP_K1_FE_SQR, ZV_OP_K1_FE_ADD, ZV_OP_K1_FE_SUB, ZV_OP_K1_FE_MUL_INT,
    ZV_OP_K1_SC_MONT_MUL,
    ZV_OP_SHA256_BLOCK, ZV_OP_SHA512_BLOCK, ZV_OP_KECCAK_F1600,
    /* BLS12-381 (issue 40's work measure): every Fp product or square; Miller loops, the
     * pairs they carry, final exponentiations; and the Fp products spent inside Miller
     * loops and final exponentiations (bls12_381_pairing.cuh). */
    ZV_OP_BLS_FP_MUL, ZV_OP_BLS_MILLER_LOOP, ZV_OP_BLS_MILLER_PAIR, ZV_OP_BLS_FINAL_EXP, ZV_OP_BLS_PAIRING_FP_MUL,
    /* P-256 ECDSA: field products, squares, sums and differences (negations count as
     * differences), Montgomery products mod n. */
    ZV_OP_P256_FE_MUL, ZV_OP_P256_FE_SQR, ZV_OP_P256_FE_ADD, ZV_OP_P256_FE_SUB, ZV_OP_P256_SC_MONT_MUL,
    ZV_OP_COUNT
};
/* ZV_SERIAL(stmt): stmt is run by one lane of a warp while the others wait (the middle of
 * a block's batched inversion).  Its operations are counted apart (the second half of
 * zv_op_counts): on the GPU each costs a whole warp instruction for one lane. */
#if !ZV_CUDA_COMPILER && defined(ZV_COUNT_OPS)
extern "C" __attribute__((visibility("default"))) zv_u64 zv_op_counts[2 * ZV_OP_COUNT];
zv_u64 zv_op_counts[2 * ZV_OP_COUNT] = {0}; /* one translation unit per host library */
static int zv_count_serial = 0;
#define ZV_COUNT(op) ((void)(zv_op_counts[(op) + (zv_count_serial ? ZV_OP_COUNT : 0)]++))
#define ZV_SERIAL(stmt) do { zv_count_serial = 1; stmt; zv_count_serial = 0; } while (0)
#else
#define ZV_COUNT(op) ((void)0)
#define ZV_SERIAL(stmt) do { stmt; } while (0)
#endif

#define ZV_BLOCK_FOR(i, n) for (zv_u64 i = ZV_BLOCK_TID; i < (zv_u64)(n); i += ZV_BLOCK_NTHREADS)

/* ZV_BLOCK_RUN(lanes, stmt): a block kernel's body, run by every thread of its block.  On
 * the GPU it is stmt itself (the launch made the block: `lanes` threads per item,
 * registry.VerifyKernel.lanes).  In the host build the block is emulated with real
 * concurrency semantics (docs/kernels.md, "How the host build runs a block"): `lanes`
 * fibers, each with its own stack and ZV_BLOCK_TID, all running stmt on one OS
 * thread; ZV_SYNC() is a real barrier — a fiber reaching it switches out, and the scheduler
 * resumes the fibers in order, round by round, so every fiber has reached the barrier (or
 * ended) before any passes it.  ZV_SYNC_WARP() is a real barrier of the fiber's warp: a
 * round runs warp by warp, and within a warp the scheduler resumes its fibers in order
 * until all of them have reached a ZV_SYNC (or ended), so the fibers of a warp pass each
 * warp barrier together while the other warps' fibers are not resumed at all — which is
 * what makes a warp's sponge cheap here: 32 switches per step, not the block's 128.  Variables declared before ZV_BLOCK_RUN in the entry point
 * (ZV_SHARED, captured by reference) are the block's shared memory: one copy per launch,
 * seen by every fiber.  Because a fiber runs alone from one barrier to the next, fiber 0
 * runs a whole phase before fiber 1 starts it: a missing barrier makes a fiber read what
 * the others have not yet written, deterministically, so it changes the result here as it
 * may on the GPU.  A barrier reached by some fibers of a round while others have ended,
 * or a warp barrier reached by some fibers of a warp while the others are at a block
 * barrier or ended (divergent barriers, undefined on the GPU), fails a ZV_CHECK. */
#if ZV_CUDA_COMPILER
#define ZV_BLOCK_RUN(lanes, stmt) do { stmt; } while (0)
#else
/* ucontext.h, setjmp.h and stdlib.h come from the host build's command line
 * (hostbuild.CXXFLAGS, -include): kernel sources never name a system header, since NVRTC
 * has none. */
#define ZV_HOST_FIBER_STACK (256u << 10) /* bytes per emulated thread (untouched pages cost nothing) */
/* A fiber starts once through setcontext (makecontext's entry, on its own stack); every later
 * switch, both ways, is _setjmp/_longjmp, which saves and restores only the callee-saved
 * registers and the stack pointer — no signal-mask system call, unlike swapcontext — so a
 * barrier of 128 fibers costs microseconds.  A fiber never returns from its entry function:
 * it jumps back to the scheduler when its body ends. */
struct zv_host_block {
    jmp_buf sched;           /* the scheduler, to which a fiber yields */
    jmp_buf *resume;         /* fiber i, suspended at a barrier */
    ucontext_t *start;       /* fiber i's first entry */
    zv_u8 *done;             /* fiber i has finished its body */
    zv_u8 *started;
    zv_u8 *at_warp;          /* fiber i is suspended at a warp barrier (else at a block barrier) */
    void (*call)(void *);
    void *body;
};
static thread_local zv_host_block *zv_host_blk = 0;

/* Out of line, so that only this function is compiled for _setjmp's second return. */
__attribute__((noinline)) static void zv_host_sync(int warp) {
    zv_host_block *b = zv_host_blk;
    if (!b) return;
    b->at_warp[zv_host_tid] = (zv_u8)warp;
    if (!_setjmp(b->resume[zv_host_tid])) _longjmp(b->sched, 1);
}

static void zv_host_fiber_main() {
    zv_host_block *b = zv_host_blk;
    b->call(b->body);
    b->done[zv_host_tid] = 1;
    _longjmp(b->sched, 1);
}

template <class F> static void zv_host_call(void *f) { (*(F *)f)(); }

/* Resume fiber i until its next barrier or its end. */
__attribute__((noinline)) static void zv_host_resume(zv_host_block *b, zv_u32 i) {
    if (_setjmp(b->sched)) return;
    if (b->started[i]) _longjmp(b->resume[i], 1);
    b->started[i] = 1;
    setcontext(&b->start[i]);
}

template <class F> static void zv_host_block_run(zv_u32 lanes, F body) {
    zv_host_block b;
    b.call = &zv_host_call<F>;
    b.body = &body;
    b.resume = (jmp_buf *)calloc(lanes, sizeof(jmp_buf));
    b.start = (ucontext_t *)calloc(lanes, sizeof(ucontext_t));
    b.done = (zv_u8 *)calloc(lanes, 1);
    b.started = (zv_u8 *)calloc(lanes, 1);
    b.at_warp = (zv_u8 *)calloc(lanes, 1);
    zv_u8 *stacks = (zv_u8 *)malloc((zv_u64)lanes * ZV_HOST_FIBER_STACK);
    if (!b.resume || !b.start || !b.done || !b.started || !b.at_warp || !stacks) abort(); /* out of memory */
    for (zv_u32 i = 0; i < lanes; i++) {
        getcontext(&b.start[i]);
        b.start[i].uc_stack.ss_sp = stacks + (zv_u64)i * ZV_HOST_FIBER_STACK;
        b.start[i].uc_stack.ss_size = ZV_HOST_FIBER_STACK;
        b.start[i].uc_link = 0; /* never returns (zv_host_fiber_main) */
        makecontext(&b.start[i], zv_host_fiber_main, 0);
    }
    zv_host_block *outer = zv_host_blk;
    zv_u32 outer_tid = zv_host_tid, outer_n = zv_host_nthreads;
    zv_host_blk = &b;
    zv_host_nthreads = lanes;
    for (zv_u32 live = lanes; live > 0;) {
        zv_u32 ended = 0;
        for (zv_u32 w = 0; w < lanes; w += ZV_WARP_SIZE) {
            const zv_u32 end = w + ZV_WARP_SIZE < lanes ? w + ZV_WARP_SIZE : lanes;
            /* The warp's fibers to the next block barrier: while any stops at a warp
             * barrier, resume those (and only those) again. */
            for (int first = 1;; first = 0) {
                zv_u32 at_warp = 0, other = 0;
                for (zv_u32 i = w; i < end; i++) {
                    if (b.done[i] || (!first && !b.at_warp[i])) continue;
                    zv_host_tid = i;
                    zv_host_resume(&b, i);
                    if (b.done[i]) ended++;
                    if (!b.done[i] && b.at_warp[i]) at_warp++;
                    else other++;
                }
                if (!at_warp) break;
                ZV_CHECK(other == 0); /* a warp barrier that some of the warp's fibers skip */
            }
        }
        ZV_CHECK(ended == 0 || ended == live); /* all fibers end in the same phase */
        live -= ended;
    }
    zv_host_blk = outer;
    zv_host_tid = outer_tid;
    zv_host_nthreads = outer_n;
    free(stacks);
    free(b.at_warp);
    free(b.started);
    free(b.done);
    free(b.start);
    free(b.resume);
}
#define ZV_BLOCK_RUN(lanes, stmt) zv_host_block_run((zv_u32)(lanes), [&]() { stmt; })
#endif

/* One block per item (a block shares one job, e.g. one SLH-DSA signature): the block walks
 * items blockIdx.x, + gridDim.x, ...; on the host the one "block" visits 0..n-1.  Block
 * state lives in ZV_SHARED variables (below). */
#if ZV_DEVICE_BUILD
#define ZV_BLOCK_ID ((zv_u64)blockIdx.x)
#define ZV_NBLOCKS ((zv_u64)gridDim.x)
#else
#define ZV_BLOCK_ID ((zv_u64)0)
#define ZV_NBLOCKS ((zv_u64)1)
#endif
#define ZV_FOR_EACH_BLOCK(i, n) for (zv_u64 i = ZV_BLOCK_ID; i < (zv_u64)(n); i += ZV_NBLOCKS)

/* Memory spaces.
 *   ZV_CONSTANT  constant memory: for values every lane of a warp reads at the same index
 *                (curve constants, round constants); the constant cache serves one address
 *                per cycle, so lanes reading different entries are serialised.
 *   ZV_TABLE     read-only global memory: for precomputed tables that lanes index by their
 *                own data (window digits); served by L1/L2 like any load, one request per
 *                distinct 32-byte sector instead of one per distinct address.
 *   ZV_SHARED    block-shared memory; for state a whole block works on between ZV_SYNC
 *                barriers.  On the host a local of the entry point: one copy per launch,
 *                shared by the fibers of ZV_BLOCK_RUN (per-call stack arrays for a kernel
 *                whose block is one thread). */
#if ZV_DEVICE_BUILD
#define ZV_TABLE __device__ const
#define ZV_SHARED __shared__
#else
#define ZV_TABLE static const
#define ZV_SHARED
#endif

/* Chunked block work: items taken ZV_CHUNK items at a time, so a block can share work
 * across its chunk (a batched inversion) between ZV_SYNC barriers.  On the GPU each block
 * takes chunks grid-stride (every thread of a block runs the same number of iterations, so
 * barriers inside are safe) and splits a chunk with ZV_BLOCK_FOR; on the host the single
 * thread walks every chunk and every item in it.  State kept from one phase of a chunk to
 * the next lives in ZV_SHARED arrays indexed by the item's place in the chunk, so the
 * result does not depend on the block size a launch used. */
#if ZV_DEVICE_BUILD
#define ZV_CHUNK_FOR(base, n, chunk) \
    for (zv_u64 base = (zv_u64)blockIdx.x * (chunk); base < (zv_u64)(n); base += (zv_u64)gridDim.x * (chunk))
#else
#define ZV_CHUNK_FOR(base, n, chunk) for (zv_u64 base = 0; base < (zv_u64)(n); base += (chunk))
#endif

/* Copy n bytes (n a multiple of 16) of one item out of a column into a thread's own
 * 16-byte-aligned buffer.  On the GPU, when the source is 16-byte aligned (device columns
 * are; an item of 32 or 64 bytes at i·len keeps that), each 16 bytes is one vector load
 * (LDG.E.128), so the lanes of a warp read their consecutive items as whole sectors
 * instead of one byte per instruction; otherwise, and on the host, byte by byte. */
ZV_HD void zv_load_item(zv_u8 *ZV_RESTRICT dst, const zv_u8 *ZV_RESTRICT src, zv_u32 n) {
#if ZV_DEVICE_BUILD
    if ((((zv_u64)src) & 15u) == 0) {
        for (zv_u32 k = 0; k < n; k += 16)
            *(uint4 *)(dst + k) = __ldg((const uint4 *)(src + k));
        return;
    }
#endif
    for (zv_u32 k = 0; k < n; k++) dst[k] = src[k];
}

/* Montgomery's trick (batched inversion), for any field type T with a product MUL and an
 * inversion INV (r may alias a in both).  Every value must be invertible: a zero would
 * zero every result, so callers substitute 1 for an item they drop.
 *
 * zv_batch_invert: z[i] = 1/z[i] for i < count, serially, with one INV and 3 (count - 1)
 * products; prefix[0..count) is scratch.
 *
 * zv_block_batch_invert: the same over a block's chunk of count <= 32 * run values, shared
 * by the 32 lanes of the block's first warp: lane L takes values [L run, (L + 1) run),
 * forms their prefix products in parallel, lane 0 inverts the (at most 32) run products by
 * zv_batch_invert, and each lane unwinds its run.  The one-lane middle costs ~93 products
 * and one INV per chunk; the rest is about 3 products per value spread over 32 lanes.
 * Called by every thread of the block between ZV_SYNC barriers (threads past the first
 * warp return at once); tops and tops_prefix hold 32 values.  On the host the lanes run
 * one after another. */
#define ZV_BATCH_LANES 32

template <typename T, void (*MUL)(T *, const T *, const T *)>
ZV_HD void zv_prefix_products(T *prefix, const T *z, int count) {
    prefix[0] = z[0];
    for (int i = 1; i < count; i++) MUL(&prefix[i], &prefix[i - 1], &z[i]);
}

/* Given inv = 1/(z[0] ... z[count-1]) and the prefix products, z[i] = 1/z[i]. */
template <typename T, void (*MUL)(T *, const T *, const T *)>
ZV_HD void zv_unwind_inverses(T *z, const T *prefix, int count, T inv) {
    for (int i = count - 1; i > 0; i--) {
        T t;
        MUL(&t, &inv, &prefix[i - 1]);  /* 1/z[i] */
        MUL(&inv, &inv, &z[i]);          /* 1/(z[0] .. z[i-1]) */
        z[i] = t;
    }
    z[0] = inv;
}

template <typename T, void (*MUL)(T *, const T *, const T *), void (*INV)(T *, const T *)>
ZV_HD void zv_batch_invert(T *z, T *prefix, int count) {
    if (count <= 0) return;
    zv_prefix_products<T, MUL>(prefix, z, count);
    T inv;
    INV(&inv, &prefix[count - 1]);
    zv_unwind_inverses<T, MUL>(z, prefix, count, inv);
}

template <typename T, void (*MUL)(T *, const T *, const T *), void (*INV)(T *, const T *)>
ZV_HD void zv_block_batch_invert(T *z, T *prefix, int count, T *tops, T *tops_prefix) {
    if (count <= 0) return;
    int run = (count + ZV_BATCH_LANES - 1) / ZV_BATCH_LANES;
    int runs = (count + run - 1) / run;
#if ZV_DEVICE_BUILD
    int lane = (int)threadIdx.x;
    if (lane >= ZV_BATCH_LANES) return;
    int lo = lane * run, len = lane < runs ? (count - lo < run ? count - lo : run) : 0;
    if (len > 0) {
        zv_prefix_products<T, MUL>(prefix + lo, z + lo, len);
        tops[lane] = prefix[lo + len - 1];
    }
    __syncwarp();
    if (lane == 0) zv_batch_invert<T, MUL, INV>(tops, tops_prefix, runs);
    __syncwarp();
    if (len > 0) zv_unwind_inverses<T, MUL>(z + lo, prefix + lo, len, tops[lane]);
#else
    for (int lane = 0; lane < runs; lane++) {
        int lo = lane * run, len = count - lo < run ? count - lo : run;
        zv_prefix_products<T, MUL>(prefix + lo, z + lo, len);
        tops[lane] = prefix[lo + len - 1];
    }
    ZV_SERIAL((zv_batch_invert<T, MUL, INV>(tops, tops_prefix, runs)));
    for (int lane = 0; lane < runs; lane++) {
        int lo = lane * run, len = count - lo < run ? count - lo : run;
        zv_unwind_inverses<T, MUL>(z + lo, prefix + lo, len, tops[lane]);
    }
#endif
}

/* *p += v by several threads of a block on one shared word: atomicAdd on the GPU; in the
 * host build the fibers of a block never interleave between barriers, so a plain add. */
ZV_HD void zv_shared_add_i32(zv_i32 *p, zv_i32 v) {
#if ZV_DEVICE_BUILD
    atomicAdd(p, v);
#else
    *p += v;
#endif
}

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
