"""Why the copies up inside the whole call are slower than alone (issue 46's 512^2 32-coil scan).

On the scan of ``bench_coil_compress.gpu_scan`` (k-space ``(32, 823296)`` complex64, 201 MiB), in one process:
the staged copy up of the scan's k-space alone; the same right after a BLAS call of the preparation (the noise
whitening, :func:`mri_recon.prep.device.whitening_of`), with BLAS's threads as they are and limited to one for that
call (OpenBLAS's idle threads wait by spinning for a while after a call, on the cores the copy's threads need);
the compression matrix's steps (:func:`mri_recon.prep.compress.centre_energies`: the centre's selection, gather,
Gram matrix and ``eigh``) with BLAS's threads as they are, one and four; the whole call uncompressed and
compressed to 8 coils in three variants (:func:`whole_calls`), and the README's 2D call in two
(:func:`readme_calls`). Medians of ``--repeats`` (device synchronized), ms, written as JSON.

Usage: python scripts/probe_upload.py OUT.json [--repeats 7]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
from bench_coil_compress import gpu_scan  # noqa: E402

import mri_recon  # noqa: E402
from mri_recon.arrays import staging  # noqa: E402
from mri_recon.arrays.backend import cupy_module, resolve_device, synchronize  # noqa: E402
from mri_recon.prep import device as device_prep  # noqa: E402
from mri_recon.prep.compress import centre_samples  # noqa: E402


def median_ms(fn, repeats: int, sync) -> float:
    fn()
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


@contextlib.contextmanager
def blas_threads(count: int | None):
    if count is None:
        yield
        return
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=count, user_api="blas"):
        yield


def copies(scan, cupy, repeats: int, sync) -> dict:
    out = cupy.empty(scan.kspace.shape, scan.kspace.dtype)

    def copy():
        staging.copy_up(cupy, scan.kspace, out, 0)

    def after_blas(count):
        def run():
            with blas_threads(count):
                device_prep.whitening_of(scan)
            copy()
        return run

    return {"threads": staging.THREADS, "copy_alone": median_ms(copy, repeats, sync),
            "whitening_alone": median_ms(lambda: device_prep.whitening_of(scan), repeats, sync),
            "whitening_then_copy": median_ms(after_blas(None), repeats, sync),
            "whitening_one_thread_then_copy": median_ms(after_blas(1), repeats, sync)}


def matrix_steps(scan, repeats: int) -> dict:
    w, _, _ = device_prep.whitening_of(scan)
    rows = {}
    for count in (None, 1, 4):
        with blas_threads(count):
            index = centre_samples(scan.trajectory, scan.n_coils)
            centre = scan.kspace[:, index].astype(np.complex128)
            rows[str(count or "default")] = {
                "select": median_ms(lambda: centre_samples(scan.trajectory, scan.n_coils), repeats, lambda: None),
                "gather": median_ms(lambda i=index: scan.kspace[:, i].astype(np.complex128), repeats, lambda: None),
                "gram": median_ms(lambda c=centre: c @ c.conj().T, repeats, lambda: None),
                "whole": median_ms(lambda: mri_recon.prep.compress.centre_energies(scan.kspace, scan.trajectory, w),
                                   repeats, lambda: None),
                "samples": int(len(index))}
    return rows


def whole_calls(scan, dev, repeats: int, sync) -> dict:
    """The whole call, none and 8 coils, interleaved: as it is (the preparation's BLAS on one thread, the products
    on the way up on :data:`staging.PRODUCT_THREADS` threads); the products on two threads; the preparation's
    BLAS on its own threads (the products still on one BLAS thread each)."""
    settings = {"iterations": 30, "lam": 1e-3, "tol": 0.0}
    original, product_threads = device_prep.prepare_on_device, staging.PRODUCT_THREADS
    variants = (("", original, product_threads), ("_product_threads_2", original, 2),
                ("_blas_threads", original.__wrapped__, product_threads))
    rows: dict[str, list[float]] = {}
    for _ in range(2):
        for name, prepare, threads in variants:
            mri_recon.api.prepare_on_device, staging.PRODUCT_THREADS = prepare, threads
            for choice in ("none", 8):
                rows.setdefault(f"{choice}{name}", []).append(median_ms(
                    lambda c=choice: mri_recon.reconstruct(scan, device=dev, coil_compress=c, **settings),
                    repeats, sync))
    mri_recon.api.prepare_on_device, staging.PRODUCT_THREADS = original, product_threads
    return rows


def readme_calls(dev, repeats: int, sync) -> dict:
    """The README's 2D call (``profile_call.py``'s problem) as it is and with the preparation's BLAS on its own
    threads, interleaved."""
    import bench_prepare
    import bench_recon

    scan = bench_prepare.with_noise(bench_recon.problem())
    original = device_prep.prepare_on_device
    rows: dict[str, list[float]] = {}
    for _ in range(2):
        for name, prepare in (("2d", original), ("2d_blas_threads", original.__wrapped__)):
            mri_recon.api.prepare_on_device = prepare
            rows.setdefault(name, []).append(median_ms(
                lambda: mri_recon.reconstruct(scan, device=dev, **bench_prepare.SETTINGS), repeats, sync))
    mri_recon.api.prepare_on_device = original
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    cupy = cupy_module()
    dev = resolve_device("gpu")
    sync = cupy.cuda.get_current_stream().synchronize
    scan = gpu_scan()
    report = {"cpus": len(os.sched_getaffinity(0))}
    report["copies"] = copies(scan, cupy, args.repeats, sync)
    print("copies", report["copies"], flush=True)
    report["matrix"] = matrix_steps(scan, args.repeats)
    print("matrix", report["matrix"], flush=True)
    report["whole"] = whole_calls(scan, dev, args.repeats, lambda: synchronize(dev))
    print("whole", report["whole"], flush=True)
    report["readme"] = readme_calls(dev, 3 * args.repeats, lambda: synchronize(dev))
    print("readme", report["readme"], flush=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
