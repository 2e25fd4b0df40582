"""The compressed-sensing figure of docs/compressed_sensing.md: one 4x undersampled scan, four images.

128 x 128 Shepp-Logan, golden-angle radial 50 spokes x 256 samples (Nyquist: pi/2 * 128 = 201 spokes),
8 coils, analytic k-space (no inverse crime), SNR 30, Pipe-Menon weights; on the CPU. Top row, left to right:
the phantom, CG-SENSE (Tikhonov), TV, l1-wavelets, each at the best lambda of a short sweep (NRMSE against the
phantom printed and written beside the PNG as JSON); bottom row: the magnitude of each error, times 4.
One brightness scale for all tiles (the phantom's 99.5th percentile).

Usage: python scripts/make_cs_figure.py docs/cs_phantom.png
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from mri_recon.io.png import encode_png
from mri_recon.pipeline import reconstruct
from mri_recon.sim.simulate import simulate_scan

SWEEPS = {"l2": (1e-3, 1e-2, 3e-2, 1e-1), "tv": (3e-3, 1e-2, 3e-2, 1e-1), "wavelet": (1e-4, 3e-4, 1e-3, 3e-3)}
ITERATIONS = {"l2": 30, "tv": 100, "wavelet": 100}


def best(scan, regularizer: str) -> tuple[np.ndarray, float, float]:
    runs = []
    for lam in SWEEPS[regularizer]:
        image = reconstruct(scan, iterations=ITERATIONS[regularizer], lam=lam, device="cpu",
                            regularizer=regularizer).image
        error = float(np.linalg.norm(image - scan.ground_truth) / np.linalg.norm(scan.ground_truth))
        runs.append((error, lam, image))
    error, lam, image = min(runs, key=lambda run: run[0])
    return image, lam, error


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/cs_phantom.png")
    scan = simulate_scan((128, 128), "golden", coils=8, spokes=50, seed=14)
    truth = scan.ground_truth
    tiles, errors, record = [np.abs(truth)], [np.zeros(truth.shape)], {}
    for regularizer in ("l2", "tv", "wavelet"):
        image, lam, error = best(scan, regularizer)
        tiles.append(np.abs(image))
        errors.append(4 * np.abs(image - truth))
        record[regularizer] = {"lambda": lam, "nrmse": error, "iterations": ITERATIONS[regularizer]}
        print(f"{regularizer:<8} lambda {lam:g}  NRMSE {error:.4f}")
    top = float(np.percentile(np.abs(truth), 99.5))
    gap = np.ones((truth.shape[1], 2)) * top

    def row(images):
        parts = []
        for image in images:
            parts += [image.T, gap]
        return np.concatenate(parts[:-1], axis=1)

    picture = np.concatenate([row(tiles), np.ones((2, row(tiles).shape[1])) * top, row(errors)], axis=0)
    out.write_bytes(encode_png(np.round(np.clip(picture / top, 0, 1) * 255).astype(np.uint8)))
    out.with_suffix(".json").write_text(json.dumps({"scan": "simulate_scan((128, 128), 'golden', coils=8, "
                                                            "spokes=50, seed=14)", **record}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
