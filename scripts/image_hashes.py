"""Hashes of the images of a fixed set of reconstructions, to show that a change leaves images bit for bit.

Usage: python scripts/image_hashes.py OUT.json [cpu|gpu] [--save DIR]

The set: the shipped demo scan reconstructed as the CLI does (default, tv, wavelet, the post-filter, the exact
engine, ESPIRiT, no preparation), simulated scans (spiral with off-resonance, stack of stars, kooshball,
root-sum-of-squares, anisotropic TV) and the CLI's HDF5 and NIfTI outputs of the demo; on the GPU also the 2D
256^2 and 3D 128^3 benchmark problems. Run it on two commits and compare the JSON files; ``--save DIR`` keeps
each image as ``DIR/NN.npy`` (in the order of the JSON) for ``scripts/compare_images.py``, which gives the
relative L2 difference where the bits differ (the GPU NUFFT adds with atomics, so its images differ from run
to run by ~1e-5 at most).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from mri_recon import load_scan, reconstruct, simulate_scan

DEMO = "data/demo_radial.h5"
CASES = {
    "demo_default": (lambda: load_scan(DEMO), {}),
    "demo_tv": (lambda: load_scan(DEMO), {"regularizer": "tv", "iterations": 10}),
    "demo_wavelet": (lambda: load_scan(DEMO), {"regularizer": "wavelet", "iterations": 10}),
    "demo_filter": (lambda: load_scan(DEMO), {"filter_sigma": 1.0}),
    "demo_exact": (lambda: load_scan(DEMO), {"method": "exact", "iterations": 5}),
    "demo_noprep": (lambda: load_scan(DEMO), {"prepare": False, "iterations": 8}),
    "demo_espirit": (lambda: load_scan(DEMO), {"coil_maps": "espirit", "iterations": 8}),
    "spiral_offres": (lambda: simulate_scan((64, 64), "spiral", coils=4, field_map_peak=100.0, seed=1),
                      {"iterations": 8}),
    "sos3d": (lambda: simulate_scan((32, 32, 8), "stack-of-stars", coils=4, seed=2), {"iterations": 6}),
    "koosh3d": (lambda: simulate_scan((24, 24, 24), "kooshball", coils=2, seed=3), {"iterations": 6}),
    "golden_rss": (lambda: simulate_scan((48, 48), "golden", coils=3, seed=4), {"coil_maps": "rss", "iterations": 6}),
    "golden_tv_aniso": (lambda: simulate_scan((48, 48), "golden", coils=3, seed=5),
                        {"regularizer": "tv", "anisotropic": True, "iterations": 6}),
}


class Hasher:
    """The hashes of the images seen, in order, each also saved as ``NN.npy`` when a folder is given."""

    def __init__(self, save: str | None) -> None:
        self.save, self.count, self.hashes = save, 0, {}

    def __call__(self, name: str, image) -> None:
        image = np.ascontiguousarray(np.asarray(image))
        self.count += 1
        if self.save:
            os.makedirs(self.save, exist_ok=True)
            np.save(os.path.join(self.save, f"{self.count:02d}.npy"), image)
        self.hashes[name] = f"{hashlib.sha256(image.tobytes()).hexdigest()[:20]} {image.dtype} {image.shape}"
        print(name, self.hashes[name], flush=True)


def benchmark_problems(hasher: Hasher) -> None:
    """The GPU benchmark problems: scripts/bench_recon.py's 2D scan, and a 3D 128^3 kooshball with 8 coils
    whose k-space comes from FINUFFT (deterministic, independent of mri-recon's operators)."""
    import bench_recon
    import finufft

    from mri_recon.scan import Scan
    from mri_recon.sim.phantom import coil_maps, shepp_logan_image
    from mri_recon.sim.trajectories import kooshball

    scan = bench_recon.problem()
    for name, options in {"bench2d_l2": {}, "bench2d_tv": {"regularizer": "tv"},
                          "bench2d_exact": {"method": "exact", "iterations": 5},
                          "bench2d_prep": {"prepare": True, "coil_maps": "walsh"}}.items():
        hasher(name, reconstruct(scan, device="gpu", **{"prepare": False, **options}).image)
    n = 128
    matrix, traj = (n,) * 3, kooshball((n,) * 3, math.ceil(math.pi / 2 * (n // 2) ** 2))
    maps = coil_maps(matrix, 8).astype(np.complex64)
    truth = shepp_logan_image(matrix, oversample=1).astype(np.complex64)
    points = [2 * np.pi * traj[:, i].astype(np.float64) / n for i in range(3)]
    kspace = np.stack([finufft.nufft3d2(*points, (maps[c] * truth).astype(np.complex128), eps=1e-6)
                       for c in range(8)]).astype(np.complex64)
    rng = np.random.default_rng(0)
    noise = 0.01 * np.abs(kspace).max() * (rng.standard_normal(kspace.shape) + 1j * rng.standard_normal(kspace.shape))
    radius2 = np.sum(traj.astype(np.float64) ** 2, axis=1)
    weights = np.maximum(radius2, 0.25 * float(np.min(radius2[radius2 > 0]))).astype(np.float32)
    scan = Scan(kspace=kspace + noise.astype(np.complex64), trajectory=traj, matrix=matrix, weights=weights,
                coil_maps=maps)
    hasher("bench3d_l2", reconstruct(scan, device="gpu", prepare=False).image)
    hasher("bench3d_prep", reconstruct(scan, device="gpu", coil_maps="walsh", iterations=10).image)


def cli_outputs(hasher: Hasher, device: str) -> None:
    import h5py
    import nibabel

    with tempfile.TemporaryDirectory() as folder:
        h5, nii = Path(folder, "demo.h5"), Path(folder, "demo.nii")
        command = [sys.executable, "-m", "mri_recon", "reconstruct", DEMO, "--device", device, "-q", "-o"]
        subprocess.run([*command, str(h5)], check=True)
        with h5py.File(h5) as f:
            hasher("cli_demo", f["image"][()])
        subprocess.run([*command, str(nii), "--regularizer", "tv", "--iterations", "5"], check=True)
        hasher("cli_demo_tv_nifti", nibabel.load(nii).get_fdata(dtype=np.float32))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("device", nargs="?", default="cpu", choices=("cpu", "gpu"))
    parser.add_argument("--save")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))
    hasher = Hasher(args.save)
    for name, (make, options) in CASES.items():
        hasher(name, reconstruct(make(), device=args.device, **options).image)
    if args.device == "gpu":
        benchmark_problems(hasher)
    cli_outputs(hasher, args.device)
    Path(args.out).write_text(json.dumps(hasher.hashes, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
