"""Benchmark of the GPU F^H d ladder (and F, PSF) with SigPy and torchkbnufft as peers.

Usage: python scripts/bench_fhd.py OUT.json

Problem A: 2D 256 x 256, golden-angle radial, 256 spokes x 1024 samples (M = 262,144, |k| < 128 = Nyquist),
random complex data. Every rung for 1 coil, the best for 8 coils: median time over >= 10 runs (CUDA events,
after warm-up), rate in voxel-sample pairs per second (coil-voxel-sample triples for 8 coils), ratio to the
special-function-unit ceiling, relative L2 error against a float64 reference computed exactly on the GPU at
2048 random voxels, and the book's count of global-memory accesses per inner iteration.
Problem B: 3D 128^3 with 284,592 samples (the IMPATIENT size; uniform random in the Nyquist cube), 1 coil.
Every section is guarded: a failure is recorded in the JSON and the run goes on.
"""

from __future__ import annotations

import functools
import json
import math
import platform
import sys
from pathlib import Path

import numpy as np
from benchtools import cuda_timed, radial_2d
from benchtools import section as run_section

from mri_recon.arrays.backend import cupy_module
from mri_recon.checks.grid import voxel_positions
from mri_recon.kernels.configs import fhd_defines
from mri_recon.operators.engines import gpu_exact as gpu_fhd
from mri_recon.operators.engines.gpu_layout import fixed_point_turns

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the ladder is test and benchmark code
import gpu_ladder as ladder  # noqa: E402

CEILING = 132 * 8 * 1.98e9
"""H200 special-function-unit bound of direct F^H d, one coil: 132 SMs x 8 sin+cos pairs/clock x 1.98 GHz."""
TARGETS = {"1 coil": 1.6e12, "8 coils": 6e12}
# Global-memory accesses per inner iteration, counted as the book does (rMu and iMu twice each; the
# compiler merges those into 2 loads). 3D: kx ky kz, x y z, rMu x2, iMu x2, rFhD r+w, iFhD r+w = 14.
GLOBAL_ACCESSES = {
    "naive": {"2d": 12, "3d": 14, "note": "k (D) + voxel coordinates (D) + rMu, iMu (x2) + rFhD, iFhD (r+w)"},
    "registers": {"2d": 6, "3d": 7, "note": "k (D) + rMu, iMu (x2); coordinates and sums in registers"},
    "constant": {"2d": 4, "3d": 4, "note": "rMu, iMu (x2, 2 loads); k in __constant__ chunks"},
    "aos": {"2d": 4, "3d": 4, "note": "rMu, iMu (x2, 2 loads); k as AoS kdata in __constant__"},
    "packed": {"2d": 0, "3d": 0, "note": "trajectory and every coil's sample in one __constant__ record"},
    "mirror": {"2d": 0, "3d": 0, "note": "as packed; one phase serves r and -r"},
    "multi": {"2d": 0, "3d": 0, "note": "as mirror; several positions per thread"},
    "recur": {"2d": 0, "3d": 0, "note": "as multi; angle-addition recurrence on the FMA pipe"},
}
RUNS = 10
REFERENCE_VOXELS = 2048
SIZE_2D, SPOKES, READOUT = 256, 256, 1024
SIZE_3D, SAMPLES_3D = 128, 284_592


timed = functools.partial(cuda_timed, runs=RUNS)


def reference(data, traj, matrix, voxels):
    """Exact F^H d at ``voxels`` in float64 on the GPU: phases reduced in turns, then exp, then a GEMM."""
    cupy = cupy_module()
    k = cupy.asarray(traj, dtype=cupy.float64)
    r = cupy.asarray(voxel_positions(matrix)[voxels])
    d = cupy.asarray(data, dtype=cupy.complex128)
    out = cupy.empty((d.shape[0], len(voxels)), dtype=cupy.complex128)
    for start in range(0, len(voxels), 128):
        cycles = k @ r[start:start + 128].T
        cycles -= cupy.rint(cycles)
        out[:, start:start + 128] = d @ cupy.exp(2j * np.pi * cycles)
    return out


def relative(out, ref) -> float:
    cupy = cupy_module()
    out = cupy.asarray(out, dtype=cupy.complex128)
    return float(cupy.linalg.norm(out - ref) / cupy.linalg.norm(ref))


def at(image, voxels):
    """The values of ``image`` (C, *matrix) at C-order flat voxel indices (a device index array)."""
    return cupy_module().take(image.reshape(image.shape[0], -1), voxels, axis=1)


def section(results: dict, name: str, fn) -> None:
    """Run one part of the benchmark (:func:`benchtools.section`); record its result or its error and go on."""
    run_section(results, name, fn, lambda entry: "error: " + entry["error"] if "error" in entry else "done")


def ours(problem: dict, variant: str, coils: int, dim: str, **kwargs) -> dict:
    cupy = cupy_module()
    data = problem["data"][:coils]
    fn = kwargs.pop("fn", None) or (lambda: ladder.fhd_ladder(data, problem["traj"], problem["matrix"],
                                                              variant=variant))
    out = fn()
    timing = timed(fn)
    triples = problem["nvox"] * problem["m"] * coils
    rate = triples / timing["median_s"]
    ref = problem["ref"][:coils]
    cupy.cuda.Device().synchronize()
    return {**timing, "variant": variant, "coils": coils, "rate": rate, "ceiling_ratio": rate / CEILING,
            "rel_error": relative(at(out, problem["voxels"]), ref),
            "global_accesses_per_iteration": GLOBAL_ACCESSES.get(variant, {}).get(dim), **kwargs}


def sigpy_peer(problem: dict, coils: int) -> dict:
    import sigpy  # noqa: PLC0415 - optional peer

    matrix = problem["matrix"]
    data = problem["data"][:coils]
    # SigPy: coordinates in the same units (cycles per FOV, centre at N//2), adjoint of an orthonormal
    # NUFFT: ours = sqrt(prod(N)) * sigpy (checked by the error below).
    scale = math.sqrt(math.prod(matrix))

    def fn():
        return sigpy.nufft_adjoint(data, problem["traj"], oshape=(coils, *matrix)) * scale

    out = fn()
    timing = timed(fn)
    return {**timing, "version": sigpy.__version__, "coils": coils,
            "mapping": "coord = trajectory, output * sqrt(prod(matrix))",
            "rate": problem["nvox"] * problem["m"] * coils / timing["median_s"],
            "rel_error": relative(at(out, problem["voxels"]), problem["ref"][:coils])}


def torchkbnufft_peer(problem: dict, coils: int) -> dict:
    import torch  # noqa: PLC0415 - optional peer
    import torchkbnufft  # noqa: PLC0415

    matrix = problem["matrix"]
    device = torch.device("cuda", cupy_module().cuda.Device().id)
    # torchkbnufft: k in radians per voxel (omega = 2 pi k / N), data (batch, coils, M), no scaling.
    omega = torch.from_dlpack(problem["traj"]).to(torch.float32).T.contiguous()
    omega = omega * (2 * math.pi / torch.tensor(matrix, dtype=torch.float32, device=device))[:, None]
    data = torch.from_dlpack(problem["data"][:coils]).unsqueeze(0)
    adjoint = torchkbnufft.KbNufftAdjoint(im_size=tuple(matrix), device=device)

    def fn():
        out = adjoint(data, omega)
        torch.cuda.synchronize()
        return out

    out = cupy_module().from_dlpack(fn()[0].contiguous())
    timing = timed(fn)
    return {**timing, "version": getattr(torchkbnufft, "__version__", "?"), "torch": torch.__version__,
            "coils": coils, "mapping": "omega = 2 pi k / N, output unscaled",
            "rate": problem["nvox"] * problem["m"] * coils / timing["median_s"],
            "rel_error": relative(at(out, problem["voxels"]), problem["ref"][:coils])}


def make_problem(matrix: tuple[int, ...], traj: np.ndarray, coils: int, rng) -> dict:
    cupy = cupy_module()
    m = traj.shape[0]
    data = (rng.standard_normal((coils, m)) + 1j * rng.standard_normal((coils, m))).astype(np.complex64)
    nvox = math.prod(matrix)
    voxels = np.sort(rng.choice(nvox, REFERENCE_VOXELS, replace=False))
    problem = {"matrix": matrix, "m": m, "nvox": nvox, "voxels": cupy.asarray(voxels),
               "traj": cupy.asarray(traj), "data": cupy.asarray(data)}
    problem["ref"] = reference(problem["data"], problem["traj"], matrix, voxels)  # host indices
    return problem


def environment() -> dict:
    cupy = cupy_module()
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return {"device": name, "sms": props["multiProcessorCount"], "clock_khz": props.get("clockRate"),
            "cupy": cupy.__version__, "numpy": np.__version__, "python": platform.python_version(),
            "ceiling_pairs_per_s": CEILING, "targets": TARGETS}


def print_table(results: dict) -> None:
    print(f"\n{'case':34} {'time ms':>9} {'rate /s':>10} {'/ceil':>6} {'rel err':>9} {'glob':>5}")
    for name, row in results.items():
        if not isinstance(row, dict) or "median_s" not in row:
            if isinstance(row, dict) and ("error" in row or "skipped" in row):
                print(f"{name:34} {row.get('error', row.get('skipped'))[:70]}")
            continue
        ratio = row.get("ceiling_ratio", row["rate"] / CEILING)
        err = row.get("rel_error", float("nan"))
        glob = row.get("global_accesses_per_iteration", "")
        print(f"{name:34} {row['median_s'] * 1e3:9.2f} {row['rate']:10.3e} {ratio:6.2f} {err:9.2e} {glob!s:>5}")


def main(path: str) -> int:
    cupy = cupy_module()
    rng = np.random.default_rng(20240617)
    results: dict = {}
    section(results, "environment", environment)
    problems: dict = {}

    def problem_2d() -> dict:
        problems["2d"] = make_problem((SIZE_2D,) * 2, radial_2d(SIZE_2D, SPOKES, READOUT), 8, rng)
        return {"matrix": [SIZE_2D] * 2, "samples": problems["2d"]["m"],
                "trajectory": f"golden-angle radial {SPOKES} x {READOUT}"}

    section(results, "problem 2d", problem_2d)
    for variant in ladder.VARIANTS:
        section(results, f"2d {variant} 1 coil", lambda v=variant: ours(problems["2d"], v, 1, "2d"))
    section(results, "2d best 8 coils", lambda: ours(problems["2d"], ladder.BEST, 8, "2d"))
    section(results, "2d sigpy 1 coil", lambda: sigpy_peer(problems["2d"], 1))
    section(results, "2d sigpy 8 coils", lambda: sigpy_peer(problems["2d"], 8))
    section(results, "2d torchkbnufft 1 coil", lambda: torchkbnufft_peer(problems["2d"], 1))
    section(results, "2d torchkbnufft 8 coils", lambda: torchkbnufft_peer(problems["2d"], 8))

    def sweep(problem: dict, dim: str, vox: int, coils: int = 1, recur: bool = True, block: int | None = None,
              chunk: int | None = None) -> dict:
        p = problem
        defines = fhd_defines(len(p["matrix"]), coils, vox, recur)

        def fn():
            out = gpu_fhd.empty((coils, p["nvox"]), cupy.complex64)
            records = gpu_fhd.fhd_records(fixed_point_turns(p["traj"], p["matrix"]), p["data"][:coils], real=False)
            gpu_fhd.fhd_launch(out, records, p["matrix"], defines, True, 0, chunk, block, gpu_fhd.current_device())
            return out

        return ours(p, "recur" if recur else "multi", coils, dim, fn=fn, positions_per_thread=vox, block=block,
                    chunk=chunk)

    for vox in (2, 8):
        section(results, f"2d recur vox={vox} 1 coil", lambda v=vox: sweep(problems["2d"], "2d", v))
    for vox in (4, 8):
        section(results, f"2d recur vox={vox} 8 coils", lambda v=vox: sweep(problems["2d"], "2d", v, 8))
    for vox in (4, 8):
        section(results, f"2d multi vox={vox} 8 coils", lambda v=vox: sweep(problems["2d"], "2d", v, 8, False))
    for vox, block in ((2, 32), (2, 128), (3, 64)):
        section(results, f"2d recur vox={vox} block={block} 8 coils",
                lambda v=vox, b=block: sweep(problems["2d"], "2d", v, 8, True, b))
    for vox, block in ((8, 64), (4, 64)):
        section(results, f"2d recur vox={vox} block={block} 1 coil",
                lambda v=vox, b=block: sweep(problems["2d"], "2d", v, 1, True, b))

    def psf_sweep(vox: int, recur: bool, block: int | None = None) -> dict:
        p = problems["2d"]
        matrix = p["matrix"]
        big = tuple(2 * n for n in matrix)
        weights = cupy.abs(p["data"][0].real).astype(cupy.float32)
        defines = fhd_defines(2, 1, vox, recur, real=True)

        def fn():
            kfix = fixed_point_turns(p["traj"].astype(cupy.float64) * 2.0, big)
            records = gpu_fhd.fhd_records(kfix, weights[None, :], real=True)
            out = gpu_fhd.empty((1, math.prod(big)), cupy.complex64)
            gpu_fhd.fhd_launch(out, records, big, defines, True, 0, None, block, gpu_fhd.current_device())
            return out

        timing = timed(fn)
        return {**timing, "vox": vox, "recur": recur, "block": block,
                "rate": math.prod(big) * p["m"] / timing["median_s"]}

    for vox, block in ((8, None), (8, 64)):
        section(results, f"2d psf vox={vox} block={block}", lambda v=vox, b=block: psf_sweep(v, True, b))

    def problem_3d() -> dict:
        traj = ((rng.random((SAMPLES_3D, 3)) - 0.5) * SIZE_3D).astype(np.float32)
        problems["3d"] = make_problem((SIZE_3D,) * 3, traj, 1, rng)
        return {"matrix": [SIZE_3D] * 3, "samples": SAMPLES_3D,
                "trajectory": f"uniform random in [-{SIZE_3D // 2}, {SIZE_3D // 2})^3"}

    section(results, "problem 3d", problem_3d)
    section(results, "3d best 1 coil", lambda: ours(problems["3d"], ladder.BEST, 1, "3d"))
    for vox in (2, 8):
        section(results, f"3d recur vox={vox} 1 coil", lambda v=vox: sweep(problems["3d"], "3d", v))

    def forward_2d() -> dict:
        p = problems["2d"]
        shape = (1, SIZE_2D, SIZE_2D)
        image = cupy.asarray((rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64))
        timing = timed(lambda: gpu_fhd.forward_gpu(image, p["traj"]))
        return {**timing, "rate": p["nvox"] * p["m"] / timing["median_s"]}

    def psf_2d() -> dict:
        p = problems["2d"]
        timing = timed(lambda: gpu_fhd.psf_gpu(p["traj"], None, p["matrix"]))
        return {**timing, "rate": 4 * p["nvox"] * p["m"] / timing["median_s"], "grid": [2 * SIZE_2D] * 2}

    section(results, "2d forward best 1 coil", forward_2d)
    section(results, "2d psf (2x grid)", psf_2d)

    with open(path, "w") as f:
        json.dump(results, f, indent=2, default=str)
    print_table(results)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python scripts/bench_fhd.py OUT.json", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
