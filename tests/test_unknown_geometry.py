"""A scan that does not say where it lies: the NIfTI affine and the MRD headers place it the same way."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

nibabel = pytest.importorskip("nibabel")
ismrmrd = pytest.importorskip("ismrmrd")

from mri_recon.cli import main  # noqa: E402
from mri_recon.io.geometry import LPS_TO_RAS, geometry_of  # noqa: E402
from mri_recon.io.mrd_image import mrd_image  # noqa: E402

AXES = ("read_dir", "phase_dir", "slice_dir")


def _world_directions(affine: np.ndarray) -> np.ndarray:
    """Unit RAS direction of each voxel axis (the columns of the affine's linear part)."""
    linear = affine[:3, :3]
    return linear / np.linalg.norm(linear, axis=0)


@pytest.mark.parametrize("ndim", [2, 3])
@pytest.mark.parametrize("voxel_known", [True, False], ids=["voxel-size", "no-voxel-size"])
def test_nifti_affine_and_mrd_header_agree_on_every_axis_without_geometry(rng, ndim, voxel_known):
    matrix = tuple(int(n) for n in rng.integers(5, 20, size=ndim))
    attrs = {"voxel_size_mm": rng.uniform(0.5, 3.0, size=3)} if voxel_known else {}
    geometry = geometry_of(matrix, attrs)
    assert not geometry.oriented
    record = mrd_image(np.zeros(matrix, np.complex64), geometry, {}, 0)
    mrd_ras = LPS_TO_RAS @ np.column_stack([np.asarray(getattr(record, name)[:], float) for name in AXES])
    affine = geometry.affine_ras()
    np.testing.assert_allclose(_world_directions(affine), mrd_ras, atol=1e-12)
    centre = [n // 2 for n in geometry.matrix]  # the MRD position is the centre voxel's
    np.testing.assert_allclose(affine @ [*centre, 1], [*(LPS_TO_RAS @ np.asarray(record.position[:], float)), 1])
    np.testing.assert_allclose(np.linalg.norm(affine[:3, :3], axis=0), geometry.voxel_size_mm)


def test_the_written_nifti_and_mrd_outputs_point_axis_0_the_same_way(tmp_path):
    scan, nii, mrd = tmp_path / "s.h5", tmp_path / "s.nii", tmp_path / "s.mrd.h5"
    runner = CliRunner()
    assert runner.invoke(main, ["simulate", str(scan), "--matrix", "16x12", "--coils", "1", "-q"]).exit_code == 0
    for out in (nii, mrd):
        result = runner.invoke(main, ["reconstruct", str(scan), "-o", str(out), "--iterations", "1",
                                      "--device", "cpu"])
        assert result.exit_code == 0, result.output
        assert "axis 0 posterior and axis 1 left (LPS: shown as the PNG)" in result.output
    with ismrmrd.Dataset(str(mrd), "dataset", create_if_needed=False, mode="r") as dataset:
        record = dataset.read_image("image_0", 0)
    world = _world_directions(nibabel.load(nii).affine)
    for d, name in enumerate(AXES):
        np.testing.assert_allclose(world[:, d], LPS_TO_RAS @ np.asarray(getattr(record, name)[:], float))


def _radiological(nii) -> np.ndarray:
    """The axial slice a radiological viewer shows: data turned to RAS (nibabel's canonical order), then rows
    from anterior (top) to posterior and columns from the patient's right (left of the screen) to left."""
    canonical = nibabel.as_closest_canonical(nii)
    data = np.asarray(canonical.dataobj)[..., 0]  # axes R, A (the slice is one voxel thick)
    return data[::-1, ::-1].T  # rows: A high to low; columns: R high to low (patient right on screen left)


def test_one_scan_looks_the_same_in_the_png_a_nifti_viewer_and_a_dicom_viewer(tmp_path):
    """A simulated phantom (``bart phantom``'s layout, tests/test_phantom.py) without geometry: the PNG (axis 0
    down the rows, as ``bart toimg``), the NIfTI volume as a radiological viewer shows it in RAS, and the DICOM
    pixels in a viewer's standard axial display (row direction the patient's left, column direction posterior)
    are one picture."""
    pydicom = pytest.importorskip("pydicom")
    scan = tmp_path / "s.h5"
    runner = CliRunner()
    assert runner.invoke(main, ["simulate", str(scan), "--matrix", "32x24", "--coils", "1", "-q"]).exit_code == 0
    outputs = {"h5": tmp_path / "x.h5", "nii": tmp_path / "x.nii", "dcm": tmp_path / "series"}
    for name, out in outputs.items():
        extra = ["--format", "dicom"] if name == "dcm" else []
        done = runner.invoke(main, ["reconstruct", str(scan), "-o", str(out), "--iterations", "3", "--device",
                                    "cpu", "-q", *extra])
        assert done.exit_code == 0, done.output
    import h5py

    with h5py.File(outputs["h5"]) as f:
        image = np.abs(f["image"][...])  # what the PNG shows: rows = axis 0, columns = axis 1
    shown_nifti = _radiological(nibabel.load(outputs["nii"]))
    np.testing.assert_allclose(shown_nifti / shown_nifti.max(), image / image.max(), atol=1e-3)
    [path] = sorted(outputs["dcm"].iterdir())
    ds = pydicom.dcmread(path)
    np.testing.assert_allclose(np.array(ds.ImageOrientationPatient, float), [1, 0, 0, 0, 1, 0])  # standard axial
    pixels = ds.pixel_array.astype(float)
    np.testing.assert_allclose(pixels / pixels.max(), image / image.max(), atol=2e-3)


@pytest.mark.skipif(__import__("shutil").which("bart") is None, reason="needs BART (apt-get install bart)")
def test_the_png_preview_is_bart_toimg_of_the_same_array(tmp_path):
    import subprocess

    from helpers import read_png

    scan = tmp_path / "s.h5"
    runner = CliRunner()
    assert runner.invoke(main, ["simulate", str(scan), "--matrix", "48x40", "--coils", "1", "-q"]).exit_code == 0
    done = runner.invoke(main, ["reconstruct", str(scan), "-o", str(tmp_path / "x.cfl"), "--png",
                                str(tmp_path / "ours.png"), "--iterations", "3", "--device", "cpu", "-q"])
    assert done.exit_code == 0, done.output
    subprocess.run(["bart", "toimg", "x", "bart.png"], cwd=tmp_path, check=True, capture_output=True)
    ours, theirs = read_png(tmp_path / "ours.png").astype(float), read_png(tmp_path / "bart.png")[..., 0].astype(float)
    assert ours.shape == theirs.shape == (48, 40)  # rows: axis 0, columns: axis 1, in both
    a, b = ours - ours.mean(), theirs - theirs.mean()
    assert (a * b).sum() / np.sqrt((a * a).sum() * (b * b).sum()) > 0.99  # the same picture, not turned
