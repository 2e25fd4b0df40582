"""MRD image output: ismrmrd.Image records, read back with the ismrmrd package, against the HDF5 output and
the geometry the input header implies."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

ismrmrd = pytest.importorskip("ismrmrd")

from test_nifti import FOV, POSITION, ROT, SLICE_GAP, THICKNESS, N, _oblique_mrd, _recon, _run  # noqa: E402

from mri_recon.errors import OutputError, SchemaError  # noqa: E402
from mri_recon.io.geometry import Geometry  # noqa: E402
from mri_recon.io.mrd_image import mrd_image, read_header_xml, write_mrd_images  # noqa: E402
from mri_recon.io.writers import output_format, output_values  # noqa: E402


def _read(path):
    """XML header and image records of an MRD file, through the ismrmrd package."""
    with ismrmrd.Dataset(str(path), "dataset", create_if_needed=False, mode="r") as dataset:
        return dataset.read_xml_header(), [dataset.read_image("image_0", i)
                                           for i in range(dataset.number_of_images("image_0"))]


def _hdf5_image(path):
    with h5py.File(path) as f:
        return f["image"][()]


def _pixels(record):
    """The record's data as mri-recon's image: axes read, phase (, slice)."""
    data = record.data[0].T  # (channels, z, y, x) -> (x, y, z)
    return data[:, :, 0] if data.shape[2] == 1 else data


@pytest.fixture(scope="module")
def oblique(tmp_path_factory):
    return _oblique_mrd(tmp_path_factory.mktemp("mrd") / "oblique.mrd.h5")


def test_oblique_mrd_image_equals_the_hdf5_image_with_the_header_the_input_implies(oblique, tmp_path):
    _recon(oblique, tmp_path / "r.h5")
    result = _recon(oblique, tmp_path / "out.mrd.h5")
    assert f"wrote {tmp_path / 'out.mrd.h5'} (MRD, complex images)" in result.output
    assert "warning" not in result.output
    xml, [record] = _read(tmp_path / "out.mrd.h5")
    image = _hdf5_image(tmp_path / "r.h5")
    assert record.data.dtype == np.complex64 and record.image_type == ismrmrd.IMTYPE_COMPLEX
    np.testing.assert_array_equal(_pixels(record), image)  # bit for bit
    assert tuple(record.matrix_size) == (N, N, 1) and record.channels == 1
    np.testing.assert_allclose(record.field_of_view[:], [FOV, FOV, THICKNESS], rtol=1e-6)
    np.testing.assert_allclose(record.position[:], POSITION, rtol=1e-6)
    for d, name in enumerate(("read_dir", "phase_dir", "slice_dir")):
        np.testing.assert_allclose(getattr(record, name)[:], ROT[:, d], atol=1e-6)
    assert (record.slice, record.repetition, record.contrast) == (0, 0, 0)
    assert (record.image_index, record.image_series_index) == (1, 0)
    assert xml == read_header_xml(oblique)  # the input's XML header, verbatim
    assert record.meta["iterations"] == "4" and record.meta["engine"] == "exact"


def test_magnitude_records_equal_the_magnitude_of_the_image(oblique, tmp_path):
    _recon(oblique, tmp_path / "r.h5")
    result = _recon(oblique, tmp_path / "m.mrd.h5", "--magnitude", "--quiet")
    assert result.output == ""
    _, [record] = _read(tmp_path / "m.mrd.h5")
    assert record.data.dtype == np.float32 and record.image_type == ismrmrd.IMTYPE_MAGNITUDE
    np.testing.assert_array_equal(_pixels(record), np.abs(_hdf5_image(tmp_path / "r.h5")))


def test_a_two_slice_stack_writes_two_records_with_their_slice_and_position(tmp_path):
    mrd = _oblique_mrd(tmp_path / "two.mrd.h5", slices=2)
    _recon(mrd, tmp_path / "s.h5")
    _recon(mrd, tmp_path / "s.mrd.h5")
    _, records = _read(tmp_path / "s.mrd.h5")
    images = _hdf5_image(tmp_path / "s.h5")
    assert len(records) == 2 and images.shape == (2, N, N)
    assert [r.slice for r in records] == [0, 1] and [r.image_index for r in records] == [1, 2]
    for record, image in zip(records, images):
        np.testing.assert_array_equal(_pixels(record), image)
    np.testing.assert_allclose(np.subtract(records[1].position[:], records[0].position[:]),
                               SLICE_GAP * ROT[:, 2], atol=1e-4)


@pytest.fixture(scope="module")
def volume(tmp_path_factory):
    path = tmp_path_factory.mktemp("vol") / "vol.h5"
    result = _run("simulate", path, "--matrix", "8", "--trajectory", "kooshball", "--coils", "1", "--quiet")
    assert result.exit_code == 0, result.output
    return path


def test_format_mrd_overrides_the_extension_and_a_schema_v1_input_gets_a_minimal_header(volume, tmp_path):
    out = tmp_path / "v.h5"
    result = _recon(volume, out, "--format", "mrd")
    assert "image headers have position 0, axis 0 posterior and axis 1 left" in result.output
    assert "(MRD, complex images)" in result.output
    xml, [record] = _read(out)
    header = ismrmrd.xsd.CreateFromDocument(xml)  # valid against ismrmrd.xsd
    assert header.encoding[0].reconSpace.matrixSize.x == 8
    assert tuple(record.matrix_size) == (8, 8, 8)
    np.testing.assert_array_equal(record.read_dir[:], [0, 1, 0])  # UNPLACED: posterior, left, inferior
    np.testing.assert_array_equal(record.phase_dir[:], [1, 0, 0])
    np.testing.assert_array_equal(record.slice_dir[:], [0, 0, -1])
    _recon(volume, tmp_path / "v_ref.h5")
    np.testing.assert_array_equal(_pixels(record), _hdf5_image(tmp_path / "v_ref.h5"))
    result = _run("reconstruct", volume, "--format", "mrd", "--device", "cpu", "--iterations", "2", "--quiet")
    assert result.exit_code == 0, result.output
    assert len(_read(volume.parent / "vol.recon.mrd.h5")[1]) == 1


def test_output_never_replaces_the_input_and_contradictions_are_refused_before_work(oblique, tmp_path):
    result = _run("reconstruct", oblique, "-o", oblique, "--device", "cpu")
    assert result.exit_code == 1 and "output would overwrite the input file" in result.output
    with ismrmrd.File(str(oblique), "r") as f:
        assert f["dataset"].has_acquisitions()
    result = _run("reconstruct", oblique, "-o", tmp_path / "x.mrd.h5", "--complex", "--magnitude", "--device", "cpu")
    assert result.exit_code == 1 and "choose one" in result.output and not (tmp_path / "x.mrd.h5").exists()
    result = _run("reconstruct", oblique, "-o", tmp_path / "x.h5", "--magnitude", "--device", "cpu")
    assert result.exit_code == 1 and "HDF5 output always holds the complex image" in result.output


def test_output_format_and_values():
    assert output_format("a.mrd.h5") == "mrd" and output_format("a.MRD") == "mrd"
    assert output_format("a.h5") == "hdf5" and output_format("a.mrd.h5", "hdf5") == "hdf5"
    assert output_values("mrd") == "complex" and output_values("mrd", magnitude=True) == "magnitude"
    assert output_values("mrd", complex_=True) == "complex" and output_values("nifti", magnitude=True) == "magnitude"
    with pytest.raises(OutputError, match=r"complex and magnitude output both asked for .*; choose one"):
        output_values("nifti", complex_=True, magnitude=True)
    with pytest.raises(OutputError, match=r"HDF5 output always holds the complex image; magnitude output applies"):
        output_values("hdf5", magnitude=True)


def test_writer_errors(tmp_path, volume):
    g = Geometry((4, 5, 1), (1.0, 1.0, 2.0), True)
    with pytest.raises(OutputError, match=r"MRD output: image 0 has shape \(5, 4\); expected the matrix \[4, 5\]"):
        mrd_image(np.zeros((5, 4), np.complex64), g, {}, 0)
    with pytest.raises(OutputError, match=r"expected one geometry, key \(and meta\) per image, at least one image; "
                                          r"found 2 images, 1 geometries, 2 keys"):
        write_mrd_images(tmp_path / "a.mrd.h5", [np.zeros((4, 5))] * 2, [g], [{}, {}])
    with pytest.raises(OutputError, match=r"found 0 images, 0 geometries, 0 keys"):
        write_mrd_images(tmp_path / "a.mrd.h5", [], [], [])
    assert not (tmp_path / "a.mrd.h5").exists()
    with pytest.raises(SchemaError, match=r"vol\.h5: cannot read the ISMRMRD XML header of dataset 'dataset'"):
        read_header_xml(volume)
