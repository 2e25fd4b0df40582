"""The command line through click's CliRunner: exit codes, outputs, untouched inputs, one-line errors."""

from __future__ import annotations

import hashlib
import json
import logging
import re

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from mri_recon.arrays import backend
from mri_recon.cli import main
from mri_recon.io import load_scan


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def small_scan(tmp_path_factory):
    path = tmp_path_factory.mktemp("scans") / "small.h5"
    result = CliRunner().invoke(main, ["simulate", str(path), "--matrix", "32", "--coils", "2", "--snr", "50",
                                       "--quiet"])
    assert result.exit_code == 0, result.output
    return path


def _run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_simulate_writes_a_valid_scan_with_ground_truth(small_scan):
    scan = load_scan(small_scan)
    assert scan.matrix == (32, 32) and scan.n_coils == 2 and scan.ground_truth is not None
    assert scan.coil_maps is not None and scan.weights is not None


def test_reconstruct_writes_image_attributes_and_png_and_leaves_input_alone(small_scan, tmp_path):
    before = _digest(small_scan)
    out, png = tmp_path / "r.h5", tmp_path / "r.png"
    result = _run("reconstruct", small_scan, "-o", out, "--png", png, "--iterations", "15", "--device", "cpu")
    assert result.exit_code == 0, result.output
    line = result.stderr.strip().splitlines()[-1]
    assert "\r" not in result.stderr  # stderr is no terminal: no bar (test_cli_log draws one on a terminal)
    assert line.startswith(f"wrote {out} (HDF5) and {png} (the image): 1 image(s), ") and "nufft on cpu" in line
    with h5py.File(out) as f:
        image = f["image"][()]
        assert image.dtype == np.complex64 and image.shape == (32, 32)
        assert f.attrs["device"] == "cpu" and f.attrs["iterations"] >= 1
        assert f.attrs["nrmse_vs_ground_truth"] < 0.35
        assert {"time_fhd_s", "time_psf_s", "time_iterations_s", "mri_recon_version"} <= set(f.attrs)
        assert f["residuals"][-1] <= f["residuals"][0]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert _digest(small_scan) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.h5", "r.png"]  # no temporary files left


def test_quiet_silences_progress_and_default_output_sits_beside_input(small_scan, tmp_path):
    copy = tmp_path / "scan.h5"
    copy.write_bytes(small_scan.read_bytes())
    result = _run("reconstruct", copy, "--iterations", "3", "--quiet", "--device", "cpu")
    assert result.exit_code == 0 and result.output == ""
    assert (tmp_path / "scan.recon.h5").is_file()


def test_default_output_off_a_terminal_is_the_result_line(small_scan, tmp_path):
    out = tmp_path / "r.h5"
    result = _run("reconstruct", small_scan, "-o", out, "--iterations", "4", "--tol", "0", "--device", "cpu")
    assert result.exit_code == 0, result.output
    lines = result.stderr.strip().split("\n")
    assert len(lines) == 1 and lines[0].startswith(f"wrote {out} (HDF5): 1 image(s), 4 CG iterations")
    assert result.stdout == ""


@pytest.mark.parametrize("flag, level", [("-v", logging.INFO), ("-vv", logging.DEBUG)])
def test_verbose_shows_the_log_and_restores_the_logger(small_scan, tmp_path, flag, level):
    result = _run("reconstruct", small_scan, "-o", tmp_path / "r.h5", "--iterations", "3", "--tol", "0",
                  "--device", "cpu", flag)
    assert result.exit_code == 0, result.output
    assert "engine nufft on cpu" in result.stderr and "psf " in result.stderr
    assert ("iteration 3/3  residual" in result.stderr) == (level == logging.DEBUG)
    logger = logging.getLogger("mri_recon")
    assert logger.level == logging.NOTSET and not [h for h in logger.handlers if type(h).__name__ == "_TqdmHandler"]


def test_quiet_and_verbose_contradict(small_scan, tmp_path):
    result = _run("reconstruct", small_scan, "-o", tmp_path / "r.h5", "-q", "-v")
    assert result.exit_code == 2 and "--quiet and --verbose contradict each other" in result.output


def test_log_json_records_settings_engine_stages_and_timings(small_scan, tmp_path):
    out, record = tmp_path / "r.h5", tmp_path / "run.json"
    result = _run("reconstruct", small_scan, "-o", out, "--iterations", "3", "--tol", "0", "--device", "cpu",
                  "--log-json", record, "--quiet")
    assert result.exit_code == 0 and result.output == ""
    log = json.loads(record.read_text())
    assert log["settings"]["iterations"] == 3 and log["settings"]["output"] == str(out)
    (image,) = log["images"]
    assert image["engine"] == "nufft" and image["device"] == "cpu" and image["iterations"] == 3
    assert len(image["residuals"]) == 4 and image["final_residual"] == image["residuals"][-1]
    assert {"upload", "fhd", "psf", "iterations", "download"} <= set(image["timings_s"])
    assert log["timings_s"]["psf"] == image["timings_s"]["psf"] and log["wall_s"] > 0
    assert image["preparation"]["coil_maps"] == "file" and image["parameters"]["lam"] == 1e-3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.h5", "run.json"]  # written atomically


def test_log_json_refuses_to_replace_an_output_or_the_input(small_scan, tmp_path):
    out = tmp_path / "r.h5"
    result = _run("reconstruct", small_scan, "-o", out, "--log-json", out, "--device", "cpu")
    _assert_clean_error(result, "--log-json names the same file as -o")
    result = _run("reconstruct", small_scan, "-o", out, "--log-json", small_scan, "--device", "cpu")
    assert result.exit_code != 0 and not out.exists()


def test_filter_sigma_smooths(small_scan, tmp_path):
    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    assert _run("reconstruct", small_scan, "-o", a, "--iterations", "5", "--quiet", "--device", "cpu").exit_code == 0
    assert _run("reconstruct", small_scan, "-o", b, "--iterations", "5", "--quiet", "--device", "cpu",
                "--filter-sigma", "1.5").exit_code == 0
    with h5py.File(a) as fa, h5py.File(b) as fb:
        sharp, smooth = fa["image"][()], fb["image"][()]
        assert fb.attrs["param_filter_sigma"] == 1.5
    total_variation = lambda x: np.abs(np.diff(x, axis=0)).sum()  # noqa: E731
    assert total_variation(smooth) < 0.8 * total_variation(sharp)


def _assert_clean_error(result, *fragments):
    assert result.exit_code != 0
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    for fragment in fragments:
        assert fragment in result.output, result.output


def test_errors_are_one_line_and_leave_nothing_behind(small_scan, tmp_path):
    _assert_clean_error(_run("reconstruct", tmp_path / "missing.h5"), "missing.h5: no such file")
    _assert_clean_error(_run("reconstruct", tmp_path), "folder holds no scan file")  # a folder is a batch
    text = tmp_path / "notes.h5"
    text.write_text("hello")
    _assert_clean_error(_run("reconstruct", text, "--quiet"), "not an HDF5 file")
    _assert_clean_error(_run("reconstruct", small_scan, "-o", small_scan, "--quiet"), "would overwrite the input")
    _assert_clean_error(_run("reconstruct", small_scan, "-o", tmp_path / "no" / "x.h5", "--quiet"), "does not exist")
    bad = tmp_path / "bad.h5"
    with h5py.File(small_scan) as src, h5py.File(bad, "w") as dst:
        dst.attrs["matrix"] = src.attrs["matrix"]
        dst["kspace"] = src["kspace"][()]
        dst["trajectory"] = src["trajectory"][()] * 10
    _assert_clean_error(_run("reconstruct", bad, "--quiet"), "did you scale your trajectory correctly")
    assert not (tmp_path / "bad.recon.h5").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.h5", "notes.h5"]


def test_gpu_without_gpu_is_a_clear_error_and_auto_falls_back(small_scan, tmp_path, monkeypatch):
    monkeypatch.setattr(backend, "gpu_count", lambda: 0)
    _assert_clean_error(_run("reconstruct", small_scan, "--device", "gpu", "-o", tmp_path / "g.h5"),
                        "device 'gpu' requested but")
    result = _run("reconstruct", small_scan, "--device", "auto", "-o", tmp_path / "a.h5", "--iterations", "2")
    assert result.exit_code == 0 and "nufft on cpu" in result.stderr
    assert re.search(r", \d+\.\d\d s \(\d+\.\d\d s since the command started\)$", result.stderr.rstrip())
    result = _run("reconstruct", small_scan, "--device", "auto", "-o", tmp_path / "a.h5", "--iterations", "2", "-v")
    assert result.exit_code == 0 and "no CUDA GPU was found; reconstructing on the CPU" in result.output
    _assert_clean_error(_run("reconstruct", small_scan, "--device", "tpu"), "unknown device 'tpu'")


def test_info_reports_shapes_extent_and_estimates(small_scan):
    result = _run("info", small_scan, "--device", "cpu")
    assert result.exit_code == 0, result.output
    for fragment in ("matrix      [32, 32]", "coils       2", "Nyquist 16", "memory", "time"):
        assert fragment in result.output


def test_info_makes_the_planner_call_reconstruct_makes(small_scan, tmp_path, monkeypatch):
    from mri_recon import pipeline
    from mri_recon.planning.planner import human_bytes

    calls = []
    real = pipeline.plan
    monkeypatch.setattr(pipeline, "host_memory_available", lambda: 2**34)  # the same free memory for both
    monkeypatch.setattr(pipeline, "plan", lambda *a, **kw: calls.append((a, kw)) or real(*a, **kw))
    no_maps = tmp_path / "nomaps.h5"  # reconstruct's default for several coils without maps: Walsh (SENSE)
    scan = load_scan(small_scan)
    from mri_recon.io import save_scan

    save_scan(no_maps, scan.replace(coil_maps=None))
    for path in (small_scan, no_maps):
        calls.clear()
        info = _run("info", path, "--device", "cpu")
        assert info.exit_code == 0, info.output
        assert _run("reconstruct", path, "-o", tmp_path / "r.h5", "--device", "cpu", "-q").exit_code == 0
        (info_args, info_kw), (run_args, run_kw) = calls  # reconstruct plans once, before it prepares
        assert info_args == run_args and info_kw == run_kw and info_kw["sense"] and info_kw["method"] == "nufft"
        assert f"about {human_bytes(real(*info_args, **info_kw).peak_bytes)} on cpu" in info.output


def test_info_says_when_the_scan_does_not_fit(small_scan, monkeypatch):
    from mri_recon import pipeline

    monkeypatch.setattr(pipeline, "host_memory_available", lambda: 1000)
    result = _run("info", small_scan, "--device", "cpu")
    assert result.exit_code == 0 and "memory      does not fit: " in result.output and "host memory" in result.output


def test_simulate_rejects_bad_arguments(tmp_path):
    _assert_clean_error(_run("simulate", tmp_path / "s.h5", "--matrix", "abc"), "expected N, NxM or NxMxK")
    result = _run("simulate", tmp_path / "s.h5", "--matrix", "32", "--trajectory", "spiral", "--spokes", "4")
    _assert_clean_error(result, "spokes apply to radial")
    assert not (tmp_path / "s.h5").exists()


def test_doctor_without_gpu_reports_versions(monkeypatch):
    monkeypatch.setattr(backend, "gpu_count", lambda: 0)
    result = _run("doctor", "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert "mri-recon" in result.output and "self-test skipped" in result.output
    for name in ("numpy", "scipy", "h5py", "click", "finufft", "ismrmrd", "nibabel", "tqdm", "cupy"):
        assert re.search(rf"^{name} +\S", result.output, re.MULTILINE), name
    assert not re.search(r"^cuda driver +0\.0$", result.output, re.MULTILINE)  # no driver: said in words
    for check in (*_cpu_engine_checks(), "cpu cg-sense 2d"):
        assert re.search(rf"^PASS  {check} +relative error \d\.\d\de-\d+ \(tolerance 1e-05\)", result.output,
                         re.MULTILINE), check
    assert result.output.rstrip().endswith("all self-tests passed")


def _cpu_engine_checks() -> list[str]:
    """The names of doctor's engine checks: each registered CPU engine, F^H d and F, 2D and 3D."""
    from mri_recon import doctor

    return [f"{engine.key} {what} {len(matrix)}d" for matrix in doctor.CPU_MATRICES
            for engine in doctor.engines_of("cpu", matrix) for what in ("fhd", "fwd")]


def test_doctor_fails_with_a_nonzero_exit_when_a_check_fails(monkeypatch):
    from mri_recon import doctor

    monkeypatch.setattr(backend, "gpu_count", lambda: 0)
    monkeypatch.setattr(doctor, "CPU_TOLERANCE", 0.0)
    result = _run("doctor", "--device", "cpu")
    first, second = _cpu_engine_checks()[:2]
    assert result.exit_code == 1 and re.search(rf"^FAIL  {first}", result.output, re.MULTILINE)
    assert f"Error: self-test failed: {first}, {second}" in result.output


def test_psf_cache_hit_gives_the_identical_image(small_scan, tmp_path):
    cache = tmp_path / "cache"
    first, second, fresh = tmp_path / "1.h5", tmp_path / "2.h5", tmp_path / "3.h5"
    common = ["--iterations", "4", "--quiet", "--device", "cpu", "--cache-dir", cache]
    assert _run("reconstruct", small_scan, "-o", first, *common).exit_code == 0
    assert len(list(cache.iterdir())) == 1
    assert _run("reconstruct", small_scan, "-o", second, *common).exit_code == 0
    assert _run("reconstruct", small_scan, "-o", fresh, "--no-cache", *common[:-2]).exit_code == 0
    with h5py.File(first) as a, h5py.File(second) as b, h5py.File(fresh) as c:
        assert a.attrs["param_psf"] == "miss" and b.attrs["param_psf"] == "hit" and c.attrs["param_psf"] == "computed"
        assert np.array_equal(a["image"][()], b["image"][()])
        assert np.array_equal(a["image"][()], c["image"][()])
    entry = next(cache.iterdir())
    entry.write_bytes(entry.read_bytes()[:-100])  # truncated: detected, recomputed, same image
    assert _run("reconstruct", small_scan, "-o", fresh, *common).exit_code == 0
    with h5py.File(first) as a, h5py.File(fresh) as c:
        assert c.attrs["param_psf"] == "miss" and np.array_equal(a["image"][()], c["image"][()])


def test_coil_map_and_dcf_choices(small_scan, tmp_path):
    for choice in ("walsh", "rss", "file"):
        out = tmp_path / f"{choice}.h5"
        result = _run("reconstruct", small_scan, "-o", out, "--iterations", "4", "--quiet", "--device", "cpu",
                      "--coil-maps", choice, "--dcf", "ramp", "--no-prewhiten")
        assert result.exit_code == 0, result.output
        with h5py.File(out) as f:
            assert f.attrs["coil_maps"] == choice and f.attrs["dcf"] == "ramp"
            assert f.attrs["combine"] == ("rss" if choice == "rss" else "sense")
    bare = tmp_path / "bare.h5"
    with h5py.File(small_scan) as src, h5py.File(bare, "w") as dst:
        dst.attrs["matrix"] = src.attrs["matrix"]
        dst["kspace"] = src["kspace"][()]
        dst["trajectory"] = src["trajectory"][()]
    _assert_clean_error(_run("reconstruct", bare, "--coil-maps", "file", "--quiet"), "needs a 'coil_maps' dataset")
    _assert_clean_error(_run("reconstruct", bare, "--dcf", "file", "--quiet"), "needs a 'weights' dataset")


def test_ismrmrd_two_slices_reconstruct_stacked_and_convert(small_scan, tmp_path):
    import json

    from mri_recon.io.ismrmrd_write import write_ismrmrd

    scan = load_scan(small_scan)
    other = scan.replace(kspace=scan.kspace * 2)
    mrd = tmp_path / "scan.mrd.h5"
    write_ismrmrd(mrd, [({"slice": 0}, scan), ({"slice": 1}, other)])
    out = tmp_path / "r.h5"
    result = _run("reconstruct", mrd, "-o", out, "--iterations", "5", "--quiet", "--device", "cpu",
                  "--coil-maps", "walsh")
    assert result.exit_code == 0, result.output
    with h5py.File(out) as f:
        image = f["image"][()]
        assert image.shape == (2, 32, 32)
        assert [k["slice"] for k in json.loads(f.attrs["stack"])] == [0, 1]
        assert f.attrs["traj_units"] == "cycles-per-fov"
    # The second slice is the first with doubled data: a linear reconstruction doubles it.
    assert np.linalg.norm(image[1] - 2 * image[0]) < 1e-3 * np.linalg.norm(image[1])
    result = _run("convert", mrd, tmp_path / "conv.h5", "--slice", "1", "--quiet")
    assert result.exit_code == 0, result.output
    converted = load_scan(tmp_path / "conv.h5")
    np.testing.assert_allclose(converted.kspace, other.kspace, rtol=1e-6)
    _assert_clean_error(_run("convert", mrd, mrd), "would overwrite the input")


def test_info_on_ismrmrd_reports_images_and_units(small_scan, tmp_path):
    from mri_recon.io.ismrmrd_write import write_ismrmrd

    scan = load_scan(small_scan)
    mrd = tmp_path / "two.mrd.h5"
    write_ismrmrd(mrd, [({"slice": 0}, scan), ({"slice": 1}, scan)], traj_units="normalized")
    result = _run("info", mrd, "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert "images      2 (slice 0, slice 1); the first is described" in result.output
    assert "traj units  normalized" in result.output
    _assert_clean_error(_run("info", mrd, "--device", "cpu", "--traj-units", "cycles-per-fov"),
                        "looks normalized to [-0.5, 0.5]")


def test_version_loads_no_numerical_library_and_help_lists_every_command():
    """``mri-recon --version`` loads only click and the version (it took 1.8-3.2 s when every command and the
    whole library were imported first); ``--help`` lists every command."""
    import subprocess
    import sys

    code = ("import sys\nfrom mri_recon.cli import main\n"
            "try:\n    main(['--version'], prog_name='mri-recon')\nexcept SystemExit:\n    pass\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'numpy', 'scipy', 'h5py', 'finufft'}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines()[-1] == "[]" and done.stdout.startswith("mri-recon, version ")
    shown = _run("--help").output
    assert all(f"  {name} " in shown for name in ("reconstruct", "simulate", "info", "convert", "doctor", "cache",
                                                   "serve", "send"))


def test_a_quiet_cpu_reconstruction_loads_neither_the_gpu_nor_the_bar_nor_the_cluster(small_scan, tmp_path):
    """A CPU run that draws no bar does not import CuPy, tqdm, Dask or SciPy's geometry (they cost the process
    0.1-0.4 s of CPU time each where installed)."""
    import subprocess
    import sys

    code = ("import sys\nfrom mri_recon.cli import main\n"
            "try:\n    main(sys.argv[1:], prog_name='mri-recon')\n"
            "except SystemExit as stop:\n    assert not stop.code\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in {'cupy', 'tqdm', 'dask', 'distributed'}"
            " or m == 'scipy.spatial'))")
    out = tmp_path / "r.h5"
    done = subprocess.run([sys.executable, "-c", code, "reconstruct", str(small_scan), "-o", str(out),
                           "--iterations", "3", "--device", "cpu", "--quiet"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]" and out.exists()


def test_auto_without_the_driver_is_the_cpu_and_leaves_cupy_unimported(monkeypatch):
    """Where the driver's library cannot be loaded no GPU can be used, so ``"auto"`` answers the CPU without
    asking CuPy (whose import alone costs a CPU process a few tenths of a second)."""
    from mri_recon.arrays import backend

    def no_library(name, *args, **kwargs):
        raise OSError(f"{name}: cannot open shared object file")

    def no_cupy():
        raise AssertionError("CuPy was asked for")

    monkeypatch.setattr(backend.sys, "platform", "linux")
    monkeypatch.setattr(backend.ctypes, "CDLL", no_library)
    monkeypatch.setattr(backend, "cupy_module", no_cupy)
    backend.gpu_count.cache_clear()
    try:
        assert not backend.driver_loadable()
        assert backend.resolve_device("auto") == backend.CPU
    finally:
        backend.gpu_count.cache_clear()


def test_one_scan_into_an_existing_folder_as_a_batch_names_it(small_scan, tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    result = _run("reconstruct", small_scan, "-o", folder, "--iterations", "2", "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert [p.name for p in folder.iterdir()] == [small_scan.name.removesuffix(".h5") + ".recon.h5"]


def test_a_png_axis_without_a_png_is_refused_before_any_work(small_scan, tmp_path):
    result = _run("reconstruct", small_scan, "-o", tmp_path / "x.h5", "--png-axis", "1", "--device", "cpu", "-q")
    assert result.exit_code == 2 and "--png-axis chooses the slices of the --png montage" in result.output
    assert not (tmp_path / "x.h5").exists()
