"""ISMRMRD input: files written by the ismrmrd package itself, geometry and units, conversion, every error."""

from __future__ import annotations

import re
import sys

import h5py
import numpy as np
import pytest

ismrmrd = pytest.importorskip("ismrmrd")

from mri_recon.errors import (  # noqa: E402
    InvalidDataError,
    OutputError,
    ScanFileError,
    SchemaError,
    TrajectoryUnitsError,
)
from mri_recon.io import load_scan, load_scans  # noqa: E402
from mri_recon.io.ismrmrd import detect_units, load_ismrmrd, load_ismrmrd_all  # noqa: E402
from mri_recon.io.ismrmrd_write import convert, write_ismrmrd  # noqa: E402
from mri_recon.scan import Scan  # noqa: E402
from mri_recon.sim import trajectories  # noqa: E402

X = ismrmrd.xsd

# --------------------------------------------------------------------------------------------------------
# Helpers: scans, and raw files written with the ismrmrd package directly


def _complex(rng, shape):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)


TRAJECTORIES = {
    "radial-2d": (lambda: trajectories.radial((32, 32), 24, golden=True), 64, (32, 32)),
    "spiral-2d": (lambda: trajectories.spiral((32, 32), 8, 150), 150, (32, 32)),
    "radial-3d": (lambda: trajectories.kooshball((16, 16, 16), 40), 32, (16, 16, 16)),
}


def _scan(rng, kind="radial-2d", coils=4, weights=False, noise=True, **attrs) -> Scan:
    make, readout, matrix = TRAJECTORIES[kind]
    traj = make()
    m = traj.shape[0]
    return Scan(kspace=_complex(rng, (coils, m)), trajectory=traj, matrix=matrix,
                weights=rng.random(m).astype(np.float32) if weights else None,
                noise=_complex(rng, (coils, 700)) if noise else None,
                attrs={"samples_per_readout": readout, **attrs})


def _space(matrix, fov):
    size = [int(n) for n in matrix] + [1] * (3 - len(matrix))
    mm = [float(v) for v in fov] + [5.0] * (3 - len(fov))
    return X.encodingSpaceType(matrixSize=X.matrixSizeType(x=size[0], y=size[1], z=size[2]),
                               fieldOfView_mm=X.fieldOfViewMm(x=mm[0], y=mm[1], z=mm[2]))


def _header(matrix=(32, 32), fov=(200.0, 200.0), encoded=None, encoded_fov=None, encodings=1):
    enc = X.encodingType(encodedSpace=_space(encoded or matrix, encoded_fov or fov),
                         reconSpace=_space(matrix, fov), encodingLimits=X.encodingLimitsType(),
                         trajectory=X.trajectoryType.RADIAL)
    return X.ismrmrdHeader(experimentalConditions=X.experimentalConditionsType(H1resonanceFrequency_Hz=1),
                           encoding=[enc] * encodings)


def _acq(data, traj=None, flags=(), **fields):
    idx = {name: fields.pop(name) for name in ("slice", "repetition", "contrast") if name in fields}
    acq = ismrmrd.Acquisition.from_array(np.ascontiguousarray(data, dtype=np.complex64),
                                         None if traj is None else np.ascontiguousarray(traj, np.float32),
                                         **fields)
    for name, value in idx.items():
        setattr(acq.idx, name, value)
    for flag in flags:
        acq.set_flag(flag)
    return acq


def _write_raw(path, header, acquisitions):
    with ismrmrd.File(str(path), "w") as f:
        f["dataset"].header = header
        f["dataset"].acquisitions = acquisitions
    return path


def _readouts(rng, count=4, coils=3, samples=16, extent=16.0, dims=2):
    """Radial-like readouts reaching ``extent`` cycles per (encoded) FOV."""
    out = []
    for a in range(count):
        angle = np.pi * a / count
        r = np.linspace(-extent, extent * (1 - 2 / samples), samples)
        traj = np.zeros((samples, dims), np.float32)
        traj[:, 0], traj[:, 1] = r * np.cos(angle), r * np.sin(angle)
        out.append((_complex(rng, (coils, samples)), traj))
    return out


def _same(a: Scan, b: Scan, *, exact_trajectory=True):
    assert a.matrix == b.matrix and a.n_coils == b.n_coils
    np.testing.assert_array_equal(a.kspace, b.kspace)
    if exact_trajectory:
        np.testing.assert_array_equal(a.trajectory, b.trajectory)
    else:
        np.testing.assert_allclose(a.trajectory, b.trajectory, rtol=1e-6, atol=1e-5)
    for name in ("weights", "noise"):
        left, right = getattr(a, name), getattr(b, name)
        assert (left is None) == (right is None), name
        if left is not None:
            np.testing.assert_array_equal(left, right)


# --------------------------------------------------------------------------------------------------------
# Round trips


@pytest.mark.parametrize("kind", list(TRAJECTORIES), ids=list(TRAJECTORIES))
@pytest.mark.parametrize("units", ["cycles-per-fov", "normalized"])
@pytest.mark.parametrize("oversampling", [1.0, 2.0], ids=["no-os", "readout-os2"])
def test_round_trip_through_the_ismrmrd_package(tmp_path, rng, kind, units, oversampling):
    scan = _scan(rng, kind, weights=kind == "spiral-2d")
    path = tmp_path / "raw.h5"
    write_ismrmrd(path, scan, traj_units=units, readout_oversampling=oversampling)
    back = load_ismrmrd(path)
    assert back.attrs["traj_units"] == units
    # Powers of two throughout: the encoded/recon scaling is exact in binary.
    _same(back, scan)
    assert back.attrs["samples_per_readout"] == scan.attrs["samples_per_readout"]
    assert back.attrs["encoded_matrix"][0] == int(oversampling * scan.matrix[0])
    # The stored trajectory (read with the package itself) is relative to the encoded space.
    with ismrmrd.File(str(path), "r") as f:
        acquisitions = f["dataset"].acquisitions[:]
    imaging = [a for a in acquisitions if not a.is_flag_set(ismrmrd.ACQ_IS_NOISE_MEASUREMENT)]
    stored = np.concatenate([a.traj for a in imaging])
    scale = np.asarray(scan.matrix, np.float64)
    scale[0] = oversampling * scale[0]
    factor = (1.0 / np.asarray(scan.matrix)) if units == "normalized" else scale / np.asarray(scan.matrix)
    np.testing.assert_allclose(stored[:, :scan.ndim], scan.trajectory * factor, rtol=1e-6)
    assert stored.shape[1] == scan.ndim + (scan.weights is not None)


def test_simulated_radial_scan_with_noise(tmp_path, rng):
    simulate = pytest.importorskip("mri_recon.sim.simulate")
    scan = simulate.simulate_scan((32, 32), "golden", coils=4, snr=30.0, dcf="ramp",
                                  seed=int(rng.integers(1 << 30)))
    write_ismrmrd(tmp_path / "raw.h5", scan)
    back = load_ismrmrd(tmp_path / "raw.h5")
    _same(back, scan)
    assert back.attrs["samples_per_readout"] == scan.attrs["samples"]  # one acquisition per spoke
    assert back.coil_maps is None and back.ground_truth is None


def test_load_scan_dispatches_to_the_ismrmrd_reader(tmp_path, rng):
    scan = _scan(rng)
    write_ismrmrd(tmp_path / "raw.h5", scan)
    _same(load_scan(tmp_path / "raw.h5"), scan)


def test_load_scans_reads_either_format(tmp_path, rng):
    scans = [({"slice": s}, _scan(rng)) for s in (0, 1)]
    write_ismrmrd(tmp_path / "raw.h5", scans)
    got = load_scans(tmp_path / "raw.h5", traj_units="cycles-per-fov")
    zero = {"slice": 0, "contrast": 0, "phase": 0, "set": 0, "repetition": 0}
    assert [key for key, _ in got] == [zero, {**zero, "slice": 1}]
    convert(tmp_path / "raw.h5", tmp_path / "one.h5", slice=1)
    ((key, scan),) = load_scans(tmp_path / "one.h5")
    assert key == {}
    np.testing.assert_array_equal(scan.kspace, scans[1][1].kspace)


def test_units_override_and_wrong_override(tmp_path, rng):
    scan = _scan(rng)
    write_ismrmrd(tmp_path / "raw.h5", scan, traj_units="normalized")
    assert load_ismrmrd(tmp_path / "raw.h5", traj_units="normalized").attrs["traj_units"] == "normalized"
    with pytest.raises(TrajectoryUnitsError, match="looks normalized"):
        load_ismrmrd(tmp_path / "raw.h5", traj_units="cycles-per-fov")


@pytest.mark.parametrize("units", ["cycles-per-fov", "normalized"])
def test_oversampled_readout_maps_physical_frequencies_to_the_recon_fov(tmp_path, rng, units):
    """A point at a physical position lands on the recon voxel at that position: d = exp(-i 2 pi k . r_p)."""
    matrix, fov = (32, 32), np.array([200.0, 160.0])
    encoded, encoded_fov = np.array([64, 32]), np.array([400.0, 160.0])
    voxel = rng.integers(4, 28, size=2)
    r_p = (voxel - np.asarray(matrix) / 2) / np.asarray(matrix)
    p_mm = r_p * fov
    acquisitions, physical = [], []
    for a in range(12):
        angle = np.pi * a / 12 + rng.random() * 0.1
        k_phys = np.linspace(-0.08, 0.078, 64)[:, None] * np.array([np.cos(angle), np.sin(angle)])  # cycles/mm
        physical.append(k_phys)
        k_enc = k_phys * encoded_fov
        stored = k_enc / encoded if units == "normalized" else k_enc
        data = np.exp(-2j * np.pi * k_phys @ p_mm)[None, :] * np.array([[1.0], [0.5j]])
        acquisitions.append(_acq(data, stored))
    header = _header(matrix, tuple(fov), tuple(encoded), tuple(encoded_fov))
    _write_raw(tmp_path / "raw.h5", header, acquisitions)
    scan = load_ismrmrd(tmp_path / "raw.h5")
    assert scan.attrs["traj_units"] == units
    expected = np.exp(-2j * np.pi * scan.trajectory.astype(np.float64) @ r_p)
    np.testing.assert_allclose(scan.kspace[0], expected, atol=2e-5)
    np.testing.assert_allclose(scan.kspace[1], 0.5j * expected, atol=2e-5)
    np.testing.assert_allclose(scan.trajectory, np.concatenate(physical) * fov, rtol=1e-6, atol=1e-5)
    # The encoded space: 64 x 32 voxels over 400 x 160 mm, the same point at its own voxel.
    wide = load_ismrmrd(tmp_path / "raw.h5", space="encoded")
    assert wide.matrix == (64, 32) and wide.attrs["fov_mm"] == [400.0, 160.0]
    r_wide = p_mm / encoded_fov
    np.testing.assert_allclose(wide.kspace[0], np.exp(-2j * np.pi * wide.trajectory.astype(np.float64) @ r_wide),
                               atol=2e-5)
    with pytest.raises(InvalidDataError, match="unknown space 'image'"):
        load_ismrmrd(tmp_path / "raw.h5", space="image")


def test_noise_calibration_navigator_and_density_column(tmp_path, rng):
    coils = 3
    noise = [_complex(rng, (coils, 40)) for _ in range(2)]
    readouts = _readouts(rng, count=5, coils=coils, dims=3)
    for _, traj in readouts:
        traj[:, 2] = rng.random(len(traj))  # the density-weight column
    acquisitions = [_acq(n, flags=[ismrmrd.ACQ_IS_NOISE_MEASUREMENT]) for n in noise]
    acquisitions.append(_acq(*readouts[0], flags=[ismrmrd.ACQ_IS_PARALLEL_CALIBRATION]))
    acquisitions.append(_acq(*readouts[1], flags=[ismrmrd.ACQ_IS_NAVIGATION_DATA]))
    acquisitions.append(_acq(*readouts[2], flags=[ismrmrd.ACQ_IS_PARALLEL_CALIBRATION_AND_IMAGING]))
    acquisitions += [_acq(*readouts[3]), _acq(*readouts[4])]
    _write_raw(tmp_path / "raw.h5", _header(), acquisitions)
    scan = load_ismrmrd(tmp_path / "raw.h5")
    kept = readouts[2:]
    np.testing.assert_array_equal(scan.kspace, np.concatenate([d for d, _ in kept], axis=1))
    np.testing.assert_array_equal(scan.trajectory, np.concatenate([t[:, :2] for _, t in kept]))
    np.testing.assert_array_equal(scan.weights, np.concatenate([t[:, 2] for _, t in kept]))
    np.testing.assert_array_equal(scan.noise, np.concatenate(noise, axis=1))
    assert scan.attrs["skipped_acquisitions"] == 2


def test_discarded_samples_are_dropped(tmp_path, rng):
    readouts = _readouts(rng, count=3)
    acquisitions = [_acq(d, t, discard_pre=2, discard_post=1) for d, t in readouts]
    _write_raw(tmp_path / "raw.h5", _header(), acquisitions)
    scan = load_ismrmrd(tmp_path / "raw.h5")
    np.testing.assert_array_equal(scan.kspace, np.concatenate([d[:, 2:-1] for d, _ in readouts], axis=1))
    np.testing.assert_array_equal(scan.trajectory, np.concatenate([t[2:-1] for _, t in readouts]))


def test_two_slices_and_repetitions(tmp_path, rng):
    scans = [({"slice": s, "repetition": r}, _scan(rng, noise=(s, r) == (0, 0)))
             for s in (0, 1) for r in (0, 2)]
    write_ismrmrd(tmp_path / "raw.h5", scans)
    back = load_ismrmrd_all(tmp_path / "raw.h5")
    assert [key for key, _ in back] == [{"slice": s, "contrast": 0, "phase": 0, "set": 0, "repetition": r}
                                        for s in (0, 1) for r in (0, 2)]
    for (_, got), (_, want) in zip(back, scans):
        np.testing.assert_array_equal(got.kspace, want.kspace)
        np.testing.assert_array_equal(got.noise, scans[0][1].noise)  # one noise scan serves every slice
    one = load_ismrmrd(tmp_path / "raw.h5", slice=1, repetition=2)
    np.testing.assert_array_equal(one.kspace, scans[3][1].kspace)
    assert (one.attrs["slice"], one.attrs["repetition"]) == (1, 2)
    with pytest.raises(SchemaError, match=r"holds several images \(slices \[0, 1\], contrasts \[0\], phases "
                                          r"\[0\], sets \[0\], repetitions \[0, 2\]\)"):
        load_ismrmrd(tmp_path / "raw.h5")
    with pytest.raises(SchemaError, match="no data for slice 5"):
        load_ismrmrd(tmp_path / "raw.h5", slice=5)


def test_convert_equals_the_direct_read(tmp_path, rng):
    scan = _scan(rng, "radial-3d", weights=True)
    write_ismrmrd(tmp_path / "raw.h5", scan, traj_units="normalized", readout_oversampling=2.0)
    written = convert(tmp_path / "raw.h5", tmp_path / "v1.h5")
    assert written == [tmp_path / "v1.h5"]
    direct, converted = load_ismrmrd(tmp_path / "raw.h5"), load_scan(tmp_path / "v1.h5")
    _same(converted, direct)
    assert {k: v for k, v in converted.attrs.items() if k != "schema_version"} == dict(direct.attrs)


def test_convert_writes_one_file_per_slice_or_the_chosen_one(tmp_path, rng):
    scans = [({"slice": s}, _scan(rng)) for s in (0, 1)]
    write_ismrmrd(tmp_path / "raw.h5", scans)
    written = convert(tmp_path / "raw.h5", tmp_path / "out.h5")
    assert written == [tmp_path / "out_slice0.h5", tmp_path / "out_slice1.h5"]
    for path, (_, scan) in zip(written, scans):
        np.testing.assert_array_equal(load_scan(path).kspace, scan.kspace)
    assert convert(tmp_path / "raw.h5", tmp_path / "one.h5", slice=1) == [tmp_path / "one.h5"]
    np.testing.assert_array_equal(load_scan(tmp_path / "one.h5").kspace, scans[1][1].kspace)
    with pytest.raises(SchemaError, match="no data for slice 7"):
        convert(tmp_path / "raw.h5", tmp_path / "none.h5", slice=7)
    with pytest.raises(OutputError, match="would overwrite the input"):
        convert(tmp_path / "raw.h5", tmp_path / "raw.h5", slice=0)


# --------------------------------------------------------------------------------------------------------
# Units


@pytest.mark.parametrize("extent, encoded, expected", [
    ([16.0, 15.9], [32, 32], "cycles-per-fov"),
    ([0.5, 0.49], [32, 32], "normalized"),
    ([32.0, 8.0], [64, 32], "cycles-per-fov"),
    ([0.5, 0.5, 0.5], [16, 16, 16], "normalized"),
], ids=["cycles", "normalized", "oversampled", "3d"])
def test_detect_units(extent, encoded, expected):
    assert detect_units(np.array(extent), encoded) == expected


@pytest.mark.parametrize("extent, encoded, message", [
    ([0.5, 0.5], [4, 4], "ambiguous"),
    ([2.0, 2.0], [32, 32], "fits no known unit"),
    ([3.0, 3.0], [32, 32], "looks like it is in radians"),
    ([0.0, 0.0], [32, 32], "fits no known unit"),
    ([100.0, 1.0], [32, 32], "fits no known unit"),
], ids=["tiny-matrix", "between", "radians", "zero", "beyond-2x"])
def test_detect_units_refuses(extent, encoded, message):
    with pytest.raises(TrajectoryUnitsError, match=message):
        detect_units(np.array(extent), encoded, "raw.h5")


# --------------------------------------------------------------------------------------------------------
# Malformed files


MALFORMED = {
    "no-traj": (lambda rng: {3: {"traj": None}}, SchemaError,
                r"acquisition 3 has no trajectory \(trajectory_dimensions = 0\)"),
    "zero-channels": (lambda rng: {1: {"data": np.zeros((0, 16), np.complex64)}}, SchemaError,
                      r"acquisition 1 has zero channels"),
    "channel-count": (lambda rng: {2: {"data": _complex(rng, (2, 16))}}, SchemaError,
                      "acquisition 2 has 2 channels but acquisition 0 has 3"),
    "sample-count": (lambda rng: {2: {"data": _complex(rng, (3, 12)), "traj": np.zeros((12, 2))}}, SchemaError,
                     "inconsistent sample counts: acquisition 2 keeps 12 samples but acquisition 0 keeps 16"),
    "traj-dims-differ": (lambda rng: {1: {"traj": np.zeros((16, 3))}}, SchemaError,
                         "acquisition 1 has trajectory_dimensions 3 but acquisition 0 has 2"),
    "traj-dims-wrong": (lambda rng: {a: {"traj": np.ones((16, 1))} for a in range(4)}, SchemaError,
                        r"trajectory_dimensions is 1 but a 2-D recon matrix \[32, 32\] needs 2 \(or 3"),
    "discard-all": (lambda rng: {a: {"discard_pre": 10, "discard_post": 6} for a in range(4)}, SchemaError,
                    "keeps no samples"),
    "discard-differ": (lambda rng: {1: {"discard_pre": 1}, **{a: {"discard_post": 1} for a in (0, 2, 3)}},
                       SchemaError, "discard different numbers of leading samples"),
    "encodings": (lambda rng: {1: {"encoding_space_ref": 1}}, InvalidDataError,
                  r"several encoding spaces \[0, 1\]"),
}


@pytest.mark.parametrize("name", list(MALFORMED), ids=list(MALFORMED))
def test_malformed_acquisitions(tmp_path, rng, name):
    changes, error, message = MALFORMED[name]
    path = _write_raw(tmp_path / "bad.h5", _header(encodings=2 if name == "encodings" else 1),
                      _imaging_from(rng, changes(rng)))
    with pytest.raises(error, match=f"^{re.escape(str(path))}: .*{message}"):
        load_ismrmrd(path)


def _imaging_from(rng, changes):
    """Four good readouts; ``changes`` maps an acquisition number to changes of its data and header."""
    acquisitions = []
    for a, (data, traj) in enumerate(_readouts(rng)):
        fields = dict(changes.get(a, {}))
        data = fields.pop("data", data)
        traj = fields.pop("traj", traj)
        acquisitions.append(_acq(data, traj, **fields))
    return acquisitions


def _edit_xml(path, pattern, replacement):
    with h5py.File(path, "r+") as f:
        xml = f["dataset/xml"][0].decode()
        f["dataset/xml"][0] = re.sub(pattern, replacement, xml, count=1, flags=re.S).encode()


@pytest.mark.parametrize("pattern, replacement, message", [
    (r"<reconSpace>\s*<matrixSize>.*?</matrixSize>", "<reconSpace>", "the encoding has no matrixSize"),
    (r"<experimentalConditions>.*?</experimentalConditions>", "", "does not follow ismrmrd.xsd"),
    (r"<reconSpace>\s*<matrixSize>\s*<x>32</x>", "<reconSpace><matrixSize>", r"reconSpace matrixSize is \[1, 32, 1\]"),
    (r"<reconSpace>(.*?)<x>200.0</x>", r"<reconSpace>\1<x>0</x>", "reconSpace fieldOfView_mm is"),
], ids=["matrix-missing", "not-xsd", "matrix-x-missing", "fov-zero"])
def test_malformed_header(tmp_path, rng, pattern, replacement, message):
    path = _write_raw(tmp_path / "bad.h5", _header(), _imaging_from(rng, {}))
    _edit_xml(path, pattern, replacement)
    with pytest.raises(SchemaError, match=message):
        load_ismrmrd(path)


def test_encoding_reference_beyond_the_header(tmp_path, rng):
    path = _write_raw(tmp_path / "bad.h5", _header(),
                      _imaging_from(rng, {a: {"encoding_space_ref": 1} for a in range(4)}))
    with pytest.raises(SchemaError, match=r"acquisitions use encoding space 1 but the XML header describes only 1 "
                                          r"encoding space\(s\) \(numbered from 0\)"):
        load_ismrmrd(path)


def test_header_without_encoding(tmp_path, rng):
    path = _write_raw(tmp_path / "bad.h5", _header(), _imaging_from(rng, {}))
    _edit_xml(path, r"<encoding>.*</encoding>", "")
    with pytest.raises(SchemaError, match=r"the XML header has no <encoding> element; expected one describing"):
        load_ismrmrd(path)


def test_file_without_xml_is_named_as_such(tmp_path, rng):
    path = _write_raw(tmp_path / "raw.h5", _header(), _imaging_from(rng, {}))
    with h5py.File(path, "r+") as f:
        del f["dataset/xml"]
    for read in (load_ismrmrd, load_scan, load_scans):
        with pytest.raises(SchemaError, match=r"ISMRMRD file without its XML header: dataset 'dataset' has no "
                                              r"'xml' header"):
            read(path)


@pytest.mark.parametrize("matrix", [(16, 16), (8, 8, 8)], ids=["2d", "3d"])
def test_an_all_zero_extra_trajectory_column_is_not_taken_as_weights(tmp_path, rng, matrix):
    ndim = len(matrix)
    acquisitions = []
    for data, traj in _readouts(rng, count=6, samples=16, extent=matrix[0] / 2, dims=ndim + 1):
        if ndim == 3:
            traj[:, 2] = traj[:, 0] / 2
        traj[:, ndim] = 0.0  # kz of a 2-D encoding, or a weight column left unset
        acquisitions.append(_acq(data, traj))
    _write_raw(tmp_path / "raw.h5", _header(matrix=matrix, fov=(200.0,) * ndim), acquisitions)
    scan = load_ismrmrd(tmp_path / "raw.h5")
    assert scan.weights is None and scan.trajectory.shape[1] == ndim
    assert scan.attrs["trajectory_extra_column"].startswith("all zero: ignored")


def test_a_negative_extra_trajectory_column_is_refused(tmp_path, rng):
    acquisitions = []
    for data, traj in _readouts(rng, count=4, dims=3):
        traj[:, 2] = np.linspace(-3, 3, len(traj))  # a kz, impossible for a 2-D encoding
        acquisitions.append(_acq(data, traj))
    path = _write_raw(tmp_path / "raw.h5", _header(), acquisitions)
    with pytest.raises(SchemaError, match=r"trajectory column 3 of 3 has negative values \(min -3\); for a 2-D "
                                          r"encoding ISMRMRD stores density weights"):
        load_ismrmrd(path)


def test_all_zero_weights_of_a_header_column_are_refused(tmp_path, rng):
    acquisitions = []
    for a, (data, traj) in enumerate(_readouts(rng, count=4, dims=3)):
        traj[:, 2] = 1.0 if a == 0 else 0.0
        acquisitions.append(_acq(data, traj))
    scan = load_ismrmrd(_write_raw(tmp_path / "raw.h5", _header(), acquisitions))
    assert scan.weights is not None and scan.weights.sum() == 16  # some non-zero weights: taken as weights


def test_no_imaging_acquisitions(tmp_path, rng):
    acquisitions = [_acq(_complex(rng, (3, 16)), flags=[ismrmrd.ACQ_IS_NOISE_MEASUREMENT]),
                    _acq(*_readouts(rng)[0], flags=[ismrmrd.ACQ_IS_NAVIGATION_DATA])]
    path = _write_raw(tmp_path / "bad.h5", _header(), acquisitions)
    with pytest.raises(SchemaError, match=r"no imaging acquisitions \(2 acquisitions: 1 noise, 1 calibration"):
        load_ismrmrd(path)


def test_noise_with_other_channels(tmp_path, rng):
    acquisitions = [_acq(_complex(rng, (5, 16)), flags=[ismrmrd.ACQ_IS_NOISE_MEASUREMENT])]
    path = _write_raw(tmp_path / "bad.h5", _header(), acquisitions + _imaging_from(rng, {}))
    with pytest.raises(SchemaError, match="noise acquisition 0 has 5 channels but the imaging data has 3"):
        load_ismrmrd(path)


def test_stored_lengths_disagreeing_with_the_header(tmp_path, rng):
    path = _write_raw(tmp_path / "bad.h5", _header(), _imaging_from(rng, {}))
    with h5py.File(path, "r+") as f:
        record = f["dataset/data"][2]
        record["data"] = record["data"][:-2]
        f["dataset/data"][2] = record
    with pytest.raises(SchemaError, match="acquisition 2 stores 94 data values but its header gives 96"):
        load_ismrmrd(path)


def test_missing_groups_and_empty_data(tmp_path, rng):
    with h5py.File(tmp_path / "plain.h5", "w") as f:
        f.create_dataset("x", data=[1])
    with pytest.raises(SchemaError, match=r"no ISMRMRD dataset group \(expected a group holding 'data'"):
        load_ismrmrd(tmp_path / "plain.h5")
    path = _write_raw(tmp_path / "raw.h5", _header(), _imaging_from(rng, {}))
    with pytest.raises(SchemaError, match="no ISMRMRD dataset 'other'"):
        load_ismrmrd(path, dataset="other")
    with h5py.File(path, "r+") as f:
        f.copy("dataset/xml", "headeronly/xml")
        f.copy("dataset/data", "dataonly/data")
        f.create_dataset("empty/data", shape=(0,), maxshape=(None,), dtype=f["dataset/data"].dtype)
        f.copy("dataset/xml", "empty/xml")
    with pytest.raises(SchemaError, match="'headeronly' holds no acquisitions"):
        load_ismrmrd(path, dataset="headeronly")
    with pytest.raises(SchemaError, match="'dataonly' has no 'xml' header"):
        load_ismrmrd(path, dataset="dataonly")
    with pytest.raises(SchemaError, match="'data' is empty"):
        load_ismrmrd(path, dataset="empty")
    with pytest.raises(ScanFileError, match="no such file"):
        load_ismrmrd(tmp_path / "absent.h5")


def test_unknown_units_option(tmp_path, rng):
    write_ismrmrd(tmp_path / "raw.h5", _scan(rng))
    with pytest.raises(InvalidDataError, match="unknown traj_units 'pixels'"):
        load_ismrmrd(tmp_path / "raw.h5", traj_units="pixels")


def test_missing_ismrmrd_package(tmp_path, rng, monkeypatch):
    write_ismrmrd(tmp_path / "raw.h5", _scan(rng))
    monkeypatch.setitem(sys.modules, "ismrmrd", None)
    with pytest.raises(InvalidDataError, match=r"needs the 'ismrmrd' package, a dependency of mri-recon") as err:
        load_ismrmrd(tmp_path / "raw.h5")
    assert "mri-recon[" not in str(err.value) and "pip install ismrmrd" in str(err.value)


# --------------------------------------------------------------------------------------------------------
# Writer errors


def test_writer_refuses_bad_requests(tmp_path, rng):
    scan = _scan(rng)
    other = _scan(rng, "radial-3d")
    cases = [
        (dict(scans=[]), "no scans given"),
        (dict(scans=[({"slice": 0}, scan), ({"slice": 1}, other)]), "has matrix"),
        (dict(scans=[({"slice": 0}, scan), ({"slice": 0}, scan)]),
         "share one slice, contrast, phase, set and repetition"),
        (dict(scans=scan, samples_per_readout=100), "samples_per_readout 100 must divide"),
        (dict(scans=scan, traj_units="pixels"), "unknown traj_units 'pixels'"),
        (dict(scans=scan, fov_mm=(1.0,)), "fov_mm must be 2 positive sizes"),
        (dict(scans=scan, readout_oversampling=0.5), "readout_oversampling must be >= 1"),
    ]
    for kwargs, message in cases:
        scans = kwargs.pop("scans")
        with pytest.raises(InvalidDataError, match=message):
            write_ismrmrd(tmp_path / "out.h5", scans, **kwargs)
    assert not (tmp_path / "out.h5").exists()


def test_writer_picks_a_readout_length_when_none_is_known(tmp_path, rng):
    scan = _scan(rng, noise=False).replace(attrs={})
    write_ismrmrd(tmp_path / "raw.h5", scan)
    back = load_ismrmrd(tmp_path / "raw.h5")
    assert back.attrs["samples_per_readout"] == scan.n_samples and back.noise is None
    _same(back, scan)
