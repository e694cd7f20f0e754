"""CUDA C kernel sources shared by the host build and the GPU build (docs/kernels.md)."""
