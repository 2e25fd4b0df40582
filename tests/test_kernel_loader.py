"""The kernel loader: constant-memory uploads check capacity against the symbol's real size."""

from __future__ import annotations

import numpy as np
import pytest

from mri_recon.arrays.backend import cupy_module
from mri_recon.errors import KernelError
from mri_recon.kernels import compile_ptx, kernel_files, options, source, symbol_bytes, upload_constant


def test_options_are_sorted_defines():
    assert options({"B": 2, "A": 1}) == ("--std=c++17", "-DA=1", "-DB=2")


def test_missing_source_is_a_clear_error():
    with pytest.raises(KernelError, match="kernel source 'nope.cu' not found"):
        source("nope.cu")


def test_every_kernel_file_is_shipped():
    assert {p.name for p in kernel_files()} >= {"fhd.cu", "convolution.cu"}


def test_compile_error_reports_the_log():
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    source.cache_clear()
    try:
        # Compile a file with a define that breaks an array size, to see NVRTC's message come through.
        with pytest.raises(KernelError, match="failed to compile"):
            compile_ptx("convolution.cu", {"RX": -100})
    finally:
        source.cache_clear()


@pytest.mark.gpu
def test_upload_checks_the_symbol_size():
    cupy = cupy_module()
    module = cupy.RawModule(code="""
        __constant__ float c_test[16];
        extern "C" __global__ void mri_recon_copy_test(float* out) { out[threadIdx.x] = c_test[threadIdx.x]; }
    """)
    kernel = module.get_function("mri_recon_copy_test")
    assert symbol_bytes(module, "c_test") == 64
    data = np.arange(16, dtype=np.float32)
    upload_constant(module, "c_test", data)
    out = cupy.full(16, np.nan, dtype=cupy.float32)
    kernel((1,), (16,), (out,))
    np.testing.assert_array_equal(cupy.asnumpy(out), data)
    upload_constant(module, "c_test", cupy.asarray(data[::-1].copy()))
    kernel((1,), (16,), (out,))
    np.testing.assert_array_equal(cupy.asnumpy(out), data[::-1])
    with pytest.raises(KernelError, match="needs 68 bytes but the symbol holds 64"):
        upload_constant(module, "c_test", np.zeros(17, np.float32))


@pytest.fixture
def fake_builds(monkeypatch):
    """Replace the NVRTC build by a slow fake that counts its calls (no GPU needed)."""
    import threading
    import time

    import mri_recon.kernels as kernels

    calls: list[tuple] = []
    lock = threading.Lock()

    def build(filename, frozen, index):
        with lock:
            calls.append((filename, frozen, index))
        time.sleep(0.05)
        if dict(frozen).get("FAIL"):
            raise KernelError(f"CUDA kernel {filename} failed to compile: fake")
        return object()

    monkeypatch.setattr(kernels, "_build", build)
    monkeypatch.setattr(kernels, "_BUILT", {})
    return calls


def test_prefetch_builds_each_module_once_and_use_waits_for_it(fake_builds):
    import mri_recon.kernels as kernels

    configs = [("a.cu", {"N": n}) for n in range(6)]
    futures = kernels.prefetch(configs + configs)  # asked twice: still one build each
    module = kernels.get_module("a.cu", {"N": 3})  # waits for the prefetch's build, starts none
    assert module is futures[3].result()
    assert all(f.result() is futures[i % 6].result() for i, f in enumerate(futures))
    assert sorted(c[1][0][1] for c in fake_builds) == list(range(6))


def test_a_failed_build_is_reported_to_its_user_and_retried(fake_builds):
    import mri_recon.kernels as kernels

    (future,) = kernels.prefetch([("b.cu", {"FAIL": 1})])
    with pytest.raises(KernelError, match="b.cu failed to compile"):
        future.result()
    with pytest.raises(KernelError, match="b.cu failed to compile"):
        kernels.get_module("b.cu", {"FAIL": 1})
    assert len(fake_builds) == 2
