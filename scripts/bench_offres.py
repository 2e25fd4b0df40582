"""GPU benchmark of off-resonance correction: the exact kernels against the plain ones, and corrected CG-SENSE.

Usage: python scripts/bench_offres.py OUT.json [--quick]

Sections (each guarded: a failure is recorded in the JSON and the run goes on):

- ``fhd_2d``: F^H d on 256 x 256 from 256 golden-angle spokes x 1024 samples (M = 262,144, the problem of
  scripts/bench_fhd.py), field map of peak 150 Hz (sim/offres.py), 16 ms per spoke; 1, 2, 3, 4 and 8 coils.
  Median of 10 runs (CUDA events, after warm-up) of the production plain kernel (mirror pairs + recurrence),
  the plain kernel on unpaired lines without recurrence (the phasor kernel's structure without its phase
  term), and the off-resonance F^H d with the field map and times prepared once (as CG does): ``fhd.cu``
  (``offres_fhd``: the time recurrence, as the readouts have a constant dwell time), its other accumulation
  (``offres_recur_walk`` or ``offres_recur_rotate``), the phasor kernel (``offres_phasor``, one phase per
  voxel-sample, what any times get) and the tensor cores (``offres_tc``). ``offres_default`` names the row the
  default path runs (the tensor cores from 3 coils, ``fhd.cu`` below; timed on its own only where it mixes
  the two) and ``offres``, ``offres_over_plain``, ``offres_error`` repeat it; ``offres_path`` describes it. Rates in
  voxel-sample pairs per second (coil-voxel-sample triples for several coils); ratios to the plain kernel;
  each off-resonance kernel's relative error against float64 at 2048 random voxels.
- ``fhd_2d_recur_sweep``: the time recurrence on the same problem with 1..8 positions per thread and either
  accumulation, 1 and 8 coils (configurations beyond about 200 floats per thread left out): rate and
  registers, to tune ``configs.offres_recur_positions`` and ``configs.ROTATE_COILS``.
- ``fhd_2d_tc_sweep``: the tensor-core kernel alone on the same problem, 1, 2, 4, 8 coils by 1, 2, 4 tiles of 16
  voxels per warp: rate and registers, to tune ``configs.TC_MTILES``.
- ``forward_2d``: F on the same problem, plain (runs with mirror pairs + recurrence) and off-resonance.
- ``impatient_3d``: the off-resonance F^H d on IMPATIENT's problem size (128^3 voxels, 284,592 samples
  uniform in the Nyquist cube, 1 coil); IMPATIENT (Stone et al. 2008) computed it in about 1.5 minutes
  on its 2008 GPU (docs/benchmarks.md).
- ``recon_256``: CG-SENSE, 256 x 256 spiral (32 interleaves), 8 coils, 16 ms readouts, +-150 Hz, 30
  iterations (tol 0): no field map (uncorrected), time-segmented (L chosen for 1e-3), exact every iteration;
  median wall time of 3 runs after a warm-up, NRMSE against the truth, ratio to the uncorrected time.
- ``segments_256``: the same scan, L from 1 to 2 L_auto: interpolation error, relative image difference to
  the exact-correction image, NRMSE, time.
``--quick`` runs small sizes (a smoke test of the script).
"""

from __future__ import annotations

import argparse
import functools
import json
import platform
import sys

import numpy as np
from benchtools import cuda_timed, radial_2d, wall_timed
from benchtools import section as run_section

import mri_recon
from mri_recon.arrays.backend import Device, cupy_module, gpu_available
from mri_recon.checks.grid import voxel_positions
from mri_recon.kernels import get_module
from mri_recon.kernels.configs import fhd_defines, offres_rotates, thread_floats
from mri_recon.operators.engines import gpu_exact
from mri_recon.operators.engines.gpu_layout import fixed_point_turns
from mri_recon.operators.offres import gpu_offres
from mri_recon.operators.offres.time_segments import interpolation_error
from mri_recon.sim import offres as sim_offres

RUNS = 10
REFERENCE_VOXELS = 2048


timed = functools.partial(cuda_timed, runs=RUNS)


def wall(fn, runs: int) -> tuple[dict, object]:
    cupy = cupy_module()
    median, times, out = wall_timed(fn, runs, lambda: cupy.cuda.Device().synchronize())
    return {"median_s": median, "min_s": min(times), "runs": runs}, out


def reference_adjoint(data, traj, fmap, times, voxels):
    """Exact F^H d with off-resonance at ``voxels`` in float64 on the GPU."""
    cupy = cupy_module()
    matrix = fmap.shape
    k = cupy.asarray(traj, dtype=cupy.float64)
    t = cupy.asarray(times, dtype=cupy.float64)
    r = cupy.asarray(voxel_positions(matrix)[voxels])
    f = cupy.asarray(fmap.reshape(-1)[voxels], dtype=cupy.float64)
    d = cupy.asarray(data, dtype=cupy.complex128)
    out = cupy.empty((d.shape[0], len(voxels)), dtype=cupy.complex128)
    for start in range(0, len(voxels), 128):
        cycles = k @ r[start:start + 128].T + t[:, None] * f[None, start:start + 128]
        cycles -= cupy.rint(cycles)
        out[:, start:start + 128] = d @ cupy.exp(2j * np.pi * cycles)
    return out


def section(results: dict, name: str, fn, output: str | None = None) -> None:
    """Run one section into ``results`` (:func:`benchtools.section`), and rewrite ``output`` after it, so a run
    cut short keeps what ran."""
    run_section(results, name, fn, lambda entry: json.dumps(entry)[:400])
    if output is not None:
        with open(output, "w") as handle:
            json.dump(results, handle, indent=1)


def transforms(n: int, spokes: int, samples: int, coil_counts: tuple[int, ...]) -> tuple[dict, dict]:
    cupy = cupy_module()
    rng = np.random.default_rng(0)
    matrix = (n, n)
    traj = radial_2d(n, spokes, samples)
    times = sim_offres.readout_times(len(traj), samples, 16e-3)
    fmap = sim_offres.field_map(matrix, 150.0)
    gk, gt, gf = cupy.asarray(traj), cupy.asarray(times), cupy.asarray(fmap)
    pairs = n * n * len(traj)
    prepared = gpu_offres.prepare_offres(gf, gt)  # once, as CG does
    recur = gpu_offres.uses_recurrence(prepared, None)

    def fhd_path(size: int) -> str:
        if not recur:
            return "phasor"
        return f"recur ({'rotate' if offres_rotates(size) else 'walk'}), {prepared.runs.runs} runs"

    adjoint, forward = {"matrix": list(matrix), "samples": len(traj)}, {"matrix": list(matrix), "samples": len(traj)}
    voxels = rng.choice(n * n, size=min(REFERENCE_VOXELS, n * n), replace=False)
    for coils in coil_counts:
        data = (rng.standard_normal((coils, len(traj))) + 1j * rng.standard_normal((coils, len(traj))))
        gd = cupy.asarray(data.astype(np.complex64))
        image = cupy.asarray((rng.standard_normal((coils, *matrix)) + 1j * rng.standard_normal((coils, *matrix)))
                             .astype(np.complex64))
        work = pairs * coils
        rotate = offres_rotates(coils)
        other = "offres_recur_walk" if rotate else "offres_recur_rotate"
        kernels = {"offres_fhd": {"tensor": False}, other: {"recur": True, "rotate": not rotate, "tensor": False},
                   "offres_phasor": {"recur": False, "tensor": False}, "offres_tc": {"tensor": True}}
        launches = gpu_offres.coil_launches(coils, Device(gd.device.id), None)
        on_tc = {tc for _, _, tc in launches}
        if len(on_tc) > 1:  # a mixed default (9 coils and more) is a path of its own
            kernels["offres"] = {}
        row = {"plain": timed(lambda gd=gd: gpu_exact.fhd_gpu(gd, gk, matrix)),
               "plain_unpaired": timed(lambda gd=gd: gpu_exact.fhd_gpu(gd, gk, matrix, paired=False, recur=False))}
        for name, options in kernels.items():
            row[name] = timed(lambda gd=gd, o=options: gpu_offres.fhd_offres_gpu(gd, gk, matrix, gf, gt,
                                                                               prepared=prepared, **o))
        for entry in row.values():
            entry["rate"] = work / entry["median_s"]
        ref = reference_adjoint(data, traj, fmap, times, voxels)
        for name, options in kernels.items():
            row[f"{name}_over_plain"] = row[name]["rate"] / row["plain"]["rate"]
            out = gpu_offres.fhd_offres_gpu(gd, gk, matrix, gf, gt, prepared=prepared, **options).reshape(coils, -1)
            row[f"{name}_error"] = float(cupy.linalg.norm(out[:, cupy.asarray(voxels)] - ref) / cupy.linalg.norm(ref))
        default = "offres" if len(on_tc) > 1 else ("offres_tc" if True in on_tc else "offres_fhd")
        row["offres_default"] = default  # the row the default path runs: offres_* keys below are its
        for key in ("", "_over_plain", "_error"):
            row["offres" + key] = row[default + key]
        row["offres_path"] = ", ".join(f"{size} coil(s) {'tensor cores' if tc else fhd_path(size)}"
                                       for _, size, tc in launches)
        row["offres_over_plain_unpaired"] = row["offres"]["rate"] / row["plain_unpaired"]["rate"]
        row["offres_phasor_over_plain_unpaired"] = row["offres_phasor"]["rate"] / row["plain_unpaired"]["rate"]
        row["offres_fhd_over_offres_phasor"] = row["offres_fhd"]["rate"] / row["offres_phasor"]["rate"]
        row["offres_tc_over_offres_fhd"] = row["offres_tc"]["rate"] / row["offres_fhd"]["rate"]
        adjoint[f"{coils} coil(s)"] = row
        frow = {"plain": timed(lambda image=image: gpu_exact.forward_gpu(image, gk)),
                "offres": timed(lambda image=image: gpu_offres.forward_offres_gpu(image, gk, gf, gt))}
        for entry in frow.values():
            entry["rate"] = work / entry["median_s"]
        frow["offres_over_plain"] = frow["offres"]["rate"] / frow["plain"]["rate"]
        forward[f"{coils} coil(s)"] = frow
    return adjoint, forward


def sweep_problem(n: int, spokes: int, samples: int) -> tuple:
    """The ``fhd_2d`` problem on the GPU for the sweeps: matrix, trajectory (host), prepared field map and times,
    fixed-point trajectory (device), the device."""
    cupy = cupy_module()
    matrix = (n, n)
    traj = radial_2d(n, spokes, samples)
    times = sim_offres.readout_times(len(traj), samples, 16e-3)
    prepared = gpu_offres.prepare_offres(cupy.asarray(sim_offres.field_map(matrix, 150.0)), cupy.asarray(times))
    return matrix, traj, prepared, fixed_point_turns(cupy.asarray(traj), matrix), gpu_exact.current_device()


def recur_sweep(n: int, spokes: int, samples: int) -> dict:
    """The time recurrence's positions per thread and accumulation on the ``fhd_2d`` problem, 1 and 8 coils."""
    cupy = cupy_module()
    rng = np.random.default_rng(2)
    matrix, traj, prepared, kfix, device = sweep_problem(n, spokes, samples)
    rows: dict = {"matrix": list(matrix), "samples": len(traj), "runs": prepared.runs.runs}
    for coils in (1, 8):
        data = (rng.standard_normal((coils, len(traj))) + 1j * rng.standard_normal((coils, len(traj))))
        records = gpu_offres.adjoint_records(kfix, prepared.taus, cupy.asarray(data.astype(np.complex64)),
                                             prepared.runs.flags)
        for rotate in (False, True):
            for vox in range(1, 9):
                if thread_floats(vox, coils, True, False, True, rotate) > 200:
                    continue
                defines = fhd_defines(2, coils, vox, True, offres=True, rotate=rotate)

                def fn(defines=defines, records=records, coils=coils):
                    out = gpu_exact.empty((coils, n * n), cupy.complex64)
                    gpu_exact.fhd_launch(out, records, matrix, defines, True, 0, None, None, device,
                                          field_map=prepared.fixed, steps=prepared.runs.steps)
                    return out

                entry = timed(fn)
                entry["rate"] = n * n * len(traj) * coils / entry["median_s"]
                entry["registers"] = int(get_module("fhd.cu", defines, device).get_function("mri_recon_fhd").num_regs)
                rows[f"{coils} coil(s) {'rotate' if rotate else 'walk'} vox={vox}"] = entry
    return rows


def tc_sweep(n: int, spokes: int, samples: int) -> dict:
    """The tensor-core kernel alone (packing included, the centre phase not) on the ``fhd_2d`` problem: 1, 2, 4, 8
    coils by 16-voxel tiles per warp (1, 2, 4), rate and registers, to tune ``configs.TC_MTILES``."""
    from mri_recon.kernels.configs import offres_tc_defines
    from mri_recon.operators.offres.gpu_offres_tc import fhd_offres_tc

    cupy = cupy_module()
    rng = np.random.default_rng(3)
    matrix, traj, prepared, kfix, device = sweep_problem(n, spokes, samples)
    rows: dict = {"matrix": list(matrix), "samples": len(traj)}
    for coils in (1, 2, 4, 8):
        data = cupy.asarray((rng.standard_normal((coils, len(traj))) + 1j * rng.standard_normal((coils, len(traj))))
                            .astype(np.complex64))
        for mtiles in (1, 2, 4):
            def fn(data=data, coils=coils, mtiles=mtiles):
                out = cupy.empty((coils, n * n), cupy.complex64)
                fhd_offres_tc(out, data, kfix, prepared.taus, prepared.fixed, matrix, device, mtiles=mtiles)
                return out

            entry = timed(fn)
            entry["rate"] = n * n * len(traj) * coils / entry["median_s"]
            entry["voxel_sample_rate"] = n * n * len(traj) / entry["median_s"]
            module = get_module("offres_tc.cu", offres_tc_defines(2, coils, mtiles), device)
            entry["registers"] = int(module.get_function("mri_recon_fhd_offres_tc").num_regs)
            rows[f"{coils} coil(s) mtiles={mtiles}"] = entry
    return rows


def impatient(n: int, samples: int) -> dict:
    cupy = cupy_module()
    rng = np.random.default_rng(1)
    matrix = (n, n, n)
    traj = ((rng.random((samples, 3)) - 0.5) * n).astype(np.float32)
    times = (rng.random(samples) * 16e-3).astype(np.float32)
    fmap = sim_offres.field_map(matrix, 150.0)
    data = cupy.asarray((rng.standard_normal((1, samples)) + 1j * rng.standard_normal((1, samples)))
                        .astype(np.complex64))
    gk, gt, gf = cupy.asarray(traj), cupy.asarray(times), cupy.asarray(fmap)
    row = {"matrix": list(matrix), "samples": samples,
           "offres": timed(lambda: gpu_offres.fhd_offres_gpu(data, gk, matrix, gf, gt), runs=5),
           "plain": timed(lambda: gpu_exact.fhd_gpu(data, gk, matrix), runs=5),
           "impatient_2008_s": 90.0}
    row["offres"]["rate"] = n ** 3 * samples / row["offres"]["median_s"]
    row["speedup_over_impatient_2008"] = 90.0 / row["offres"]["median_s"]
    return row


def recon(n: int, runs: int) -> tuple[dict, dict]:
    scan = mri_recon.simulate_scan((n, n), "spiral", coils=8, snr=30, field_map_peak=150, readout_ms=16)
    truth = scan.ground_truth
    base = {"iterations": 30, "tol": 0.0, "lam": 1e-3, "device": "gpu", "progress": False}

    def nrmse(image):
        return float(np.linalg.norm(image - truth) / np.linalg.norm(truth))

    rows = {"matrix": [n, n], "samples": scan.n_samples, "coils": 8}
    plain = scan.replace(field_map=None, times=None)
    timing, result = wall(lambda: mri_recon.reconstruct(plain, **base), runs)
    rows["uncorrected"] = {**timing, "nrmse": nrmse(result.image), "engine": result.parameters["method"]}
    timing, result = wall(lambda: mri_recon.reconstruct(scan, field_map_correction="segmented", **base), runs)
    rows["segmented"] = {**timing, "nrmse": nrmse(result.image), "label": result.parameters["field_map_correction"],
                         "timings": result.timings}
    timing, exact = wall(lambda: mri_recon.reconstruct(scan, field_map_correction="exact", **base), max(1, runs - 1))
    rows["exact"] = {**timing, "nrmse": nrmse(exact.image), "timings": exact.timings}
    for name in ("segmented", "exact"):
        rows[f"{name}_over_uncorrected"] = rows[name]["median_s"] / rows["uncorrected"]["median_s"]
    automatic = int(rows["segmented"]["label"].split("L=")[1].rstrip(")"))
    table = []
    for segments in range(1, 2 * automatic + 1):
        timing, result = wall(lambda s=segments: mri_recon.reconstruct(
            scan, field_map_correction="segmented", segments=s, **base), 1)
        table.append({"segments": segments,
                      "interpolation_error": interpolation_error(scan.field_map, scan.times, segments),
                      "difference_to_exact": float(np.linalg.norm(result.image - exact.image)
                                                   / np.linalg.norm(exact.image)),
                      "nrmse": nrmse(result.image), "seconds": timing["median_s"]})
    return rows, {"automatic": automatic, "table": table}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("output")
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke test of the script")
    parser.add_argument("--sections", default="all",
                        help="comma-separated: transforms (fhd_2d, its sweeps, forward_2d), impatient, recon "
                             "(recon_256, segments_256); default all")
    args = parser.parse_args()
    chosen = {"transforms", "impatient", "recon"} if args.sections == "all" else set(args.sections.split(","))
    cupy = cupy_module()
    if cupy is None or not gpu_available():
        print("this benchmark needs CuPy and a GPU", file=sys.stderr)
        return 1
    props = cupy.cuda.runtime.getDeviceProperties(0)
    results: dict = {"device": props["name"].decode(), "cupy": cupy.__version__, "numpy": np.__version__,
                     "python": platform.python_version(), "mri_recon": mri_recon.__version__}
    n, spokes, samples = (64, 64, 256) if args.quick else (256, 256, 1024)
    holder: dict = {}

    def run_transforms():
        holder["adjoint"], holder["forward"] = transforms(n, spokes, samples, (1, 2, 3, 4, 8))
        return holder["adjoint"]

    if "transforms" in chosen:
        section(results, "fhd_2d", run_transforms, args.output)
        section(results, "fhd_2d_recur_sweep", lambda: recur_sweep(n, spokes, samples), args.output)
        section(results, "fhd_2d_tc_sweep", lambda: tc_sweep(n, spokes, samples), args.output)
        section(results, "forward_2d", lambda: holder.get("forward", {"error": "fhd_2d failed"}), args.output)
    if "impatient" in chosen:
        section(results, "impatient_3d", lambda: impatient(32, 20000) if args.quick else impatient(128, 284_592),
                args.output)

    def run_recon():
        holder["recon"], holder["segments"] = recon(64 if args.quick else 256, 1 if args.quick else 3)
        return holder["recon"]

    if "recon" in chosen:
        section(results, "recon_256", run_recon, args.output)
        section(results, "segments_256", lambda: holder.get("segments", {"error": "recon_256 failed"}), args.output)
    with open(args.output, "w") as handle:
        json.dump(results, handle, indent=1)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
