"""CUDA C kernel sources shared by the host build and the GPU build (DESIGN.md section 6)."""
