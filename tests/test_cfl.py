"""BART .cfl/.hdr files: the reader and writer, the mapping onto Scan, BART-layout output, and unit guards."""

from __future__ import annotations

import numpy as np
import pytest

import mri_recon
from mri_recon.errors import ExternalDataError, SchemaError, TrajectoryUnitsError
from mri_recon.io.cfl import DIMS, read_cfl, write_cfl
from mri_recon.io.cfl_scan import cfl_image, load_cfl_scans


def _random(rng, shape):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)


def _fortran_bytes(array):
    return np.asarray(array, np.complex64).ravel(order="F").tobytes()


@pytest.mark.parametrize("shape", [(1,), (7,), (3, 5), (1, 4, 3, 2), (2, 1, 1, 1, 1, 3), (1,) * 10 + (2,)])
def test_round_trip_is_fortran_order(tmp_path, shape):
    rng = np.random.default_rng(len(shape))
    array = _random(rng, shape)
    write_cfl(tmp_path / "x", array)
    assert (tmp_path / "x.cfl").read_bytes() == _fortran_bytes(array)  # BART's column-major data
    header = (tmp_path / "x.hdr").read_text().splitlines()
    assert header[0] == "# Dimensions"
    assert [int(v) for v in header[1].split()] == list(shape) + [1] * (DIMS - len(shape))
    back = read_cfl(tmp_path / "x.cfl")
    assert back.shape == tuple(list(shape) + [1] * (DIMS - len(shape)))
    np.testing.assert_array_equal(np.asarray(back).reshape(shape), array)


def test_header_written_by_bart_with_other_sections(tmp_path):
    array = _random(np.random.default_rng(1), (2, 3))
    (tmp_path / "a.cfl").write_bytes(_fortran_bytes(array))
    (tmp_path / "a.hdr").write_text("# Dimensions\n2 3 1 1 \n# Command\ntraj -x 2\n# Files\n >a\n# Creator\nBART v1\n")
    np.testing.assert_array_equal(np.asarray(read_cfl(tmp_path / "a")).reshape(2, 3), array)


@pytest.mark.parametrize(("text", "size", "match"), [
    ("# Command\nx\n", 8, "no '# Dimensions'"),
    ("# Dimensions\n2 x 1\n", 16, "are not"),
    ("# Dimensions\n0 1\n", 0, "are not|must be positive"),
    ("# Dimensions\n2 2\n", 24, "holds 24 bytes but"),
    ("# Dimensions\n2\n# Dimensions\n2\n", 16, "two '# Dimensions'"),
])
def test_malformed_files_are_refused(tmp_path, text, size, match):
    (tmp_path / "b.hdr").write_text(text)
    (tmp_path / "b.cfl").write_bytes(b"\0" * size)
    with pytest.raises(SchemaError, match=match):
        read_cfl(tmp_path / "b.cfl")


def test_data_file_elsewhere_needs_the_opt_in(tmp_path):
    array = _random(np.random.default_rng(2), (4,))
    (tmp_path / "elsewhere.bin").write_bytes(_fortran_bytes(array))
    (tmp_path / "c.hdr").write_text(f"# Dimensions\n4\n# Data\n{tmp_path / 'elsewhere.bin'}\n")
    with pytest.raises(ExternalDataError, match="names the data file"):
        read_cfl(tmp_path / "c.hdr")
    np.testing.assert_array_equal(np.asarray(read_cfl(tmp_path / "c.hdr", allow_external=True)).ravel(), array)


def _bart_scan(tmp_path, rng, ro=16, spokes=5, coils=3, n=16, frames=1):
    """BART-layout files of a radial-like scan and the oracle Scan fields, built independently."""
    angles = np.arange(spokes * frames) * np.pi / spokes
    line = np.arange(ro) - ro / 2 + 0.5
    traj = np.zeros((3, ro, spokes, 1, 1, 1, 1, 1, 1, 1, frames), np.complex64)
    for f in range(frames):
        for s in range(spokes):
            a = angles[f * spokes + s]
            traj[0, :, s, 0, 0, 0, 0, 0, 0, 0, f] = line * np.cos(a) * n / ro
            traj[1, :, s, 0, 0, 0, 0, 0, 0, 0, f] = line * np.sin(a) * n / ro
    ksp = _random(rng, (1, ro, spokes, coils, 1, 1, 1, 1, 1, 1, frames))
    sens = _random(rng, (n, n, 1, coils))
    for name, value in (("traj", traj), ("ksp", ksp), ("sens", sens)):
        write_cfl(tmp_path / name, value)
    return traj, ksp, sens


def test_scan_fields_follow_bart_axes(tmp_path):
    rng = np.random.default_rng(3)
    traj, ksp, sens = _bart_scan(tmp_path, rng)
    scan = mri_recon.load_scan(tmp_path / "ksp.cfl", trajectory=tmp_path / "traj.cfl",
                               sensitivities=tmp_path / "sens.cfl")
    assert scan.matrix == (16, 16)
    for c in range(3):
        for s in range(5):
            for r in range(16):  # sample m = ro + RO * spoke
                m = r + 16 * s
                assert scan.kspace[c, m] == ksp[0, r, s, c, ..., 0].item()
                np.testing.assert_array_equal(scan.trajectory[m], traj[:2, r, s, 0, ..., 0].real.ravel())
        np.testing.assert_array_equal(scan.coil_maps[c], sens[:, :, 0, c])


def test_time_frames_are_repetitions_and_written_back_on_dim_10(tmp_path):
    rng = np.random.default_rng(4)
    traj, ksp, _ = _bart_scan(tmp_path, rng, frames=3)
    scans = load_cfl_scans(tmp_path / "ksp", trajectory=tmp_path / "traj", matrix=(16, 16))
    assert [key["repetition"] for key, _ in scans] == [0, 1, 2]
    np.testing.assert_array_equal(scans[2][1].kspace[1], ksp[0, :, :, 1, ..., 2].ravel(order="F"))
    np.testing.assert_array_equal(scans[2][1].trajectory[:, 1], traj[1, :, :, 0, ..., 2].real.ravel(order="F"))
    stack = _random(rng, (3, 16, 16))
    out = cfl_image(stack, [key for key, _ in scans], 2)
    assert out.shape[:3] == (16, 16, 1) and out.shape[10] == 3
    np.testing.assert_array_equal(out[:, :, 0, 0, 0, 0, 0, 0, 0, 0, 2].reshape(16, 16), stack[2])


@pytest.mark.parametrize(("kwargs", "match"), [
    ({}, "does not say the image size"),
    ({"matrix": (16, 16), "sensitivities": "sens_bad"}, "sets of maps"),
])
def test_refusals(tmp_path, kwargs, match):
    rng = np.random.default_rng(5)
    _bart_scan(tmp_path, rng)
    write_cfl(tmp_path / "sens_bad", _random(rng, (16, 16, 1, 3, 2)))
    if "sensitivities" in kwargs:
        kwargs["sensitivities"] = tmp_path / kwargs["sensitivities"]
        kwargs.pop("matrix")
    with pytest.raises(SchemaError, match=match):
        load_cfl_scans(tmp_path / "ksp", trajectory=tmp_path / "traj", **kwargs)


def test_missing_trajectory_is_refused(tmp_path):
    _bart_scan(tmp_path, np.random.default_rng(6))
    with pytest.raises(SchemaError, match="needs its trajectory"):
        load_cfl_scans(tmp_path / "ksp", matrix=(16, 16))


@pytest.mark.parametrize("n", [32, 64, 96])
def test_radians_are_detected_and_converted(tmp_path, n):
    rng = np.random.default_rng(n)
    traj, ksp, _ = _bart_scan(tmp_path, rng, ro=n, n=n)
    radians = traj.copy()
    radians[:2] = traj[:2] * (2 * np.pi / n)  # [-pi, pi)
    write_cfl(tmp_path / "rad", radians)
    with pytest.raises(TrajectoryUnitsError, match="radians.*--traj-units radians"):
        load_cfl_scans(tmp_path / "ksp", trajectory=tmp_path / "rad", matrix=(n, n))
    scan = load_cfl_scans(tmp_path / "ksp", trajectory=tmp_path / "rad", matrix=(n, n), traj_units="radians")[0][1]
    reference = traj[:2, :, :, 0].real.reshape(2, -1, order="F").T
    error = np.linalg.norm(scan.trajectory - reference) / np.linalg.norm(reference)
    assert error < 1e-6


def test_radians_in_a_schema_scan_are_named():
    n = 64
    k = np.linspace(-np.pi, np.pi * (1 - 2 / n), n, dtype=np.float32)
    trajectory = np.stack([k, np.zeros_like(k)], axis=1)
    with pytest.raises(TrajectoryUnitsError, match="looks like it is in radians"):
        mri_recon.Scan(kspace=np.ones((1, n), np.complex64), trajectory=trajectory, matrix=(n, n))


def test_per_meter_is_named_for_an_ismrmrd_extent():
    from mri_recon.io.ismrmrd import detect_units

    encoded, fov_mm = np.array([256.0, 256.0]), np.array([240.0, 240.0])
    extent = encoded / 2 / (fov_mm / 1000)  # N / (2 FOV) in 1/m
    with pytest.raises(TrajectoryUnitsError, match="per-meter.*--traj-units per-meter"):
        detect_units(extent, encoded, "scan.h5", fov_mm)
    with pytest.raises(TrajectoryUnitsError, match="radians"):
        detect_units(np.array([np.pi, np.pi]), encoded, "scan.h5", fov_mm)
    assert detect_units(encoded / 2, encoded, "scan.h5", fov_mm) == "cycles-per-fov"


def test_writing_over_a_protected_input_is_refused_and_leaves_both_files(tmp_path):
    from mri_recon.errors import OutputError

    first = _random(np.random.default_rng(8), (3, 2))
    write_cfl(tmp_path / "k", first)
    with pytest.raises(OutputError, match="would overwrite the input"):
        write_cfl(tmp_path / "k.cfl", np.zeros((5,), np.complex64), protect=(tmp_path / "k.cfl",))
    np.testing.assert_array_equal(np.asarray(read_cfl(tmp_path / "k")).reshape(3, 2), first)


@pytest.mark.parametrize("dims", ["99999999999999999999999999", "1 64 288230376151711745 1",
                                  "1 4294967296 4294967296 1"], ids=["one-huge", "int64-overflow", "empty-file"])
def test_sizes_beyond_any_file_are_refused_by_the_header(tmp_path, dims):
    (tmp_path / "k.hdr").write_text(f"# Dimensions\n{dims}\n")
    (tmp_path / "k.cfl").write_bytes(b"")
    with pytest.raises(SchemaError, match=r"declare .* bytes of data, more than any file holds"):
        read_cfl(tmp_path / "k")


def test_a_file_of_another_format_given_as_bart_is_named_as_such(tmp_path):
    """A BART option given an HDF5 file (``--trajectory scan.h5``) says the file is not BART's, not that a
    header ``scan.h5.hdr`` is missing; a missing BART name still names its missing header."""
    from mri_recon.errors import ScanFileError

    (tmp_path / "scan.h5").write_bytes(b"\x89HDF\r\n\x1a\n")
    with pytest.raises(ScanFileError, match=r"scan\.h5: not a BART file \(BART's are a NAME\.cfl / NAME\.hdr "
                                            r"pair; there is no scan\.h5\.hdr\)"):
        read_cfl(tmp_path / "scan.h5")
    with pytest.raises(ScanFileError, match=r"missing\.hdr: no such BART header"):
        read_cfl(tmp_path / "missing")
