// Runtime-API harness that replays a recorded list of launches under GPGPU-Sim
// (scripts/lib/gpusim/device.py writes the list; docs/kernels.md "Device code without a GPU").
//
// The kernels here are empty stubs that only give each launch a name: the module that runs
// is the PTX named by ZVSIM_PTX (the service's own NVRTC output), which the simulator's
// cuobjdump shim hands over in place of this file's.  The simulator sizes every parameter
// from that PTX's .entry, so the stubs take none; argument storage is passed as is.
//
// usage: harness PROGRAM OUTPUT
// PROGRAM (little-endian): "ZVSIMP01", u32 buffers, then per buffer u64 bytes, u8 filled,
// [bytes if filled]; u32 launches, then per launch u32 entry (index into ZV_ENTRIES),
// u32 grid, u32 block, u32 args, then per argument u8 kind (0 buffer index, 1 u32, 2 u64)
// and u64 value.  OUTPUT gets every buffer's final bytes, in order, back to back.
// Stdout: one "ZVSIM launch <i> <entry> <grid>x<block> <seconds>" line per launch.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>

#define ZV_ENTRY(name) extern "C" __global__ void name() {}
#include "entries.h"
#undef ZV_ENTRY
#define ZV_ENTRY(name) {#name, (const void *)name},
static const struct { const char *name; const void *fn; } ZV_ENTRIES[] = {
#include "entries.h"
};
#undef ZV_ENTRY

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "ZVSIM error: %s -> %s\n", #x, cudaGetErrorString(e_)); exit(2); } } while (0)

struct Reader {
  const uint8_t *p, *end;
  void take(void *dst, size_t n) {
    if ((size_t)(end - p) < n) { fprintf(stderr, "ZVSIM error: program truncated\n"); exit(2); }
    memcpy(dst, p, n); p += n;
  }
  template <class T> T get() { T v; take(&v, sizeof v); return v; }
};

int main(int argc, char **argv) {
  if (argc != 3) { fprintf(stderr, "usage: %s PROGRAM OUTPUT\n", argv[0]); return 2; }
  FILE *f = fopen(argv[1], "rb");
  if (!f) { perror(argv[1]); return 2; }
  std::vector<uint8_t> raw;
  uint8_t chunk[1 << 16];
  for (size_t got; (got = fread(chunk, 1, sizeof chunk, f)) > 0;) raw.insert(raw.end(), chunk, chunk + got);
  fclose(f);
  Reader r{raw.data(), raw.data() + raw.size()};
  char magic[8];
  r.take(magic, 8);
  if (memcmp(magic, "ZVSIMP01", 8) != 0) { fprintf(stderr, "ZVSIM error: not a program\n"); return 2; }

  uint32_t nbuf = r.get<uint32_t>();
  std::vector<void *> bufs(nbuf);
  std::vector<uint64_t> sizes(nbuf);
  for (uint32_t i = 0; i < nbuf; i++) {
    sizes[i] = r.get<uint64_t>();
    CK(cudaMalloc(&bufs[i], sizes[i] ? sizes[i] : 1));
    if (r.get<uint8_t>()) {
      if ((size_t)(r.end - r.p) < sizes[i]) { fprintf(stderr, "ZVSIM error: program truncated\n"); return 2; }
      CK(cudaMemcpy(bufs[i], r.p, sizes[i], cudaMemcpyHostToDevice));
      r.p += sizes[i];
    }
  }
  const uint32_t nentries = sizeof ZV_ENTRIES / sizeof ZV_ENTRIES[0];
  uint32_t nlaunch = r.get<uint32_t>();
  for (uint32_t l = 0; l < nlaunch; l++) {
    uint32_t entry = r.get<uint32_t>(), grid = r.get<uint32_t>(), block = r.get<uint32_t>(), nargs = r.get<uint32_t>();
    if (entry >= nentries) { fprintf(stderr, "ZVSIM error: entry %u of %u\n", entry, nentries); return 2; }
    std::vector<uint64_t> store(nargs);  // every argument's bytes, 8-aligned; a u32 reads its low half
    std::vector<void *> args(nargs);
    for (uint32_t a = 0; a < nargs; a++) {
      uint8_t kind = r.get<uint8_t>();
      uint64_t value = r.get<uint64_t>();
      if (kind == 0) {
        if (value >= nbuf) { fprintf(stderr, "ZVSIM error: buffer %llu of %u\n", (unsigned long long)value, nbuf); return 2; }
        memcpy(&store[a], &bufs[value], sizeof(void *));
      } else if (kind == 1) {
        uint32_t v32 = (uint32_t)value;
        memcpy(&store[a], &v32, 4);
      } else {
        store[a] = value;
      }
      args[a] = &store[a];
    }
    auto t0 = std::chrono::steady_clock::now();
    // The simulator's cudaLaunchKernel takes the launch shape from the configuration stack,
    // as a <<<>>> launch leaves it (CUDA >= 10); a direct call must push it first.
    __cudaPushCallConfiguration(dim3(grid), dim3(block), 0, 0);
    CK(cudaLaunchKernel(ZV_ENTRIES[entry].fn, dim3(grid), dim3(block), args.data(), 0, 0));
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    printf("ZVSIM launch %u %s %ux%u %.3f\n", l, ZV_ENTRIES[entry].name, grid, block, s);
    fflush(stdout);
  }
  FILE *out = fopen(argv[2], "wb");
  if (!out) { perror(argv[2]); return 2; }
  std::vector<uint8_t> host;
  for (uint32_t i = 0; i < nbuf; i++) {
    host.resize(sizes[i]);
    if (sizes[i]) CK(cudaMemcpy(host.data(), bufs[i], sizes[i], cudaMemcpyDeviceToHost));
    if (fwrite(host.data(), 1, sizes[i], out) != sizes[i]) { perror(argv[2]); return 2; }
  }
  fclose(out);
  return 0;
}
