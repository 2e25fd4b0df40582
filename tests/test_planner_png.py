"""Memory planner arithmetic and the PNG preview writer."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest

from mri_recon.errors import ResourceError
from mri_recon.io.png import encode_png, preview
from mri_recon.planner import human_bytes, plan


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


def test_preview_scales_magnitude_and_shows_3d_as_three_slices(rng):
    image = rng.standard_normal((20, 10)) + 1j * rng.standard_normal((20, 10))
    pix = preview(image)
    assert pix.shape == (10, 20) and pix.dtype == np.uint8 and pix.max() == 255
    assert preview(np.ones((4, 5, 6))).shape == (6, 4 + 4 + 5)


def test_preview_refuses_other_ranks():
    with pytest.raises(ValueError, match=r"preview needs a 2-D or 3-D image, got shape \(4,\)"):
        preview(np.ones(4))


def test_cpu_plan_counts_finufft_fine_grids():
    from mri_recon.operators.finufft import fine_grid_shape

    # 256^3, one coil: the PSF stage holds FINUFFT's complex128 fine grid of the 512^3 grid (640^3 at
    # upsampfac 1.25) and the complex128 PSF; the old count (3.9 GiB) missed both.
    m = 4_000_000
    p = plan((256, 256, 256), 1, m, sense=True, iterations=30, available_bytes=None, gpu=False, workers=2)
    fine = np.prod(fine_grid_shape((512, 512, 512), 1e-7)) * 16
    assert fine_grid_shape((512, 512, 512), 1e-7) == (640, 640, 640)
    assert max(p.stages, key=p.stages.get) == "psf" and p.peak_bytes == p.stages["psf"]
    assert p.peak_bytes > fine + 512**3 * 16 and p.peak_bytes / 2**30 > 6.0
    exact = plan((256, 256, 256), 1, m, sense=True, iterations=30, available_bytes=None, gpu=False,
                 method="exact")
    assert exact.stages["psf"] < p.stages["psf"]
    with pytest.raises(ResourceError, match=r"needs at least 6\.\d GiB"):
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
    from mri_recon.operators.finufft import fine_grid_shape, upsampfac

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
