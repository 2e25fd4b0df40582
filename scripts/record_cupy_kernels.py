"""Record the CuPy kernels GPU reconstructions compile into ``mri_recon/kernels/cupy_kernels.json`` (needs a GPU).

Runs ``mri-recon reconstruct`` in this process on simulated scans (the 2D problem of the cold-start benchmark,
256^2 with 8 coils and 512 x 512 radial samples, with each method, ramp weights and Walsh maps; a 1-coil 2D
scan; a 64^3 kooshball with 8 coils) while every compile request made of CuPy is recorded
(:func:`mri_recon.kernels.cupy_kernels.recording`), then writes them in the order of first use with the CuPy
version (the record is used only with that version).
Rerun after a CuPy upgrade or a change to what the pipeline computes with CuPy (the warm-up,
:mod:`mri_recon.kernels.warmup`, compiles what it lists); see docs/kernels.md.

Usage: python scripts/record_cupy_kernels.py [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

SCANS = (  # (name, simulate options, the reconstructions' options)
    ("radial_256", ["--matrix", "256", "--coils", "8", "--spokes", "512", "--samples", "512"],
     (["--method", "auto"], ["--method", "exact"], ["--dcf", "ramp"], ["--coil-maps", "walsh"])),
    ("radial_64_1coil", ["--matrix", "64", "--coils", "1"], (["--method", "auto"],)),
    ("kooshball_64", ["--matrix", "64", "--coils", "8", "--trajectory", "kooshball"], (["--method", "auto"],)),
)


def main() -> int:
    from mri_recon.kernels import cupy_kernels

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=cupy_kernels.RECORD_FILE)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["CUPY_CACHE_DIR"] = str(Path(tmp) / "cupy")  # a fresh cache: every request reaches NVRTC
        os.environ["MRI_RECON_CACHE_DIR"] = str(Path(tmp) / "psf")
        os.environ["MRI_RECON_WARMUP"] = "0"  # nothing compiled ahead from an older record: CuPy builds each
        import cupy
        from cupy._core.core import assemble_cupy_compiler_options
        from cupy.cuda import compiler

        from mri_recon.cli import main as cli

        with cupy_kernels.recording(compiler, assemble_cupy_compiler_options) as requests:
            for name, options, runs in SCANS:
                scan = str(Path(tmp) / f"{name}.h5")
                cli(["simulate", scan, *options, "-q"], standalone_mode=False)
                for index, extra in enumerate(runs):
                    cli(["reconstruct", scan, "--device", "gpu", *extra, "-q",
                         "-o", str(Path(tmp) / f"{name}_{index}_out.h5")], standalone_mode=False)
                print(f"{name}: {len(requests)} CuPy kernel(s) recorded so far", file=sys.stderr)
    record = cupy_kernels.pack(cupy.__version__, requests)
    args.out.write_text(json.dumps(record, indent=0, sort_keys=True) + "\n")
    print(f"wrote {len(requests)} requests (CuPy {cupy.__version__}) to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
