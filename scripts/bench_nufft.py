"""Benchmark of the GPU NUFFT (mri_recon.operators.engines.gpu_nufft) with SigPy's GPU nufft_adjoint beside it.

Usage: python scripts/bench_nufft.py OUT.json [quick]

Problems (random complex64 k-space, 8 coils):
  2d      256^2, golden-angle radial, 256 spokes x 1024 samples (M = 262,144)
  3d128   128^3 kooshball, 6,434 spokes x 256 samples (M = 1,647,104)
  3d256   256^3 kooshball, 25,736 spokes x 512 samples (M = 13,176,832)
For each: plan (sort) setup, adjoint with 1 and 8 coils, forward with 8 coils, the PSF (plan + transform, and
the transform alone), the 8-coil adjoint's stages (spread, FFT, deconvolution), median over repeats with CUDA
events after warm-up. Errors: relative L2 against the exact float64 sum (computed on the GPU) at random
voxels (adjoint, PSF) or random samples (forward). SigPy's nufft_adjoint (GPU) beside it when importable:
ours = sqrt(prod(N)) * sigpy. Every section is guarded: a failure is recorded and the run goes on.
"""

from __future__ import annotations

import json
import math
import platform
import statistics
import sys
import time

import numpy as np
from benchtools import cuda_timed, exact_adjoint, exact_forward, radial_2d
from benchtools import section as run_section

from mri_recon.arrays.backend import cupy_module
from mri_recon.operators.engines import gpu_nufft, nufft_launch
from mri_recon.sim import trajectories

COILS = 8


timed = cuda_timed


def relative(out, ref) -> float:
    cupy = cupy_module()
    out = cupy.asarray(out, dtype=cupy.complex128)
    return float(cupy.linalg.norm(out - ref) / cupy.linalg.norm(ref))


def at(image, voxels):
    cupy = cupy_module()
    return cupy.take(image.reshape(image.shape[0], -1), cupy.asarray(voxels), axis=1)


def section(results: dict, name: str, fn) -> None:
    """:func:`benchtools.section`, showing the median, the error or the failure."""
    run_section(results, name, fn, lambda entry: {k: v for k, v in entry.items()
                                                  if k in ("median_s", "rel_error", "error")})


def make_problem(name: str, rng) -> dict:
    cupy = cupy_module()
    if name == "2d":
        matrix, traj = (256, 256), radial_2d(256, 256, 1024)
    elif name == "3d128":
        matrix = (128,) * 3
        traj = trajectories.kooshball(matrix, math.ceil(math.pi / 2 * 64**2))
    else:
        matrix = (256,) * 3
        traj = trajectories.kooshball(matrix, math.ceil(math.pi / 2 * 128**2))
    m = traj.shape[0]
    k = cupy.asarray(traj)
    data = (cupy.random.standard_normal((COILS, m), dtype=cupy.float32)
            + 1j * cupy.random.standard_normal((COILS, m), dtype=cupy.float32)).astype(cupy.complex64)
    weights = cupy.random.random(m, dtype=cupy.float32)
    nvox = math.prod(matrix)
    voxels = np.sort(rng.choice(nvox, size=min(2048 if name != "3d256" else 512, nvox), replace=False))
    return {"name": name, "matrix": matrix, "traj": k, "data": data, "weights": weights, "m": m,
            "voxels": voxels, "runs": {"2d": 30, "3d128": 10, "3d256": 4}[name]}


def stages(plan, data) -> dict:
    """The 8-coil adjoint's stages timed alone (grid memset + spread, FFT, deconvolution)."""
    cupy = cupy_module()
    coils = data.shape[0]
    group = min(coils, plan.max_group)
    grid = plan._grid(group)
    out = cupy.empty((group, *plan.matrix), dtype=cupy.complex64)
    deconv = plan._kernel("mri_recon_nufft_deconv_adjoint")
    runs = 10

    def spread():
        cupy.cuda.runtime.memsetAsync(grid.data.ptr, 0, grid.nbytes, cupy.cuda.get_current_stream().ptr)
        plan._spread(data[:group], grid, group, False)

    def fft():
        plan._fft(grid, inverse=True)

    def dec():
        deconv(plan._deconv_blocks(plan.matrix), (128,), (grid, out, plan._ker, np.int32(group), *plan._sizes()))

    return {"group": group, "spread_s": timed(spread, runs)["median_s"], "fft_s": timed(fft, runs)["median_s"],
            "deconv_s": timed(dec, runs)["median_s"], "subproblems": plan.n_subproblems,
            "spread_coils_per_launch": nufft_launch.spread_coils(plan.bins, plan.params.width, plan.dim, group,
                                                               False, plan.shared_limit, plan.warps)}


def run_problem(results: dict, p: dict, with_sigpy: bool, sweep: list[dict]) -> None:
    cupy = cupy_module()
    name, matrix, runs = p["name"], p["matrix"], p["runs"]
    holder: dict = {}

    def setup():
        cupy.cuda.Device().synchronize()
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            plan = gpu_nufft.GpuNufft(p["traj"], matrix)
            cupy.cuda.Device().synchronize()
            times.append(time.perf_counter() - t0)
        holder["plan"] = plan
        return {"median_s": statistics.median(times[1:]), "first_s": times[0], "m": p["m"],
                "matrix": list(matrix), "width": plan.params.width, "fine": list(plan.params.fine),
                "bins": list(plan.bins), "subproblems": plan.n_subproblems, "max_group": plan.max_group}

    section(results, f"{name} plan setup", setup)
    plan = holder.get("plan")
    if plan is None:
        return
    ref = exact_adjoint(cupy_module(), p["data"], p["traj"], matrix, p["voxels"], chunk=1 << 19)

    def adjoint(coils):
        data = p["data"][:coils]
        out = plan.adjoint(data, out=cupy.full((coils, *matrix), np.nan, dtype=cupy.complex64))
        finite = bool(cupy.all(cupy.isfinite(out)))
        timing = timed(lambda: plan.adjoint(data, out=out), runs)
        return {**timing, "coils": coils, "all_written": finite,
                "rel_error": relative(at(out, p["voxels"]), ref[:coils])}

    section(results, f"{name} adjoint 1 coil", lambda: adjoint(1))
    section(results, f"{name} adjoint 8 coils", lambda: adjoint(COILS))
    section(results, f"{name} adjoint 8 coils stages", lambda: stages(plan, p["data"]))

    def forward():
        image = (cupy.random.standard_normal((COILS, *matrix), dtype=cupy.float32)
                 + 1j * cupy.random.standard_normal((COILS, *matrix), dtype=cupy.float32)).astype(cupy.complex64)
        out = plan.forward(image, out=cupy.full((COILS, p["m"]), np.nan, dtype=cupy.complex64))
        finite = bool(cupy.all(cupy.isfinite(out)))
        timing = timed(lambda: plan.forward(image, out=out), runs)
        samples = np.sort(np.random.default_rng(1).choice(p["m"], size=256 if name == "3d256" else 1024,
                                                          replace=False))
        exact = exact_forward(cupy_module(), image, p["traj"], samples, chunk=1 << 18)
        return {**timing, "coils": COILS, "all_written": finite,
                "rel_error": relative(out[:, cupy.asarray(samples)], exact)}

    section(results, f"{name} forward 8 coils", forward)

    def psf():
        big = tuple(2 * n for n in matrix)
        nvox = math.prod(big)
        voxels = np.sort(np.random.default_rng(2).choice(nvox, size=p["voxels"].size, replace=False))
        out = gpu_nufft.psf(p["traj"], p["weights"], matrix)
        timing = timed(lambda: gpu_nufft.psf(p["traj"], p["weights"], matrix), max(3, runs // 3), warmup=1)
        psf_plan = gpu_nufft.GpuNufft(2 * p["traj"], big)
        alone = timed(lambda: psf_plan.adjoint_real(p["weights"]), max(3, runs // 3))
        exact = exact_adjoint(cupy, p["weights"][None].astype(cupy.complex64), 2 * p["traj"], big, voxels,
                              chunk=1 << 19)
        return {**timing, "transform_only_s": alone["median_s"],
                "rel_error": relative(at(out[None], voxels), exact)}

    section(results, f"{name} psf (plan + transform)", psf)

    for config in sweep:
        label = ",".join(f"{k}={v}" for k, v in config.items())

        def variant(config=config):
            plan2 = gpu_nufft.GpuNufft(p["traj"], matrix, **config)
            out = plan2.adjoint(p["data"])
            timing = timed(lambda: plan2.adjoint(p["data"], out=out), max(5, runs // 2))
            return {**timing, **stages(plan2, p["data"]), "config": config,
                    "rel_error": relative(at(out, p["voxels"]), ref)}

        section(results, f"{name} adjoint 8 coils [{label}]", variant)

    if with_sigpy:
        def sigpy_peer(coils):
            import sigpy  # noqa: PLC0415 - optional peer

            scale = math.sqrt(math.prod(matrix))
            data = p["data"][:coils]

            def fn():
                return sigpy.nufft_adjoint(data, p["traj"], oshape=(coils, *matrix)) * scale

            out = fn()
            timing = timed(fn, max(3, runs // 3), warmup=1)
            return {**timing, "version": sigpy.__version__, "coils": coils,
                    "mapping": "coord = trajectory, output * sqrt(prod(matrix))",
                    "rel_error": relative(at(out, p["voxels"]), ref[:coils])}

        section(results, f"{name} sigpy adjoint 1 coil", lambda: sigpy_peer(1))
        section(results, f"{name} sigpy adjoint 8 coils", lambda: sigpy_peer(COILS))
    holder.clear()
    cupy.get_default_memory_pool().free_all_blocks()


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__)
        return 2
    cupy = cupy_module()
    if cupy is None:
        print("CuPy is required")
        return 1
    quick = len(argv) > 2 and argv[2] == "quick"
    try:
        import sigpy  # noqa: F401, PLC0415
        with_sigpy = True
    except Exception:  # noqa: BLE001
        with_sigpy = False
    props = cupy.cuda.runtime.getDeviceProperties(0)
    results: dict = {"device": props["name"].decode(), "cupy": cupy.__version__, "python": platform.python_version(),
                     "cuda_runtime": cupy.cuda.runtime.runtimeGetVersion(), "sigpy": with_sigpy}
    rng = np.random.default_rng(0)
    sweeps = {
        "2d": [{"spread": "atomic"}, {"subproblem": 128}, {"subproblem": 512}, {"bins": (16, 16), "warps": 8},
               {"bins": (8, 8), "warps": 8}, {"bins": (32, 32), "warps": 2}],
        "3d128": [{"spread": "atomic"}, {"warps": 4}, {"warps": 8, "shared_limit": 227 * 1024}, {"warps": 1},
                  {"bins": (8, 8, 4), "warps": 4}, {"bins": (16, 8, 8), "warps": 2, "shared_limit": 227 * 1024},
                  {"subproblem": 128}, {"subproblem": 1024}, {"eps": 1e-5}],
        "3d256": [{"spread": "atomic"}, {"warps": 4}],
    }
    for name in ("2d", "3d128") if quick else ("2d", "3d128", "3d256"):
        t0 = time.perf_counter()
        p = make_problem(name, rng)
        print(f"{name}: M = {p['m']}, built in {time.perf_counter() - t0:.1f} s", flush=True)
        run_problem(results, p, with_sigpy, sweeps[name])
        with open(argv[1], "w") as fh:
            json.dump(results, fh, indent=1, default=str)
    print("\n| section | median ms | rel. error |")
    print("|---|---|---|")
    for key, value in results.items():
        if isinstance(value, dict):
            ms = f"{1e3 * value['median_s']:.3f}" if "median_s" in value else "-"
            err = f"{value['rel_error']:.2e}" if "rel_error" in value else value.get("error", "-")[:60]
            extra = ""
            if "spread_s" in value:
                extra = (f" (spread {1e3 * value['spread_s']:.2f}, fft {1e3 * value['fft_s']:.2f}, "
                         f"deconv {1e3 * value['deconv_s']:.2f})")
            print(f"| {key} | {ms}{extra} | {err} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
