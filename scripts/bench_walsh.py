"""Walsh's coil maps on the GPU: the kernels of ``kernels/maps.cu`` against the array code they replace (the same
``mri_recon.prep.walsh.walsh`` with ``walsh_gpu.fits`` answering no), on coil images of smooth sensitivities times
an object with a zero background plus noise, and the whole estimate from k-space (``coil_maps_from_kspace``: the
low-resolution images and the maps) on a golden-angle scan.

Wall clock of each call, the device synchronized, median of ``--repeats`` after a warm-up; the two paths' maps
compared where the dominant eigenvalue stands clear (the object) by the smallest per-voxel correlation, and the
relative L2 difference over every voxel.
Usage: python scripts/bench_walsh.py OUT.json [--repeats N]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchtools import wall_timed  # noqa: E402

from mri_recon.arrays.backend import cupy_module  # noqa: E402
from mri_recon.prep import walsh_gpu  # noqa: E402
from mri_recon.prep.coilmaps import coil_maps_from_kspace  # noqa: E402
from mri_recon.prep.walsh import walsh  # noqa: E402
from mri_recon.sim.simulate import simulate_scan  # noqa: E402

IMAGES = [(8, (128, 128)), (12, (256, 256)), (16, (256, 256)), (8, (128, 128, 128)), (16, (64, 64, 64))]
SCANS = [((128, 128), 8, 21), ((256, 256), 12, 25), ((256, 256), 8, 402)]


def coil_images(coils: int, shape: tuple[int, ...], rng) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian sensitivities times a disc (zero outside) plus noise, and the voxels well inside the disc."""
    grids = np.meshgrid(*[np.linspace(-1, 1, n) for n in shape], indexing="ij")
    radius = np.sqrt(sum(g ** 2 for g in grids))
    obj = np.where(radius < 0.8, 1.0, 0.0)
    centres = rng.uniform(-1, 1, (coils, len(shape)))
    maps = [np.exp(-sum((g - c) ** 2 for g, c in zip(grids, centre)) + 2j * np.pi * rng.random()) for centre in centres]
    noise = 0.01 * (rng.standard_normal((coils, *shape)) + 1j * rng.standard_normal((coils, *shape)))
    return (np.stack(maps) * obj + noise).astype(np.complex64), radius < 0.75


def compare(kernels: np.ndarray, array: np.ndarray, inside: np.ndarray) -> dict:
    """The two paths' maps: smallest per-voxel correlation over ``inside``, relative L2 over everything."""
    num = np.abs(np.sum(np.conj(kernels) * array, axis=0))
    corr = num / np.maximum(np.linalg.norm(kernels, axis=0) * np.linalg.norm(array, axis=0), 1e-30)
    return {"min_correlation_object": float(corr[inside].min()),
            "relative_l2_all": float(np.linalg.norm(kernels - array) / np.linalg.norm(array))}


def both(fn, repeats: int) -> dict:
    """``fn`` timed with the kernels and with the array code; both results."""
    cupy = cupy_module()
    sync = cupy.cuda.Device().synchronize
    kernel_s, _, kernels = wall_timed(fn, repeats, sync, warmup=2)
    fits = walsh_gpu.fits
    walsh_gpu.fits = lambda coils: False  # the array code, as before the kernels
    try:
        array_s, _, array = wall_timed(fn, repeats, sync, warmup=2)
    finally:
        walsh_gpu.fits = fits
    return {"kernels_ms": kernel_s * 1e3, "array_code_ms": array_s * 1e3, "speedup": array_s / kernel_s,
            "maps": (cupy.asnumpy(kernels), cupy.asnumpy(array))}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    cupy, rng = cupy_module(), np.random.default_rng(5)
    report = {"device": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(), "cupy": cupy.__version__,
              "repeats": args.repeats, "walsh": [], "from_kspace": []}
    for coils, shape in IMAGES:
        images, inside = coil_images(coils, shape, rng)
        up = cupy.asarray(images)
        row = both(lambda up=up: walsh(up), args.repeats)
        row.update(compare(*row.pop("maps"), inside), coils=coils, shape=list(shape))
        report["walsh"].append(row)
        print(f"walsh {shape} x {coils}: kernels {row['kernels_ms']:.2f} ms, array code {row['array_code_ms']:.2f} "
              f"ms ({row['speedup']:.1f}x), object correlation >= {row['min_correlation_object']:.6f}", flush=True)
    for matrix, coils, spokes in SCANS:
        scan = simulate_scan(matrix, "golden", coils=coils, spokes=spokes, snr=30.0, seed=1)
        k, t = cupy.asarray(scan.kspace), cupy.asarray(scan.trajectory)
        row = both(lambda k=k, t=t, m=matrix: coil_maps_from_kspace(k, t, m, "walsh", device="gpu"), args.repeats)
        row.update(compare(*row.pop("maps"), np.ones(matrix, bool)), coils=coils, matrix=list(matrix), spokes=spokes)
        report["from_kspace"].append(row)
        print(f"from k-space {matrix} x {coils}, {spokes} spokes: kernels {row['kernels_ms']:.2f} ms, array code "
              f"{row['array_code_ms']:.2f} ms", flush=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
