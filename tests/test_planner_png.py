"""Memory planner arithmetic and the PNG preview writer."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest

from mri_recon.errors import OutputError, ResourceError
from mri_recon.io.png import encode_png, montage, preview, write_png
from mri_recon.planning.planner import human_bytes, plan


def test_plan_counts_arrays_and_batches_coils_to_fit():
    full = plan((64, 64), 8, 10000, sense=True, iterations=30, available_bytes=None, gpu=True)
    n_vox, grid2 = 64 * 64, 4 * 64 * 64
    expected_fixed = (8 * 10000 * 8 + 10000 * 3 * 4 + 8 * n_vox * 8 + grid2 * 8 + 5 * n_vox * 8 + 8 * n_vox * 8)
    assert full.fixed_bytes == expected_fixed and full.per_coil_bytes == 2 * grid2 * 8
    assert full.coil_batch == 8 and not full.batched
    tight = int((full.fixed_bytes + 3 * full.per_coil_bytes) / 0.9) + 1
    small = plan((64, 64), 8, 10000, sense=True, iterations=30, available_bytes=tight, gpu=True)
    assert small.coil_batch == 3 and small.batched and small.peak_bytes <= tight
    forced = plan((64, 64), 8, 10000, sense=True, iterations=30, available_bytes=None, gpu=False, max_coil_batch=2)
    assert forced.coil_batch == 2


def test_plan_refuses_what_cannot_fit_and_says_how_large():
    with pytest.raises(ResourceError, match=r"needs at least .* GiB .* but 1.0 MiB is available"):
        plan((512, 512, 512), 8, 10**6, sense=True, iterations=30, available_bytes=2**20, gpu=True)


def test_human_bytes():
    assert human_bytes(512) == "512 B" and human_bytes(3 * 2**30) == "3.0 GiB"


def _decode(png: bytes) -> np.ndarray:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, size = 8, b"", None
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos:pos + 4])
        tag, data = png[pos + 4:pos + 8], png[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", png[pos + 8 + length:pos + 12 + length])
        assert crc == zlib.crc32(tag + data) & 0xFFFFFFFF
        if tag == b"IHDR":
            size = struct.unpack(">II", data[:8])
        elif tag == b"IDAT":
            idat += data
        pos += 12 + length
    width, height = size
    rows = np.frombuffer(zlib.decompress(idat), np.uint8).reshape(height, width + 1)
    assert np.all(rows[:, 0] == 0)
    return rows[:, 1:]


def test_png_round_trip(rng):
    pixels = rng.integers(0, 256, size=(7, 13), dtype=np.uint8)
    np.testing.assert_array_equal(_decode(encode_png(pixels)), pixels)


def test_the_preview_shows_an_array_as_imshow_and_bart_toimg_do(rng, tmp_path):
    """[0, 0] top-left, axis 0 down the rows, axis 1 across the columns, on a non-square image."""
    image = rng.uniform(0.0, 0.2, size=(5, 8))
    image[0, 0], image[3, 0], image[0, 6] = 1.0, 0.6, 0.3  # bright corner, marks down axis 0 and across axis 1
    write_png(tmp_path / "p.png", image)
    shown = _decode((tmp_path / "p.png").read_bytes())
    assert shown.shape == (5, 8) and shown[0, 0] == 255 and shown.max() == 255
    assert np.argmax(shown[:, 0] * (np.arange(5) > 0)) == 3 and np.argmax(shown[0, 1:]) + 1 == 6
    # BART's toimg: PNG row i, column j is data[j * h + i] of the column-major (cfl) buffer of the same array
    h, w = image.shape
    data = image.ravel(order="F")
    toimg = np.array([[data[j * h + i] for j in range(w)] for i in range(h)])
    np.testing.assert_array_equal(shown, preview(toimg))


def test_a_3d_montage_keeps_each_slice_in_array_order(tmp_path):
    volume = np.zeros((4, 6, 2))
    volume[0, 0, 0], volume[2, 0, 0], volume[0, 5, 1] = 1.0, 0.5, 0.75
    shown, _ = montage(volume)  # 2 slices across axis 2, side by side: each 4 rows (axis 0) by 6 columns
    assert shown.shape == (4, 12)
    assert shown[0, 0] == 255 and 0 < shown[2, 0] < shown[0, 6 + 5] < 255  # slice 1 begins at column 6
    assert np.count_nonzero(shown) == 3


def test_preview_scales_magnitude_and_shows_3d_as_a_montage_of_its_slices(rng):
    image = rng.standard_normal((20, 10)) + 1j * rng.standard_normal((20, 10))
    pix = preview(image)
    assert pix.shape == (20, 10) and pix.dtype == np.uint8 and pix.max() == 255
    # 6 slices of 4 x 5 (shown 4 rows by 5 columns) in a grid of 2 rows and 3 columns, row by row
    volume = np.stack([np.full((4, 5), k + 1.0) for k in range(6)], axis=-1)
    pix, what = montage(volume)
    assert pix.shape == (2 * 4, 3 * 5) and what == "montage of the 6 slices along axis 2 (2 x 3 grid, row by row)"
    tiles = [pix[r * 4:(r + 1) * 4, c * 5:(c + 1) * 5] for r in range(2) for c in range(3)]
    np.testing.assert_array_equal([t.min() for t in tiles], [t.max() for t in tiles])
    np.testing.assert_array_equal([t[0, 0] for t in tiles], np.round(np.arange(1, 7) / 6 * 255))


def test_montage_of_stacks_fills_a_grid_and_leaves_unused_tiles_black():
    stack = np.ones((3, 4, 5))
    pix, what = montage(stack, stacked=True)
    assert pix.shape == (2 * 4, 2 * 5) and what == "montage of the 3 images of the stack (2 x 2 grid, row by row)"
    assert np.all(pix[4:, 5:] == 0) and np.all(pix[:4] == 255)
    pix, what = montage(np.ones((2, 4, 5, 6)), stacked=True)
    assert pix.shape == (4, 2 * 5) and "slice 3 of axis 2 of each" in what
    with pytest.raises(ValueError, match=r"preview needs a stack of 2-D or 3-D images, got shape \(4, 5\)"):
        montage(np.ones((4, 5)), stacked=True)


def test_png_names_other_than_png_are_refused(tmp_path):
    with pytest.raises(OutputError, match=r"out\.jpg: the preview is a PNG image; name it with the extension \.png"):
        write_png(tmp_path / "out.jpg", np.ones((4, 4)))
    assert not (tmp_path / "out.jpg").exists()
    assert write_png(tmp_path / "out.PNG", np.ones((4, 4))) == "the image"


def test_preview_refuses_other_ranks():
    with pytest.raises(ValueError, match=r"preview needs a 2-D or 3-D image, got shape \(4,\)"):
        preview(np.ones(4))


def test_cpu_plan_counts_finufft_fine_grids():
    from mri_recon.operators.engines.finufft import fine_grid_shape

    # 256^3, one coil: the PSF stage holds FINUFFT's complex128 fine grid of the 512^3 grid (640^3 at
    # upsampfac 1.25) and the complex128 PSF; the old count (3.9 GiB) missed both. Without the trajectory,
    # the subgrids FINUFFT's spreading fills beside its fine grid are counted as covering all of it.
    m = 4_000_000
    p = plan((256, 256, 256), 1, m, sense=True, iterations=30, available_bytes=None, gpu=False, workers=2)
    fine = np.prod(fine_grid_shape((512, 512, 512), 1e-7)) * 16
    assert fine_grid_shape((512, 512, 512), 1e-7) == (640, 640, 640)
    assert max(p.stages, key=p.stages.get) == "psf" and p.peak_bytes == p.stages["psf"]
    assert p.peak_bytes > fine + 512**3 * 16 and p.peak_bytes / 2**30 > 6.0
    exact = plan((256, 256, 256), 1, m, sense=True, iterations=30, available_bytes=None, gpu=False,
                 method="exact")
    assert exact.stages["psf"] < p.stages["psf"]
    with pytest.raises(ResourceError, match=r"needs at least 8\.\d GiB"):
        plan((256, 256, 256), 1, m, sense=True, iterations=30, available_bytes=5 * 2**30, gpu=False)
    with pytest.raises(ValueError, match="unknown method 'fast'"):
        plan((8, 8), 1, 10, sense=True, iterations=1, available_bytes=None, gpu=False, method="fast")


@pytest.mark.parametrize("matrix", [(8, 8), (24, 30), (100, 100), (31, 33), (17, 17, 17), (64, 80, 24)])
def test_fine_grid_shape_is_finufft_s(matrix):
    """The planner's fine grid equals the one FINUFFT allocates (read from its debug output)."""
    import os
    import re
    import tempfile

    finufft = pytest.importorskip("finufft")
    from mri_recon.operators.engines.finufft import fine_grid_shape, upsampfac

    x = [np.linspace(-3, 3, 50) for _ in matrix]
    fn = {2: finufft.nufft2d1, 3: finufft.nufft3d1}[len(matrix)]
    with tempfile.TemporaryFile() as log:
        saved = os.dup(1)
        os.dup2(log.fileno(), 1)
        try:
            fn(*x, np.ones(50, complex), n_modes=matrix, eps=1e-7, nthreads=1, debug=1, upsampfac=upsampfac(1e-7))
        finally:
            os.dup2(saved, 1)
            os.close(saved)
        log.seek(0)
        text = log.read().decode()
    found = re.search(r"\(nf1,nf2,nf3\)=\((\d+),(\d+),(\d+)\)", text)
    assert found is not None, text
    # FINUFFT reports its axes fastest first (Fortran order), ours are C order
    assert tuple(int(v) for v in found.groups()[: len(matrix)])[::-1] == fine_grid_shape(matrix, 1e-7)


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_a_3d_montage_across_a_chosen_axis_shows_each_plane(rng, axis):
    volume = rng.random((3, 4, 5))
    pix, what = montage(volume, axis=axis)
    assert what.startswith(f"montage of the {volume.shape[axis]} slices along axis {axis}")
    rest = [n for d, n in enumerate(volume.shape) if d != axis]  # tiles: rows = the earlier axis
    columns = int(np.ceil(np.sqrt(volume.shape[axis])))
    assert pix.max() == 255
    for k in range(volume.shape[axis]):
        r, c = divmod(k, columns)
        tile = pix[r * rest[0]:(r + 1) * rest[0], c * rest[1]:(c + 1) * rest[1]].astype(float)
        plane = np.take(volume, k, axis=axis)
        # the tile is the plane, up to the montage's one brightness scale (and 8-bit rounding)
        count = volume.shape[axis]
        unused = np.zeros((int(np.ceil(count / columns)) * columns - count) * rest[0] * rest[1])
        scale = np.percentile(np.concatenate([volume.ravel(), unused]), 99.5)  # black tiles count too
        np.testing.assert_allclose(tile, np.round(np.clip(plane / scale, 0, 1) * 255), atol=1)
    stack_pix, stack_what = montage(np.stack([volume, 2 * volume]), stacked=True, axis=axis)
    assert f"slice {volume.shape[axis] // 2} of axis {axis} of each" in stack_what
    with pytest.raises(OutputError, match="preview axis must be 0, 1 or 2"):
        montage(volume, axis=3)
