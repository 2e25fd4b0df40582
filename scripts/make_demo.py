"""Write the demo scan ``data/demo_radial.h5`` that the README's first command reconstructs.

128 x 128 modified Shepp-Logan phantom, golden-angle radial (128 spokes of 256 samples, oversampling 2:
about 1.6x below the Nyquist spoke count, which the 8 coils make up for), analytic multi-coil k-space (no
inverse crime), SNR 30, Pipe-Menon weights, seed 0. Deterministic: running it again gives the same data.

Usage::

    python scripts/make_demo.py [OUTPUT]
"""

from __future__ import annotations

import sys
from pathlib import Path

from mri_recon.io import save_scan
from mri_recon.sim.simulate import simulate_scan

DEFAULT_OUTPUT = Path(__file__).resolve().parent.parent / "data" / "demo_radial.h5"
SETTINGS = {"trajectory": "golden", "coils": 8, "snr": 30.0, "spokes": 128, "samples": 256, "seed": 0,
            "dcf": "pipe"}
MATRIX = (128, 128)


def main(argv: list[str]) -> int:
    output = Path(argv[0]) if argv else DEFAULT_OUTPUT
    scan = simulate_scan(MATRIX, **SETTINGS)
    save_scan(output, scan)
    size = output.stat().st_size / 2**20
    print(f"wrote {output}: matrix {list(scan.matrix)}, {scan.n_coils} coils, {scan.n_samples} samples, "
          f"{size:.2f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
