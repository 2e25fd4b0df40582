"""Throughput of batch reconstruction: scans per second of ``reconstruct_many`` in this process against local
Dask clusters of 1, 2, ... workers (CPU processes, or one worker per GPU), the outputs compared bit for bit.

Problem: ``--scans`` scans of one trajectory (golden-angle radial, 2x readout oversampling, ``--coils``
coils with their maps in the file, pipe density weights): one simulated scan and copies of it with fresh
noise added to the k-space, written to a temporary folder as schema-v1 HDF5. Every run reconstructs all of
them into a fresh output folder with a fresh PSF cache (``overwrite``), so each run computes the PSF once
(exact engines; the GPU NUFFT computes it per scan, faster than a cache read) and writes every output; the
JSON counts the PSF computations.

Timing: every cluster is started first (its start-up timed separately, not counted); then each
configuration (in-process, each worker count) is warmed up by one untimed run (imports, FINUFFT and FFT
set-up, CUDA context and kernel compilation in every worker), and the configurations are timed in turn,
``--repeats`` rounds, so that the load of a shared machine falls on all alike; the median wall time of
``reconstruct_many`` (submission to the last output written) gives the throughput. Each worker count's
outputs are compared with the in-process run's: image and residuals bit-identical, and the largest relative
L2 difference of the images.

Usage (one line each):

  CPU, 2 cores:  python scripts/bench_batch.py OUT.json --scans 8 --matrix 64 --coils 4 --device cpu --workers 1,2
  H200:          python scripts/bench_batch.py OUT.json --scans 32 --matrix 256 --coils 8 --device gpu --workers 1
  PSF once:      the same with --method exact (the exact engines read the shared PSF cache; the GPU NUFFT,
                 which method auto picks at this size, computes its PSF per scan, faster than a cache read)
  2 GPUs:        python scripts/bench_batch.py OUT.json --scans 32 --matrix 256 --coils 8 --device gpu --workers 1,2

``--workers all`` asks for one worker per visible GPU. A summary goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np

import mri_recon
from mri_recon.arrays.backend import gpu_count
from mri_recon.batch import reconstruct_many
from mri_recon.batch.cluster import start_local, visible_gpus
from mri_recon.io import save_scan
from mri_recon.sim.simulate import simulate_scan


def make_scans(folder: Path, n: int, matrix: tuple[int, int], coils: int) -> list[Path]:
    """``n`` scans of one trajectory: one simulated scan, and copies with fresh noise (simulating a 256^2
    8-coil scan takes seconds; adding noise, milliseconds)."""
    first = simulate_scan(matrix, "golden", coils=coils, snr=30, seed=1000)
    sigma = float(np.std(first.noise)) if first.noise is not None else 1e-3 * float(np.abs(first.kspace).max())
    gen = np.random.default_rng(1000)
    paths = []
    for i in range(n):
        noise = gen.standard_normal((2, *first.kspace.shape)).astype(np.float32) * np.float32(sigma / np.sqrt(2))
        scan = first if i == 0 else dataclasses.replace(first, kspace=first.kspace + (noise[0] + 1j * noise[1]))
        path = folder / f"scan{i:03d}.h5"
        save_scan(path, scan)
        paths.append(path)
    return paths


def images(report) -> list[tuple[np.ndarray, np.ndarray]]:
    out = []
    for outcome in report.outcomes:
        with h5py.File(outcome.output) as f:
            out.append((f["image"][()], f["residuals"][()]))
    return out


def one_run(scans, folder: Path, options: dict, client=None) -> tuple[float, object, dict | None]:
    """Wall time and report of one run, and with a client its timeline (:func:`timeline`)."""
    out, cache = tempfile.mkdtemp(dir=folder, prefix="out"), tempfile.mkdtemp(dir=folder, prefix="cache")
    stream = contextlib.nullcontext()
    if client is not None:
        from distributed import get_task_stream

        stream = get_task_stream(client)
    with stream as tasks:
        wall_start = time.time()
        started = time.perf_counter()
        report = reconstruct_many(scans, out, client, overwrite=True, cache_dir=cache, **options)
        seconds = time.perf_counter() - started
        wall_end = time.time()
    if not report.ok:
        raise SystemExit(f"bench_batch: a scan failed: {report.failed[0].input}: {report.failed[0].reason}")
    if client is None:
        return seconds, report, None
    names = {address: info.get("name") for address, info in client.scheduler_info()["workers"].items()}
    return seconds, report, timeline(tasks.data, wall_start, wall_end, names)


def timeline(records: list[dict], start: float, end: float, names: dict | None = None) -> dict:
    """Where a run's wall time went, from Dask's task stream: the scans each worker ran, the time from the
    call to the first scan's start (``lead_s``) and from the last scan's end to the return (``tail_s``), and
    per worker (by its name, ``gpu-N`` for the GPU workers, where ``names`` maps addresses to names) the time
    running scans (``busy_s``) and between them (``gaps_s``)."""
    spans: dict[str, list[tuple[float, float]]] = {}
    for record in records:
        for part in record.get("startstops", ()):
            if part.get("action") == "compute":
                worker = record["worker"]
                spans.setdefault(str((names or {}).get(worker, worker)), []).append((part["start"], part["stop"]))
    if not spans:
        return {}
    per_worker = {}
    for worker, items in sorted(spans.items()):
        items.sort()
        per_worker[worker] = {"scans": len(items), "busy_s": sum(b - a for a, b in items),
                              "gaps_s": sum(items[i][0] - items[i - 1][1] for i in range(1, len(items))),
                              "first_start_s": items[0][0] - start, "last_stop_s": items[-1][1] - start}
    return {"lead_s": min(w["first_start_s"] for w in per_worker.values()),
            "tail_s": end - start - max(w["last_stop_s"] for w in per_worker.values()),
            "wall_s": end - start, "workers": per_worker}


def summarize(scans, runs: list[float], report) -> dict:
    wall = statistics.median(runs)
    return {"wall_s": runs, "median_wall_s": wall, "scans_per_s": len(scans) / wall,
            "psf_computed": sum(o.psf not in ("hit", "memory") for o in report.outcomes),
            "psf_states": sorted({o.psf for o in report.outcomes}),
            "per_scan_s_median": statistics.median(o.seconds for o in report.outcomes),
            "engine": report.outcomes[0].engine, "devices": sorted({o.device for o in report.outcomes}),
            "workers_used": len({o.worker for o in report.outcomes}), "where": report.where}


def compare(a, b) -> dict:
    identical = all(x[0].tobytes() == y[0].tobytes() and x[1].tobytes() == y[1].tobytes() for x, y in zip(a, b))
    rel = max(float(np.linalg.norm(x[0].astype(np.complex128) - y[0]) / np.linalg.norm(y[0].astype(np.complex128)))
              for x, y in zip(a, b))
    return {"bit_identical": identical, "max_relative_l2": rel}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="JSON output file")
    parser.add_argument("--scans", type=int, default=8)
    parser.add_argument("--matrix", type=int, default=64)
    parser.add_argument("--coils", type=int, default=4)
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--method", default="auto", choices=["auto", "exact", "nufft"])
    parser.add_argument("--device", default="cpu", choices=["cpu", "gpu"])
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts, or 'all' (GPUs)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dask-default-env", action="store_true",
                        help="start the workers with Dask's default environment (OMP_NUM_THREADS=1, "
                             "MALLOC_TRIM_THRESHOLD_, ...) instead of ours, to measure what it costs")
    parser.add_argument("--saturation", type=float, default=None,
                        help="Dask's worker-saturation for the local clusters (default: mri-recon's)")
    parser.add_argument("--no-affinity", action="store_true",
                        help="leave the GPU workers on every CPU (not on those next to their GPU)")
    args = parser.parse_args()
    from mri_recon.batch import cluster as cluster_module

    if args.saturation is not None:
        cluster_module.WORKER_SATURATION = args.saturation
    cluster_module.GPU_AFFINITY = not args.no_affinity
    gpus = visible_gpus() if args.device == "gpu" else []
    counts = ([len(gpus)] if args.workers == "all" else [int(w) for w in args.workers.split(",")])
    options = {"iterations": args.iterations, "method": args.method, "device": args.device, "tol": 0.0}
    result = {"benchmark": "batch", "mri_recon_version": mri_recon.__version__, "python": platform.python_version(),
              "machine": platform.machine(), "cpus": os.cpu_count(), "device": args.device,
              "visible_gpus": gpus, "gpu_count": gpu_count(), "scans": args.scans, "matrix": [args.matrix] * 2,
              "coils": args.coils, "iterations": args.iterations, "method": args.method, "repeats": args.repeats,
              "dask_default_env": args.dask_default_env,
              "worker_saturation": args.saturation, "gpu_affinity": not args.no_affinity,
              "load_before": os.getloadavg(), "runs": {}}
    with tempfile.TemporaryDirectory(prefix="bench_batch.") as tmp:
        folder = Path(tmp)
        scans = make_scans(folder, args.scans, (args.matrix, args.matrix), args.coils)
        configs = {"in_process": None}
        clusters = {}
        try:
            for count in counts:
                started = time.perf_counter()
                if args.dask_default_env:
                    clusters[count] = start_local_dask_defaults(count, args.device)
                else:
                    clusters[count] = start_local(count, args.device)
                clusters[count].startup_s = time.perf_counter() - started
                configs[f"workers_{count}"] = clusters[count].client
            # every configuration warmed up once, then timed in turn (a shared machine's load hits all alike)
            times = {name: [] for name in configs}
            lines = {name: [] for name in configs}
            last = {}
            for attempt in range(args.repeats + 1):
                for name, client in configs.items():
                    seconds, last[name], line = one_run(scans, folder, options, client)
                    if attempt:
                        times[name].append(seconds)
                        lines[name].append(line)
        finally:
            for cluster in clusters.values():
                cluster.close()
        base = summarize(scans, times["in_process"], last["in_process"])
        reference = images(last["in_process"])
        result["runs"]["in_process"] = base
        print(f"in process: {base['scans_per_s']:.2f} scans/s ({base['engine']} on {base['devices']}, "
              f"PSF computed {base['psf_computed']}x)", file=sys.stderr)
        for count in counts:
            name, cluster = f"workers_{count}", clusters[count]
            run = summarize(scans, times[name], last[name])
            run.update(compare(images(last[name]), reference), cluster=cluster.kind, startup_s=cluster.startup_s,
                       gpus=cluster.gpus, vs_in_process=run["scans_per_s"] / base["scans_per_s"],
                       timelines=lines[name])
            result["runs"][name] = run
            print(f"{count} worker(s): {run['scans_per_s']:.2f} scans/s ({run['vs_in_process']:.2f}x in-process; "
                  f"{cluster.kind}; bit-identical {run['bit_identical']}, PSF computed {run['psf_computed']}x)",
                  file=sys.stderr)
            for line in filter(None, lines[name]):
                print("  " + "/".join(line["workers"]) + ": scans "
                      + "/".join(str(w["scans"]) for w in line["workers"].values())
                      + f", lead {line['lead_s']:.3f} s, tail {line['tail_s']:.3f} s, gaps "
                      + "/".join(f"{w['gaps_s']:.3f}" for w in line["workers"].values()) + " s, busy "
                      + "/".join(f"{w['busy_s']:.3f}" for w in line["workers"].values()) + " s", file=sys.stderr)
    if len(counts) > 1:
        first = result["runs"][f"workers_{counts[0]}"]["scans_per_s"]
        result["speedup_vs_first_count"] = {f"workers_{c}": result["runs"][f"workers_{c}"]["scans_per_s"] / first
                                            for c in counts}
        print(f"speed-up against {counts[0]} worker(s): {result['speedup_vs_first_count']}", file=sys.stderr)
    result["load_after"] = os.getloadavg()
    args.out.write_text(json.dumps(result, indent=2) + "\n")


def start_local_dask_defaults(count: int, device: str):
    """A local cluster as :func:`start_local` makes it, but with Dask's default worker environment."""
    from mri_recon.batch import cluster as module

    saved = module.NANNY_ENVIRON
    module.NANNY_ENVIRON = ()
    try:
        return start_local(count, device)
    finally:
        module.NANNY_ENVIRON = saved


if __name__ == "__main__":
    main()
