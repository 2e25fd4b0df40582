"""Normal operators ``A^H W A + lam I`` by Toeplitz embedding (:mod:`.toeplitz`) and the fused CG-SENSE form on
the GPU (:mod:`.gpu_toeplitz`). The engines build them (``Encoding.normal``); :func:`.toeplitz.normal_operator`
builds one from a kernel spectrum of either array type."""
