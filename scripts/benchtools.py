"""Helpers shared by the benchmark scripts (imported from scripts/ when a script runs as
``python scripts/NAME.py``): the golden-angle test trajectory, CUDA-event and wall-clock timing, float64
reference sums, sections that record their errors, child processes, JSON reports and a server to talk to."""

from __future__ import annotations

import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
import traceback

import numpy as np

from mri_recon.arrays.backend import cupy_module


def radial_2d(n: int, spokes: int, samples: int) -> np.ndarray:
    """Golden-angle radial spokes through the centre, |k| < n/2 (cycles per field of view)."""
    radius = (np.arange(samples) - samples / 2) / samples * n
    angles = np.arange(spokes) * np.pi * (math.sqrt(5.0) - 1.0) / 2.0
    traj = np.stack([np.cos(angles)[:, None] * radius, np.sin(angles)[:, None] * radius], axis=-1)
    return traj.reshape(-1, 2).astype(np.float32)


def cuda_timed(fn, runs: int, warmup: int = 2) -> dict:
    """``fn``'s device time by CUDA events over ``runs`` runs after ``warmup`` (median, minimum, runs)."""
    cupy = cupy_module()
    for _ in range(warmup):
        fn()
    cupy.cuda.Device().synchronize()
    times = []
    for _ in range(runs):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop) / 1e3)
    return {"median_s": statistics.median(times), "min_s": min(times), "runs": runs}


def wall_timed(fn, repeats: int, sync=lambda: None, warmup: int = 1) -> tuple[float, list[float], object]:
    """``fn``'s wall time: ``warmup`` calls (compilation, FFT plans, caches), ``sync()``, then ``repeats`` calls
    each followed by ``sync()`` (the device synchronized; nothing on the CPU). The median, every time, and the
    last call's result."""
    out = None
    for _ in range(warmup):
        out = fn()
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times), times, out


def positions(matrix, voxels) -> np.ndarray:
    """r = (j - floor(N/2)) / N at C-order flat voxel indices (float64, (V, D))."""
    idx = np.unravel_index(voxels, matrix)
    return np.stack([(i - n // 2) / n for i, n in zip(idx, matrix)], axis=1)


def exact_adjoint(xp, data, traj, matrix, voxels, chunk=1 << 15, block=512):
    """sum_m d[c, m] exp(+i 2 pi k_m . r) at ``voxels`` in float64, on the arrays' device (``xp``): samples
    ``chunk`` and voxels ``block`` at a time."""
    r = xp.asarray(positions(matrix, voxels))
    out = xp.zeros((data.shape[0], len(voxels)), dtype=np.complex128)
    for m in range(0, traj.shape[0], chunk):
        k = traj[m:m + chunk].astype(np.float64)
        d = data[:, m:m + chunk].astype(np.complex128)
        for v in range(0, len(voxels), block):
            cycles = k @ r[v:v + block].T
            cycles -= xp.rint(cycles)
            out[:, v:v + block] += d @ xp.exp(2j * np.pi * cycles)
    return out


def exact_forward(xp, image, traj, samples, chunk=1 << 15):
    """sum_n x[c, n] exp(-i 2 pi k_m . r_n) at sample indices ``samples`` in float64, on the arrays' device."""
    matrix = image.shape[1:]
    flat = image.reshape(image.shape[0], -1)
    k = traj[xp.asarray(samples)].astype(np.float64)
    out = xp.zeros((image.shape[0], len(samples)), dtype=np.complex128)
    for v in range(0, flat.shape[1], chunk):
        r = xp.asarray(positions(matrix, np.arange(v, min(v + chunk, flat.shape[1]))))
        cycles = r @ k.T
        cycles -= xp.rint(cycles)
        out += flat[:, v:v + chunk].astype(np.complex128) @ xp.exp(-2j * np.pi * cycles)
    return out


def section(results: dict, name: str, fn, brief) -> None:
    """``results[name] = fn()`` with its wall time; an exception is recorded there instead of stopping the other
    sections. Prints one line: ``brief(entry)``, the entry's fields worth showing."""
    began = time.perf_counter()
    try:
        results[name] = fn()
    except Exception as exc:  # noqa: BLE001 - a failing section must not stop the others
        results[name] = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc(limit=4)}
    results[name]["wall_s"] = round(time.perf_counter() - began, 2)
    print(f"  [{name}] {brief(results[name])} ({results[name]['wall_s']} s)", flush=True)


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a child process: this one's, with the checkout first on ``PYTHONPATH`` (the rest of
    it kept: packages installed there, as on the GPU machine) and ``extra``."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p),
            **extra}


def child_rss(code: str, *args: str, root) -> tuple[int, str]:
    """Run ``code`` in a fresh interpreter with ``root`` on its path; its max RSS in bytes and its stdout
    (RuntimeError when it fails)."""
    env = child_env()
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, env=env, text=True)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.stdout.close()
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise RuntimeError(f"child failed with {code}")
    return usage.ru_maxrss * 1024, out.strip()


def write_report(report: dict, path=None) -> None:
    """Print ``report`` as indented JSON, and write it to ``path`` (a ``pathlib.Path``) when one is given."""
    text = json.dumps(report, indent=2)
    if path:
        path.write_text(text + "\n")
    print(text)


def start_server(log, device: str, *extra: str, timeout: float = 60.0):
    """``mri-recon serve --port 0 --device DEVICE EXTRA...`` in its own process logging to ``log`` (a
    ``pathlib.Path``): the process and the port it logged it listens on."""
    with open(log, "wb") as stream:
        server = subprocess.Popen([sys.executable, "-m", "mri_recon", "serve", "--port", "0", "--device", device,
                                   *extra], stderr=stream, env=child_env())
    deadline = time.time() + timeout
    while time.time() < deadline and server.poll() is None:
        found = re.search(r"listening on [^\s]+:(\d+)", log.read_text())
        if found:
            return server, int(found.group(1))
        time.sleep(0.2)
    server.kill()
    raise RuntimeError(f"the server did not start: {log.read_text()[-2000:]}")
