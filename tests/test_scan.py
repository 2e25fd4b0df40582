"""Schema v1: validation, casting, loading and saving, and every error path of the loader."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from mri_recon.checks.validation import trajectory_extent, validate_matrix
from mri_recon.errors import InvalidDataError, OutputError, ScanFileError, SchemaError, TrajectoryUnitsError
from mri_recon.io import load_scan, save_scan
from mri_recon.io.files import atomic_output
from mri_recon.scan import Scan


def _arrays(rng, coils=2, m=50, matrix=(16, 12)):
    kspace = (rng.standard_normal((coils, m)) + 1j * rng.standard_normal((coils, m))).astype(np.complex64)
    traj = ((rng.random((m, len(matrix))) - 0.5) * np.asarray(matrix)).astype(np.float32)
    return kspace, traj


def _write(path, **datasets):
    matrix = datasets.pop("matrix", None)
    with h5py.File(path, "w") as f:
        if matrix is not None:
            f.attrs["matrix"] = matrix
        for name, value in datasets.items():
            f.create_dataset(name, data=value)
    return path


def test_round_trip_keeps_every_dataset(tmp_path, rng):
    kspace, traj = _arrays(rng)
    maps = (rng.standard_normal((2, 16, 12)) + 1j).astype(np.complex64)
    scan = Scan(kspace=kspace, trajectory=traj, matrix=(16, 12), weights=np.ones(50, np.float32),
                coil_maps=maps, field_map=np.zeros((16, 12), np.float32), times=np.arange(50, dtype=np.float32),
                noise=kspace[:, :7].copy(), attrs={"note": "x"})
    save_scan(tmp_path / "s.h5", scan)
    back = load_scan(tmp_path / "s.h5")
    assert back.matrix == (16, 12) and back.attrs["note"] == "x"
    for name in ("kspace", "trajectory", "weights", "coil_maps", "field_map", "times", "noise"):
        np.testing.assert_array_equal(getattr(back, name), getattr(scan, name))


def test_double_precision_is_cast_and_one_coil_becomes_two_dimensional(rng):
    kspace, traj = _arrays(rng, coils=1)
    scan = Scan(kspace=kspace[0].astype(np.complex128), trajectory=traj.astype(np.float64), matrix=[16, 12])
    assert scan.kspace.dtype == np.complex64 and scan.kspace.shape == (1, 50)
    assert scan.trajectory.dtype == np.float32 and scan.n_coils == 1 and scan.n_samples == 50


@pytest.mark.parametrize("matrix, message", [
    ([16], r"must be \[Nx, Ny\]"),
    ([0, 16], "must be positive"),
    ([100000, 16], "absurd"),
    ([1.5, 2], "must hold integers"),
], ids=["rank", "zero", "absurd", "fraction"])
def test_bad_matrix(matrix, message):
    with pytest.raises((SchemaError, InvalidDataError), match=message):
        validate_matrix(matrix, "scan.h5")


def test_huge_unsigned_matrix_is_reported_as_written(tmp_path, rng):
    huge = np.array([2**64 - 1, 64], dtype=np.uint64)
    with pytest.raises(InvalidDataError, match=r"'matrix' \[18446744073709551615, 64\] is absurd"):
        validate_matrix(huge, "scan.h5")
    kspace, traj = _arrays(rng, matrix=(16, 16))
    path = _write(tmp_path / "huge.h5", kspace=kspace, trajectory=traj, matrix=huge)
    with pytest.raises(InvalidDataError, match=r"huge.h5: attribute 'matrix' \[18446744073709551615, 64\]"):
        load_scan(path)
    with pytest.raises(SchemaError, match=r"must hold integers, found float64 \[inf, 2.0\]"):
        validate_matrix([np.inf, 2.0], "scan.h5")


@pytest.mark.parametrize("change, error, message", [
    ({"kspace": "real"}, SchemaError, "'kspace' must be complex64"),
    ({"trajectory": "int"}, SchemaError, "'trajectory' must be float32"),
    ({"kspace": "rank3"}, SchemaError, "'kspace' must have rank 1 or 2"),
    ({"kspace": "nan"}, InvalidDataError, "'kspace' contains 1 NaN or Inf"),
    ({"trajectory": "inf"}, InvalidDataError, "'trajectory' contains 1 NaN or Inf"),
    ({"kspace": "empty"}, InvalidDataError, "'kspace' is empty"),
    ({"trajectory": "short"}, SchemaError, "trajectory has 49 samples but kspace has 50"),
    ({"trajectory": "3d"}, SchemaError, "D = 3 columns but matrix"),
    ({"weights": "short"}, SchemaError, "weights has 10 samples but kspace has 50"),
    ({"times": "short"}, SchemaError, "times has 10 samples but kspace has 50"),
    ({"weights": "negative"}, InvalidDataError, "weights must be non-negative"),
    ({"weights": "zero"}, InvalidDataError, r"weights are all zero: every sample would be ignored"),
    ({"coil_maps": "wrong"}, SchemaError, r"coil_maps must have shape \(2, 16, 12\)"),
    ({"noise": "coils"}, SchemaError, "noise has 3 coils but kspace has 2"),
    ({"trajectory": "far"}, TrajectoryUnitsError, "did you scale your trajectory correctly"),
    ({"trajectory": "normalized"}, TrajectoryUnitsError, "looks normalized"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_validation_errors_name_the_problem(rng, change, error, message):
    kspace, traj = _arrays(rng)
    values = {"kspace": kspace, "trajectory": traj, "matrix": (16, 12)}
    (name, how), = change.items()
    bad = {
        ("kspace", "real"): kspace.real, ("trajectory", "int"): traj.astype(np.int32),
        ("kspace", "rank3"): kspace[None], ("kspace", "empty"): kspace[:, :0],
        ("trajectory", "short"): traj[:-1], ("trajectory", "3d"): np.zeros((50, 3), np.float32),
        ("weights", "short"): np.ones(10, np.float32), ("times", "short"): np.ones(10, np.float32),
        ("weights", "negative"): -np.ones(50, np.float32), ("weights", "zero"): np.zeros(50, np.float32),
        ("coil_maps", "wrong"): np.ones((2, 12, 16), np.complex64),
        ("noise", "coils"): np.ones((3, 5), np.complex64),
        ("trajectory", "far"): traj * 3, ("trajectory", "normalized"): traj / np.array([16, 12]),
    }
    if how == "nan":
        kspace[0, 3] = np.nan
        bad_value = kspace
    elif how == "inf":
        traj[1, 0] = np.inf
        bad_value = traj
    else:
        bad_value = bad[(name, how)]
    values[name] = bad_value
    with pytest.raises(error, match=message):
        Scan(**values, source="scan.h5")


def test_load_errors(tmp_path, rng):
    kspace, traj = _arrays(rng)
    with pytest.raises(ScanFileError, match="no such file"):
        load_scan(tmp_path / "missing.h5")
    with pytest.raises(ScanFileError, match="is a directory"):
        load_scan(tmp_path)
    (tmp_path / "text.h5").write_text("not hdf5")
    with pytest.raises(ScanFileError, match="not an HDF5 file"):
        load_scan(tmp_path / "text.h5")
    with pytest.raises(SchemaError, match="missing dataset 'kspace'"):
        load_scan(_write(tmp_path / "a.h5", trajectory=traj, matrix=[16, 12]))
    with pytest.raises(SchemaError, match="missing dataset 'trajectory'"):
        load_scan(_write(tmp_path / "b.h5", kspace=kspace, matrix=[16, 12]))
    with pytest.raises(SchemaError, match="missing root attribute 'matrix'"):
        load_scan(_write(tmp_path / "c.h5", kspace=kspace, trajectory=traj))
    with h5py.File(tmp_path / "d.h5", "w") as f:
        f.attrs["matrix"] = [16, 12]
        f.create_group("kspace")
        f.create_dataset("trajectory", data=traj)
    with pytest.raises(SchemaError, match="'kspace' must be a dataset"):
        load_scan(tmp_path / "d.h5")
    with pytest.raises(SchemaError, match="scan.h5|e.h5"):
        load_scan(_write(tmp_path / "e.h5", kspace=kspace.real, trajectory=traj, matrix=[16, 12]))


def test_atomic_output_leaves_nothing_on_failure_and_protects_inputs(tmp_path):
    target = tmp_path / "out.bin"
    with pytest.raises(RuntimeError), atomic_output(target) as tmp:
        tmp.write_bytes(b"partial")
        raise RuntimeError("boom")
    assert not target.exists() and list(tmp_path.iterdir()) == []
    source = tmp_path / "in.h5"
    source.write_bytes(b"precious")
    with pytest.raises(OutputError, match="would overwrite the input"), atomic_output(source, protect=(source,)):
        pass
    assert source.read_bytes() == b"precious"
    with pytest.raises(OutputError, match="does not exist"), atomic_output(tmp_path / "nope" / "x.h5"):
        pass
    with pytest.raises(OutputError, match="is a directory"), atomic_output(tmp_path):
        pass


def test_atomic_output_gives_the_usual_permissions(tmp_path):
    import os

    with atomic_output(tmp_path / "o.bin") as tmp:
        tmp.write_bytes(b"x")
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "o.bin").stat().st_mode & 0o777 == 0o666 & ~umask


def test_values_beyond_float32_are_refused():
    traj = np.zeros((4, 2), dtype=np.float32)
    traj[:, 0] = [1.0, 2.0, 3.0, 4.0]
    with pytest.raises(InvalidDataError, match=r"dataset 'kspace' has 1 value\(s\) beyond the float32 range"):
        Scan(kspace=np.array([1e300, 1, 2, 3], dtype=np.complex128), trajectory=traj, matrix=(16, 16))


def test_a_dangling_link_is_a_schema_error(tmp_path):
    path = tmp_path / "linked.h5"
    with h5py.File(path, "w") as f:
        f.attrs["matrix"] = [16, 16]
        f["kspace"] = np.ones((1, 4), dtype=np.complex64)
        f["trajectory"] = h5py.ExternalLink("missing.h5", "/trajectory")
    with pytest.raises(SchemaError, match="'/trajectory' is an external link to 'missing.h5:/trajectory'; refused"):
        load_scan(path)  # an external link is refused before anything is read
    with pytest.raises(SchemaError, match="'/trajectory' cannot be opened: external link to 'missing.h5"):
        load_scan(path, allow_external=True)


@pytest.mark.parametrize("dims", [1, 2, 3])
@pytest.mark.parametrize("samples", [1, 7, 100_003])
def test_trajectory_extent_is_the_largest_magnitude_of_each_axis(rng, dims, samples):
    k = (rng.standard_normal((samples, dims)) * 40).astype(np.float32)
    assert np.array_equal(trajectory_extent(k), np.max(np.abs(k), axis=0))
    assert np.array_equal(trajectory_extent(k[::-1]), np.max(np.abs(k), axis=0))  # not C-contiguous
    assert trajectory_extent(np.zeros((0, dims), np.float32)).tolist() == [0.0] * dims


def test_replace_checks_the_changed_fields_and_how_all_fit(rng):
    kspace, traj = _arrays(rng)
    maps = (rng.standard_normal((2, 16, 12)) + 1j).astype(np.complex64)
    scan = Scan(kspace, traj, (16, 12), coil_maps=maps, noise=kspace[:, :20].copy())
    new = scan.replace(kspace=(kspace * 2).astype(np.complex128))
    assert new.kspace.dtype == np.complex64 and np.array_equal(new.kspace, (kspace * 2).astype(np.complex64))
    assert new.trajectory is scan.trajectory and new.coil_maps is scan.coil_maps  # not checked or copied again
    bad = kspace.copy()
    bad[1, 3] = np.nan
    with pytest.raises(InvalidDataError, match="kspace.*1 NaN"):
        scan.replace(kspace=bad)
    with pytest.raises(SchemaError, match="trajectory has 50 samples but kspace has 49"):
        scan.replace(kspace=kspace[:, :49])
    with pytest.raises(SchemaError, match="noise has 2 coils but kspace has 1"):
        scan.replace(kspace=kspace[:1], coil_maps=None)
    with pytest.raises(TrajectoryUnitsError, match="2x Nyquist"):  # a new matrix checks every array again
        scan.replace(matrix=(4, 4), coil_maps=None)
    with pytest.raises(SchemaError, match="coil_maps must have shape"):
        scan.replace(matrix=(16, 16))


def test_replace_refuses_unknown_fields_and_takes_any_matrix_form(rng):
    kspace, traj = _arrays(rng)
    scan = Scan(kspace, traj, (16, 12), weights=np.ones(50, np.float32))
    with pytest.raises(TypeError, match="unknown field.*wieghts"):
        scan.replace(wieghts=np.full(50, -1.0, np.float32))
    assert scan.replace(matrix=np.array([16, 12])).matrix == (16, 12)
    with pytest.raises(SchemaError, match="D = 2 columns but matrix"):
        scan.replace(matrix=np.array([16, 12, 4]))
    with pytest.raises(InvalidDataError, match="negative"):
        scan.replace(weights=np.full(50, -1.0, np.float32))


def test_a_dataset_declaring_far_more_than_the_file_stores_is_refused_before_reading(tmp_path):
    import h5py

    from mri_recon.io import load_scan

    path = tmp_path / "huge.h5"
    with h5py.File(path, "w") as f:
        f.attrs["matrix"] = [64, 64]
        f.create_dataset("kspace", shape=(2, 2**28), dtype=np.complex64, chunks=(1, 2**16))  # 4 GiB, none written
        f.create_dataset("trajectory", data=np.zeros((4, 2), np.float32))
    assert path.stat().st_size < 64 * 2**10
    with pytest.raises(SchemaError, match=r"dataset 'kspace' declares 4096 MiB but the file holds 0 bytes of it "
                                          r".*refused before reading"):
        load_scan(path)


def test_compressed_zeros_empty_and_virtual_datasets_are_not_taken_for_unwritten_ones(tmp_path):
    import h5py

    from mri_recon.io.schema import _check_stored

    with h5py.File(tmp_path / "a.h5", "w") as f:
        zeros = f.create_dataset("zeros", data=np.zeros((2, 2**24), np.complex64), chunks=(1, 2**20),
                                 compression="gzip")  # 256 MiB, compressed far beyond 1000:1
        empty = f.create_dataset("empty", data=h5py.Empty("f4"))
        layout = h5py.VirtualLayout(shape=(2, 2**24), dtype=np.complex64)
        layout[:] = h5py.VirtualSource(zeros)
        virtual = f.create_virtual_dataset("virtual", layout)
        for node in (zeros, empty, virtual):
            _check_stored(node, "a.h5", node.name)  # none refused


@pytest.mark.parametrize("value", [{"a": 1}, 2**70, [1, "a"], [[1, 2], [3]], np.array([object()]),
                                   np.array(["ab", "c"])],
                         ids=["dict", "int-70-bits", "mixed-list", "ragged-list", "objects", "numpy-text"])
def test_an_attribute_hdf5_cannot_hold_is_named_and_nothing_is_written(tmp_path, rng, value):
    kspace, traj = _arrays(rng)
    scan = Scan(kspace=kspace, trajectory=traj, matrix=(16, 12), attrs={"note": "x", "bad": value})
    with pytest.raises(OutputError, match=rf"s\.h5: attribute bad \({type(value).__name__}\) cannot be stored in "
                                          r"HDF5 .*; attributes hold numbers, strings, bytes, lists of them, "
                                          r"or NumPy arrays of numbers or bytes$"):
        save_scan(tmp_path / "s.h5", scan)
    assert list(tmp_path.iterdir()) == []


def test_ragged_rows_are_a_schema_error(rng):
    _, traj = _arrays(rng, m=2)
    with pytest.raises(SchemaError, match="dataset 'kspace' is not an array: its rows have different lengths"):
        Scan(kspace=[[1j, 2j], [3j]], trajectory=traj, matrix=(16, 12))


def test_a_scan_in_radians_is_told_the_conversion_not_an_option_it_does_not_take(rng):
    """A schema-v1 file or a Scan holds cycles per FOV by definition, so --traj-units is no way out there (it
    was advised, and ignored): the message gives the conversion and says whose option --traj-units is."""
    kspace, traj = _arrays(rng, matrix=(32, 32))
    radians = (traj / 16 * np.pi * 0.98).astype(np.float32)
    with pytest.raises(TrajectoryUnitsError, match=r"looks like it is in radians .* a schema-v1 file or Scan holds "
                                                   r"cycles per FOV by definition \(--traj-units radians is for "
                                                   r"ISMRMRD and BART input\): multiply axis d by matrix\[d\] / "
                                                   r"\(2 pi\)$"):
        Scan(kspace=kspace, trajectory=radians, matrix=(32, 32))
