"""Benchmark the GPU post-filter against cupyx.scipy.ndimage.correlate, and the public call against its kernels.

Usage: python scripts/bench_filter.py OUT.json
       python scripts/bench_filter.py --plans-only   (no GPU needed: print every case's launch plans)

For each case (image size, filter radius) every strategy of :mod:`mri_recon.filters.plan` and CuPy's
``cupyx.scipy.ndimage.correlate`` filter the same float32 image with the same Gaussian filter
(sigma = r / 2, boundary zero). Every variant is first checked against CuPy (relative error), then timed
with CUDA events: 3 warm-up runs (which also compile), then the median over 25 groups of 10 back-to-back
runs (time per run = group time / 10, so the host's cost of queuing a launch hides behind the previous
one, as it does in a pipeline). Reported per variant:

- ``ms``: the kernels of a prepared plan (what a reconstruction loop pays), ``call_ms``: the public
  ``gpu_filter.correlate`` call including validation and planning, timed alone (host overhead included);
- ``tbps``: effective bandwidth, (bytes read once + bytes written once) / ``ms``, against the measured
  device-to-device copy rate of the same array (``copy_tbps``);
- ``op_per_byte``: the seed's arithmetic intensity of the tile used, outputs x taps x 2 OP over the 4-byte
  elements a block stages (strategy B stages no halo: its halo is read through the caches).

Per case, the public call (issue 10: "a public call costs the kernel, not the kernel plus its set-up"):

- ``public``: ``mri_recon.filters.convolve(image, taps)`` on a CuPy image, called :data:`PUBLIC_GROUP`
  times back to back between two CUDA events (median over :data:`REPEATS` groups, after warm-up), with
  NumPy taps (``numpy_ms``) and CuPy taps (``cupy_ms``); ``kernel_ms`` is the same auto plan's kernels
  alone (``execute`` of a prepared plan into a preallocated output, timed the same way);
  ``*_ratio`` = public / kernel (target: <= 1.10); ``host_us``: host wall-clock time per public call,
  measured without synchronizing (what the CPU spends queuing one call: it hides behind the kernel while
  it is shorter than the kernel).

Each case runs in its own try/except; failures are recorded in the JSON and the run continues.
"""

from __future__ import annotations

import datetime
import json
import math
import platform
import sys
import time
import traceback

import numpy as np

from mri_recon import filters
from mri_recon.arrays import backend
from mri_recon.filters import gpu as gpu_filter
from mri_recon.filters import plan as gpu_plan

CASES = [
    ("8192x8192 r=2", (8192, 8192), 2),
    ("8192x8192 r=7", (8192, 8192), 7),
    ("512^3 r=2", (512, 512, 512), 2),
    ("256^3 r=1", (256, 256, 256), 1),
    ("256x256 r=2", (256, 256), 2),
]
STRATEGIES = ("A", "B", "register", "stream", "separable", "auto")
WARMUP = 3
REPEATS = 25
GROUP = 10
PUBLIC_GROUP = 50
PUBLIC_TARGET = 1.10


def median_ms(cupy, fn, repeats: int = REPEATS, group: int = GROUP) -> float:
    """Median over ``repeats`` groups of ``group`` back-to-back runs of ``fn`` (CUDA events around each group,
    divided by ``group``), after :data:`WARMUP` runs. ``group=1`` times single calls."""
    for _ in range(WARMUP):
        fn()
    cupy.cuda.get_current_stream().synchronize()
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    times = []
    for _ in range(repeats):
        start.record()
        for _ in range(group):
            fn()
        end.record()
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end) / group)
    return float(np.median(times))


def op_per_byte(launch: gpu_plan.Launch) -> float:
    """Seed formula: outputs per block x taps x 2 OP / (staged input elements x 4 bytes)."""
    taps = math.prod(2 * r + 1 for r in launch.radii)
    return math.prod(launch.out_tile) * taps * 2 / (math.prod(launch.in_tile) * 4)


def describe(launch: gpu_plan.Launch) -> dict:
    return {"kernel": launch.name, "defines": dict(launch.defines), "view": launch.view, "batch": launch.batch,
            "grid": launch.grid, "block": launch.block, "shared_bytes": launch.shared_bytes,
            "out_tile": launch.out_tile, "in_tile": launch.in_tile, "op_per_byte": round(op_per_byte(launch), 3)}


def run_case(cupy, cupyx_ndimage, name: str, shape: tuple[int, ...], radius: int, rng) -> dict:
    sigma = radius / 2
    factors = [filters.gaussian_taps(sigma, radius) for _ in shape]
    weights = filters.outer_product(factors)
    image = cupy.asarray(rng.standard_normal(shape, dtype=np.float32))
    nbytes = 2 * image.nbytes
    record: dict = {"name": name, "shape": shape, "radius": radius, "dtype": "float32", "mode": "zero",
                    "filter": f"gaussian sigma={sigma}", "variants": []}

    copy = cupy.empty_like(image)
    copy_ms = median_ms(cupy, lambda: cupy.copyto(copy, image))
    record["copy_tbps"] = nbytes / copy_ms / 1e9

    reference = cupy.empty_like(image)
    weights_gpu = cupy.asarray(weights)
    correlate = cupyx_ndimage.correlate
    cupyx_ms = median_ms(cupy, lambda: correlate(image, weights_gpu, output=reference, mode="constant", cval=0.0))
    record["cupyx_ms"] = cupyx_ms
    record["cupyx_tbps"] = nbytes / cupyx_ms / 1e9
    norm = float(cupy.linalg.norm(reference))

    out = cupy.empty_like(image)
    for strategy in STRATEGIES:
        entry: dict = {"strategy": strategy}
        record["variants"].append(entry)
        try:
            launches = gpu_plan.plan(shape, weights, strategy=strategy, factors=factors)
            entry["launches"] = [describe(launch) for launch in launches]
            out.fill(np.nan)
            gpu_filter.execute(launches, image, out=out)
            entry["rel_err"] = float(cupy.linalg.norm(out - reference)) / norm
            entry["ms"] = median_ms(cupy, lambda launches=launches: gpu_filter.execute(launches, image, out=out))
            entry["call_ms"] = median_ms(cupy, lambda strategy=strategy: gpu_filter.correlate(
                image, weights, strategy=strategy, factors=factors, out=out), group=1)
            entry["tbps"] = nbytes / entry["ms"] / 1e9
            entry["speedup_vs_cupyx"] = cupyx_ms / entry["ms"]
        except Exception as exc:  # noqa: BLE001 - recorded, the benchmark goes on
            entry["error"] = f"{type(exc).__name__}: {exc}"
            entry["traceback"] = traceback.format_exc(limit=3)
    try:
        record["public"] = public_call(cupy, image, weights, weights_gpu, out)
    except Exception as exc:  # noqa: BLE001 - recorded, the benchmark goes on
        record["public"] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(limit=3)}
    return record


def public_call(cupy, image, weights: np.ndarray, weights_gpu, out) -> dict:
    """Back-to-back public ``convolve`` calls (NumPy and CuPy taps) beside the kernels of the same plan."""
    launches = gpu_plan.plan(image.shape, weights, factors=filters.separable_factors(weights))
    kernel_ms = median_ms(cupy, lambda: gpu_filter.execute(launches, image, out=out), group=PUBLIC_GROUP)
    result: dict = {"strategy": launches[0].strategy if len(launches) == 1 else "separable",
                    "group": PUBLIC_GROUP, "kernel_ms": kernel_ms}
    for name, taps in (("numpy", weights), ("cupy", weights_gpu)):
        def call(taps=taps):
            return filters.convolve(image, taps, mode="zero")

        ms = median_ms(cupy, call, group=PUBLIC_GROUP)
        began = time.perf_counter()
        for _ in range(PUBLIC_GROUP):
            call()
        host_us = (time.perf_counter() - began) / PUBLIC_GROUP * 1e6
        cupy.cuda.get_current_stream().synchronize()
        result[f"{name}_ms"] = ms
        result[f"{name}_ratio"] = ms / kernel_ms
        result[f"{name}_host_us"] = host_us
    result["target_met"] = max(result["numpy_ratio"], result["cupy_ratio"]) <= PUBLIC_TARGET
    return result


def environment(cupy) -> dict:
    props = cupy.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return {"device": name, "cupy": cupy.__version__, "cuda_runtime": cupy.cuda.runtime.runtimeGetVersion(),
            "driver": cupy.cuda.runtime.driverGetVersion(), "numpy": np.__version__,
            "python": platform.python_version(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "warmup": WARMUP, "repeats": REPEATS, "timing": "CUDA events, median"}


def print_table(result: dict) -> None:
    print(f"{result['environment']['device']}  cupy {result['environment']['cupy']}")
    print(f"{'case':16s} {'variant':10s} {'ms':>9s} {'call ms':>9s} {'TB/s':>6s} {'x cupyx':>8s} {'OP/B':>6s} "
          f"{'rel err':>8s}")
    for case in result["cases"]:
        if "error" in case:
            print(f"{case['name']:16s} ERROR {case['error']}")
            continue
        print(f"{case['name']:16s} {'cupyx':10s} {case['cupyx_ms']:9.3f} {'':9s} {case['cupyx_tbps']:6.2f} "
              f"{1.0:8.2f} {'':6s} {'':8s}  (copy {case['copy_tbps']:.2f} TB/s)")
        for v in case["variants"]:
            if "error" in v:
                print(f"{'':16s} {v['strategy']:10s} ERROR {v['error'][:70]}")
                continue
            intensity = sum(launch["op_per_byte"] for launch in v["launches"]) / len(v["launches"])
            print(f"{'':16s} {v['strategy']:10s} {v['ms']:9.3f} {v['call_ms']:9.3f} {v['tbps']:6.2f} "
                  f"{v['speedup_vs_cupyx']:8.2f} {intensity:6.2f} {v['rel_err']:8.1e}")
        p = case.get("public", {})
        if "error" in p:
            print(f"{'':16s} public     ERROR {p['error'][:70]}")
        elif p:
            print(f"{'':16s} public convolve ({p['strategy']}, {p['group']} back to back): kernel "
                  f"{p['kernel_ms']:.3f} ms; NumPy taps {p['numpy_ms']:.3f} ms (x{p['numpy_ratio']:.3f}, host "
                  f"{p['numpy_host_us']:.0f} us); CuPy taps {p['cupy_ms']:.3f} ms (x{p['cupy_ratio']:.3f}, host "
                  f"{p['cupy_host_us']:.0f} us); target x{PUBLIC_TARGET:.2f} {'met' if p['target_met'] else 'MISSED'}")


def print_plans() -> None:
    """The launches of every case and strategy (no GPU needed): what the benchmark will run."""
    for name, shape, radius in CASES:
        factors = [filters.gaussian_taps(radius / 2, radius) for _ in shape]
        weights = filters.outer_product(factors)
        for strategy in STRATEGIES:
            try:
                launches = [describe(launch) for launch in gpu_plan.plan(shape, weights, strategy=strategy,
                                                                         factors=factors)]
            except Exception as exc:  # noqa: BLE001 - printed, as the GPU run records it
                print(f"{name:16s} {strategy:10s} {type(exc).__name__}: {exc}")
                continue
            for launch in launches:
                print(f"{name:16s} {strategy:10s} {launch['kernel']:24s} grid {launch['grid']} block "
                      f"{launch['block']} shared {launch['shared_bytes']} OP/B {launch['op_per_byte']}")


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[1] == "--plans-only":
        print_plans()
        return 0
    if len(argv) != 2:
        print("usage: python scripts/bench_filter.py OUT.json | --plans-only", file=sys.stderr)
        return 2
    cupy = backend.cupy_module()
    if not backend.gpu_available():
        print("bench_filter needs CuPy and a CUDA GPU", file=sys.stderr)
        return 1
    import cupyx.scipy.ndimage as cupyx_ndimage  # noqa: PLC0415 - only on a GPU machine

    rng = np.random.default_rng(0)
    result = {"environment": environment(cupy), "cases": []}
    began = time.perf_counter()
    for name, shape, radius in CASES:
        try:
            result["cases"].append(run_case(cupy, cupyx_ndimage, name, shape, radius, rng))
        except Exception as exc:  # noqa: BLE001 - recorded, the benchmark goes on
            result["cases"].append({"name": name, "shape": shape, "radius": radius,
                                    "error": f"{type(exc).__name__}: {exc}",
                                    "traceback": traceback.format_exc(limit=3)})
        cupy.get_default_memory_pool().free_all_blocks()
    result["seconds"] = time.perf_counter() - began
    with open(argv[1], "w") as handle:
        json.dump(result, handle, indent=2, default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o))
    print_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
