"""Coil compression (``coil_compress=N``, issue 46): image quality against the uncompressed reconstruction, the
subspace against BART's ``cc``, the compression step's time on the CPU, and the GPU whole call with and without.

Sections (each recorded on its own, ``benchtools.section``):

- ``quality`` (CPU): 32-coil scans reconstructed without compression and compressed to N = 8, 10, 12 and
  ``auto``, with the scan's coil maps and with Walsh maps; NRMSE against the ground truth (complex with the
  scan's maps, magnitude with Walsh's) and its ratio to the uncompressed one. Scans: ``simulate_scan``'s
  128^2 golden-angle phantom (32 coils, SNR 30; its coil model spans 9 functions, so its maps have 9
  independent components) and :func:`birdcage_scan` (32 Gaussian coils on a ring: a spectrum that decays
  without a cut).
- ``bart``: the whitened centre samples of both scans written as BART k-space ``(1, M, 1, C)``,
  ``bart cc -A -M`` (SVD of all the given samples: the matrix whose first N columns ``bart cc -A -p N``
  applies; checked) against our matrix from the same samples: the largest principal angle
  (``scipy.linalg.subspace_angles``) for N = 1..16, beside the angle between our float64 matrix and the
  float64 SVD of the same samples (NumPy), and the centre's eigenvalue spectrum relative to the largest.
- ``cpu_time``: ``prepare_scan`` of a 512^2 x 32-coil scan (``bench_prepare.synthetic``) with and without
  ``coil_compress=8``, and the compression matrix alone (``compression_of``); one BLAS thread, as
  ``prepare_scan`` runs.
- ``gram`` (``--only gram``): the centre's Gram matrix (``compress.centre_gram``) and the whole compression
  matrix (``centre_energies``) of the GPU section's scan on one, two and four threads (``GRAM_THREADS``, capped at
  the CPUs this process may use), one BLAS thread each, two rounds.
- ``cartesian`` (CPU): 32-coil Cartesian scans (128^2, every other phase encode and 24 ACS lines, noise
  correlated across coils and prewhitened): :func:`birdcage_cartesian` (32 Gaussian coils on a ring) and the
  package's analytic coil model (``mri_recon.sim.cartesian``), reconstructed without compression and compressed
  to N = 8, 10, 12 and ``auto`` by ``coil_compress_method`` ``svd`` and ``geometric`` (GCC), with the scan's maps
  (complex NRMSE) and ESPIRiT's (magnitude NRMSE after the least-squares scale, since estimated maps are
  normalized in the receivers); the compression step alone (``compression_for``, one BLAS thread) and the
  whole call's seconds.
- ``bart_gcc``: the same Cartesian scans' whitened k-space as BART Cartesian k-space, ``bart cc -G -M`` (its
  matrix per readout position, before alignment) against ours: the largest and median principal angle over the
  readout positions for N = 1..12, with the smallest relative eigen-gap; ``bart cc -G -p 8`` (aligned) against
  our compressed k-space after the one best unitary of the 8 virtual coils (the eigenvector phases at x = 0);
  BART's calibration window (its debug line: BART slides the readout window to the most energy).
- ``gpu`` (``--gpu``): the whole call ``mri_recon.reconstruct(scan, device="gpu")`` of a 512^2 x 32-coil
  golden-angle scan (the phantom, 804 spokes of 1024 samples, SNR 30, noise for prewhitening, the file's maps
  and weights, 30 CG iterations) without compression and with N = 8, 10, 12 and ``auto``: medians of
  ``--repeats`` after a warm-up, the device synchronized, the speed-up and the NRMSE of each.

Usage: python scripts/bench_coil_compress.py OUT.json [--gpu] [--no-cpu] [--repeats N]
       [--only cartesian|cpu_time|gram]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import benchtools  # noqa: E402

import mri_recon  # noqa: E402
from mri_recon.api import prepare_and_reconstruct  # noqa: E402
from mri_recon.arrays.backend import one_blas_thread, resolve_device, synchronize  # noqa: E402
from mri_recon.io.cfl import read_cfl, write_cfl  # noqa: E402
from mri_recon.prep import prepare_scan  # noqa: E402
from mri_recon.prep.compress import centre_energies, centre_samples, compression_of  # noqa: E402
from mri_recon.prep.noise import whitening_and_basis  # noqa: E402
from mri_recon.scan import Scan  # noqa: E402

CHOICES = ("none", 8, 10, 12, "auto")
SETTINGS = {"iterations": 30, "lam": 1e-3}


def birdcage_scan(n: int = 64, coils: int = 32, spokes: int = 100, noise: float = 1e-3, seed: int = 0) -> Scan:
    """A golden-angle radial scan of the Shepp-Logan phantom seen by ``coils`` Gaussian coils (width 0.2 FOV)
    on a ring of radius 0.55 FOV, each with a random phase: a coil spectrum without a cut. Complex noise of
    ``noise`` times the largest sample, and as many noise-only samples per coil (for prewhitening)."""
    from mri_recon.sim.phantom import shepp_logan, voxel_positions  # noqa: PLC0415
    from mri_recon.sim.trajectories import radial  # noqa: PLC0415

    rng = np.random.default_rng(seed)
    trajectory = radial((n, n), spokes, 2 * n, golden=True)
    r = voxel_positions((n, n))
    angle = 2 * np.pi * np.arange(coils) / coils
    ring = 0.55 * np.stack([np.cos(angle), np.sin(angle)], axis=1)
    maps = np.exp(-((r[None] - ring[:, None]) ** 2).sum(-1) / (2 * 0.2 ** 2)) * np.exp(2j * np.pi * rng.random(coils))[
        :, None]
    maps = maps.reshape(coils, n, n).astype(np.complex64)
    truth = shepp_logan(r).reshape(n, n).astype(np.complex64)
    clean = mri_recon.forward(maps * truth, trajectory, device="cpu")
    level = noise * float(np.abs(clean).max())

    def white(shape):
        return level * (rng.standard_normal(shape) + 1j * rng.standard_normal(shape))

    return Scan(kspace=(clean + white(clean.shape)).astype(np.complex64), trajectory=trajectory, matrix=(n, n),
                coil_maps=maps, noise=white((coils, 4096)).astype(np.complex64), ground_truth=truth,
                weights=np.hypot(*trajectory.T).astype(np.float32) + 0.5, source="birdcage")


def nrmse(result, scan: Scan) -> float:
    """NRMSE against the truth: complex with the scan's maps, magnitude otherwise (as the CLI reports it)."""
    from mri_recon.io.outputs import nrmse_vs_truth  # noqa: PLC0415

    return nrmse_vs_truth(result.image, scan.ground_truth, result)[1]


def quality_of(scan: Scan, maps: str) -> dict:
    """NRMSE per choice of :data:`CHOICES` (and the coils kept, the seconds of the call) on the CPU."""
    rows = {}
    for choice in CHOICES:
        start = time.perf_counter()
        _, record, result = prepare_and_reconstruct(scan, device="cpu", coil_maps=maps, coil_compress=choice,
                                                    **SETTINGS)
        rows[str(choice)] = {"coils": record.get("coil_compress", scan.n_coils), "nrmse": nrmse(result, scan),
                             "energy": record.get("coil_compress_energy", 1.0),
                             "seconds": time.perf_counter() - start}
    base = rows["none"]["nrmse"]
    for row in rows.values():
        row["ratio"] = row["nrmse"] / base
    return rows


def quality() -> dict:
    out = {}
    for name, scan in (("phantom128", mri_recon.simulate_scan((128, 128), "golden", coils=32, snr=30.0, seed=1)),
                       ("birdcage64", birdcage_scan())):
        for maps in ("file", "walsh"):
            rows = quality_of(scan, maps)
            out[f"{name}_{maps}"] = rows
            print(f"{name} {maps}: " + ", ".join(f"{k} ({v['coils']}) {v['nrmse']:.4f} x{v['ratio']:.4f}"
                                                 for k, v in rows.items()), flush=True)
    return out


def whitened_centre(scan: Scan) -> np.ndarray:
    """The scan's centre samples (:func:`~mri_recon.prep.compress.centre_samples`) whitened, complex64."""
    w, _ = whitening_and_basis(scan)
    index = centre_samples(scan.trajectory, scan.n_coils)
    return (w @ scan.kspace[:, index].astype(np.complex128)).astype(np.complex64)


def bart_matrix(centre: np.ndarray, folder: Path, bart: str) -> np.ndarray:
    """``bart cc -A -M`` of centre samples ``(C, M)``: the ``(C, C)`` matrix, its columns largest first."""
    c = centre.shape[0]
    write_cfl(folder / "centre", centre.T.reshape(1, -1, 1, c))
    subprocess.run([bart, "cc", "-A", "-M", str(folder / "centre"), str(folder / "matrix")], check=True,
                   capture_output=True)
    return np.asarray(read_cfl(folder / "matrix")).reshape(c, c)


def bart_applies(centre: np.ndarray, matrix: np.ndarray, n: int, folder: Path, bart: str) -> float:
    """``bart cc -A -p n`` of the samples against ``matrix[:, :n]^H`` applied to them (relative error): the
    columns ``-M`` writes are the ones ``-p`` compresses with."""
    subprocess.run([bart, "cc", "-A", "-p", str(n), str(folder / "centre"), str(folder / "compressed")], check=True,
                   capture_output=True)
    theirs = np.asarray(read_cfl(folder / "compressed")).reshape(-1, n).T
    ours = matrix[:, :n].conj().T @ centre
    return float(np.linalg.norm(theirs - ours) / np.linalg.norm(ours))


def against_bart(scan: Scan, bart: str) -> dict:
    from scipy.linalg import subspace_angles  # noqa: PLC0415

    centre = whitened_centre(scan)
    with tempfile.TemporaryDirectory() as folder:
        theirs = bart_matrix(centre, Path(folder), bart)
        applied = bart_applies(centre, theirs, 8, Path(folder), bart)
    values, ours, _ = centre_energies(centre, np.zeros((centre.shape[1], 2), np.float32))
    oracle = np.linalg.svd(centre.astype(np.complex128), full_matrices=False)[0]
    top = min(16, scan.n_coils)
    return {"samples": centre.shape[1], "bart_p8_vs_M_columns": applied,
            "eigenvalues_relative": (values[:top + 1] / values[0]).tolist(),
            "angle_vs_bart": [float(subspace_angles(theirs[:, :n], ours[:, :n]).max()) for n in range(1, top + 1)],
            "angle_vs_numpy_svd": [float(subspace_angles(oracle[:, :n], ours[:, :n]).max())
                                   for n in range(1, top + 1)]}


def bart_section() -> dict:
    bart = shutil.which("bart")
    if bart is None:
        return {"skipped": "no bart command"}
    out = {"bart": subprocess.run([bart, "version"], capture_output=True, text=True).stdout.strip()}
    for name, scan in (("phantom128", mri_recon.simulate_scan((128, 128), "golden", coils=32, snr=30.0, seed=1)),
                       ("birdcage64", birdcage_scan())):
        out[name] = against_bart(scan, bart)
        print(name, "angles vs bart:", " ".join(f"{a:.1e}" for a in out[name]["angle_vs_bart"]), flush=True)
    return out


def birdcage_cartesian(n: int = 128, coils: int = 32, noise: float = 2e-3, seed: int = 0,
                       model: str = "ring") -> Scan:
    """A Cartesian scan (readout along x complete; every other phase encode and the 24 central ones) of the
    Shepp-Logan phantom seen by 32 coils: ``"ring"``, Gaussian coils (width 0.2 FOV) on a ring of radius 0.55 FOV
    with random phases, the k-space the exact DFT of the coil images; or ``"analytic"``, the package's coil model
    and analytic k-space (``mri_recon.sim.cartesian``). Noise of ``noise`` times the largest sample, correlated
    across coils (a random mixing matrix), and 4096 noise-only samples per coil."""
    from mri_recon.sim.cartesian import cartesian_kspace, undersampling_mask  # noqa: PLC0415
    from mri_recon.sim.phantom import coil_maps, shepp_logan, shepp_logan_image, voxel_positions  # noqa: PLC0415

    rng = np.random.default_rng(seed)
    if model == "ring":
        r = voxel_positions((n, n))
        angle = 2 * np.pi * np.arange(coils) / coils
        ring = 0.55 * np.stack([np.cos(angle), np.sin(angle)], axis=1)
        maps = np.exp(-((r[None] - ring[:, None]) ** 2).sum(-1) / (2 * 0.2 ** 2)).reshape(coils, n, n)
        maps = maps * np.exp(2j * np.pi * rng.random(coils))[:, None, None]
        truth = shepp_logan(r).reshape(n, n)
        grid = np.fft.fftshift(np.fft.fftn(np.fft.ifftshift(maps * truth, axes=(1, 2)), axes=(1, 2)), axes=(1, 2))
    else:
        maps, truth = coil_maps((n, n), coils), shepp_logan_image((n, n))
        grid = cartesian_kspace((n, n), coils).astype(np.complex128)
    lines, _ = undersampling_mask(n, 2, 24)
    kx, ky = np.meshgrid(np.arange(n), np.flatnonzero(lines), indexing="ij")
    mix = np.eye(coils) + 0.2 * (rng.standard_normal((coils, coils)) + 1j * rng.standard_normal((coils, coils)))
    level = noise * float(np.abs(grid).max())

    def white(shape):
        return level * (rng.standard_normal(shape) + 1j * rng.standard_normal(shape))

    data = grid[:, kx.ravel(), ky.ravel()]
    return Scan(kspace=(mix @ (data + white(data.shape))).astype(np.complex64),
                trajectory=np.stack([kx.ravel() - n // 2, ky.ravel() - n // 2], axis=1).astype(np.float32),
                matrix=(n, n), coil_maps=(mix @ maps.reshape(coils, -1)).reshape(coils, n, n).astype(np.complex64),
                noise=(mix @ white((coils, 4096))).astype(np.complex64), ground_truth=truth.astype(np.complex64),
                attrs={"sampling": "cartesian"}, source=f"cartesian-{model}")


def fitted_nrmse(image: np.ndarray, truth: np.ndarray) -> float:
    """Magnitude NRMSE after the least-squares scale (estimated maps fix the image's scale in the receivers)."""
    a, b = np.abs(image).astype(np.float64).ravel(), np.abs(truth).astype(np.float64).ravel()
    return float(np.linalg.norm(a * (a @ b) / (a @ a) - b) / np.linalg.norm(b))


CARTESIAN_CHOICES = (("none", "svd"), *((n, m) for m in ("svd", "geometric") for n in (8, 10, 12, "auto")))


def cartesian_quality(scan: Scan) -> dict:
    """NRMSE and seconds per compression (:data:`CARTESIAN_CHOICES`) and maps (file, espirit) on the CPU."""
    from mri_recon.prep.compress_methods import compression_for  # noqa: PLC0415

    w, _ = whitening_and_basis(scan)
    rows = {}
    for choice, method in CARTESIAN_CHOICES:
        row = {}
        if choice != "none":
            with one_blas_thread():
                row["compression_s"], _, _ = benchtools.wall_timed(
                    lambda c=choice, m=method: compression_for(scan, c, m, w), 3)
        for maps in ("file", "espirit"):
            start = time.perf_counter()
            _, record, result = prepare_and_reconstruct(scan, device="cpu", coil_maps=maps, coil_compress=choice,
                                                        coil_compress_method=method, **SETTINGS)
            row[maps] = {"coils": record.get("coil_compress", scan.n_coils), "seconds": time.perf_counter() - start,
                         "nrmse": nrmse(result, scan) if maps == "file" else fitted_nrmse(result.image,
                                                                                          scan.ground_truth)}
        rows[f"{method} {choice}" if choice != "none" else "none"] = row
    for row in rows.values():
        for maps in ("file", "espirit"):
            row[maps]["ratio"] = row[maps]["nrmse"] / rows["none"][maps]["nrmse"]
    return rows


def cartesian() -> dict:
    out = {}
    for model in ("ring", "analytic"):
        rows = cartesian_quality(birdcage_cartesian(model=model))
        out[model] = rows
        for name, row in rows.items():
            print(f"{model} {name}: " + ", ".join(f"{maps} ({row[maps]['coils']}) {row[maps]['nrmse']:.4f} "
                                                  f"x{row[maps]['ratio']:.4f}" for maps in ("file", "espirit"))
                  + (f", matrices {row['compression_s'] * 1e3:.1f} ms" if "compression_s" in row else ""),
                  flush=True)
    return out


def against_bart_gcc(scan: Scan, bart: str) -> dict:
    """``bart cc -G`` of the scan's whitened k-space against ours (see the module docstring)."""
    from scipy.linalg import subspace_angles  # noqa: PLC0415

    from mri_recon.prep.compress_methods import compression_for  # noqa: PLC0415
    from mri_recon.prep.geometric import calibration_hybrid  # noqa: PLC0415

    w, _ = whitening_and_basis(scan)
    white = scan.replace(kspace=(w @ scan.kspace.astype(np.complex128)).astype(np.complex64), noise=None)
    n, c = scan.matrix[0], scan.n_coils
    k = np.rint(white.trajectory).astype(int) + n // 2
    grid = np.zeros((n, scan.matrix[1], 1, c), dtype=np.complex64)
    grid[k[:, 0], k[:, 1], 0] = white.kspace.T
    hybrid, box = calibration_hybrid(white.kspace, white.trajectory, white.matrix, None, white.source)
    values = np.linalg.eigvalsh(hybrid @ hybrid.conj().transpose(0, 2, 1))[:, ::-1]
    with tempfile.TemporaryDirectory() as folder:
        d = Path(folder)
        write_cfl(d / "k", grid)
        run = subprocess.run([bart, "cc", "-G", "-M", str(d / "k"), str(d / "m")], check=True, capture_output=True,
                             text=True, env={**os.environ, "DEBUG_LEVEL": "4"})
        theirs = np.asarray(read_cfl(d / "m")).reshape(n, c, c)
        subprocess.run([bart, "cc", "-G", "-p", "8", str(d / "k"), str(d / "c")], check=True, capture_output=True)
        compressed = np.asarray(read_cfl(d / "c")).reshape(n, scan.matrix[1], 8)[k[:, 0], k[:, 1]].T
    window = next((line for line in (run.stdout + run.stderr).splitlines() if "Calibration region" in line), "")
    rows = {}
    for m in range(1, 13):
        ours = compression_for(white, m, "geometric").matrices
        angles = np.array([subspace_angles(theirs[x][:, :m], ours[x].conj().T).max() for x in range(n)])
        gap = (values[:, m - 1] - values[:, m]) / values[:, 0]
        rows[m] = {"max": float(angles.max()), "median": float(np.median(angles)), "min_gap": float(gap.min())}
    ours = compression_for(white, 8, "geometric").kspace(white.kspace, white.trajectory)
    u, _, vh = np.linalg.svd(compressed @ ours.conj().T)
    fit = float(np.linalg.norm(compressed - (u @ vh) @ ours) / np.linalg.norm(compressed))
    return {"box": list(box), "bart_window": window.strip(), "angles": rows, "p8_after_one_unitary": fit,
            "angles_at_barts_window": at_barts_window(grid, window, theirs, box)}


def at_barts_window(grid: np.ndarray, window: str, theirs: np.ndarray, box: tuple) -> dict:
    """The largest principal angle (N = 1, 2, 4, 8) between BART's matrices and the same computation as ours
    (float64 eigenvectors of the zero-filled calibration in hybrid space) on BART's calibration window, read from
    its debug line ``(size: RxPx1, pos: AxBx0)``: what differs when BART's window is not the centred one."""
    from scipy.linalg import subspace_angles  # noqa: PLC0415

    from mri_recon.prep.geometric import _fft  # noqa: PLC0415

    size, pos = (list(map(int, part.split(",")[0].split(")")[0].split("x")))
                 for part in window.split(": ")[1:3])
    n, c = grid.shape[0], grid.shape[3]
    cal = np.zeros((n, size[1], c), dtype=np.complex128)
    cal[pos[0]:pos[0] + size[0]] = grid[pos[0]:pos[0] + size[0], pos[1]:pos[1] + size[1], 0]
    hybrid = _fft(np, cal.transpose(2, 1, 0), inverse=True).transpose(2, 0, 1)
    vectors = np.linalg.eigh(hybrid @ hybrid.conj().transpose(0, 2, 1))[1][:, :, ::-1]
    return {m: float(max(subspace_angles(theirs[x][:, :m], vectors[x][:, :m]).max() for x in range(n)))
            for m in (1, 2, 4, 8)}


def bart_gcc_section() -> dict:
    bart = shutil.which("bart")
    if bart is None:
        return {"skipped": "no bart command"}
    out = {}
    for model in ("ring", "analytic"):
        out[model] = against_bart_gcc(birdcage_cartesian(model=model), bart)
        print(model, out[model]["bart_window"], "p8:", f"{out[model]['p8_after_one_unitary']:.1e}", "angles:",
              " ".join(f"{m}:{r['max']:.1e}/{r['median']:.1e}" for m, r in out[model]["angles"].items()), flush=True)
    return out


def cpu_time(repeats: int) -> dict:
    from bench_prepare import synthetic  # noqa: PLC0415

    scan = synthetic((512, 512), 32)
    w, _ = whitening_and_basis(scan)
    with one_blas_thread():
        matrix, _, found = benchtools.wall_timed(lambda: compression_of(scan.kspace, scan.trajectory, 8, w), repeats)
        plain, _, _ = benchtools.wall_timed(lambda: prepare_scan(scan, coil_maps="file", dcf="none"), repeats)
    compressed, _, _ = benchtools.wall_timed(
        lambda: prepare_scan(scan, coil_maps="file", dcf="none", coil_compress=8), repeats)
    out = {"matrix": [512, 512], "coils": 32, "samples": scan.n_samples, "centre_samples": found.samples,
           "compression_matrix_s": matrix, "prepare_scan_s": plain, "prepare_scan_compress8_s": compressed}
    print(out, flush=True)
    return out


def gram_threads(repeats: int) -> dict:
    """The Gram matrix and the whole compression matrix on 1, 2 and 4 threads (see the module docstring)."""
    from mri_recon.prep import compress  # noqa: PLC0415

    scan = gpu_scan()
    w, _ = whitening_and_basis(scan)
    index = centre_samples(scan.trajectory, scan.n_coils)
    saved, out = compress.GRAM_THREADS, {"centre_samples": int(len(index))}
    try:
        with one_blas_thread():
            for _ in range(2):
                for threads in (1, 2, 4):
                    compress.GRAM_THREADS = threads
                    gram, _, _ = benchtools.wall_timed(lambda: compress.centre_gram(scan.kspace, index), repeats)
                    whole, _, _ = benchtools.wall_timed(
                        lambda: centre_energies(scan.kspace, scan.trajectory, w), repeats)
                    out.setdefault(f"threads_{threads}", []).append({"gram_s": gram, "matrix_s": whole})
    finally:
        compress.GRAM_THREADS = saved
    print(out, flush=True)
    return out


def gpu_scan() -> Scan:
    return mri_recon.simulate_scan((512, 512), "golden", coils=32, snr=30.0, seed=3, spokes=804, dcf="ramp")


def gpu(repeats: int) -> dict:
    """The whole call for every choice, interleaved: after one warm-up call each, ``repeats`` rounds of one call
    per choice, so that the host's load falls on every row alike."""
    import statistics
    import time

    dev = resolve_device("gpu")
    scan = gpu_scan()
    calls = {str(c): (lambda c=c: mri_recon.reconstruct(scan, device=dev, coil_compress=c, **SETTINGS))
             for c in CHOICES}
    results = {key: call() for key, call in calls.items()}
    synchronize(dev)
    times: dict[str, list[float]] = {key: [] for key in calls}
    for _ in range(repeats):
        for key, call in calls.items():
            start = time.perf_counter()
            results[key] = call()
            synchronize(dev)
            times[key].append(time.perf_counter() - start)
    rows = {key: {"whole_s": statistics.median(times[key]), "times_s": times[key],
                  "nrmse": nrmse(results[key], scan), "timings": dict(results[key].timings)} for key in calls}
    for row in rows.values():
        row["speedup"] = rows["none"]["whole_s"] / row["whole_s"]
        row["nrmse_ratio"] = row["nrmse"] / rows["none"]["nrmse"]
    print("\n".join(f"{k}: {v['whole_s'] * 1e3:.1f} ms x{v['speedup']:.2f}, NRMSE {v['nrmse']:.4f}, "
                    f"prepare {v['timings'].get('prepare', 0) * 1e3:.1f} ms" for k, v in rows.items()), flush=True)
    return {"device": str(dev), "package": os.path.dirname(os.path.abspath(mri_recon.__file__)),
            "matrix": list(scan.matrix), "coils": scan.n_coils, "samples": scan.n_samples, "interleaved": True,
            "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--gpu", action="store_true", help="the GPU whole call at 512^2 x 32 coils")
    parser.add_argument("--no-cpu", action="store_true", help="skip the CPU sections (quality, BART, CPU time)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--only", choices=("cartesian", "cpu_time", "gram"),
                        help="only the Cartesian sections (cartesian, bart_gcc), the CPU time or the Gram's threads")
    args = parser.parse_args()
    if args.only:
        report = {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count()}
        if args.only == "cpu_time":
            benchtools.section(report, "cpu_time", lambda: cpu_time(args.repeats),
                               lambda e: "the compression step on the CPU")
        elif args.only == "gram":
            benchtools.section(report, "gram", lambda: gram_threads(args.repeats),
                               lambda e: "the centre's Gram matrix by thread count")
        else:
            benchtools.section(report, "cartesian", cartesian, lambda e: "Cartesian: svd and geometric (CPU)")
            benchtools.section(report, "bart_gcc", bart_gcc_section, lambda e: "principal angles against bart cc -G")
        benchtools.write_report(report, args.out)
        return
    report = {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
              "mri_recon": mri_recon.__version__}
    if not args.no_cpu:
        benchtools.section(report, "quality", quality, lambda e: "NRMSE with and without compression (CPU)")
        benchtools.section(report, "bart", bart_section, lambda e: "principal angles against bart cc")
        benchtools.section(report, "cpu_time", lambda: cpu_time(args.repeats),
                           lambda e: "the compression step on the CPU")
        benchtools.section(report, "cartesian", cartesian, lambda e: "Cartesian: svd and geometric (CPU)")
        benchtools.section(report, "bart_gcc", bart_gcc_section, lambda e: "principal angles against bart cc -G")
    if args.gpu:
        benchtools.section(report, "gpu", lambda: gpu(args.repeats), lambda e: "GPU whole call, 512^2 x 32 coils")
    benchtools.write_report(report, args.out)


if __name__ == "__main__":
    main()
