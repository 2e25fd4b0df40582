"""Our GPU NUFFT beside cuFINUFFT, same process, same arrays, tolerance 1e-6.

Usage: python scripts/bench_cufinufft.py OUT.json [2d] [3d128] [3d256]   (default: all three)

cuFINUFFT is imported when its Python package and ``libcufinufft.so`` are importable (they are not a
dependency: build the library from FINUFFT's source for the GPU at hand and put ``python/cufinufft`` on
``PYTHONPATH``). Ours is the public planned operator, ``mri_recon.EncodingOperator(..., method="nufft")``.

Problems (random complex64 data): 2D 256^2 golden-angle radial (256 x 1024 samples), 3D 128^3 kooshball
(1,647,104 samples), 3D 256^3 kooshball (13,176,832 samples); 1 and 8 coils. Timed separately: the plan
(ours: building the operator, which sorts the samples; cuFINUFFT: makeplan + setpts, for each type) and the
execution (type 1 = adjoint ``op.H``, type 2 = forward ``op``), medians of CUDA-event times after warm-up.
Errors: relative L2 against the exact float64 sums at random voxels (type 1) or samples (type 2).
Conventions: sample k (cycles per field of view) is cuFINUFFT's point 2 pi k / N, isign +1 for type 1 and
-1 for type 2, modes ordered -N/2..N/2-1 (modeord 0), which is our voxel order; the first coordinate pairs
with the first axis of the array, as ours.
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

import mri_recon
from mri_recon.arrays.backend import cupy_module
from mri_recon.sim import trajectories

EPS = 1e-6


def brief(entry: dict) -> dict:
    return {k: v for k, v in entry.items() if k in ("median_s", "rel_error", "error")}


def problem(name: str, rng) -> dict:
    cupy = cupy_module()
    if name == "2d":
        matrix, traj = (256, 256), radial_2d(256, 256, 1024)
    else:
        n = 128 if name == "3d128" else 256
        matrix = (n,) * 3
        traj = trajectories.kooshball(matrix, math.ceil(math.pi / 2 * (n // 2) ** 2))
    m = traj.shape[0]
    data = (cupy.random.standard_normal((8, m), dtype=cupy.float32)
            + 1j * cupy.random.standard_normal((8, m), dtype=cupy.float32)).astype(cupy.complex64)
    image = (cupy.random.standard_normal((8, *matrix), dtype=cupy.float32)
             + 1j * cupy.random.standard_normal((8, *matrix), dtype=cupy.float32)).astype(cupy.complex64)
    voxels = np.sort(rng.choice(math.prod(matrix), size=1024 if name != "3d256" else 256, replace=False))
    samples = np.sort(rng.choice(m, size=1024, replace=False))
    k = cupy.asarray(traj)
    return {"name": name, "matrix": matrix, "traj": k, "data": data, "image": image, "voxels": voxels,
            "samples": samples, "runs": {"2d": 30, "3d128": 10, "3d256": 4}[name],
            "ref1": exact_adjoint(cupy, data, k, matrix, voxels, chunk=1 << 19),
            "ref2": exact_forward(cupy, image, k, samples)}


def relative(out, ref) -> float:
    cupy = cupy_module()
    out = cupy.asarray(out, dtype=cupy.complex128)
    return float(cupy.linalg.norm(out - ref) / cupy.linalg.norm(ref))


def wall(fn, repeats: int = 3) -> dict:
    cupy = cupy_module()
    times = []
    for _ in range(repeats):
        cupy.cuda.Device().synchronize()
        t0 = time.perf_counter()
        kept = fn()
        cupy.cuda.Device().synchronize()
        times.append(time.perf_counter() - t0)
    return {"median_s": statistics.median(times), "first_s": times[0], "kept": kept}


def ours(results: dict, p: dict, coils: int) -> None:
    name, matrix = p["name"], p["matrix"]
    holder = {}

    def plan():
        timing = wall(lambda: mri_recon.EncodingOperator(p["traj"], matrix, coils=coils, device="gpu",
                                                         method="nufft"))
        holder["op"] = timing.pop("kept")
        return timing

    run_section(results, f"{name} {coils} ours plan", plan, brief)
    op = holder.get("op")
    if op is None:
        return
    data, image = p["data"][:coils], p["image"][:coils]

    def type1():
        out = op.H(data)
        flat = out.reshape(coils, -1)[:, cupy_module().asarray(p["voxels"])]
        return {**cuda_timed(lambda: op.H(data), p["runs"]), "rel_error": relative(flat, p["ref1"][:coils])}

    def type2():
        out = op(image)[:, cupy_module().asarray(p["samples"])]
        return {**cuda_timed(lambda: op(image), p["runs"]), "rel_error": relative(out, p["ref2"][:coils])}

    run_section(results, f"{name} {coils} ours type 1", type1, brief)
    run_section(results, f"{name} {coils} ours type 2", type2, brief)


def theirs(results: dict, p: dict, coils: int, cufinufft) -> None:
    for kind in (1, 2):
        their_type(results, p, coils, cufinufft, kind)


def their_type(results: dict, p: dict, coils: int, cufinufft, kind: int) -> None:
    """cuFINUFFT's type ``kind`` (1: isign +1, our adjoint; 2: isign -1, our forward): plan, then execute."""
    cupy = cupy_module()
    name, matrix = p["name"], p["matrix"]
    points = [cupy.ascontiguousarray((2 * np.pi / n) * p["traj"][:, i]) for i, n in enumerate(matrix)]
    source = p["data"][:coils] if kind == 1 else p["image"][:coils]
    picked, ref = (p["voxels"], p["ref1"]) if kind == 1 else (p["samples"], p["ref2"])
    holder = {}

    def make():
        made = cufinufft.Plan(kind, matrix, n_trans=coils, eps=EPS, isign=1 if kind == 1 else -1,
                              dtype="complex64")
        made.setpts(*points)  # x pairs with axis 0 of the C-ordered array (as cuFINUFFT's own tests)
        return made

    def plan():
        timing = wall(make)
        holder["plan"] = timing.pop("kept")
        return timing

    def execute():
        made = holder["plan"]
        out = made.execute(source).reshape(coils, -1)[:, cupy.asarray(picked)]
        return {**cuda_timed(lambda: made.execute(source), p["runs"]), "rel_error": relative(out, ref[:coils])}

    run_section(results, f"{name} {coils} cufinufft type {kind} plan", plan, brief)
    if "plan" in holder:
        run_section(results, f"{name} {coils} cufinufft type {kind}", execute, brief)


def main() -> int:
    cupy = cupy_module()
    try:
        import cufinufft
    except ImportError as exc:
        print(f"cuFINUFFT not importable ({exc}): ours only", flush=True)
        cufinufft = None
    results: dict = {"device": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                     "cupy": cupy.__version__, "python": platform.python_version(), "eps": EPS,
                     "date": time.strftime("%Y-%m-%d"),
                     "cufinufft": getattr(cufinufft, "__version__", None) if cufinufft else None}
    rng = np.random.default_rng(0)
    for name in sys.argv[2:] or ("2d", "3d128", "3d256"):
        p = problem(name, rng)
        for coils in (1, 8):
            ours(results, p, coils)
            if cufinufft is not None:
                theirs(results, p, coils, cufinufft)
        del p
        cupy.get_default_memory_pool().free_all_blocks()
        with open(sys.argv[1], "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
