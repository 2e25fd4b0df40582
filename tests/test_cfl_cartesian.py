"""BART's Cartesian k-space (``bart pics ksp sens``): the sampling pattern from the non-zero samples, the
l2 solution against a dense float64 solve and against ``bart pics -l2`` itself (skipped without ``bart``),
ESPIRiT maps from the centre, BART's lambda, refusals."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
from click.testing import CliRunner

import mri_recon
from mri_recon.cli import main
from mri_recon.errors import SchemaError
from mri_recon.io.cfl import read_cfl, write_cfl
from mri_recon.io.cfl_scan import load_cfl_scans

BART = shutil.which("bart")


def _unitary_fft(image: np.ndarray) -> np.ndarray:
    """BART's ``fft -u``: centred (voxel and frequency N // 2 at 0), unitary, exp(-2 pi i k r)."""
    axes = tuple(range(image.ndim))
    spectrum = np.fft.fftshift(np.fft.fftn(np.fft.ifftshift(image, axes=axes), axes=axes), axes=axes)
    return spectrum / np.sqrt(image.size)


def _cartesian(tmp_path, rng, n=12, coils=3, keep=0.6):
    image = rng.standard_normal((n, n)) + 1j * rng.standard_normal((n, n))
    maps = rng.standard_normal((coils, n, n)) + 1j * rng.standard_normal((coils, n, n))
    mask = rng.random((n, n)) < keep
    mask[n // 2, n // 2] = True
    ksp = np.stack([_unitary_fft(m * image) for m in maps], axis=-1) * mask[:, :, None]
    write_cfl(tmp_path / "ksp", ksp[:, :, None, :].astype(np.complex64))
    write_cfl(tmp_path / "sens", np.moveaxis(maps, 0, -1)[:, :, None, :].astype(np.complex64))
    return maps, mask, ksp


def test_the_sampled_frequencies_are_the_non_zero_ones(tmp_path, rng):
    maps, mask, ksp = _cartesian(tmp_path, rng)
    [(key, scan)] = load_cfl_scans(tmp_path / "ksp", sensitivities=tmp_path / "sens")
    assert scan.matrix == (12, 12) and scan.n_samples == mask.sum() and scan.attrs["sampling"] == "cartesian"
    index = scan.trajectory.astype(int) + 6
    assert np.array_equal(np.sort(np.ravel_multi_index(index.T, (12, 12))), np.flatnonzero(mask))
    assert np.allclose(scan.kspace, ksp[index[:, 0], index[:, 1]].T, atol=1e-6)


def test_l2_solves_barts_normal_equations(tmp_path, rng):
    """``(A^H A + lam_bart I) x = A^H y`` with BART's unitary A, solved densely in float64: our image times
    ``sqrt(N)`` at ``--lambda = lam_bart N / (M peak)``."""
    maps, mask, ksp = _cartesian(tmp_path, rng)
    n, lam_bart = 12, 0.05
    r = (np.arange(n) - n // 2) / n
    k = np.argwhere(mask) - n // 2
    dft = np.exp(-2j * np.pi * (np.outer(k[:, 0], np.repeat(r, n)) + np.outer(k[:, 1], np.tile(r, n)))) / n
    a = np.concatenate([dft * m.ravel()[None, :] for m in maps])
    y = np.concatenate([ksp[mask][:, c] for c in range(maps.shape[0])])
    truth = np.linalg.solve(a.conj().T @ a + lam_bart * np.eye(n * n), a.conj().T @ y).reshape(n, n)
    [(_, scan)] = load_cfl_scans(tmp_path / "ksp", sensitivities=tmp_path / "sens")
    peak = float(np.max(np.sum(np.abs(scan.coil_maps) ** 2, axis=0)))
    lam = lam_bart * n * n / (scan.n_samples * peak)
    image = np.asarray(mri_recon.reconstruct(scan, device="cpu", lam=lam, iterations=300, tol=0).image) * n
    assert np.linalg.norm(image - truth) / np.linalg.norm(truth) < 1e-4


def test_refusals_name_the_problem(tmp_path, rng):
    _cartesian(tmp_path, rng)
    write_cfl(tmp_path / "small", np.ones((8, 8, 1, 3), np.complex64))
    with pytest.raises(SchemaError, match="sensitivities of matrix \\[8, 8\\] do not fit the Cartesian k-space grid"):
        load_cfl_scans(tmp_path / "ksp", sensitivities=tmp_path / "small")
    with pytest.raises(SchemaError, match="is the grid \\[12, 12\\]; matrix \\[16, 16\\] differs"):
        load_cfl_scans(tmp_path / "ksp", matrix="16x16")
    write_cfl(tmp_path / "zero", np.zeros((12, 12, 1, 3), np.complex64))
    with pytest.raises(SchemaError, match="holds no non-zero sample"):
        load_cfl_scans(tmp_path / "zero")


def bart(folder, *args: str) -> None:
    subprocess.run([BART, *args], cwd=folder, capture_output=True, text=True, check=True)


@pytest.mark.skipif(BART is None, reason="needs BART's command line (apt-get install bart)")
def test_equal_to_bart_pics_with_its_maps_and_close_with_ours(tmp_path):
    n, lam_bart = 96, 0.01
    bart(tmp_path, "phantom", "-x", str(n), "-s", "8", "-k", "full")
    full = np.asarray(read_cfl(tmp_path / "full"))
    mask = np.zeros((n, n), bool)
    mask[:, ::3] = True
    mask[:, n // 2 - 10:n // 2 + 10] = True  # a calibration region
    write_cfl(tmp_path / "ksp", (full * mask.reshape(n, n, *[1] * 14)).astype(np.complex64))
    bart(tmp_path, "ecalib", "-m1", "ksp", "sens")
    bart(tmp_path, "pics", "-S", "-l2", "-r", str(lam_bart), "-i", "200", "ksp", "sens", "theirs")  # -S: data units
    theirs = np.asarray(read_cfl(tmp_path / "theirs")).reshape(n, n)
    lam = lam_bart * n * n / int(mask.sum())  # M sampled frequencies, maps of peak 1 (ecalib)
    for maps in (["--sensitivities", tmp_path / "sens.cfl"], []):
        out = tmp_path / f"ours{len(maps)}.cfl"
        done = CliRunner().invoke(main, [str(a) for a in ["reconstruct", tmp_path / "ksp.cfl", *maps, "-o", out,
                                                          "--device", "cpu", "--iterations", "200", "--tol", "0",
                                                          "--lambda", lam, "--quiet"]])
        assert done.exit_code == 0, done.output
        ours = np.asarray(read_cfl(out)).reshape(n, n) * n
        if maps:
            assert np.linalg.norm(ours - theirs) / np.linalg.norm(theirs) < 1e-2
        else:  # ESPIRiT maps of our own: the magnitude (the maps' phase is arbitrary)
            assert np.linalg.norm(np.abs(ours) - np.abs(theirs)) / np.linalg.norm(theirs) < 0.15
