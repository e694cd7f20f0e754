"""The drivers of the kernels in app/engine/kernels/: build them (nvcc, NVRTC, or g++ for the
host build that stands in for a device), load them, launch them and pipeline batches
through them (docs/kernels.md)."""
