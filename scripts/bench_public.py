"""Benchmark of the public API: one-shot fhd/forward (repeat calls on one trajectory) and EncodingOperator, with
SigPy's nufft_adjoint / nufft on the same arrays beside them.

Usage: python scripts/bench_public.py --out OUT.json [--device gpu|cpu] [--quick] [--runs N]

Problems (random complex64 k-space and images; --quick: 32^2 with 32 x 128 samples and 16^3 with 512 x 32, a
smoke test for the CPU):
  2d   256^2, golden-angle radial, 256 spokes x 1024 samples (M = 262,144), 1 and 8 coils
  3d   128^3, kooshball, 4,096 spokes x 256 samples (M = 1,048,576), 1 and 8 coils

Per problem and coil count, median wall-clock seconds over --runs calls after warm-up, the device synchronized
after each call (the one-shot calls include their checks and host work, so wall-clock, not CUDA events):
  fhd cold        mri_recon.fhd with the plan cache emptied before each call: a plan per call (the old cost)
  fhd             mri_recon.fhd, repeated on the same trajectory (its plan kept: plan_cache_info counts hits)
  forward         mri_recon.forward, likewise
  op.H, op        an EncodingOperator(trajectory, matrix, coils=C) made once, its adjoint and forward
  sigpy adjoint   sigpy.nufft_adjoint(kspace, trajectory, oshape=(C, *matrix)) on the same arrays
  sigpy forward   sigpy.nufft(image, trajectory)
Errors: relative L2 of op.H and op against the float64 sum (NUDFT) at 512 random voxels (adjoint) or 512
random samples (forward), coils included, every sample (resp. voxel) summed; SigPy against ours, after scaling:
SigPy's transforms are unitary-scaled (forward divided by sqrt(prod(matrix)), coordinates in the same units as
ours, cycles per FOV with the centre at N // 2), so ours = sqrt(prod(matrix)) * sigpy. The scale that fits SigPy
to ours best (least squares) is recorded over sqrt(prod(matrix)) (1 when the problems are the same).
Targets (H200): op.H 2D 8 coils <= 0.4 ms, 3D 8 coils <= 15 ms.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import tempfile
import time

import numpy as np
from benchtools import exact_adjoint, exact_forward, radial_2d, section, wall_timed

import mri_recon
from mri_recon.arrays.backend import Device, cupy_module, resolve_device, synchronize
from mri_recon.sim.trajectories import kooshball

TARGETS_S = {("2d", 8): 0.4e-3, ("3d", 8): 15e-3}
SUBSET = 512


def problem(name: str, quick: bool, xp, rng) -> dict:
    if name == "2d":
        n, spokes, samples = (32, 32, 128) if quick else (256, 256, 1024)
        matrix, traj = (n, n), radial_2d(n, spokes, samples)
    else:
        n, spokes, samples = (16, 512, 32) if quick else (128, 4096, 256)
        matrix, traj = (n, n, n), kooshball((n, n, n), spokes, samples)
    return {"name": name, "matrix": matrix, "traj": xp.asarray(traj), "m": int(traj.shape[0]),
            "voxels": np.sort(rng.choice(math.prod(matrix), size=min(SUBSET, math.prod(matrix)), replace=False)),
            "samples": np.sort(rng.choice(traj.shape[0], size=min(SUBSET, traj.shape[0]), replace=False))}


def crandn(xp, shape) -> object:
    draw = xp.random.standard_normal if xp is not np else np.random.default_rng().standard_normal
    return (draw(shape, dtype=np.float32) + 1j * draw(shape, dtype=np.float32)).astype(np.complex64)


def timed(fn, dev: Device, runs: int, warmup: int = 2) -> dict:
    median, times, _ = wall_timed(fn, runs, lambda: synchronize(dev), warmup)
    return {"median_s": median, "min_s": min(times), "runs": runs}


def nrmse(xp, out, ref) -> float:
    out, ref = xp.asarray(out, dtype=np.complex128), xp.asarray(ref, dtype=np.complex128)
    return float(xp.linalg.norm(out - ref) / xp.linalg.norm(ref))


def brief(entry: dict) -> dict:
    """The medians of a section's measurements (or its error), for its printed line."""
    return {k: (f"{1e3 * v['median_s']:.3f} ms" if "median_s" in v else v) for k, v in entry.items()
            if isinstance(v, dict) and "median_s" in v or k == "error"}


def ours(p: dict, coils: int, dev: Device, runs: int) -> dict:
    """The one-shot calls (cold and kept) and the planned operator, with its errors against the float64 sum."""
    xp, matrix, k = dev.xp, p["matrix"], p["traj"]
    data, image = crandn(xp, (coils, p["m"])), crandn(xp, (coils, *matrix))
    p["data"], p["image"] = data, image

    def cold():
        mri_recon.plan_cache_clear()
        return mri_recon.fhd(data, k, matrix, device=dev)

    out = {"coils": coils, "m": p["m"], "matrix": list(matrix), "fhd cold": timed(cold, dev, max(3, runs // 3))}
    mri_recon.plan_cache_clear()
    out["fhd"] = timed(lambda: mri_recon.fhd(data, k, matrix, device=dev), dev, runs)
    out["forward"] = timed(lambda: mri_recon.forward(image, k, device=dev), dev, runs)
    info = mri_recon.plan_cache_info()
    out["plan cache"] = {"hits": info.hits, "misses": info.misses, "entries": info.entries, "bytes": info.bytes}
    t0 = time.perf_counter()
    op = mri_recon.EncodingOperator(k, matrix, coils=coils, device=dev)
    synchronize(dev)
    out["operator"] = {"engine": op.name, "setup_s": time.perf_counter() - t0}
    out["op.H"], out["op"] = timed(lambda: op.H(data), dev, runs), timed(lambda: op(image), dev, runs)
    adjoint, fwd = op.H(data), op(image)
    p["ours_adjoint"], p["ours_forward"] = adjoint, fwd
    flat = adjoint.reshape(coils, -1)[:, xp.asarray(p["voxels"])]
    out["op.H"]["rel_error"] = nrmse(xp, flat, exact_adjoint(xp, data, k, matrix, p["voxels"]))
    out["op"]["rel_error"] = nrmse(xp, fwd[:, xp.asarray(p["samples"])], exact_forward(xp, image, k, p["samples"]))
    target = TARGETS_S.get((p["name"], coils))
    if target is not None:
        out["op.H"]["target_s"], out["op.H"]["meets_target"] = target, out["op.H"]["median_s"] <= target
    return out


def sigpy_peer(p: dict, coils: int, dev: Device, runs: int) -> dict:
    import sigpy  # noqa: PLC0415 - optional peer

    xp, matrix, k = dev.xp, p["matrix"], p["traj"]
    data, image = p["data"], p["image"]
    scale = math.sqrt(math.prod(matrix))
    out = {"version": sigpy.__version__, "mapping": "coord = trajectory; ours = sqrt(prod(matrix)) * sigpy"}
    out["adjoint"] = timed(lambda: sigpy.nufft_adjoint(data, k, oshape=(coils, *matrix)), dev, max(3, runs // 3))
    out["forward"] = timed(lambda: sigpy.nufft(image, k), dev, max(3, runs // 3))
    for what, theirs, mine in (("adjoint", sigpy.nufft_adjoint(data, k, oshape=(coils, *matrix)), p["ours_adjoint"]),
                               ("forward", sigpy.nufft(image, k), p["ours_forward"])):
        fit = complex(xp.vdot(theirs.astype(np.complex128), mine.astype(np.complex128))
                      / xp.vdot(theirs.astype(np.complex128), theirs.astype(np.complex128)))
        out[what]["nrmse_vs_ours"] = nrmse(xp, theirs * np.float32(scale), mine)
        out[what]["fitted_scale_over_expected"] = [fit.real / scale, fit.imag / scale]
    return out


def table(results: dict) -> None:
    print("\n| problem | coils | fhd cold | fhd | forward | op.H | op | sigpy adj | sigpy fwd | op.H err "
          "| sigpy nrmse |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for key, r in results["problems"].items():
        if "error" in r:
            print(f"| {key} | error: {r['error'][:80]} |")
            continue
        s = r.get("sigpy", {})

        def ms(d):
            return f"{1e3 * d['median_s']:.3f}" if isinstance(d, dict) and "median_s" in d else "-"

        err = s.get("adjoint", {}).get("nrmse_vs_ours")
        print(f"| {key} | {r['coils']} | {ms(r['fhd cold'])} | {ms(r['fhd'])} | {ms(r['forward'])} | "
              f"{ms(r['op.H'])} | {ms(r['op'])} | {ms(s.get('adjoint'))} | {ms(s.get('forward'))} | "
              f"{r['op.H']['rel_error']:.1e} | {'-' if err is None else f'{err:.1e}'} |")
    print("(milliseconds, medians; errors: relative L2)")


def write(path: str, results: dict) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    with tempfile.NamedTemporaryFile("w", dir=folder, suffix=".tmp", delete=False) as fh:
        json.dump(results, fh, indent=1, default=str)
    os.replace(fh.name, path)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--device", default="gpu", help="gpu, gpu:N or cpu (default gpu)")
    parser.add_argument("--quick", action="store_true", help="tiny problems (a smoke test)")
    parser.add_argument("--runs", type=int, default=None, help="timed calls per measurement")
    args = parser.parse_args(argv)
    dev = resolve_device(args.device)
    try:
        import sigpy  # noqa: F401, PLC0415

        with_sigpy = True
    except Exception:  # noqa: BLE001 - SigPy is optional: its columns are left out
        with_sigpy = False
    cupy = cupy_module()
    results: dict = {"device": str(dev), "python": platform.python_version(), "numpy": np.__version__,
                     "mri_recon": mri_recon.__version__, "sigpy": with_sigpy, "quick": args.quick,
                     "subset": f"errors at {SUBSET} random voxels (adjoint) / samples (forward)", "problems": {}}
    if dev.is_gpu:
        props = cupy.cuda.runtime.getDeviceProperties(dev.index)
        results.update(gpu=props["name"].decode(), cupy=cupy.__version__,
                       cuda_runtime=cupy.cuda.runtime.runtimeGetVersion())
    rng = np.random.default_rng(0)
    with dev.use():
        for name in ("2d", "3d"):
            p = problem(name, args.quick, dev.xp, rng)
            runs = args.runs or ({"2d": 30, "3d": 10}[name] if dev.is_gpu else 3)
            print(f"{name}: matrix {p['matrix']}, M = {p['m']}", flush=True)
            for coils in (1, 8):
                key = f"{name} {coils} coil{'s' if coils > 1 else ''}"
                section(results["problems"], key, lambda p=p, coils=coils, runs=runs: ours(p, coils, dev, runs),
                        brief)
                entry = results["problems"][key]
                if with_sigpy and "error" not in entry:
                    holder: dict = {}
                    section(holder, f"{key} sigpy",
                            lambda p=p, coils=coils, runs=runs: sigpy_peer(p, coils, dev, runs), brief)
                    entry["sigpy"] = holder[f"{key} sigpy"]
                write(args.out, results)
            mri_recon.plan_cache_clear()
            if dev.is_gpu:
                cupy.get_default_memory_pool().free_all_blocks()
    table(results)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
