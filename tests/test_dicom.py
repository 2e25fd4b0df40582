"""DICOM output: an oblique two-slice MRD scan as one series whose geometry is the NIfTI affine's."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

pydicom = pytest.importorskip("pydicom")
sys.path.insert(0, str(Path(__file__).parent))
from test_nifti import _oblique_mrd, _recon, _run  # noqa: E402

from mri_recon.io.dicom_fields import clean, date, header_fields, time, valid_uid  # noqa: E402

LPS = np.diag([-1.0, -1.0, 1.0])


@pytest.fixture(scope="module")
def series(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dicom")
    scan = _oblique_mrd(folder / "two.mrd.h5", slices=2)
    _recon(scan, folder / "two.nii.gz")
    _recon(scan, folder / "two.h5")
    _recon(scan, folder / "series", "--format", "dicom")
    return folder


def _read(folder):
    with pydicom.config.strict_reading():
        return [pydicom.dcmread(path) for path in sorted((folder / "series").iterdir())]


def test_positions_and_orientation_are_the_nifti_affine(series):
    import nibabel

    affine = nibabel.load(series / "two.nii.gz").affine  # a volume of the two parallel slices
    files = _read(series)
    assert len(files) == 2
    step = LPS @ affine[:3, 2]  # NIfTI axis 3: the slices in order along it
    for k, ds in enumerate(sorted(files, key=lambda d: float(np.array(d.ImagePositionPatient, float) @ step))):
        expected = LPS @ (affine @ np.array([0.0, 0.0, k, 1.0]))[:3]
        np.testing.assert_allclose(np.array(ds.ImagePositionPatient, float), expected, atol=1e-4)
        linear = LPS @ affine[:3, :3]
        rows = linear[:, 1] / np.linalg.norm(linear[:, 1])
        columns = linear[:, 0] / np.linalg.norm(linear[:, 0])
        np.testing.assert_allclose(np.array(ds.ImageOrientationPatient, float), np.r_[rows, columns], atol=1e-6)
        np.testing.assert_allclose([float(v) for v in ds.PixelSpacing], np.linalg.norm(affine[:3, :2], axis=0),
                                   rtol=1e-6)
        np.testing.assert_allclose(float(ds.SpacingBetweenSlices), np.linalg.norm(affine[:3, 2]), rtol=1e-6)


def test_pixels_are_the_magnitude_to_half_a_step(series):
    import h5py

    with h5py.File(series / "two.h5") as f:
        image = np.abs(f["image"][()])  # (slice, x, y)
        positions = f.attrs["position_mm"]
    files = _read(series)
    for ds in files:
        index = int(np.argmin(np.linalg.norm(positions - _centre(ds), axis=1)))
        values = float(ds.RescaleSlope) * ds.pixel_array.astype(np.float64) + float(ds.RescaleIntercept)
        assert ds.pixel_array.shape == image[index].shape
        assert np.max(np.abs(values - image[index])) <= 0.51 * float(ds.RescaleSlope)  # float32 division
    assert max(int(ds.pixel_array.max()) for ds in files) == 65535


def _centre(ds):
    """LPS position of voxel (N // 2, N // 2): the slice's MRD position."""
    orient = np.array(ds.ImageOrientationPatient, float)
    spacing = [float(v) for v in ds.PixelSpacing]
    return (np.array(ds.ImagePositionPatient, float) + ds.Rows // 2 * spacing[0] * orient[3:]
            + ds.Columns // 2 * spacing[1] * orient[:3])


def test_files_are_valid_mr_images_of_one_series(series):
    files = _read(series)
    assert len({ds.SeriesInstanceUID for ds in files}) == 1
    assert len({ds.SOPInstanceUID for ds in files}) == 2
    for ds in files:
        pydicom.dataset.validate_file_meta(ds.file_meta, enforce_standard=True)
        assert ds.SOPClassUID == pydicom.uid.MRImageStorage == ds.file_meta.MediaStorageSOPClassUID
        assert ds.file_meta.MediaStorageSOPInstanceUID == ds.SOPInstanceUID
        assert ds.preamble is not None and ds.Modality == "MR"
        for uid in (ds.SOPInstanceUID, ds.SeriesInstanceUID, ds.StudyInstanceUID, ds.FrameOfReferenceUID):
            assert pydicom.uid.UID(uid).is_valid
        with pydicom.config.strict_reading():
            for element in ds.iterall():
                if element.VR in ("OB", "OW", "SQ"):
                    continue
                many = isinstance(element.value, pydicom.multival.MultiValue)
                for value in element.value if many else [element.value]:
                    if value is None:  # an empty type-2 element
                        continue
                    text = str(value) if element.VR in ("DS", "IS", "PN") else value
                    pydicom.valuerep.validate_value(element.VR, text, pydicom.config.RAISE)


def test_an_existing_folder_of_other_files_is_refused(series, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    result = _run("reconstruct", series / "two.mrd.h5", "-o", tmp_path / "out", "--format", "dicom",
                  "--device", "cpu", "--iterations", "1")
    assert result.exit_code == 1
    assert "holds other files than an earlier DICOM series" in result.output
    assert (tmp_path / "out" / "notes.txt").read_text() == "mine"


def test_header_strings_are_cleaned():
    assert clean("Doe\\John\x1b[31m" + "x" * 100, "PN") == ("DoeJohn[31m" + "x" * 100)[:64]
    assert clean("head first-supine", "CS") == "HEAD FIRSTSUPINE"
    assert date("2024-02-30") == "20240230" and date("garbage") == "" and date("2024-13-01") == ""
    assert time("12:34:56.5") == "123456.5" and time("25:00:00") == ""
    assert valid_uid("1.2.840.10008.1") == "1.2.840.10008.1" and valid_uid("1.02.3") is None
    assert valid_uid("1." * 40 + "1") is None


def test_header_fields_from_an_ismrmrd_header():
    import ismrmrd.xsd as x

    header = x.ismrmrdHeader(
        experimentalConditions=x.experimentalConditionsType(H1resonanceFrequency_Hz=123_200_000),
        subjectInformation=x.subjectInformationType(patientName="Doe^Jane\\", patientID="ID\n7", patientGender="F"),
        studyInformation=x.studyInformationType(studyInstanceUID="1.2.3.4", studyDescription="brain"),
        measurementInformation=x.measurementInformationType(protocolName="radial", frameOfReferenceUID="1.2.x",
                                                            patientPosition=x.patientPositionType.HFS),
        sequenceParameters=x.sequenceParametersType(TR=[5.0], TE=[2.5], flipAngle_deg=[10.0]))
    fields = header_fields(header)
    assert fields["PatientName"] == "Doe^Jane" and fields["PatientID"] == "ID7" and fields["PatientSex"] == "F"
    assert fields["StudyInstanceUID"] == "1.2.3.4" and "FrameOfReferenceUID" not in fields
    assert fields["RepetitionTime"] == "5" and fields["EchoTime"] == "2.5" and fields["FlipAngle"] == "10"
    assert fields["ImagingFrequency"] == "123.2" and fields["ProtocolName"] == "radial"
    assert fields["PatientPosition"] == "HFS"


def test_a_3d_image_is_one_file_per_slice_at_the_documented_positions(tmp_path):
    from mri_recon import Scan
    from mri_recon.io.dicom import write_dicom_series
    from mri_recon.io.geometry import geometry_of

    rng = np.random.default_rng(7)
    a, b = np.radians(20.0), np.radians(-35.0)
    rot = np.array([[np.cos(a), -np.sin(a), 0], [np.sin(a), np.cos(a), 0], [0, 0, 1]]) @ \
        np.array([[1, 0, 0], [0, np.cos(b), -np.sin(b)], [0, np.sin(b), np.cos(b)]])
    matrix, voxel, position = (9, 6, 5), np.array([1.5, 2.0, 3.25]), np.array([-4.0, 17.5, 30.0])
    attrs = {"voxel_size_mm": voxel, "position_mm": position, "read_dir": rot[:, 0], "phase_dir": rot[:, 1],
             "slice_dir": rot[:, 2]}
    n = 16
    scan = Scan(kspace=np.ones((1, n), np.complex64), trajectory=rng.uniform(-2, 2, (n, 3)).astype(np.float32),
                matrix=matrix, attrs=attrs)
    image = (rng.standard_normal(matrix) + 1j * rng.standard_normal(matrix)).astype(np.complex64)
    files = write_dicom_series(tmp_path / "vol", image, [geometry_of(matrix, attrs)], [({}, scan, {}, None)])
    assert [f.name for f in files] == [f"IM{k + 1:05d}.dcm" for k in range(5)]
    for k, path in enumerate(files):
        ds = pydicom.dcmread(path)
        steps = zip((0, 0, k), matrix, voxel)
        corner = position + sum((j - m // 2) * v * rot[:, d] for d, (j, m, v) in enumerate(steps))
        np.testing.assert_allclose(np.array(ds.ImagePositionPatient, float), corner, atol=1e-4)
        np.testing.assert_allclose(np.array(ds.ImageOrientationPatient, float), np.r_[rot[:, 1], rot[:, 0]],
                                   atol=1e-8)
        assert (ds.Rows, ds.Columns) == (9, 6) and float(ds.SpacingBetweenSlices) == 3.25
        # SliceLocation along the slice axis (rows x columns is phase x read = -slice_dir here)
        assert float(ds.SliceLocation) == pytest.approx(float(rot[:, 2] @ corner), abs=1e-4)
        values = float(ds.RescaleSlope) * ds.pixel_array
        assert np.max(np.abs(values - np.abs(image[:, :, k]))) <= 0.51 * float(ds.RescaleSlope)


def test_slice_location_has_the_sign_of_the_slice_axis(tmp_path):
    from mri_recon import Scan
    from mri_recon.io.dicom import write_dicom_series
    from mri_recon.io.geometry import geometry_of

    attrs = {"voxel_size_mm": [1.0, 1.0, 2.0], "position_mm": [0.0, 0.0, 30.0], "read_dir": [1.0, 0.0, 0.0],
             "phase_dir": [0.0, 1.0, 0.0], "slice_dir": [0.0, 0.0, 1.0]}
    scan = Scan(kspace=np.ones((1, 4), np.complex64), trajectory=np.zeros((4, 2), np.float32), matrix=(4, 4),
                attrs=attrs)
    [path] = write_dicom_series(tmp_path / "one", np.ones((4, 4), np.complex64), [geometry_of((4, 4), attrs)],
                                [({}, scan, {}, None)])
    assert float(pydicom.dcmread(path).SliceLocation) == pytest.approx(30.0)


def test_a_dicom_batch_is_complete_on_its_second_run(tmp_path):
    from mri_recon import save_scan, simulate_scan

    for name in ("a", "b"):
        save_scan(tmp_path / f"{name}.h5", simulate_scan((16, 16), "golden", coils=2, spokes=12))
    args = ["reconstruct", tmp_path / "a.h5", tmp_path / "b.h5", "-o", tmp_path / "out", "--format", "dicom",
            "--device", "cpu", "--iterations", "2", "--no-cache"]
    first = _run(*args)
    assert first.exit_code == 0, first.output
    written = {n: (tmp_path / "out" / f"{n}.recon.dcm" / "IM00001.dcm").read_bytes() for n in ("a", "b")}
    second = _run(*args)
    assert second.exit_code == 0 and "2 skipped (complete)" in second.output, second.output
    (tmp_path / "out" / "a.recon.dcm" / "IM00001.dcm").write_bytes(b"changed")
    third = _run(*args)
    assert third.exit_code == 0 and "1 done, 1 skipped" in third.output, third.output
    assert (tmp_path / "out" / "a.recon.dcm" / "IM00001.dcm").read_bytes()[:132] == written["a"][:132]


def test_a_missing_pydicom_is_found_before_any_work(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from mri_recon.cli import main

    scan = tmp_path / "s.h5"
    assert CliRunner().invoke(main, ["simulate", str(scan), "--matrix", "16", "--coils", "1", "-q"]).exit_code == 0
    monkeypatch.setitem(sys.modules, "pydicom", None)  # import pydicom now raises ImportError
    started = []
    monkeypatch.setattr("mri_recon.api.prepare_and_reconstruct", lambda *a, **k: started.append(1))
    done = CliRunner().invoke(main, ["reconstruct", str(scan), "-o", str(tmp_path / "series"), "--format", "dicom"])
    assert done.exit_code == 1 and "DICOM output needs pydicom" in done.output and not started


def test_unicode_text_is_written_as_utf8_and_read_back(tmp_path, monkeypatch):
    from mri_recon import Scan
    from mri_recon.io import dicom
    from mri_recon.io.geometry import geometry_of

    names = {"PatientName": "Müller^Jürgen", "SeriesDescription": "日本語 シリーズ", "InstitutionName": "Zürich"}
    monkeypatch.setattr("mri_recon.io.dicom_fields.header_fields", lambda header: dict(names))
    scan = Scan(kspace=np.ones((1, 4), np.complex64), trajectory=np.zeros((4, 2), np.float32), matrix=(4, 4))
    [path] = dicom.write_dicom_series(tmp_path / "u", np.ones((4, 4), np.complex64), [geometry_of((4, 4), {})],
                                      [({}, scan, {}, None)])
    raw = path.read_bytes()
    assert "Müller^Jürgen".encode() in raw and "日本語".encode() in raw  # UTF-8 bytes, not Latin-1 or '?'
    ds = pydicom.dcmread(path)
    assert ds.SpecificCharacterSet == "ISO_IR 192"
    assert str(ds.PatientName) == "Müller^Jürgen" and ds.SeriesDescription == "日本語 シリーズ"
    assert ds.InstitutionName == "Zürich"


def test_a_uid_longer_than_64_characters_is_replaced_not_cut():
    long_uid = "1.2." + "3" * 78  # 82 characters: the first 64 would still look valid
    assert valid_uid(long_uid) is None and valid_uid("1.2.840.10008.5.1.4.1.1.4") == "1.2.840.10008.5.1.4.1.1.4"
