"""Resident blocks per SM and the size of one full wave, from a kernel's registers and
shared memory (the occupancy rules of compute capability 9.0).

Used by the pipelined CUDA backend to size its chunks (at least one full wave of the GPU,
so no SM idles while a chunk runs) and by ``scripts/gpu_model`` for its prediction.

Limits per SM for sm_90 (CUDA C++ Programming Guide, "Compute Capabilities", table of
technical specifications): 65,536 32-bit registers allocated per warp in units of 256,
228 KiB of shared memory, at most 64 resident warps and 32 resident blocks.
"""

from __future__ import annotations

REGS_PER_SM = 65536
REG_ALLOC_UNIT = 256
MAX_WARPS_PER_SM = 64
MAX_BLOCKS_PER_SM = 32
SMEM_PER_SM = 228 * 1024


def blocks_per_sm(registers: int, block: int, smem_bytes: int = 0) -> int:
    """Blocks of ``block`` threads resident on one SM for a kernel using ``registers`` per
    thread and ``smem_bytes`` of shared memory per block (at least 1: a kernel that
    launches at all fits one block)."""
    warps = -(-max(1, block) // 32)
    regs_per_warp = -(-max(1, registers) * 32 // REG_ALLOC_UNIT) * REG_ALLOC_UNIT
    blocks = min(MAX_BLOCKS_PER_SM, REGS_PER_SM // (regs_per_warp * warps), MAX_WARPS_PER_SM // warps)
    if smem_bytes:
        blocks = min(blocks, SMEM_PER_SM // smem_bytes)
    return max(1, blocks)


def wave_items(multiprocessors: int, registers: int, block: int, smem_bytes: int = 0) -> int:
    """Items one full wave runs (one item per thread): every SM with its resident blocks."""
    return max(1, multiprocessors) * blocks_per_sm(registers, block, smem_bytes) * block
