"""GPGPU-Sim runs of the kernels' shipped PTX on a CPU (scripts/gpusim, docs/kernels.md "Device code without a GPU")."""
