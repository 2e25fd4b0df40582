"""Low-rank time series against BART ``pics -R L`` and temporal TV, on two moving phantoms.

Phantoms (golden-angle radial, 128^2, 8 coils, 20 frames of 21 spokes of 256 samples, 2x readout oversampling):

- ``beating``: :func:`mri_recon.sim.dynamic.simulate_series` as ``scripts/bench_temporal.py`` has it (one beat
  over the series, image-domain SNR 30, the simulation's maps).
- ``rotating``: BART's rotating tubes phantom, made by BART: ``bart traj -r -G -x 256 -y 420`` (golden ratio)
  scaled by 0.5 and cut into 20 frames of 21 spokes (``reshape``, time as BART's dimension 10),
  ``bart phantom -T -k -s 8 --rotation-steps 20 --rotation-angle 18 -t traj ksp`` (18 degrees a frame: one
  full turn over the series, a periodic motion), ``bart phantom -S 8 -x 128 sens`` divided by its
  root-sum-of-squares peak (given to both tools), complex Gaussian noise of standard deviation 1/30 of the
  k-space's RMS added once (seed 0). Truths: the band-limited frames (the inverse FFT of the Cartesian k-space
  of each rotation step, what a 128^2 image can hold; the main figure) and BART's rasterized frames
  (``bart phantom -T -x 128 --rotation-steps 20 --rotation-angle 18``, sharp edges: an NRMSE floor near 0.15).

Methods, 100 iterations each, every one over a sweep of its weight (each phantom's best reported):

- ours: ``mri_recon.reconstruct(series, temporal=tv | lowrank | llr, temporal_lam=LAMBDA)``, ADMM, Pipe-Menon
  weights per frame, timed as the whole call (the frames' F^H d and PSFs included); llr with 8^2 blocks and
  random shifts (seed 0).
- ours with spatial TV on every frame beside the temporal term (``regularizer="tv", lam=SPATIAL``): ``tv_tv``,
  ``lowrank_tv``, ``llr_tv``, each run a pair ``TEMPORAL:SPATIAL`` of weights (the same spatial term for each
  temporal one, so that the temporal terms are compared on equal terms); ``none_tv``: each frame alone with
  spatial TV, the reference that shows what the temporal term adds.
- BART: ``bart pics -S -R L:3:3:LAMBDA -b B -i 100 -t traj -p pattern ksp sens out`` (``pattern`` the square
  root of our weights, as ``bench_temporal.py`` has it), ``B = 8`` (locally low rank, BART's default blocks and
  random shifts) and ``B = 128`` (one block: the global low rank), timed as the command with
  ``OMP_NUM_THREADS=2``.

Subspace (``temporal="subspace"``), each run a basis of K functions and a spatial weight, written ``K`` or
``K:LAMBDA`` in the sweeps:

- ``subspace``: the basis estimated from the k-space centre (the package's own), CG on the coefficients
  (no spatial term, ``tol=0``: the 100 iterations run); ``subspace_tv``: with spatial TV of weight LAMBDA on
  every coefficient image (ADMM); ``oracle`` and ``oracle_tv``: the same with the basis of the true frames
  (their K leading left singular vectors, given as a ``.npy`` file), a reference for the estimate.
- BART: ``bart pics -S -B basis -i 100 -t traj -p pattern ksp sens out`` with the same estimated basis (a
  ``[1 1 1 1 1 T K]`` cfl; the data's time moved to BART's dimension 5, TE, as ``-B`` takes it), CG
  (``bart_subspace``) or with a spatial term on the coefficients: ``-e -R W:3:0:LAMBDA``
  (``bart_subspace_wavelet``, against ours ``subspace_wavelet``) or ``-e -R T:3:0:LAMBDA``
  (``bart_subspace_tv``); the frames are ``basis @ coefficients``.

NRMSE: of the magnitudes over all frames after the best real scale (BART's images are in its own units).

Section ``prox``: the llr proximal map alone (``LocalLowRank(8).prox`` on random 20 x 128^2 complex64 frames,
256 blocks of 20 x 64) and its singular value thresholding, in one group and in the groups the blocks' own size
allows (``SVT_TEMPORARIES`` 0); medians of 20 after a warm-up, the device synchronized (``--device``).

Usage: python scripts/bench_lowrank.py OUT.json [--bart PATH] [--sections beating,rotating,prox]
       [--methods tv,lowrank,llr,bart_llr,bart_global,subspace,...] [--weights METHOD=W1,W2,... ...]
       [--device gpu]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_temporal import COILS, FRAMES, MATRIX, SPOKES, bart_inputs, nrmse, read_cfl, write_cfl

import mri_recon
from mri_recon.io.frames import TimeSeries
from mri_recon.prep.frames import prepare_series
from mri_recon.prep.temporal_basis import estimate_basis
from mri_recon.scan import Scan
from mri_recon.sim.dynamic import simulate_series

SAMPLES, ITERATIONS, ROTATION_DEG = 2 * MATRIX, 100, 360.0 / FRAMES
SWEEPS = {
    "tv": (0.005, 0.01, 0.02),
    "lowrank": (0.5, 1.0, 2.0, 4.0),
    "llr": (0.15, 0.3, 0.6, 1.2),
    "bart_llr": (0.003, 0.01, 0.03, 0.1),
    "bart_global": (0.01, 0.03, 0.1, 0.3),
    "subspace": ("2", "3", "4", "5", "6"),
    "subspace_tv": ("2:0.01", "4:0.005", "4:0.01", "6:0.005", "6:0.01", "6:0.02"),
    "oracle": ("2", "3", "4", "5", "6"),
    "oracle_tv": ("4:0.01", "6:0.01"),
    "bart_subspace": ("2", "3", "4", "5", "6"),
    "subspace_wavelet": ("4:0.005", "4:0.01", "6:0.005", "6:0.01", "6:0.02"),
    "bart_subspace_wavelet": ("4:0.003", "4:0.01", "6:0.003", "6:0.01", "6:0.03"),
    "bart_subspace_tv": ("4:0.003", "4:0.01", "6:0.003", "6:0.01", "6:0.03"),
    "tv_tv": ("0.005:0.005", "0.005:0.01", "0.005:0.02", "0.01:0.005", "0.01:0.01", "0.01:0.02", "0.02:0.01"),
    "lowrank_tv": ("1:0.005", "1:0.01", "1:0.02", "2:0.005", "2:0.01", "2:0.02", "0.5:0.01"),
    "llr_tv": ("0.15:0.005", "0.15:0.01", "0.15:0.02", "0.3:0.005", "0.3:0.01", "0.3:0.02", "0.075:0.01"),
    "none_tv": ("0:0.01", "0:0.02"),
}
"""Each method's weights (ours relative to max |A^H W d|, BART's its own); the subspace methods' ``K[:LAMBDA]``;
a temporal term with spatial TV on every frame (``TERM_tv``), ``TEMPORAL:SPATIAL``."""
BLOCKS = {"bart_llr": 8, "bart_global": MATRIX}
SUBSPACE = {"subspace": "estimated", "subspace_tv": "estimated", "subspace_wavelet": "estimated", "oracle": "oracle",
            "oracle_tv": "oracle"}
"""Our subspace methods and their basis."""
WITH_SPATIAL_TV = {"tv_tv": "tv", "lowrank_tv": "lowrank", "llr_tv": "llr", "none_tv": "none"}
"""Our temporal terms with spatial TV on every frame (``regularizer="tv"``), by method name; ``none_tv``: each
frame alone with spatial TV (its temporal weight is ignored)."""
SPATIAL = {"tv": ("tv", "T:3:0"), "wavelet": ("wavelet", "W:3:0")}
"""A subspace method's spatial term by its name's ending: ours, and BART's ``-R`` (with ``-e``: BART's wavelet
steps need the operator's largest eigenvalue)."""


def bart(binary: str, *args: str, folder: Path) -> float:
    """Run ``bart ARGS`` in ``folder`` on two threads; the seconds it took."""
    start = time.perf_counter()
    done = subprocess.run(
        [binary, *args],
        cwd=folder,
        env={**os.environ, "OMP_NUM_THREADS": "2"},
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"bart {args[0]} failed: {done.stderr.strip()[-300:]}")
    return time.perf_counter() - start


def rotating_series(binary: str, folder: Path) -> tuple[TimeSeries, dict[str, np.ndarray]]:
    """BART's rotating tubes phantom (see the module docstring) as a series, and its two truths."""
    steps = ["--rotation-steps", str(FRAMES), "--rotation-angle", str(ROTATION_DEG)]
    bart(binary, "traj", "-r", "-G", "-x", str(SAMPLES), "-y", str(SPOKES * FRAMES), "t0", folder=folder)
    bart(binary, "scale", "0.5", "t0", "t1", folder=folder)
    bart(binary, "reshape", str((1 << 2) | (1 << 10)), str(SPOKES), str(FRAMES), "t1", "traj", folder=folder)
    bart(binary, "phantom", "-T", "-k", "-s", str(COILS), *steps, "-t", "traj", "ksp", folder=folder)
    bart(binary, "phantom", "-S", str(COILS), "-x", str(MATRIX), "sens", folder=folder)
    bart(binary, "phantom", "-T", "-x", str(MATRIX), *steps, "raster", folder=folder)
    bart(binary, "traj", "-x", str(MATRIX), "-y", str(MATRIX), "grid0", folder=folder)
    bart(binary, "repmat", "10", str(FRAMES), "grid0", "grid", folder=folder)
    bart(binary, "phantom", "-T", "-k", *steps, "-t", "grid", "cartesian", folder=folder)
    traj = read_cfl(folder / "traj").reshape(3, SAMPLES, SPOKES, FRAMES)
    ksp = read_cfl(folder / "ksp").reshape(SAMPLES, SPOKES, COILS, FRAMES)
    sens = read_cfl(folder / "sens").reshape(MATRIX, MATRIX, COILS)
    maps = np.ascontiguousarray(np.moveaxis(sens, -1, 0) / np.sqrt((np.abs(sens) ** 2).sum(-1)).max())
    rng = np.random.default_rng(0)
    sigma = float(np.sqrt(np.mean(np.abs(ksp) ** 2))) / 30.0
    noise = sigma / np.sqrt(2.0) * (rng.standard_normal(ksp.shape) + 1j * rng.standard_normal(ksp.shape))
    ksp = ksp + noise
    frames = tuple(
        Scan(
            kspace=np.ascontiguousarray(ksp[..., t].transpose(2, 1, 0).reshape(COILS, -1), dtype=np.complex64),
            trajectory=np.ascontiguousarray(traj[:2, :, :, t].real.transpose(2, 1, 0).reshape(-1, 2), dtype=np.float32),
            matrix=(MATRIX, MATRIX),
        )
        for t in range(FRAMES)
    )
    cartesian = read_cfl(folder / "cartesian").reshape(MATRIX, MATRIX, FRAMES)
    band_limited = np.fft.fftshift(np.fft.ifft2(np.fft.ifftshift(cartesian, axes=(0, 1)), axes=(0, 1)), axes=(0, 1))
    truths = {
        "band_limited": np.moveaxis(band_limited, -1, 0),
        "rasterized": np.moveaxis(read_cfl(folder / "raster").reshape(MATRIX, MATRIX, FRAMES), -1, 0),
    }
    series = TimeSeries(
        frames=frames,
        axis="readouts",
        labels=tuple(range(FRAMES)),
        coil_maps=maps.astype(np.complex64),
        ground_truth=truths["band_limited"].astype(np.complex64),
        attrs={"samples": SAMPLES},
        source="bart phantom -T --rotation-steps",
    )
    return series, truths


REPEATS = 1
"""Timed calls of each of ours (``--repeats``): one is timed as it comes; more are timed after an untimed
warm-up call and their median reported."""


def ours(series: TimeSeries, temporal: str, lam: float, device: str = "cpu",
         spatial_tv: float | None = None) -> tuple[np.ndarray, float]:
    spatial = {} if spatial_tv is None else {"regularizer": "tv", "lam": spatial_tv}
    temporal_lam = {} if temporal == "none" else {"temporal_lam": lam}

    def call() -> tuple[np.ndarray, float]:
        start = time.perf_counter()
        result = mri_recon.reconstruct(
            series, prepare=False, device=device, temporal=temporal, iterations=ITERATIONS, **temporal_lam,
            **spatial,
        )
        return result.image, time.perf_counter() - start

    if REPEATS > 1:
        call()
    runs = [call() for _ in range(REPEATS)]
    return runs[-1][0], float(np.median([seconds for _, seconds in runs]))


def bases(series: TimeSeries, truth: np.ndarray, rank: int) -> dict[str, np.ndarray]:
    """The estimated basis (:func:`mri_recon.prep.temporal_basis.estimate_basis`, as the reconstruction makes it)
    and the oracle: the K leading left singular vectors of the true frames' Casorati matrix."""
    estimated = estimate_basis([f.kspace for f in series.frames], [f.trajectory for f in series.frames],
                               series.matrix, rank, device="cpu").basis
    u, _, _ = np.linalg.svd(truth.reshape(truth.shape[0], -1).astype(np.complex128), full_matrices=False)
    return {"estimated": estimated, "oracle": u[:, :rank]}


def ours_subspace(series: TimeSeries, basis: np.ndarray, spatial: str | None, lam: float | None, folder: Path,
                  device: str = "cpu") -> tuple[np.ndarray, float, str]:
    """``temporal="subspace"`` with ``basis`` given as a file (the estimate is the one the package makes)."""
    path = folder / "basis.npy"
    np.save(path, basis)
    keywords = {"regularizer": SPATIAL[spatial][0], "lam": lam} if spatial else {"tol": 0.0}
    start = time.perf_counter()
    result = mri_recon.reconstruct(series, prepare=False, device=device, temporal="subspace",
                                   temporal_basis=str(path), iterations=ITERATIONS, **keywords)
    return result.image, time.perf_counter() - start, f"reconstruct(temporal='subspace', {keywords})"


def bart_subspace(binary: str, folder: Path, basis: np.ndarray, spatial: str | None,
                  lam: float | None) -> tuple[np.ndarray, float, str]:
    """``bart pics -B`` with ``basis`` (time along BART's dimension 5), CG or a spatial term; the frames."""
    t, k = basis.shape
    write_cfl(folder / "basis", basis.reshape(1, 1, 1, 1, 1, t, k))
    for name in ("traj", "ksp", "pattern"):  # time from dimension 10 to 5 (TE): the same values
        array = read_cfl(folder / name)
        write_cfl(folder / f"{name}5", array.reshape(*array.shape[:5], t))
    regularization = ["-e", "-R", f"{SPATIAL[spatial][1]}:{lam}"] if spatial else []
    command = ["pics", "-S", "-B", "basis", *regularization, "-i", str(ITERATIONS), "-t", "traj5", "-p", "pattern5",
               "ksp5", "sens", "out"]
    seconds = bart(binary, *command, folder=folder)
    coefficients = read_cfl(folder / "out").reshape(MATRIX * MATRIX, k)
    frames = (basis @ coefficients.T).reshape(t, MATRIX, MATRIX)
    return frames, seconds, "bart " + " ".join(command)


def run_subspace(method: str, value: str, series: TimeSeries, truth: np.ndarray, binary: str, folder: Path,
                 device: str) -> tuple[np.ndarray, float, str]:
    """One subspace run: ``value`` is ``K`` or ``K:LAMBDA``."""
    rank, _, weight = value.partition(":")
    lam = float(weight) if weight else None
    spatial = next((name for name in SPATIAL if method.endswith(name)), None)
    chosen = bases(series, truth, int(rank))
    if method.startswith("bart"):
        return bart_subspace(binary, folder, chosen["estimated"], spatial, lam)
    return ours_subspace(series, chosen[SUBSPACE[method]], spatial, lam, folder, device)


def run_bart(binary: str, folder: Path, lam: float, block: int) -> tuple[np.ndarray, float, str]:
    command = [
        "pics",
        "-S",
        "-R",
        f"L:3:3:{lam}",
        "-b",
        str(block),
        "-i",
        str(ITERATIONS),
        "-t",
        "traj",
        "-p",
        "pattern",
        "ksp",
        "sens",
        "out",
    ]
    seconds = bart(binary, *command, folder=folder)
    out = read_cfl(folder / "out").reshape(MATRIX, MATRIX, -1)
    return np.moveaxis(out, -1, 0), seconds, "bart " + " ".join(command)


def phantom(
    name: str, series: TimeSeries, truths: dict[str, np.ndarray], methods: list[str], binary: str, save, sweeps,
    device: str = "cpu",
) -> dict:
    """Every method's sweep (``sweeps[method]``) on one prepared series, saved after each run; each method's
    best by the first truth."""
    first = next(iter(truths))
    report: dict = {}
    with tempfile.TemporaryDirectory() as work:
        folder = Path(work)
        if any(m.startswith("bart") for m in methods):
            bart_inputs(series, folder)
        for method in methods:
            runs = {}
            for lam in sweeps[method]:
                if method in SUBSPACE or method.startswith("bart_subspace"):
                    image, seconds, command = run_subspace(method, str(lam), series, truths[first], binary, folder,
                                                           device)
                elif method.startswith("bart"):
                    image, seconds, command = run_bart(binary, folder, lam, BLOCKS[method])
                elif method in WITH_SPATIAL_TV:
                    term, (temporal, spatial) = WITH_SPATIAL_TV[method], map(float, str(lam).split(":"))
                    image, seconds = ours(series, term, temporal, device, spatial_tv=spatial)
                    command = f"reconstruct(temporal={term!r}, regularizer='tv', device={device!r})"
                else:
                    image, seconds = ours(series, method, lam, device)
                    command = f"reconstruct(temporal={method!r}, device={device!r})"
                runs[str(lam)] = {
                    "nrmse": {k: nrmse(image, v) for k, v in truths.items()},
                    "seconds": seconds,
                    "command": command,
                }
                report[method] = {"sweep": runs}
                save(name, report)
            best = min(runs, key=lambda k: runs[k]["nrmse"][first]["fitted"])
            report[method].update(best_lambda=best, best=runs[best])
            save(name, report)
    return report


def prox_timing(device: str) -> dict:
    """Milliseconds of the llr proximal map and of its thresholding in one group and in the blocks' groups."""
    from mri_recon.arrays.backend import resolve_device, synchronize  # noqa: PLC0415
    from mri_recon.solvers import lowrank  # noqa: PLC0415

    dev = resolve_device(device)
    rng = np.random.default_rng(0)
    frames = (rng.standard_normal((FRAMES, MATRIX, MATRIX)) + 1j * rng.standard_normal((FRAMES, MATRIX, MATRIX)))
    x = dev.xp.asarray(frames.astype(np.complex64))
    blocks = lowrank.to_blocks(x, 8)

    def median_ms(fn) -> float:
        fn()
        synchronize(dev)
        times = []
        for _ in range(20):
            start = time.perf_counter()
            fn()
            synchronize(dev)
            times.append(time.perf_counter() - start)
        return float(np.median(times) * 1e3)

    floor = lowrank.SVT_TEMPORARIES
    llr = lowrank.LocalLowRank(8)
    out = {"device": str(dev), "blocks": list(blocks.shape), "prox_ms": median_ms(lambda: llr.prox(x, 0.5)),
           "svt_one_group_ms": median_ms(lambda: lowrank.svt(blocks, 0.5))}
    lowrank.SVT_TEMPORARIES = 0
    try:
        out["svt_blocks_groups_ms"] = median_ms(lambda: lowrank.svt(blocks, 0.5))
    finally:
        lowrank.SVT_TEMPORARIES = floor
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--bart", default="/usr/bin/bart")
    parser.add_argument("--sections", default="beating,rotating")
    parser.add_argument("--methods", default=",".join(SWEEPS))
    parser.add_argument("--device", default="cpu", help="where ours runs: cpu, gpu")
    parser.add_argument("--weights", action="append", default=[], metavar="METHOD=W1,W2,...",
                        help="a method's weights instead of its default sweep (repeatable)")
    parser.add_argument("--repeats", type=int, default=1, help="timed calls of each of ours (more than one: after "
                        "a warm-up call, the median)")
    args = parser.parse_args()
    global REPEATS
    REPEATS = max(1, args.repeats)
    sweeps = dict(SWEEPS)
    for given in args.weights:
        method, _, values = given.partition("=")
        sweeps[method] = tuple(v if ":" in v or method in SUBSPACE or method.startswith("bart_subspace") else float(v)
                               for v in values.split(","))
    methods = [m for m in args.methods.split(",") if m]
    if not Path(args.bart).exists():
        methods = [m for m in methods if not m.startswith("bart")]
    version = (
        subprocess.run([args.bart, "version"], capture_output=True, text=True, check=False).stdout.strip()
        if Path(args.bart).exists()
        else None
    )
    report = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "mri_recon": mri_recon.__version__,
        "bart": version,
        "numpy": np.__version__,
        "machine": platform.node(),
        "cpus": os.cpu_count(),
        "load": os.getloadavg(),
        "frames": FRAMES,
        "spokes_per_frame": SPOKES,
        "matrix": MATRIX,
        "coils": COILS,
        "iterations": ITERATIONS,
        "repeats": REPEATS,
        "sweeps": sweeps,
    }

    def save(name: str, value) -> None:
        report[name] = value
        report["load_end"] = os.getloadavg()
        Path(args.out).write_text(json.dumps(report, indent=1, default=str))
        print(name, json.dumps(value, default=str)[-300:], flush=True)

    for section in args.sections.split(","):
        if section == "beating":
            raw = simulate_series((MATRIX, MATRIX), frames=FRAMES, spokes_per_frame=SPOKES, coils=COILS, snr=30, seed=0)
            series, _ = prepare_series(raw, coil_maps="file")
            phantom(section, series, {"truth": raw.ground_truth}, methods, args.bart, save, sweeps, args.device)
        elif section == "prox":
            save("prox", prox_timing(args.device))
        elif section == "rotating":
            with tempfile.TemporaryDirectory() as work:
                raw, truths = rotating_series(args.bart, Path(work))
            series, _ = prepare_series(raw, coil_maps="file")
            phantom(section, series, truths, methods, args.bart, save, sweeps, args.device)


if __name__ == "__main__":
    main()
