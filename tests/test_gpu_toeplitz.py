"""The fused GPU CG-SENSE operator equals the NumPy normal operator, for every coil batching; and its kernels
(toeplitz.cu built for the host, no GPU needed) behind FusedSenseNormal's and FusedSeriesNormal's own launches."""

from __future__ import annotations

import ctypes

import host_kernels as host
import numpy as np
import pytest

from mri_recon.arrays.backend import cupy_module
from mri_recon.operators.gpu import fft as gpu_fft
from mri_recon.operators.normal import gpu_toeplitz
from mri_recon.operators.normal.toeplitz import kernel_spectrum, normal_operator


def _crandn(rng, *shape):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)


@pytest.mark.gpu
@pytest.mark.parametrize("matrix", [(16, 16), (13, 7), (6, 5, 4), (96, 128), (12, 20, 64)],
                         ids=lambda m: "x".join(map(str, m)))
@pytest.mark.parametrize("coil_batch", [None, 1, 2], ids=["all", "one", "two"])
@pytest.mark.parametrize("passes", ["rows", "grid"])
def test_fused_sense_operator_matches_numpy(rng, monkeypatch, matrix, coil_batch, passes):
    """Both pass kinds (rows where the last axis allows, 3-D included) against the NumPy operator."""
    monkeypatch.setattr(gpu_toeplitz, "ROW_PASS_DIMS", (2, 3) if passes == "rows" else ())
    cupy = cupy_module()
    psf = _crandn(rng, *(2 * n for n in matrix))
    maps = _crandn(rng, 3, *matrix)
    x = _crandn(rng, *matrix)
    ref = normal_operator(kernel_spectrum(psf), coil_maps=maps, lam=0.3)(x)
    op = normal_operator(kernel_spectrum(cupy.asarray(psf)), coil_maps=cupy.asarray(maps), lam=0.3,
                         coil_batch=coil_batch)
    first = cupy.asnumpy(op(cupy.asarray(x)))
    second = cupy.asnumpy(op(cupy.asarray(x)))  # the reused work buffer must not leak between calls
    for got in (first, second):
        assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 1e-5


@pytest.fixture(scope="module")
def host_toeplitz(tmp_path_factory):
    """``toeplitz.cu`` built for the host (tests/host/toeplitz_host.cpp): ``get_kernel``'s twin."""
    library = host.build("toeplitz_host.cpp", tmp_path_factory.mktemp("toeplitz_host") / "toeplitz.so")

    def get_kernel(filename, name, defines, device):
        assert filename == "toeplitz.cu" and name.startswith("mri_recon_toeplitz_")
        function = getattr(library, "emu_" + name.removeprefix("mri_recon_toeplitz_"))

        def launch(grid, block, args, shared_mem=0):
            if name == "mri_recon_toeplitz_rows":  # the launch's shared memory must hold what the kernel indexes
                p, rows = 1 << int(args[-2]), int(args[-1])
                padded = lambda count: count + (count >> 3)  # noqa: E731  rows_pad
                assert shared_mem >= 8 * (padded(p) + 2 * padded(rows * p)) + 4 * rows
            blocks_y = grid[1] if len(grid) > 1 else 1
            function(ctypes.c_uint(grid[0]), ctypes.c_uint(blocks_y), ctypes.c_uint(block[0]),
                     *(host.argument(a) for a in args))

        return launch

    return get_kernel


@pytest.fixture(params=["rows", "grid"])
def host_gpu(request, monkeypatch, host_toeplitz):
    """The fused operators on NumPy arrays with toeplitz.cu built for the host and NumPy's FFTs for cuFFT's:
    the row passes where the grid allows them, 3-D included ("rows"), or the whole-grid passes everywhere
    ("grid")."""
    monkeypatch.setattr(gpu_toeplitz, "cupy_module", lambda: np)
    monkeypatch.setattr(gpu_toeplitz, "get_kernel", host_toeplitz)
    monkeypatch.setattr(gpu_toeplitz, "fft_plan", host.HostPlan)
    monkeypatch.setattr(gpu_fft, "fft_plan", host.HostPlan)
    monkeypatch.setattr(gpu_toeplitz, "ROW_PASS_DIMS", (2, 3) if request.param == "rows" else ())
    return request.param


def _expected_passes(host_gpu, op):
    """The pass kind the operator took: rows where asked for and the grid's last axis allows."""
    grid = op._grid
    rows = host_gpu == "rows" and gpu_toeplitz.row_passes_fit(op.ishape[-len(grid):], grid, 64)
    assert isinstance(op._passes, gpu_toeplitz.RowPasses if rows else gpu_toeplitz.GridPasses)


HOST_MATRICES = [(16, 16), (13, 7), (12, 4), (6, 5, 4), (5, 3, 8)]
"""Even, odd and power-of-two last axes (the row passes take 2x grids whose last axis is a power of two)."""


@pytest.mark.parametrize("matrix", HOST_MATRICES, ids=lambda m: "x".join(map(str, m)))
@pytest.mark.parametrize("coil_batch", [None, 1, 2], ids=["all", "one", "two"])
def test_kernels_run_on_the_host_are_the_sense_normal(rng, host_gpu, matrix, coil_batch):
    """toeplitz.cu itself (threads run in turn, or as a block's threads at its barriers) behind
    FusedSenseNormal's launches, NumPy FFTs for cuFFT's: every element written (poisoned buffers), equal to the
    NumPy normal operator, twice in a row."""
    psf = _crandn(rng, *(2 * n for n in matrix))
    maps, x = _crandn(rng, 3, *matrix), _crandn(rng, *matrix)
    spectrum = kernel_spectrum(psf)
    ref = normal_operator(spectrum, coil_maps=maps, lam=0.3)(x)
    op = gpu_toeplitz.FusedSenseNormal(spectrum.astype(np.complex64), maps.view(host.HostMaps), 0.3, coil_batch)
    _expected_passes(host_gpu, op)
    for _ in range(2):  # the reused work buffer must not leak between applications
        op._passes._work[...] = np.nan
        out = np.full(matrix, np.nan, np.complex64)
        op.apply_into(x, out)
        assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-5


@pytest.mark.parametrize("matrix", [(12, 8), (6, 5, 4)], ids=lambda m: "x".join(map(str, m)))
def test_kernels_run_on_the_host_on_the_image_grid(rng, host_gpu, matrix):
    """A Cartesian scan's spectrum on the image grid itself (no padding, circular): both pass kinds equal the
    NumPy operator ``sum_c conj(S_c) IFFT(h FFT(S_c x)) + lam x`` (IFFT with its 1/N)."""
    spectrum = (rng.uniform(size=matrix) * np.prod(matrix)).astype(np.complex64)
    maps, x = _crandn(rng, 3, *matrix), _crandn(rng, *matrix)
    ref = normal_operator(spectrum, coil_maps=maps, lam=0.2)(x)
    direct = sum(np.conj(m) * np.fft.ifftn(spectrum * np.fft.fftn(m * x)) for m in maps)
    assert np.linalg.norm(ref - direct - 0.2 * x) / np.linalg.norm(ref) < 1e-5
    op = gpu_toeplitz.FusedSenseNormal(spectrum, maps.view(host.HostMaps), 0.2, None)
    _expected_passes(host_gpu, op)
    op._passes._work[...] = np.nan
    out = np.full(matrix, np.nan, np.complex64)
    op.apply_into(x, out)
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-5


@pytest.mark.parametrize("matrix", [(12, 10), (12, 4), (5, 4, 3), (5, 3, 4)], ids=lambda m: "x".join(map(str, m)))
@pytest.mark.parametrize("frame_batch", [None, 1, 2], ids=["all", "one", "two"])
def test_kernels_run_on_the_host_are_the_series_normal(rng, host_gpu, matrix, frame_batch):
    """The same kernels behind FusedSeriesNormal's launches (every coil of a batch of frames, each frame its own
    spectrum; the last batch shorter): equal to the frames' NumPy normal operators, every element written."""
    from mri_recon.solvers.temporal import BatchedSeriesNormal

    frames = 3
    spectra = np.stack([kernel_spectrum(_crandn(rng, *(2 * n for n in matrix))) for _ in range(frames)])
    maps, x = _crandn(rng, 3, *matrix), _crandn(rng, frames, *matrix)
    ref = BatchedSeriesNormal(spectra, maps, lam=0.3)(x)
    per_frame = np.stack([normal_operator(spectra[t], coil_maps=maps, lam=0.3)(x[t]) for t in range(frames)])
    assert np.linalg.norm(ref - per_frame) / np.linalg.norm(per_frame) < 1e-5
    op = gpu_toeplitz.FusedSeriesNormal(spectra.astype(np.complex64), maps.view(host.HostMaps), 0.3, frame_batch)
    _expected_passes(host_gpu, op)
    for _ in range(2):  # the reused work buffer must not leak between applications
        op._passes._work[...] = np.nan
        out = np.full(x.shape, np.nan, np.complex64)
        op.apply_into(x, out)
        assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-5


@pytest.mark.parametrize("p", [2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048])
def test_rows_kernel_is_the_padded_filter_on_every_radix(rng, host_gpu, p):
    """mri_recon_toeplitz_rows alone, every transform length it takes (radix-8 stages and a radix-4 or -2 last
    one), rows of n = p / 2 + 1 points, several tiles of rows over two blocks, the last tile short: each row
    zero-padded to p, transformed, multiplied by its frame's spectrum row, transformed back (both unnormalized)
    and cut to n, as NumPy's FFTs do it."""
    if host_gpu == "grid":
        pytest.skip("the rows kernel alone")
    n, planes, coils, frames = p // 2 + 1, 37, 2, 2
    grids = coils * frames
    work = _crandn(rng, planes, grids, n)
    spectra = _crandn(rng, frames, planes, p)
    full = np.zeros((planes, grids, p), np.complex128)
    full[..., :n] = work
    frame_of = np.arange(grids) // coils
    expected = np.fft.ifft(np.fft.fft(full, axis=-1) * spectra[frame_of].transpose(1, 0, 2), axis=-1)[..., :n] * p
    rows_per_block = gpu_toeplitz.rows_per_block(p)
    blocks = min(2, -(-planes * grids // rows_per_block))
    kernel = gpu_toeplitz.rows_kernel(None)  # 2048 points: beyond the 48 KiB a launch gets without opting in
    kernel((blocks,), (64,), (work, spectra, np.int32(coils), np.int32(grids), np.int32(planes), np.int32(n),
                             np.int32(p.bit_length() - 1), np.int32(rows_per_block)),
           shared_mem=gpu_toeplitz.rows_shared_bytes(p))
    assert np.linalg.norm(work - expected) / np.linalg.norm(expected) < 2e-6


@pytest.mark.gpu
@pytest.mark.parametrize("p", [1024, 2048])
def test_rows_kernel_on_the_gpu_takes_the_longest_rows(rng, p):
    """On a GPU the longest rows need more dynamic shared memory than a launch gets without opting in
    (:func:`rows_kernel` opts in): each row padded, filtered and cut as NumPy's FFTs do it."""
    from mri_recon.arrays.backend import cupy_module, resolve_device

    cupy = cupy_module()
    n, planes, coils, frames = p // 2, 5, 2, 2
    grids = coils * frames
    work, spectra = _crandn(rng, planes, grids, n), _crandn(rng, frames, planes, p)
    full = np.zeros((planes, grids, p), np.complex128)
    full[..., :n] = work
    expected = np.fft.ifft(np.fft.fft(full, axis=-1) * spectra[np.arange(grids) // coils].transpose(1, 0, 2),
                           axis=-1)[..., :n] * p
    rows_per_block = gpu_toeplitz.rows_per_block(p)
    on_gpu = cupy.asarray(work)
    gpu_toeplitz.rows_kernel(resolve_device("gpu"))(
        (3,), (256,), (on_gpu, cupy.asarray(spectra), np.int32(coils), np.int32(grids), np.int32(planes), np.int32(n),
                       np.int32(p.bit_length() - 1), np.int32(rows_per_block)),
        shared_mem=gpu_toeplitz.rows_shared_bytes(p))
    got = cupy.asnumpy(on_gpu)
    assert np.linalg.norm(got - expected) / np.linalg.norm(expected) < 2e-6


def test_rows_limits_are_the_kernels():
    """The launcher's ROWS_MAX_P, ROWS_POINTS and ROWS_MAX_ROWS are toeplitz.cu's (they size the shared memory),
    and the largest rows fit the shared memory a Hopper block may opt in to (227 KiB), the others the 48 KiB a
    launch gets without opting in."""
    import re

    from mri_recon.kernels import KERNEL_DIR

    text = (KERNEL_DIR / "toeplitz.cu").read_text()
    for name in ("ROWS_MAX_P", "ROWS_POINTS", "ROWS_MAX_ROWS"):
        assert int(re.search(rf"#define {name} (\d+)", text).group(1)) == getattr(gpu_toeplitz, name)
    assert all(gpu_toeplitz.rows_shared_bytes(2 ** k) <= 48 * 1024 for k in range(1, 11))
    assert gpu_toeplitz.SHARED_DEFAULT < gpu_toeplitz.rows_shared_bytes(gpu_toeplitz.ROWS_MAX_P) <= 227 * 1024


@pytest.mark.parametrize("bad", ["dtype", "layout", "frames", "aliased"])
def test_series_normal_refuses_arrays_its_kernels_cannot_index(rng, host_gpu, bad):
    """The kernels read raw memory: a complex128, a strided or a wrongly sized array is refused, not misread, and
    so is an output that is the input."""
    matrix, frames = (6, 4), 3
    spectra = np.stack([kernel_spectrum(_crandn(rng, 12, 8)) for _ in range(frames)]).astype(np.complex64)
    op = gpu_toeplitz.FusedSeriesNormal(spectra, _crandn(rng, 2, *matrix).view(host.HostMaps), 0.0)
    x = {"dtype": _crandn(rng, frames, *matrix).astype(np.complex128),
         "layout": _crandn(rng, frames, matrix[1], matrix[0]).astype(np.complex64).transpose(0, 2, 1),
         "frames": _crandn(rng, frames + 1, *matrix).astype(np.complex64),
         "aliased": _crandn(rng, frames, *matrix)}[bad]
    out = x if bad == "aliased" else np.empty((frames, *matrix), np.complex64)
    with pytest.raises(ValueError, match="C-contiguous complex64|over its input"):
        op.apply_into(x, out)


def test_whole_grid_passes_refuse_more_grids_than_a_launch_takes(rng, host_gpu, monkeypatch):
    """gridDim.y is the grid of a pass: a pass of more grids than it takes is refused by name, not misrun."""
    if host_gpu == "rows":
        pytest.skip("the whole-grid passes' limit")
    monkeypatch.setattr(gpu_toeplitz, "MAX_GRIDS_Y", 4)
    spectra = np.stack([kernel_spectrum(_crandn(rng, 12, 8)) for _ in range(3)]).astype(np.complex64)
    with pytest.raises(ValueError, match="6 grids in one pass.*smaller coil or frame batch"):
        gpu_toeplitz.FusedSeriesNormal(spectra, _crandn(rng, 2, 6, 4).view(host.HostMaps), 0.0)
    batched = gpu_toeplitz.FusedSeriesNormal(spectra, _crandn(rng, 2, 6, 4).view(host.HostMaps), 0.0, 2)
    assert batched._passes.work(4).shape[0] == 4  # two frames of two coils a pass: within the limit


def test_grids_beyond_the_32_bit_positions_are_refused_by_name(rng, host_gpu, monkeypatch):
    """A grid with more points than the 32-bit kernels index (one grid-stride step below 2^31) is refused with
    the reason, and the row passes leave such a pass to the whole-grid passes' check."""
    monkeypatch.setattr(gpu_toeplitz, "INDEX_LIMIT", 90)
    spectrum = kernel_spectrum(_crandn(rng, 12, 8)).astype(np.complex64)
    assert not gpu_toeplitz.row_passes_fit((6, 4), (12, 8), 3)
    with pytest.raises(ValueError, match="grid of 96 points is beyond the fused kernels. 32-bit indices"):
        gpu_toeplitz.FusedSenseNormal(spectrum, _crandn(rng, 3, 6, 4).view(host.HostMaps), 0.0, None)
