"""Every dimension of an MRD scan: slices, contrasts, phases, sets and repetitions as named output axes."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

pytest.importorskip("ismrmrd")

from mri_recon.cli import main  # noqa: E402
from mri_recon.errors import InvalidDataError, SchemaError  # noqa: E402
from mri_recon.io import load_scan, load_scans  # noqa: E402
from mri_recon.io.ismrmrd import load_ismrmrd, load_ismrmrd_all  # noqa: E402
from mri_recon.io.ismrmrd_write import convert, write_ismrmrd  # noqa: E402
from mri_recon.io.stack import StackLayout, select, stack_layout  # noqa: E402

FAST = ("--iterations", "3", "--quiet", "--device", "cpu", "--no-cache")


def _run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    path = tmp_path_factory.mktemp("dims") / "small.h5"
    result = _run("simulate", path, "--matrix", "32", "--coils", "2", "--snr", "50", "--quiet")
    assert result.exit_code == 0, result.output
    return load_scan(path)


@pytest.fixture(scope="module")
def mrd(base, tmp_path_factory):
    """3 slices x 2 contrasts; image (s, c) is the base scan's data times 1 + s + 10 c."""
    path = tmp_path_factory.mktemp("dims") / "sc.mrd.h5"
    scans = [({"slice": s, "contrast": c}, base.replace(kspace=base.kspace * (1 + s + 10 * c)))
             for s in range(3) for c in range(2)]
    write_ismrmrd(path, scans)
    return path


def test_every_image_is_read_in_the_fixed_order(mrd, base):
    pairs = load_ismrmrd_all(mrd)
    assert [(k["slice"], k["contrast"]) for k, _ in pairs] == [(s, c) for s in range(3) for c in range(2)]
    for key, scan in pairs:
        assert (scan.attrs["slice"], scan.attrs["contrast"], scan.attrs["phase"]) == (key["slice"], key["contrast"], 0)
        np.testing.assert_allclose(scan.kspace, base.kspace * (1 + key["slice"] + 10 * key["contrast"]), rtol=1e-6)
    second = load_ismrmrd_all(mrd, contrast=1)
    assert [k["slice"] for k, _ in second] == [0, 1, 2] and all(k["contrast"] == 1 for k, _ in second)
    one = load_ismrmrd(mrd, contrast=1, slice=2)
    np.testing.assert_array_equal(one.kspace, pairs[5][1].kspace)
    with pytest.raises(SchemaError, match=r"holds several images \(slices \[0, 1, 2\], contrasts \[1\]"):
        load_ismrmrd(mrd, contrast=1)
    with pytest.raises(SchemaError, match=r"no data for contrast 5 \(file holds slices \[0, 1, 2\], contrasts "
                                          r"\[0, 1\], phases \[0\], sets \[0\], repetitions \[0\]\)"):
        load_ismrmrd_all(mrd, contrast=5)


def test_phases_and_sets_are_written_and_read(base, tmp_path):
    scans = [({"phase": p, "set": t}, base.replace(kspace=base.kspace * (1 + p + 2 * t)))
             for p in range(2) for t in range(2)]
    write_ismrmrd(tmp_path / "ps.h5", scans)
    pairs = load_ismrmrd_all(tmp_path / "ps.h5")
    assert [(k["phase"], k["set"]) for k, _ in pairs] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    scan = load_ismrmrd(tmp_path / "ps.h5", phase=1, set=0)
    np.testing.assert_allclose(scan.kspace, base.kspace * 2, rtol=1e-6)
    assert stack_layout([k for k, _ in pairs]) == StackLayout(("phase", "set"), (2, 2))


def test_stack_layout_and_select():
    grid = [{"slice": s, "repetition": r} for s in (0, 1) for r in (0, 2)]
    assert stack_layout(grid) == StackLayout(("slice", "repetition"), (2, 2))
    assert stack_layout(grid).names(2) == ["slice", "repetition", "x", "y"]
    ragged = [{"slice": 0, "repetition": 0}, {"slice": 1, "repetition": 2}]
    assert stack_layout(ragged) == StackLayout(("image",), (2,))
    assert stack_layout(grid[::-1]) == StackLayout(("image",), (4,))  # not in the fixed order
    assert stack_layout([{}]) == StackLayout((), ())
    assert select(grid, "f", repetition=2) == [1, 3]
    with pytest.raises(SchemaError, match=r"f: unknown image dimension\(s\) \['echo'\]"):
        select(grid, "f", echo=1)


def test_a_choice_of_images_is_refused_for_schema_v1(tmp_path, base):
    from mri_recon.io import save_scan

    save_scan(tmp_path / "v1.h5", base)
    with pytest.raises(InvalidDataError, match=r"a schema-v1 file holds one image; contrast=1 chooses"):
        load_scans(tmp_path / "v1.h5", contrast=1)
    with pytest.raises(InvalidDataError, match=r"holds one image; slice=0, set=2 chooses"):
        load_scan(tmp_path / "v1.h5", slice=0, set=2)
    assert len(load_scans(tmp_path / "v1.h5", slice=None)) == 1
    result = _run("reconstruct", tmp_path / "v1.h5", "--slice", "0", *FAST)
    assert result.exit_code == 1 and "holds one image; slice=0 chooses" in result.output


def test_convert_a_chosen_contrast_writes_one_file_per_slice(mrd, tmp_path):
    written = convert(mrd, tmp_path / "c.h5", contrast=1)
    assert written == [tmp_path / f"c_slice{s}.h5" for s in range(3)]
    for s, path in enumerate(written):
        np.testing.assert_array_equal(load_scan(path).kspace, load_ismrmrd(mrd, slice=s, contrast=1).kspace)
    result = _run("convert", mrd, tmp_path / "d.h5", "--contrast", "1", "--quiet")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.glob("d_*.h5")) == [f"d_slice{s}.h5" for s in range(3)]
    assert load_scan(tmp_path / "d_slice2.h5").attrs["contrast"] == 1
    assert convert(mrd, tmp_path / "all.h5")[1] == tmp_path / "all_slice0_contrast1.h5"
    result = _run("convert", mrd, tmp_path / "e.h5", "--contrast", "2")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "no data for contrast 2 (file holds slices [0, 1, 2], contrasts [0, 1]" in result.output


def test_reconstruct_gives_named_axes_and_a_contrast_alone_equals_its_part(mrd, tmp_path):
    full, second = tmp_path / "full.h5", tmp_path / "second.h5"
    result = _run("reconstruct", mrd, "-o", full, *FAST)
    assert result.exit_code == 0, result.output
    with h5py.File(full) as f:
        image = f["image"][()]
        assert image.shape == (3, 2, 32, 32)
        assert list(f.attrs["axes"]) == ["slice", "contrast", "x", "y"]
        assert [(k["slice"], k["contrast"]) for k in json.loads(f.attrs["stack"])] == \
            [(s, c) for s in range(3) for c in range(2)]
        assert f["residuals"].shape[:2] == (3, 2) and f.attrs["affine_ras"].shape == (3, 2, 4, 4)
    # image (s, c) is image (0, 0) times 1 + s + 10 c: a linear reconstruction keeps the factor
    np.testing.assert_allclose(image[2, 1], 13 * image[0, 0], rtol=1e-3, atol=1e-3 * np.abs(image[2, 1]).max())
    result = _run("reconstruct", mrd, "-o", second, "--contrast", "1", *FAST)
    assert result.exit_code == 0, result.output
    with h5py.File(second) as f:
        assert list(f.attrs["axes"]) == ["slice", "x", "y"]
        np.testing.assert_array_equal(f["image"][()], image[:, 1])  # bit for bit
    result = _run("reconstruct", mrd, "-o", tmp_path / "one.h5", "--contrast", "1", "--slice", "2", *FAST)
    with h5py.File(tmp_path / "one.h5") as f:
        assert f["image"].shape == (32, 32) and list(f.attrs["axes"]) == ["x", "y"]
        np.testing.assert_array_equal(f["image"][()], image[2, 1])
    result = _run("reconstruct", mrd, "-o", tmp_path / "none.h5", "--contrast", "5", *FAST)
    assert result.exit_code == 1 and "Traceback" not in result.output
    message = result.output.strip().splitlines()
    assert len(message) == 1 and message[0].startswith("Error: ")
    assert "no data for contrast 5 (file holds slices [0, 1, 2], contrasts [0, 1], phases [0]" in message[0]
    assert not (tmp_path / "none.h5").exists()


def test_nifti_of_slices_at_one_position_is_one_file_per_slice_with_contrasts_on_the_4th_axis(mrd, tmp_path):
    nibabel = pytest.importorskip("nibabel")
    out = tmp_path / "sc.nii"
    result = _run("reconstruct", mrd, "-o", out, *FAST)
    assert result.exit_code == 0, result.output
    assert not out.exists()  # the slices share one position: no volume
    _run("reconstruct", mrd, "-o", tmp_path / "sc.h5", *FAST)
    with h5py.File(tmp_path / "sc.h5") as f:
        image = f["image"][()]
    for s in range(3):
        nii = nibabel.load(tmp_path / f"sc_slice{s}.nii")
        assert nii.shape == (32, 32, 1, 2)
        data = np.asarray(nii.dataobj)
        for c in range(2):
            np.testing.assert_array_equal(data[:, :, 0, c], np.abs(image[s, c]).astype(np.float32))
        assert nii.header["descrip"].item().decode() == "mri-recon magnitude; axis 4 = contrast(2)"
        [extension] = nii.header.extensions
        assert json.loads(extension.get_content()) == {"axis_4": ["contrast"], "axis_4_shape": [2], "order": "C"}
