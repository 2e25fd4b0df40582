"""The memory plan of ``mri_recon.reconstruct(scan)`` (the preparation included) against the measured peaks.

Each case is simulated in one process and written to a temporary file; a fresh process reads it and runs
``mri_recon.reconstruct(scan, device=..., ...)`` (prewhitening with the scan's noise, its weights or the
density compensation asked for, its coil maps or estimated ones). On the CPU (``--device cpu``, the default),
with ``tracemalloc`` on, measured:

- ``traced``: the peak of the memory NumPy and Python allocate (``tracemalloc``, which NumPy reports its
  arrays to), the loaded scan included; FINUFFT's and pocketfft's own buffers are not traced;
- ``rss``: the process's peak RSS minus the max RSS (``os.wait4``) of a process that only imports the same
  modules, so everything (FINUFFT's grids too, allocator and library state, tracemalloc's own bookkeeping);
- per stage, the traced peak and the peak RSS (``VmHWM``, restarted through ``/proc/self/clear_refs``; minus
  the imports-only RSS) between the preparation's end (``preparation``: prewhitening and density
  weights), the pipeline's stage ends (``coil_maps``, ``fhd``, ``psf``, ``iterations``).

On a GPU (``--device gpu``): the case is reconstructed once (kernels built), the kept cuFFT plans and CuPy's
free blocks are released and the memo is off (``MRI_RECON_MEMO_MAX=0``: the PSF is computed each run); then
the peak of the bytes held by live device arrays (a CuPy memory hook on every allocation and release, cuFFT's
work areas included) and the growth of CuPy's pool, per stage, against the device plan.

The plan is :func:`mri_recon.api.plan_prepared` (what ``reconstruct`` checks); the plan's ``psf`` is the
larger of its ``psf`` and ``spectrum`` stages (one stage of the pipeline), ``preparation`` the larger of
``prewhiten`` and ``dcf``. Usage: ``python scripts/measure_planner.py [--json out.json] [--only NAME]
[--case NAME=SPEC ...] [--device cpu|gpu]``; a ``SPEC`` is ``MATRIX,TRAJECTORY,COILS[,KEY=VALUE...]``, e.g.
``3d160-1coil-300=160x160x160,kooshball,1,spokes=300`` (keys ``spokes``, ``samples``: the simulation;
others, e.g. ``coil_maps=walsh``, ``dcf=pipe``: ``reconstruct``'s).
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
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's package, before any installed one (benchtools imports it)

from benchtools import child_rss  # noqa: E402

_child = partial(child_rss, root=ROOT)
"""Run code in a fresh interpreter with this repository on its path: its max RSS in bytes and its stdout."""
ITERATIONS = 10
# name: (matrix, trajectory, coils, reconstruct's options[, the simulation's keywords])
CASES = {
    "2d64-1coil": ((64, 64), "golden", 1, {}),
    "2d64-4coils-walsh": ((64, 64), "golden", 4, {"coil_maps": "walsh"}),
    "2d128-4coils-espirit": ((128, 128), "golden", 4, {"coil_maps": "espirit"}),
    "2d64-8coils-exact": ((64, 64), "golden", 8, {"coil_maps": "file", "method": "exact"}),
    "2d256-8coils-walsh": ((256, 256), "golden", 8, {"coil_maps": "walsh"}),
    "2d256-8coils-espirit": ((256, 256), "golden", 8, {"coil_maps": "espirit"}),
    "2d256-8coils-file": ((256, 256), "golden", 8, {"coil_maps": "file"}),
    "2d256-1coil-pipe": ((256, 256), "golden", 1, {"dcf": "pipe"}),
    "2d512-1coil-ramp": ((512, 512), "golden", 1, {"dcf": "ramp"}),
    "2d512-16coils-walsh": ((512, 512), "golden", 16, {"coil_maps": "walsh"}),
    "2d512-16coils-file": ((512, 512), "golden", 16, {"coil_maps": "file"}),
    "3d48-1coil": ((48, 48, 48), "kooshball", 1, {}),
    "3d48-8coils-walsh": ((48, 48, 48), "kooshball", 8, {"coil_maps": "walsh"}),
    "3d32-8coils-espirit": ((32, 32, 32), "kooshball", 8, {"coil_maps": "espirit"}),
    "3d64-4coils-file": ((64, 64, 64), "kooshball", 4, {"coil_maps": "file"}),
    "3d96-1coil": ((96, 96, 96), "kooshball", 1, {}),
    "3d96-1coil-walsh": ((96, 96, 96), "kooshball", 1, {"coil_maps": "walsh"}),
    "3d96-1coil-sos": ((96, 96, 96), "stack-of-stars", 1, {}),
    "3d160-1coil-300spokes": ((160, 160, 160), "kooshball", 1, {}, {"spokes": 300}),
    "3d160-1coil-1000spokes": ((160, 160, 160), "kooshball", 1, {}, {"spokes": 1000}),
    "3d160-1coil": ((160, 160, 160), "kooshball", 1, {}),
}
SIMULATION = ("spokes", "samples")
"""Keys of a ``--case`` that go to the simulation; the others are ``reconstruct``'s options."""
IMPORTS = ("import h5py, numpy, scipy.fft, finufft, threadpoolctl; import mri_recon, mri_recon.pipeline, mri_recon.io, "
           "mri_recon.operators.engines.finufft, mri_recon.prep.coilmaps, mri_recon.prep.dcf")
MAKE = """
import sys
from mri_recon.io import save_scan
from mri_recon.sim.simulate import simulate_scan
matrix, kind, coils, extra = eval(sys.argv[2])
scan = simulate_scan(tuple(matrix), kind, coils=coils, snr=30.0, seed=1, dcf="ramp", **extra)
save_scan(sys.argv[1], scan.replace(ground_truth=None, coil_maps=scan.coil_maps if coils > 1 else None))
"""
RUN = IMPORTS + """
import json, sys, time, tracemalloc
from mri_recon import api
from mri_recon.io import load_scan
options = json.loads(sys.argv[2])
prep = {k: options.pop(k) for k in ("coil_maps", "dcf") if k in options}
tracemalloc.start()
scan = load_scan(sys.argv[1])
dev, engine, plan = api.plan_prepared(scan, device="cpu", iterations={iterations}, **prep, **options)
stages, resident = {}, {}
def peak_rss():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
def reset_rss():
    with open("/proc/self/clear_refs", "w") as f:  # "5": the peak RSS starts again from the current RSS
        f.write("5")
reset_rss()
tracemalloc.reset_peak()
def mark(name):
    stages[name] = max(stages.get(name, 0), tracemalloc.get_traced_memory()[1])
    resident[name] = max(resident.get(name, 0), peak_rss())
    tracemalloc.reset_peak()
    reset_rss()
real_prepare = api.prepare_scan
def prepare(*args, **kwargs):
    out = real_prepare(*args, **kwargs)
    mark("preparation")
    return out
api.prepare_scan = prepare
names = {"upload": "coil_maps", "coil_maps": "coil_maps", "fhd": "fhd", "psf": "psf"}
def progress(stage, iteration, total, residual):
    if iteration is None:
        mark(names.get(stage, "iterations"))
start = time.perf_counter()
result = api.reconstruct(scan, iterations={iterations}, tol=0.0, device="cpu", progress=progress, **prep, **options)
seconds = time.perf_counter() - start
mark("iterations")
print(json.dumps({"seconds": seconds, "traced": stages, "resident": resident, "plan": dict(plan.stages),
                  "peak": plan.peak_bytes,
                  "samples": scan.n_samples, "method": engine.name, "coil_maps": result.parameters["coil_maps"]}))
""".replace("{iterations}", str(ITERATIONS))
GPU_RUN = "import os; os.environ['MRI_RECON_MEMO_MAX'] = '0'\n" + IMPORTS + """
import json, sys, time
import cupy
from cupy.cuda import memory_hook
from mri_recon import api
from mri_recon.io import load_scan
from mri_recon.operators.gpu import fft
options = json.loads(sys.argv[2])
prep = {k: options.pop(k) for k in ("coil_maps", "dcf") if k in options}
scan = load_scan(sys.argv[1])
run = dict(iterations={iterations}, tol=0.0, device="gpu", **prep, **options)
api.reconstruct(scan, progress=False, **run)  # kernels built
fft.release()
pool = cupy.get_default_memory_pool()
pool.free_all_blocks()
dev, engine, plan = api.plan_prepared(scan, device="gpu", iterations={iterations}, **prep, **options)
class Live(memory_hook.MemoryHook):
    name = "LivePeak"
    def __init__(self):
        self.sizes, self.live, self.peak = {}, 0, 0
    def malloc_postprocess(self, device_id, size, mem_size, mem_ptr, pmem_id):
        self.sizes[mem_ptr] = mem_size
        self.live += mem_size
        self.peak = max(self.peak, self.live)
    def free_postprocess(self, device_id, mem_size, mem_ptr, pmem_id):
        self.live -= self.sizes.pop(mem_ptr, 0)
hook, live, grown, held = Live(), {}, {}, pool.total_bytes()
def mark(name):
    cupy.cuda.Device().synchronize()
    live[name] = max(live.get(name, 0), hook.peak)
    grown[name] = max(grown.get(name, 0), pool.total_bytes() - held)
    hook.peak = hook.live
real_prepare = api.prepare_on_device
def prepare(*args, **kwargs):
    out = real_prepare(*args, **kwargs)
    mark("preparation")
    return out
api.prepare_on_device = prepare
names = {"upload": "coil_maps", "coil_maps": "coil_maps", "fhd": "fhd", "psf": "psf"}
def progress(stage, iteration, total, residual):
    if iteration is None:
        mark(names.get(stage, "iterations"))
start = time.perf_counter()
with hook:
    result = api.reconstruct(scan, progress=progress, **run)
    mark("iterations")
seconds = time.perf_counter() - start
name = cupy.cuda.runtime.getDeviceProperties(dev.index)["name"].decode()
print(json.dumps({"seconds": seconds, "traced": live, "resident": grown, "plan": dict(plan.stages),
                  "peak": plan.peak_bytes, "device": str(dev), "gpu": name,
                  "samples": scan.n_samples, "method": engine.name, "coil_maps": result.parameters["coil_maps"]}))
""".replace("{iterations}", str(ITERATIONS))


def planned_stages(plan: dict[str, int]) -> dict[str, int]:
    """The plan's stages as the pipeline reports them (see the module docstring)."""
    out = {"preparation": max(plan.get("prewhiten", 0), plan.get("dcf", 0)), "coil_maps": plan.get("coil_maps", 0),
           "fhd": plan["fhd"], "psf": max(plan["psf"], plan.get("spectrum", 0)), "iterations": plan["iterations"]}
    return {name: value for name, value in out.items() if value}


def finufft_grids(matrix: tuple[int, ...], coils: int, method: str) -> dict[str, int]:
    """Bytes of FINUFFT's fine grids in the ``fhd`` and ``psf`` stages, which tracemalloc does not see (their
    shapes are FINUFFT's own: tests/test_planner_png.py reads them from its debug output)."""
    from mri_recon.arrays.backend import cpu_threads  # noqa: PLC0415 - after the path is set
    from mri_recon.operators.engines.encoding import NUFFT_EPS  # noqa: PLC0415
    from mri_recon.operators.engines.finufft import fine_grid_shape  # noqa: PLC0415

    if method != "nufft":
        return {}
    big = tuple(2 * n for n in matrix)
    return {"fhd": min(cpu_threads(), coils) * math.prod(fine_grid_shape(matrix, NUFFT_EPS)) * 16,
            "psf": math.prod(fine_grid_shape(big, NUFFT_EPS)) * 16}


def parse_case(text: str) -> tuple[str, tuple]:
    """``NAME=MATRIX,TRAJECTORY,COILS[,KEY=VALUE...]`` (see the module docstring) as a :data:`CASES` entry."""
    name, _, spec = text.partition("=")
    matrix, kind, coils, *pairs = spec.split(",")
    options, simulation = {}, {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        (simulation if key in SIMULATION else options)[key] = int(value) if key in SIMULATION else value
    return name, (tuple(int(n) for n in matrix.split("x")), kind, int(coils), options, simulation)


def measure(name: str, case: tuple, folder: str, baseline: int, gpu: bool) -> dict:
    """Simulate the case, reconstruct it in a fresh process and compare each stage with the plan. ``traced``
    and ``rss`` are, on a GPU, the live device arrays' peak and the growth of CuPy's pool."""
    matrix, kind, coils, options, *extra = case
    path = str(Path(folder) / f"{name}.h5")
    _child(MAKE, path, repr((list(matrix), kind, coils, extra[0] if extra else {})))
    _, out = _child(GPU_RUN if gpu else RUN, path, json.dumps(options))
    os.unlink(path)
    info = json.loads(out.splitlines()[-1])
    planned, traced = planned_stages(info["plan"]), info["traced"]
    resident = {stage: value - baseline for stage, value in info["resident"].items()}
    ratios = {stage: traced[stage] / planned[stage] for stage in planned if traced.get(stage)}
    rss_ratios = {stage: resident[stage] / planned[stage] for stage in planned if resident.get(stage)}
    return {"case": name, "matrix": list(matrix), "coils": coils, "options": options, "samples": info["samples"],
            "simulation": extra[0] if extra else {}, "device": info.get("device", "cpu"), "gpu": info.get("gpu"),
            "method": info["method"], "coil_maps": info["coil_maps"], "plan_bytes": info["peak"],
            "traced_bytes": max(traced.values()), "rss_bytes": max(resident.values()), "planned_stages": planned,
            "traced_stages": traced, "stage_ratios": ratios,
            "rss_stages": resident, "rss_stage_ratios": rss_ratios,
            "finufft_grids": {} if gpu else finufft_grids(matrix, coils, info["method"]),
            "seconds": info["seconds"]}


def markdown(rows: list[dict]) -> str:
    """The table of docs/planner.md: whole runs, then every stage (MiB). On a GPU: the live device arrays'
    peak and the growth of CuPy's pool instead of the traced peak and the RSS."""
    mib = 2**20
    gpu = any(r.get("device", "cpu") != "cpu" for r in rows)
    traced_name, rss_name = ("live", "pool") if gpu else ("traced", "RSS")
    lines = [f"| case | matrix | coils | maps / dcf | samples | plan | {traced_name} | {traced_name} / plan "
             f"| {rss_name} | {rss_name} / plan | peak stage | time (s) |",
             "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---|---:|"]
    for r in rows:
        r = {**r, "rss_bytes": max(r["rss_stages"].values())}
        stage = max(r["planned_stages"], key=r["planned_stages"].get)
        prep = "/".join(str(v) for k, v in r["options"].items() if k in ("coil_maps", "dcf")) or r["coil_maps"]
        lines.append(f"| {r['case']} | {'x'.join(map(str, r['matrix']))} | {r['coils']} | {prep} | {r['samples']} "
                     f"| {r['plan_bytes'] / mib:.1f} | {r['traced_bytes'] / mib:.1f} "
                     f"| {r['traced_bytes'] / r['plan_bytes']:.2f} | {r['rss_bytes'] / mib:.1f} "
                     f"| {r['rss_bytes'] / r['plan_bytes']:.2f} | {stage} | {r['seconds']:.1f} |")
    added = "" if gpu else " (+ FINUFFT grids)"
    lines += ["", f"| case | stage | plan (MiB) | {traced_name}{added} | ratio | {rss_name} (MiB) "
              f"| {rss_name} / plan |", "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        grids = {} if gpu else r.get("finufft_grids") or finufft_grids(tuple(r["matrix"]), r["coils"], r["method"])
        for stage, planned in r["planned_stages"].items():
            traced = r["traced_stages"].get(stage, 0) + grids.get(stage, 0)
            rss = r["rss_stages"].get(stage, 0)
            lines.append(f"| {r['case']} | {stage} | {planned / mib:.1f} | {traced / mib:.1f} | {traced / planned:.2f} "
                         f"| {rss / mib:.1f} | {rss / planned:.2f} |")
    return "\n".join(lines)


def report(row: dict, human_bytes) -> None:
    """One line per case: plan, measured peaks and their ratios, the stage farthest from its plan."""
    worst = max(row["rss_stage_ratios"].items(), key=lambda kv: abs(kv[1] - 1))
    traced, rss = ("live", "pool") if row["device"] != "cpu" else ("traced", "rss")
    plan = row["plan_bytes"]
    print(f"{row['case']:<24} plan {human_bytes(plan):>10}  {traced} {human_bytes(row['traced_bytes']):>10} "
          f"({row['traced_bytes'] / plan:.2f})  {rss} {human_bytes(row['rss_bytes']):>10} "
          f"({row['rss_bytes'] / plan:.2f})  farthest stage ({rss}) {worst[0]} {worst[1]:.2f}  "
          f"{row['seconds']:.1f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", default=None)
    parser.add_argument("--only", default=None, help="run the cases whose name contains this")
    parser.add_argument("--case", action="append", default=[], help="NAME=MATRIX,TRAJECTORY,COILS[,KEY=VALUE...]: "
                        "run this case (with --only or alone: instead of the table's)")
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--markdown", default=None, help="print the tables of this JSON file and exit")
    args = parser.parse_args()
    if args.markdown:
        print(markdown(json.loads(Path(args.markdown).read_text())["rows"]))
        return
    from mri_recon.planning.planner import human_bytes  # noqa: PLC0415 - after the path is set

    cases = dict(parse_case(text) for text in args.case) if args.case else CASES
    gpu = args.device == "gpu"
    baseline = 0 if gpu else min(_child(IMPORTS)[0] for _ in range(3))
    print(f"baseline (imports only): {human_bytes(baseline)}")
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name, case in cases.items():
            if args.only and args.only not in name:
                continue
            rows.append(measure(name, case, folder, baseline, gpu))
            report(rows[-1], human_bytes)
    info = {"date": time.strftime("%Y-%m-%d"), "cpus": len(os.sched_getaffinity(0)), "machine": platform.machine(),
            "python": platform.python_version(), "iterations": ITERATIONS, "baseline_bytes": baseline,
            "device": args.device, "rows": rows}
    if args.json:
        Path(args.json).write_text(json.dumps(info, indent=1))


if __name__ == "__main__":
    main()
