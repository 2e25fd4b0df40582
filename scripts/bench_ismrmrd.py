"""Benchmark ISMRMRD input and coil-map estimation; write the results as JSON.

Usage::

    python scripts/bench_ismrmrd.py OUT.json [--size-mb 100] [--repeats 5] [--no-cpu-maps]

1. I/O: writes a radial, 8-coil ISMRMRD file of about ``--size-mb`` MB (with the ``ismrmrd`` package, into
   a temporary folder), then times :func:`mri_recon.io.ismrmrd.load_ismrmrd` and
   :func:`mri_recon.io.ismrmrd_write.convert` (to schema v1) and reports MB/s of the ISMRMRD file. The ceiling is
   h5py reading the same acquisition records (what any reader must do) and the raw file bytes. The file
   is read once before timing, so the page cache is warm: these are parse rates, not disk rates.
2. Coil maps: Walsh and ESPIRiT on 256 x 256, 262,144 radial samples (512 spokes x 512), 8 coils at SNR 30,
   on the CPU and on GPU 0 when present, with both per-voxel eigen solvers; from a host Scan
   (:func:`~mri_recon.prep.coilmaps.estimate_coil_maps`, upload and download included) and, on a GPU, from
   device-resident k-space (:func:`~mri_recon.prep.coilmaps.coil_maps_from_kspace`). Warm-up run first
   (kernel compilation), device synchronized, median of the repeats; accuracy is the per-voxel
   correlation with the true maps inside the phantom. The budget is 20% of a 70 ms GPU reconstruction.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np
from benchtools import wall_timed

from mri_recon.arrays import backend
from mri_recon.io import ismrmrd as ismrmrd_io
from mri_recon.io import ismrmrd_write
from mri_recon.operators.engines import finufft as nufft_cpu
from mri_recon.prep import coilmaps
from mri_recon.scan import Scan
from mri_recon.sim import phantom, trajectories

MATRIX = (256, 256)
SPOKES, SAMPLES, COILS = 512, 512, 8
BUDGET_S = 0.2 * 0.070


def _median_time(fn, repeats: int, device: backend.Device = backend.CPU) -> tuple[float, list[float]]:
    median, times, _ = wall_timed(fn, repeats, lambda: backend.synchronize(device))  # warm-up: JIT, page cache, plans
    return median, times


def _versions() -> dict:
    import finufft  # noqa: PLC0415 - reported only
    import ismrmrd  # noqa: PLC0415 - reported only

    out = {"python": platform.python_version(), "numpy": np.__version__, "h5py": h5py.__version__,
           "ismrmrd": getattr(ismrmrd, "__version__", "?"), "finufft": finufft.__version__}
    cupy = backend.cupy_module()
    if cupy is not None:
        out["cupy"] = cupy.__version__
    return out


def _device_names() -> dict:
    out = {"cpu": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"}
    if backend.gpu_available():
        props = backend.cupy_module().cuda.runtime.getDeviceProperties(0)
        name = props["name"]
        out["gpu:0"] = name.decode() if isinstance(name, bytes) else str(name)
    return out


def bench_io(folder: Path, size_mb: float, repeats: int, rng: np.random.Generator) -> dict:
    samples = 2 * MATRIX[0]
    per_spoke = COILS * samples * 8 + samples * 2 * 4 + 400  # data, trajectory, header (bytes)
    spokes = max(1, int(size_mb * 1e6 / per_spoke))
    traj = trajectories.radial(MATRIX, spokes, samples, golden=True)
    m = traj.shape[0]
    kspace = (rng.standard_normal((COILS, m), np.float32)
              + 1j * rng.standard_normal((COILS, m), np.float32)).astype(np.complex64)
    noise = (rng.standard_normal((COILS, 4096)) + 1j * rng.standard_normal((COILS, 4096))).astype(np.complex64)
    scan = Scan(kspace=kspace, trajectory=traj, matrix=MATRIX, noise=noise, attrs={"samples_per_readout": samples})
    raw = folder / "radial.mrd.h5"
    start = time.perf_counter()
    ismrmrd_write.write_ismrmrd(raw, scan)
    write_s = time.perf_counter() - start
    size = raw.stat().st_size
    mb = size / 1e6

    def read_records():
        with h5py.File(raw, "r") as f:
            return f["dataset/data"][()]

    read_s, read_all = _median_time(lambda: ismrmrd_io.load_ismrmrd(raw), repeats)
    convert_s, convert_all = _median_time(lambda: ismrmrd_write.convert(raw, folder / "v1.h5"), repeats)
    h5_s, _ = _median_time(read_records, repeats)
    bytes_s, _ = _median_time(raw.read_bytes, repeats)
    back = ismrmrd_io.load_ismrmrd(raw)
    assert np.array_equal(back.kspace, scan.kspace), "round trip changed the data"
    return {
        "file_mb": round(mb, 2), "acquisitions": spokes + -(-4096 // 512), "samples": m, "coils": COILS,
        "samples_per_readout": samples,
        "write_s": round(write_s, 4), "write_mb_per_s": round(mb / write_s, 1),
        "read_s": round(read_s, 4), "read_mb_per_s": round(mb / read_s, 1),
        "read_all_s": [round(t, 4) for t in read_all],
        "convert_s": round(convert_s, 4), "convert_mb_per_s": round(mb / convert_s, 1),
        "convert_all_s": [round(t, 4) for t in convert_all],
        "ceiling_h5py_records_s": round(h5_s, 4), "ceiling_h5py_records_mb_per_s": round(mb / h5_s, 1),
        "ceiling_file_bytes_mb_per_s": round(mb / bytes_s, 1),
        "read_vs_h5py_ceiling": round(h5_s / read_s, 3),
    }


def _problem(rng: np.random.Generator):
    traj = trajectories.radial(MATRIX, SPOKES, SAMPLES, golden=True)
    truth = phantom.coil_maps(MATRIX, COILS)
    image = phantom.shepp_logan_image(MATRIX)
    clean = nufft_cpu.forward(truth * image[None], traj, eps=1e-7).astype(np.complex64)
    noisy, _ = phantom.add_noise(clean, 30.0, rng)
    return Scan(kspace=noisy, trajectory=traj, matrix=MATRIX), truth, np.abs(image) > 0.05


def _accuracy(maps: np.ndarray, truth: np.ndarray, inside: np.ndarray) -> dict:
    num = np.abs(np.sum(np.conj(maps) * truth, axis=0))
    c = (num / np.maximum(np.linalg.norm(maps, axis=0) * np.linalg.norm(truth, axis=0), 1e-30))[inside]
    return {"correlation_mean": round(float(c.mean()), 5), "correlation_p1": round(float(np.percentile(c, 1)), 5)}


def bench_maps(repeats: int, cpu: bool, rng: np.random.Generator) -> dict:
    scan, truth, inside = _problem(rng)
    devices = ([backend.CPU] if cpu else []) + ([backend.resolve_device("gpu")] if backend.gpu_available() else [])
    out = {"matrix": list(MATRIX), "samples": scan.n_samples, "coils": COILS, "budget_s": BUDGET_S, "runs": []}
    for dev in devices:
        n = repeats if dev.is_gpu else max(1, min(repeats, 3))
        lowres_s, _ = _median_time(
            lambda dev=dev: coilmaps.lowres_images(scan.kspace, scan.trajectory, MATRIX, device=dev), n, dev)
        out["runs"].append({"device": str(dev), "stage": "lowres_images (walsh, host input)",
                            "median_s": round(lowres_s, 5)})
        for method in ("walsh", "espirit"):
            for solver in ("power", "eigh"):
                def host(method=method, solver=solver, dev=dev):
                    return coilmaps.estimate_coil_maps(scan, method, device=dev, solver=solver)

                median, times = _median_time(host, n, dev)
                run = {"device": str(dev), "method": method, "solver": solver, "input": "host Scan",
                       "median_s": round(median, 5), "all_s": [round(t, 5) for t in times],
                       "fraction_of_budget": round(median / BUDGET_S, 2), **_accuracy(host(), truth, inside)}
                out["runs"].append(run)
                print(json.dumps(run), file=sys.stderr)
                if dev.is_gpu:
                    with dev.use():
                        k = backend.to_device(scan.kspace, dev)
                        t = backend.to_device(scan.trajectory, dev)

                        def resident(method=method, solver=solver, dev=dev, k=k, t=t):
                            return coilmaps.coil_maps_from_kspace(k, t, MATRIX, method, device=dev, solver=solver)

                        median, times = _median_time(resident, n, dev)
                    run = {"device": str(dev), "method": method, "solver": solver, "input": "device arrays",
                           "median_s": round(median, 5), "all_s": [round(t, 5) for t in times],
                           "fraction_of_budget": round(median / BUDGET_S, 2)}
                    out["runs"].append(run)
                    print(json.dumps(run), file=sys.stderr)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="JSON file to write")
    parser.add_argument("--size-mb", type=float, default=100.0, help="ISMRMRD file size (default 100)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs after the warm-up (default 5)")
    parser.add_argument("--no-cpu-maps", action="store_true", help="skip coil maps on the CPU")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(20240601)
    report = {"benchmark": "bench_ismrmrd", "versions": _versions(), "devices": _device_names()}
    with tempfile.TemporaryDirectory() as folder:
        report["io"] = bench_io(Path(folder), args.size_mb, args.repeats, rng)
    print(json.dumps(report["io"]), file=sys.stderr)
    report["coil_maps"] = bench_maps(args.repeats, not args.no_cpu_maps, rng)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
