"""``mri-recon reconstruct ksp.cfl --trajectory traj.cfl --sensitivities sens.cfl -o x.cfl`` and ``convert``."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

import mri_recon
from mri_recon.cli import main
from mri_recon.io.cfl import read_cfl, write_cfl

N, RO, SPOKES, COILS = 12, 24, 14, 3


def _run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture()
def bart_files(tmp_path):
    """A BART-layout scan whose data are the exact DFT (float64) of a random image times random maps."""
    rng = np.random.default_rng(11)
    angles = np.arange(SPOKES) * np.pi / SPOKES
    line = (np.arange(RO) - RO / 2) * N / RO
    kx, ky = np.outer(line, np.cos(angles)), np.outer(line, np.sin(angles))  # (RO, SPOKES)
    traj = np.zeros((3, RO, SPOKES), np.complex64)
    traj[0], traj[1] = kx, ky
    image = rng.standard_normal((N, N)) + 1j * rng.standard_normal((N, N))
    maps = rng.standard_normal((COILS, N, N)) + 1j * rng.standard_normal((COILS, N, N))
    r = (np.arange(N) - N // 2) / N
    k = np.stack([traj[0].real.ravel(order="F"), traj[1].real.ravel(order="F")], axis=1).astype(np.float64)
    encode = np.exp(-2j * np.pi * (np.outer(k[:, 0], np.repeat(r, N)) + np.outer(k[:, 1], np.tile(r, N))))
    data = np.stack([encode @ (maps[c] * image).ravel() for c in range(COILS)])  # (C, M)
    ksp = data.T.reshape(RO, SPOKES, COILS, order="F")[None]
    write_cfl(tmp_path / "traj", traj)
    write_cfl(tmp_path / "ksp", ksp)
    write_cfl(tmp_path / "sens", np.moveaxis(maps, 0, -1)[:, :, None, :])
    return tmp_path, encode, maps, data


def test_reconstruct_solves_the_normal_equations_and_writes_bart_layout(bart_files):
    folder, encode, maps, data = bart_files
    lam = 0.05
    result = _run("reconstruct", folder / "ksp.cfl", "--trajectory", folder / "traj.cfl", "--sensitivities",
                  folder / "sens.cfl", "-o", folder / "x.cfl", "--lambda", lam, "--iterations", 200, "--tol", 0,
                  "--device", "cpu", "--method", "exact", "-q")
    assert result.exit_code == 0, result.output
    out = np.asarray(read_cfl(folder / "x.cfl"))
    assert out.shape == (N, N) + (1,) * 14
    a = np.concatenate([encode * maps[c].ravel() for c in range(COILS)])  # float64 oracle
    peak = float(np.max(np.sum(np.abs(maps) ** 2, axis=0))) * encode.shape[0]
    x = np.linalg.solve(a.conj().T @ a + lam * peak * np.eye(N * N), a.conj().T @ data.ravel())
    got = out.reshape(N, N).ravel()
    assert np.linalg.norm(got - x) / np.linalg.norm(x) < 1e-4


def test_convert_to_mrd_keeps_the_samples(bart_files):
    folder, *_ = bart_files
    result = _run("convert", folder / "ksp.cfl", folder / "ksp.mrd.h5", "--trajectory", folder / "traj.cfl",
                  "--matrix", f"{N}x{N}")
    assert result.exit_code == 0, result.output
    ours = mri_recon.load_scan(folder / "ksp.cfl", trajectory=folder / "traj.cfl", matrix=(N, N))
    back = mri_recon.load_scan(folder / "ksp.mrd.h5", traj_units="cycles-per-fov")
    np.testing.assert_array_equal(back.kspace, ours.kspace)
    np.testing.assert_allclose(back.trajectory, ours.trajectory, rtol=1e-6, atol=1e-6)


def test_convert_refuses_sensitivities_where_mrd_has_no_place_for_them(bart_files):
    """MRD raw data holds no coil maps: --sensitivities for an MRD output is refused (it was dropped without a
    word), and schema v1 keeps them."""
    folder, _, maps, _ = bart_files
    common = ["--trajectory", folder / "traj.cfl", "--sensitivities", folder / "sens.cfl", "--matrix", f"{N}x{N}"]
    result = _run("convert", folder / "ksp.cfl", folder / "ksp.mrd.h5", *common)
    assert result.exit_code == 1 and "MRD raw data has no place for coil sensitivities" in result.output
    assert not (folder / "ksp.mrd.h5").exists()
    assert _run("convert", folder / "ksp.cfl", folder / "ksp.h5", *common).exit_code == 0
    np.testing.assert_allclose(mri_recon.load_scan(folder / "ksp.h5").coil_maps, maps, rtol=1e-6, atol=1e-6)


def test_bart_options_for_an_hdf5_scan_are_refused(bart_files, tmp_path):
    scan = mri_recon.simulate_scan((16, 16), "golden", coils=1, spokes=8)
    mri_recon.save_scan(tmp_path / "s.h5", scan)
    result = _run("reconstruct", tmp_path / "s.h5", "--trajectory", bart_files[0] / "traj.cfl")
    assert result.exit_code == 1
    assert "--trajectory apply to BART .cfl k-space" in result.output


def test_a_radian_trajectory_stops_with_the_fix(bart_files):
    folder, *_ = bart_files
    traj = np.asarray(read_cfl(folder / "traj")).copy()
    write_cfl(folder / "rad", traj * (np.pi / np.max(np.abs(traj))))  # max |k| = pi
    result = _run("reconstruct", folder / "ksp.cfl", "--trajectory", folder / "rad.cfl", "--matrix", "32x32",
                  "-o", folder / "y.cfl", "--device", "cpu")
    assert result.exit_code == 1
    assert "radians" in result.output and "--traj-units radians" in result.output


def test_info_describes_a_bart_scan(bart_files):
    folder, *_ = bart_files
    result = _run("info", folder / "ksp", "--trajectory", folder / "traj", "--sensitivities", folder / "sens",
                  "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert f"matrix      [{N}, {N}] (2-D)" in result.output and f"coils       {COILS}" in result.output
    assert f"samples     {RO * SPOKES} per coil" in result.output
    assert f"coil_maps   complex64 ({COILS}, {N}, {N})" in result.output


def test_a_batch_honours_the_bart_options(bart_files):
    folder, *_ = bart_files
    (folder / "again.cfl").write_bytes((folder / "ksp.cfl").read_bytes())
    (folder / "again.hdr").write_bytes((folder / "ksp.hdr").read_bytes())
    bart = ["--trajectory", folder / "traj.cfl", "--sensitivities", folder / "sens.cfl"]
    fast = ["--iterations", 5, "--device", "cpu", "--method", "exact", "--no-cache", "-q"]
    single = _run("reconstruct", folder / "ksp.cfl", *bart, "-o", folder / "one.cfl", *fast)
    assert single.exit_code == 0, single.output
    batch = _run("reconstruct", folder / "ksp.cfl", folder / "again.cfl", *bart, "-o", folder / "out", "--format",
                 "cfl", *fast)
    assert batch.exit_code == 0, batch.output
    one = np.asarray(read_cfl(folder / "one.cfl"))
    for name in ("ksp", "again"):
        np.testing.assert_array_equal(np.asarray(read_cfl(folder / "out" / f"{name}.recon.cfl")), one)


def test_bart_options_for_an_hdf5_scan_are_refused_everywhere(bart_files, tmp_path):
    from mri_recon.errors import InvalidDataError

    scan = mri_recon.simulate_scan((16, 16), "golden", coils=1, spokes=8)
    mri_recon.save_scan(tmp_path / "s.h5", scan)
    with pytest.raises(InvalidDataError, match=r"--sensitivities apply to BART .cfl k-space \(sensitivities=\)"):
        mri_recon.load_scans(tmp_path / "s.h5", sensitivities=bart_files[0] / "sens.cfl")
    assert np.array_equal(mri_recon.load_scan(tmp_path / "s.h5", matrix=None).kspace, scan.kspace)
    for command in ("info", "convert"):
        extra = [tmp_path / "t.h5"] if command == "convert" else []
        result = _run(command, tmp_path / "s.h5", *extra, "--matrix", "16x16")
        assert result.exit_code == 1 and "--matrix apply to BART .cfl k-space" in result.output, result.output
    assert not (tmp_path / "t.h5").exists()


@pytest.mark.parametrize(("value", "expected"), [("12x12", (12, 12)), ("8,6,4", (8, 6, 4)), ((5, 7), (5, 7)),
                                                 ([3, 4, 5], (3, 4, 5))])
def test_the_matrix_setting_takes_text_or_sizes(value, expected):
    from mri_recon.settings import ReconSettings

    settings = ReconSettings(matrix=value)
    assert settings.matrix == expected and settings.reader_keywords()["matrix"] == expected


@pytest.mark.parametrize("value", ["12", "12xa", "1x2x3x4", (2.5, 3), "", ()])
def test_a_malformed_matrix_setting_is_refused(value):
    from mri_recon.errors import InvalidDataError
    from mri_recon.settings import ReconSettings

    with pytest.raises(InvalidDataError, match="matrix must be NxM or NxMxK"):
        ReconSettings(matrix=value)


def test_a_cpu_run_on_cfl_files_imports_no_hdf5_scipy_server_or_unused_stage(bart_files):
    """The process a user starts for BART files loads what it uses: h5py, SciPy's packages (``scipy.fft``,
    ``scipy.ndimage``, ...; pocketfft is loaded from SciPy's folder by itself), the TCP server, and the modules of
    stages this run does not have (off-resonance correction: no field map; the gradient-delay estimators and
    Cartesian GCC: not asked for; the GPU's Walsh maps) are imported on use, and this run uses none of them."""
    folder, *_ = bart_files
    args = ["reconstruct", "ksp.cfl", "--trajectory", "traj.cfl", "--sensitivities", "sens.cfl", "-o", "x.cfl",
            "--device", "cpu", "--iterations", "3", "-q"]
    packages = ("h5py", "scipy")
    modules = ("mri_recon.server.service", "mri_recon.operators.offres.setup", "mri_recon.prep.fit",
               "mri_recon.prep.ring", "mri_recon.prep.adaptive", "mri_recon.prep.geometric",
               "mri_recon.prep.walsh_gpu")
    code = ("import sys; from mri_recon.cli import main; main(sys.argv[1:], standalone_mode=False); "
            f"print(' '.join(sorted(m for m in sys.modules if m.partition('.')[0] in {packages} or m in {modules})))")
    done = subprocess.run([sys.executable, "-c", code, *args], cwd=folder, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == ""
    assert np.all(np.isfinite(np.asarray(read_cfl(folder / "x.cfl"))))


def test_a_time_series_along_barts_time_dimension_is_solved_jointly(bart_files):
    """Frames along BART's TIME dimension (10) of a .cfl k-space (the layout of ``bart phantom -t`` with a
    trajectory of ``bart traj -t``) go to the joint temporal solve; a .cfl file stores no true frames, so none is
    looked for (it was opened as HDF5)."""
    folder, *_ = bart_files
    frames = 3
    ksp, traj = (np.asarray(read_cfl(folder / name))[(Ellipsis, *[0] * 6)] for name in ("ksp", "traj"))
    scales = np.arange(1, frames + 1).reshape((1,) * 10 + (frames,))
    write_cfl(folder / "kt", ksp[..., None] * scales)  # dimensions 0-9, then TIME
    write_cfl(folder / "tt", np.broadcast_to(traj[..., None], traj.shape + (frames,)))
    result = _run("reconstruct", folder / "kt.cfl", "--trajectory", folder / "tt.cfl", "--sensitivities",
                  folder / "sens.cfl", "-o", folder / "xt.cfl", "--temporal", "tv", "--iterations", 20,
                  "--device", "cpu", "-q")
    assert result.exit_code == 0, result.output
    out = np.asarray(read_cfl(folder / "xt.cfl")).reshape(N, N, frames, order="F")
    energy = np.linalg.norm(out.reshape(-1, frames), axis=0)
    assert np.all(np.isfinite(out)) and np.all(np.diff(energy) > 0)  # the frames' data grow with t
