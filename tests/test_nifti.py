"""Output formats and geometry: NIfTI through nibabel with the affine the MRD header implies, HDF5 geometry
attributes, PNG montages."""

from __future__ import annotations

import json
import struct
import zlib

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

ismrmrd = pytest.importorskip("ismrmrd")
nibabel = pytest.importorskip("nibabel")

from mri_recon.cli import main  # noqa: E402
from mri_recon.errors import OutputError, SchemaError  # noqa: E402
from mri_recon.io import load_scans  # noqa: E402
from mri_recon.io.geometry import UNPLACED, Geometry, geometry_attrs, geometry_of  # noqa: E402
from mri_recon.io.nifti import nifti_array  # noqa: E402
from mri_recon.io.writers import formats, output_format  # noqa: E402
from mri_recon.sim.simulate import simulate_scan  # noqa: E402

X = ismrmrd.xsd
N, FOV, THICKNESS = 64, 220.0, 5.0
POSITION = np.array([12.5, -30.0, 7.0])
SLICE_GAP = 6.0


def _rotation(z_deg: float, x_deg: float) -> np.ndarray:
    """Rx(x) @ Rz(z): columns are read, phase and slice directions (LPS)."""
    a, b = np.radians(z_deg), np.radians(x_deg)
    rz = np.array([[np.cos(a), -np.sin(a), 0], [np.sin(a), np.cos(a), 0], [0, 0, 1]])
    rx = np.array([[1, 0, 0], [0, np.cos(b), -np.sin(b)], [0, np.sin(b), np.cos(b)]])
    return rx @ rz


ROT = _rotation(30.0, 10.0)


def _space(z_matrix=1, z_fov=THICKNESS):
    return X.encodingSpaceType(matrixSize=X.matrixSizeType(x=N, y=N, z=z_matrix),
                               fieldOfView_mm=X.fieldOfViewMm(x=FOV, y=FOV, z=z_fov))


def _oblique_mrd(path, slices=1, offsets=None):
    """A 2-D golden-angle scan of a phantom written with the ismrmrd package: oblique slice(s), offset
    (slice s at ``offsets[s]`` along the slice direction, default ``s * SLICE_GAP``)."""
    offsets = [s * SLICE_GAP for s in range(slices)] if offsets is None else offsets
    scan = simulate_scan((N, N), "golden", coils=2, snr=60, spokes=48, seed=3)
    readout = int(scan.attrs["samples"])
    header = X.ismrmrdHeader(
        experimentalConditions=X.experimentalConditionsType(H1resonanceFrequency_Hz=63_870_000),
        encoding=[X.encodingType(encodedSpace=_space(), reconSpace=_space(),
                                 encodingLimits=X.encodingLimitsType(), trajectory=X.trajectoryType.RADIAL)])
    acquisitions = []
    for s in range(slices):
        position = POSITION + offsets[s] * ROT[:, 2]
        for start in range(0, scan.n_samples, readout):
            part = slice(start, start + readout)
            acq = ismrmrd.Acquisition.from_array(
                np.ascontiguousarray(scan.kspace[:, part] * (1 + s)),
                np.ascontiguousarray(scan.trajectory[part], np.float32),
                position=tuple(position), read_dir=tuple(ROT[:, 0]), phase_dir=tuple(ROT[:, 1]),
                slice_dir=tuple(ROT[:, 2]))
            acq.idx.slice = s
            acquisitions.append(acq)
    with ismrmrd.File(str(path), "w") as f:
        f["dataset"].header = header
        f["dataset"].acquisitions = acquisitions
    return path


def _run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _recon(scan, out, *args):
    result = _run("reconstruct", scan, "-o", out, "--device", "cpu", "--method", "exact", "--iterations", "4",
                  "--coil-maps", "walsh", *args)
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def oblique(tmp_path_factory):
    return _oblique_mrd(tmp_path_factory.mktemp("mrd") / "oblique.mrd.h5")


def test_the_reader_carries_voxel_size_position_and_directions(oblique):
    [(key, scan)] = load_scans(oblique)
    assert key == {"slice": 0, "contrast": 0, "phase": 0, "set": 0, "repetition": 0}
    np.testing.assert_allclose(scan.attrs["voxel_size_mm"], [FOV / N, FOV / N, THICKNESS])
    np.testing.assert_allclose(scan.attrs["position_mm"], POSITION, rtol=1e-6)
    for d, name in enumerate(("read_dir", "phase_dir", "slice_dir")):
        np.testing.assert_allclose(scan.attrs[name], ROT[:, d], atol=1e-6)


def test_oblique_mrd_gives_the_nifti_affine_its_header_implies(oblique, tmp_path):
    out = tmp_path / "r.nii.gz"
    result = _recon(oblique, out)
    assert f"wrote {out} (NIfTI, magnitude)" in result.output and "warning" not in result.output
    nii = nibabel.load(out)
    assert nii.shape == (N, N, 1) and nii.get_data_dtype() == np.float32
    voxel = np.array([FOV / N, FOV / N, THICKNESS])
    np.testing.assert_allclose(nii.header.get_zooms(), voxel, rtol=1e-6)
    lps_to_ras = np.diag([-1.0, -1.0, 1.0])
    expected = lps_to_ras @ ROT * voxel  # column d: voxel size d times direction d, in RAS
    for affine, code in (nii.header.get_sform(coded=True), nii.header.get_qform(coded=True)):
        assert int(code) == 1  # scanner
        np.testing.assert_allclose(affine[:3, :3], expected, atol=1e-5)
        # voxel (N//2, N//2, 0) is the ISMRMRD position, in RAS
        np.testing.assert_allclose(affine @ [N // 2, N // 2, 0, 1], [-12.5, 30.0, 7.0, 1.0], atol=1e-4)
        # one voxel along axis 0 moves by FOV/N along read_dir (LPS), i.e. x and y negated
        step = affine @ [N // 2 + 1, N // 2, 0, 1] - affine @ [N // 2, N // 2, 0, 1]
        np.testing.assert_allclose(step[:3], lps_to_ras @ ROT[:, 0] * FOV / N, atol=1e-5)
    assert nii.header.get_xyzt_units()[0] == "mm"


def test_nifti_magnitude_and_complex_equal_the_hdf5_image(oblique, tmp_path):
    _recon(oblique, tmp_path / "r.h5")
    _recon(oblique, tmp_path / "m.nii")
    result = _recon(oblique, tmp_path / "c.nii.gz", "--complex")
    assert "(NIfTI, real and imaginary)" in result.output
    with h5py.File(tmp_path / "r.h5") as f:
        image = f["image"][()]
        affine = f.attrs["affine_ras"]
        np.testing.assert_allclose(f.attrs["position_mm"], POSITION, rtol=1e-6)
        np.testing.assert_allclose(f.attrs["voxel_size_mm"], [FOV / N, FOV / N, THICKNESS])
        np.testing.assert_allclose(f.attrs["slice_dir"], ROT[:, 2], atol=1e-6)
        assert f.attrs["geometry"] == "scanner"
    assert image.dtype == np.complex64 and image.shape == (N, N)
    magnitude = nibabel.load(tmp_path / "m.nii")
    np.testing.assert_array_equal(magnitude.get_fdata(dtype=np.float32)[:, :, 0], np.abs(image))
    np.testing.assert_allclose(magnitude.affine, affine, atol=1e-5)
    parts = np.asarray(nibabel.load(tmp_path / "c.nii.gz").dataobj)
    assert parts.shape == (N, N, 1, 2) and parts.dtype == np.float32
    np.testing.assert_array_equal(parts[:, :, 0, 0], image.real)  # bit for bit
    np.testing.assert_array_equal(parts[:, :, 0, 1], image.imag)


def test_evenly_spaced_slices_are_one_volume_and_their_png_a_montage(tmp_path):
    mrd = _oblique_mrd(tmp_path / "two.mrd.h5", slices=2)
    out, png = tmp_path / "s.nii.gz", tmp_path / "s.png"
    result = _recon(mrd, out, "--png", png)
    assert "montage of the 2 images of the stack (1 x 2 grid, row by row)" in result.output
    nii = nibabel.load(out)
    assert nii.shape == (N, N, 2)
    data = nii.get_fdata()
    np.testing.assert_allclose(data[..., 1], 2 * data[..., 0], rtol=1e-3, atol=1e-3 * data.max())
    np.testing.assert_allclose(nii.header.get_zooms(), [FOV / N, FOV / N, SLICE_GAP], rtol=1e-6)
    # every slice's centre voxel lands on that slice's ISMRMRD position (LPS -> RAS)
    for s in range(2):
        lps = POSITION + s * SLICE_GAP * ROT[:, 2]
        np.testing.assert_allclose(nii.affine @ [N // 2, N // 2, s, 1], [-lps[0], -lps[1], lps[2], 1], atol=1e-4)
    _recon(mrd, tmp_path / "s.h5")
    with h5py.File(tmp_path / "s.h5") as f:
        positions, affines = f.attrs["position_mm"], f.attrs["affine_ras"]
        assert [k["slice"] for k in json.loads(f.attrs["stack"])] == [0, 1]
    assert positions.shape == (2, 3) and affines.shape == (2, 4, 4)
    np.testing.assert_allclose(positions[1] - positions[0], SLICE_GAP * ROT[:, 2], atol=1e-4)
    assert _png_size(png) == (2 * N, N)  # 2 tiles side by side (width, height)


@pytest.mark.parametrize("offsets", [[0.0, -SLICE_GAP, -2 * SLICE_GAP], [0.0, 2 * SLICE_GAP, SLICE_GAP],
                                     [0.0, SLICE_GAP, 2.5 * SLICE_GAP]])
def test_slices_in_any_order_are_one_volume_and_uneven_ones_one_file_each(tmp_path, offsets):
    mrd = _oblique_mrd(tmp_path / "three.mrd.h5", slices=3, offsets=offsets)
    out = tmp_path / "t.nii"
    result = _recon(mrd, out)
    ranked = np.sort(offsets)
    even = np.allclose(np.diff(ranked), ranked[1] - ranked[0])
    place = np.argsort(np.argsort(offsets))  # a slice's index along the volume's axis 3: by position
    files = [out] if even else [tmp_path / f"t_slice{s}.nii" for s in range(3)]
    assert all(f.is_file() for f in files) and (even or not out.exists())
    assert ("wrote 3 files" in result.output) != even
    for s in range(3):
        lps = POSITION + offsets[s] * ROT[:, 2]
        nii = nibabel.load(files[0] if even else files[s])
        assert nii.shape == ((N, N, 3) if even else (N, N, 1))
        voxel = [N // 2, N // 2, place[s] if even else 0, 1]
        np.testing.assert_allclose(nii.affine @ voxel, [-lps[0], -lps[1], lps[2], 1], atol=1e-4)


def _png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    assert struct.unpack(">I", data[29:33])[0] == zlib.crc32(data[12:29]) & 0xFFFFFFFF
    return struct.unpack(">II", data[16:24])


@pytest.fixture(scope="module")
def volume(tmp_path_factory):
    path = tmp_path_factory.mktemp("vol") / "vol.h5"
    result = _run("simulate", path, "--matrix", "12", "--trajectory", "kooshball", "--coils", "1", "--quiet")
    assert result.exit_code == 0, result.output
    return path


def test_3d_scan_without_geometry_montage_and_warning(volume, tmp_path):
    out, png = tmp_path / "v.nii", tmp_path / "v.png"
    result = _recon(volume, out, "--png", png)
    assert "does not say where the image lies" in result.output and "voxel size unknown" in result.output
    assert "montage of the 12 slices along axis 2 (3 x 4 grid, row by row)" in result.output
    assert _png_size(png) == (4 * 12, 3 * 12)
    nii = nibabel.load(out)
    assert nii.shape == (12, 12, 12)
    expected = np.eye(4)
    expected[:3, :3] = np.diag([-1.0, -1.0, 1.0]) @ UNPLACED  # the MRD headers' LPS directions, as RAS
    expected[:3, 3] = -expected[:3, :3] @ [6.0, 6.0, 6.0]  # 1 mm voxels, voxel N//2 at the origin
    np.testing.assert_allclose(nii.affine, expected)


def test_png_extension_and_format_override(volume, tmp_path):
    result = _run("reconstruct", volume, "-o", tmp_path / "v.h5", "--png", tmp_path / "out.jpg", "--device", "cpu")
    assert result.exit_code == 1 and "name it with the extension .png" in result.output
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "v.h5").exists()
    out = tmp_path / "x.nii.gz"
    result = _recon(volume, out, "--format", "hdf5", "--quiet")
    assert h5py.is_hdf5(out)
    with h5py.File(out) as f:
        assert f["image"].shape == (12, 12, 12) and f.attrs["geometry"] == "unknown"
        assert "voxel_size_mm" not in f.attrs and "position_mm" not in f.attrs
    result = _recon(volume, tmp_path / "y.h5", "--format", "nifti", "--quiet")
    assert nibabel.Nifti1Image.from_bytes((tmp_path / "y.h5").read_bytes()).shape == (12, 12, 12)
    result = _run("reconstruct", volume, "--format", "nifti", "--device", "cpu", "--iterations", "2", "--quiet")
    assert result.exit_code == 0, result.output
    assert (volume.parent / "vol.recon.nii.gz").exists()


def test_output_format_choice():
    assert output_format("a.NII.GZ") == "nifti" and output_format("a.nii") == "nifti"
    assert output_format("a.h5") == "hdf5" and output_format("a.nii", "hdf5") == "hdf5"
    with pytest.raises(OutputError, match=f"unknown output format 'png': expected one of {', '.join(formats())}$"):
        output_format("a.nii", "png")


def test_geometry_from_schema_v1_attributes_and_errors():
    attrs = {"fov_mm": [200.0, 100.0], "position_mm": [1, 2, 3], "read_dir": [0, 1, 0], "phase_dir": [1, 0, 0],
             "slice_dir": [0, 0, -1]}
    g = geometry_of((100, 50), attrs)
    assert g.voxel_size_mm == (2.0, 2.0, 1.0) and g.oriented and g.voxel_size_known
    affine = g.affine_ras()
    np.testing.assert_allclose(affine @ [50, 25, 0, 1], [-1, -2, 3, 1])
    np.testing.assert_allclose(affine[:3, :3], [[0, -2, 0], [-2, 0, 0], [0, 0, -1]])
    stacked = geometry_attrs([g, g])
    assert stacked["affine_ras"].shape == (2, 4, 4) and stacked["read_dir"].shape == (2, 3)
    assert geometry_attrs([Geometry((4, 4, 1), (1.0, 1.0, 1.0), False)]).keys() == {"geometry", "affine_ras"}
    with pytest.raises(SchemaError, match=r"s\.h5: geometry attributes \['position_mm'\] without "
                                          r"\['read_dir', 'phase_dir', 'slice_dir'\]"):
        geometry_of((4, 4), {"position_mm": [0, 0, 0]}, "s.h5")
    with pytest.raises(SchemaError, match=r"are not orthonormal \(largest deviation of their dot products 1\)"):
        geometry_of((4, 4), {**attrs, "read_dir": [1, 0, 0]})
    with pytest.raises(SchemaError, match=r"attribute 'voxel_size_mm' is \[1, 2\]; expected 3 finite numbers"):
        geometry_of((4, 4), {"voxel_size_mm": [1, 2]})
    with pytest.raises(SchemaError, match=r"attribute 'position_mm' is 'left'; expected 3 finite numbers"):
        geometry_of((4, 4), {**attrs, "position_mm": "left"})
    with pytest.raises(SchemaError, match=r"voxel size \[0\.0, 1\.0, 1\.0\] mm; expected positive sizes"):
        geometry_of((4, 4), {"voxel_size_mm": [0, 1, 1]})


def test_nifti_array_refuses_an_image_of_another_matrix():
    assert nifti_array(np.ones((3, 4, 5), np.complex64), (4, 5)).shape == (4, 5, 1, 3)
    with pytest.raises(OutputError, match=r"image of shape \(4, 6\) is neither the matrix \[4, 5\] nor a stack"):
        nifti_array(np.ones((4, 6)), (4, 5))


def test_mrd_without_directions_has_no_orientation(tmp_path, volume):
    from mri_recon.io import load_scan
    from mri_recon.io.ismrmrd_write import write_ismrmrd

    mrd = tmp_path / "plain.mrd.h5"
    write_ismrmrd(mrd, load_scan(volume))  # acquisition headers with all-zero directions: geometry unset
    [(_, scan)] = load_scans(mrd)
    assert "position_mm" not in scan.attrs and "read_dir" not in scan.attrs
    assert len(scan.attrs["voxel_size_mm"]) == 3 and not geometry_of(scan.matrix, scan.attrs).oriented
