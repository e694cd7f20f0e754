"""Code shared by the scripts: kernel sources and NVIDIA's tools (``kernels``), the per-scheme
parts of ``scripts/agreement`` (``agreement/``) and the methods of ``scripts/gpu_model``
(``gpu_model/``)."""
