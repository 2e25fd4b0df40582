"""GPU F^H d, F and PSF kernels against the float64 oracle, plus their host-side structures (CPU)."""

from __future__ import annotations

import math

import gpu_ladder as ladder
import numpy as np
import pytest
from helpers import adjoint_gap, poison_empty, random_problem, relative

from mri_recon.arrays.backend import cupy_module, gpu_available, gpu_count
from mri_recon.checks.grid import voxel_positions
from mri_recon.errors import DeviceError, InvalidDataError, ResourceError, SchemaError
from mri_recon.kernels.configs import adjoint_defines
from mri_recon.operators.engines import gpu_exact as gpu_fhd
from mri_recon.operators.engines import gpu_frames
from mri_recon.operators.engines import gpu_layout as layout
from mri_recon.operators.engines.nudft import nudft_adjoint, nudft_forward

TOL = 2e-5  # the product's accuracy requirement (relative L2 error against float64)
FAST = ("packed", "mirror", "multi", "recur")
MATRICES = [(6, 5), (4, 3, 5), (1, 1), (7, 1), (2, 1, 3), (9, 7, 2), (5, 5), (3, 7, 5), (33, 30), (17, 16, 15)]
ODD = [((31, 31), 2, 300), ((33, 30), 1, 250), ((17, 16, 15), 1, 200), ((15, 17, 9), 3, 150), ((5, 3, 7), 9, 60)]






# ----------------------------------------------------------------------------------------------------
# Host-side structures (no GPU)


def twice_centre(n):
    return 2 * (n // 2)


def mirror_line(matrix, jx, jy):
    """Flat line index of the mirror (2 cx - jx, 2 cy - jy) of a line."""
    if len(matrix) == 3:
        return (twice_centre(matrix[0]) - jx) * matrix[1] + twice_centre(matrix[1]) - jy
    return twice_centre(matrix[0]) - jx


def covered_voxels(matrix, paired):
    """Voxels the F^H d threads write, by the position rule of fhd.cu (own voxel p < L; mirror voxel 2c - p
    of the partner line when it lies in [0, L))."""
    size, c2 = matrix[-1], twice_centre(matrix[-1])
    written = []
    for jx, jy, flag in layout.line_list(matrix, paired):
        for p in range(layout.line_positions(matrix, paired)):
            if p < size:
                written.append((jx * matrix[1] + jy) * size + p if len(matrix) == 3 else jx * size + p)
            if flag and p <= c2 and c2 - p < size:
                written.append(mirror_line(matrix, jx, jy) * size + c2 - p)
    return np.sort(np.asarray(written))


@pytest.mark.parametrize("matrix", MATRICES + [(8, 8), (5, 6, 4), (7, 7), (7, 5, 3)], ids=str)
@pytest.mark.parametrize("paired", [False, True])
def test_line_list_covers_every_voxel_once(matrix, paired):
    np.testing.assert_array_equal(covered_voxels(matrix, paired), np.arange(math.prod(matrix)))


@pytest.mark.parametrize("matrix", MATRICES, ids=str)
@pytest.mark.parametrize("run", [1, 3, 8])
def test_forward_runs_cover_every_voxel_once(matrix, run):
    headers, own, mirror = layout.forward_runs(matrix, run)
    nvox = math.prod(matrix)
    assert headers.shape == (own.shape[0], 4) and own.shape == mirror.shape and own.shape[1] == run
    both = np.concatenate([own.ravel(), mirror.ravel()])
    np.testing.assert_array_equal(np.sort(both[both < nvox]), np.arange(nvox))
    # each header's Q is 2 j - 2 (N // 2) of the run's first own voxel (or, for positions past the line, 2 p - 2c)
    first = own[:, 0]
    valid = first < nvox
    j = np.stack(np.unravel_index(first[valid], matrix), axis=1)
    q = 2 * j - 2 * (np.asarray(matrix) // 2)
    np.testing.assert_array_equal(headers[valid][:, :len(matrix)], q)


@pytest.mark.parametrize("n, paired_lines", [(5, 3), (6, 4), (7, 4), (1, 1)])
def test_odd_axes_pair_every_line(n, paired_lines):
    """2-D lines: an odd leading axis pairs every line but its centre; an even one also leaves line 0 alone."""
    lines = layout.line_list((n, 4), True)
    assert len(lines) == paired_lines
    flags = {int(jx): int(flag) for jx, _, flag in lines}
    assert flags[n // 2] == 0 and (n % 2 == 1 or flags[0] == 0)
    assert layout.line_positions((4, n), True) == 2 * (n // 2) + 1

@pytest.mark.parametrize("matrix", [(6, 5), (4, 3, 5), (256, 256), (64, 64, 64), (255, 257), (33, 31, 29)], ids=str)
def test_fixed_point_turns_are_the_phase(rng, matrix):
    traj, _ = random_problem(rng, matrix, 1, 200, reach=1.0)
    kfix = layout.fixed_point_turns(traj, matrix).astype(np.uint64)
    assert kfix.dtype == np.uint64 and kfix.shape == traj.shape
    j = np.stack([rng.integers(0, n, 50) for n in matrix], axis=1)
    q = (2 * j - 2 * (np.asarray(matrix) // 2)) % 2**32  # two's complement of Q = 2j - 2c
    turns = (kfix @ q.T.astype(np.uint64)) % 2**32 / 2.0**32
    exact = traj.astype(np.float64) @ ((j - np.asarray(matrix) // 2) / np.asarray(matrix)).T
    gap = (turns - exact) % 1.0
    assert np.max(np.minimum(gap, 1 - gap)) < 1e-8 * max(matrix)


def emulate_fast_adjoint(data, traj, matrix, paired, vox):
    """NumPy replica of fhd.cu's work assignment: fixed-point phases, U and W sums, mirror pairs."""
    kfix = layout.fixed_point_turns(traj, matrix).astype(np.uint64)
    size, dim, c2 = matrix[-1], len(matrix), twice_centre(matrix[-1])
    per_line = -(-layout.line_positions(matrix, paired) // vox)
    out = np.full((data.shape[0], math.prod(matrix)), np.nan, dtype=np.complex128)
    for jx, jy, flag in layout.line_list(matrix, paired):
        for p in range(per_line * vox):
            q = ([2 * jx - twice_centre(matrix[0])] + ([2 * jy - twice_centre(matrix[1])] if dim == 3 else [])
                 + [2 * p - c2])
            turns = sum(kfix[:, d] * np.uint64(int(q[d]) % 2**32) for d in range(dim)) % 2**32
            phase = np.exp(2j * np.pi * turns / 2.0**32)
            u, w = data @ phase.real, data @ phase.imag
            line = jx * matrix[1] + jy if dim == 3 else jx
            if p < size:
                out[:, line * size + p] = u + 1j * w
            if flag and p <= c2 and c2 - p < size:
                out[:, mirror_line(matrix, jx, jy) * size + c2 - p] = u - 1j * w
    return out.reshape(-1, *matrix)


@pytest.mark.parametrize("matrix", [(6, 5), (4, 3, 5), (1, 1), (2, 1, 3), (5, 7), (7, 5, 3), (9, 4, 5)], ids=str)
@pytest.mark.parametrize("paired, vox", [(False, 1), (True, 1), (True, 3)])
def test_emulated_fast_adjoint_matches_oracle(rng, matrix, paired, vox):
    traj, data = random_problem(rng, matrix, 2, 40, reach=1.0)
    out = emulate_fast_adjoint(data.astype(np.complex128), traj, matrix, paired, vox)
    assert relative(out, nudft_adjoint(data, traj, matrix)) < 1e-7


def test_coil_groups_split_evenly():
    assert layout.coil_groups(1) == [(0, 1)]
    assert layout.coil_groups(8) == [(0, 8)]
    assert layout.coil_groups(9) == [(0, 5), (5, 4)]
    groups = layout.coil_groups(32)
    assert [size for _, size in groups] == [8, 8, 8, 8] and groups[-1][0] == 24


def test_grid_slices_fill_the_last_wave():
    def fill(blocks, slots):
        return blocks / (-(-blocks // slots) * slots)

    assert layout.grid_slices(10_000, 512, 48, 132, 8) == 1
    # 512 threads of 107 registers: one block per SM, so 133 blocks on 132 SMs leave the second wave empty
    fills = [fill(133 * count, 132) for count in range(1, 9)]
    assert layout.grid_slices(133, 512, 107, 132, 8) == 1 + int(np.argmax(fills))
    # 263 blocks of 48 registers: two per SM fill two waves at 99.6 %
    assert layout.grid_slices(263, 512, 48, 132, 8) == 1
    assert layout.grid_slices(1, 512, 255, 132, 1) == 1


def test_unknown_variant_is_rejected():
    with pytest.raises(InvalidDataError, match="unknown F\\^H d variant 'fast'"):
        ladder.fhd_ladder(None, None, (4, 4), variant="fast")
    with pytest.raises(InvalidDataError, match="unknown forward variant"):
        ladder.forward_ladder(None, None, variant="aos")


def test_recurrence_needs_several_positions_per_thread():
    with pytest.raises(InvalidDataError, match="recur=True walks several voxels per thread: it needs multi=True"):
        gpu_fhd.fhd_gpu(None, None, (4, 4), multi=False, recur=True)


def test_psf_grid_too_large_is_rejected():
    with pytest.raises(ResourceError, match="exceeds 2\\^31 - 1 voxels"):
        gpu_fhd.psf_gpu(None, None, (1024, 1024, 1024))


@pytest.mark.skipif(gpu_available(), reason="checks the message given without a GPU")
def test_without_gpu_the_launchers_say_so():
    with pytest.raises(DeviceError, match="need CuPy and an NVIDIA GPU"):
        gpu_fhd.fhd_gpu(np.zeros((1, 4), np.complex64), np.zeros((4, 2), np.float32), (4, 4))


# ----------------------------------------------------------------------------------------------------
# GPU kernels


@pytest.fixture
def poisoned(monkeypatch):
    """Every buffer the kernels fill starts as NaN, so a voxel or sample left unwritten shows."""
    poison_empty(monkeypatch, gpu_fhd)
    poison_empty(monkeypatch, gpu_frames)


def on_gpu(*arrays):
    cupy = cupy_module()
    return [None if a is None else cupy.asarray(a) for a in arrays]


def host(array):
    return cupy_module().asnumpy(array)


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ladder.VARIANTS + ("best",))
@pytest.mark.parametrize("matrix, coils, samples", [((17, 12), 1, 300), ((9, 10, 7), 3, 200), ((12, 13), 8, 400),
                                                    ((1, 1), 2, 5), ((5, 1, 3), 1, 1), *ODD], ids=str)
def test_fhd_matches_oracle(rng, poisoned, variant, matrix, coils, samples):
    traj, data = random_problem(rng, matrix, coils, samples)
    d_traj, d_data = on_gpu(traj, data)
    out = ladder.fhd_ladder(d_data, d_traj, matrix, variant=variant)
    assert out.dtype == np.complex64 and out.shape == (coils, *matrix)
    assert relative(host(out), nudft_adjoint(data, traj, matrix)) < TOL


def chunk_capacity(variant, dim, coils):
    if variant in ("constant", "aos"):
        return ladder.seed_capacity(dim, variant)
    rung = ladder.FAST_RUNGS[variant]
    return adjoint_defines(dim, coils, multi=rung["multi"], recur=rung["recur"])["FHD_CHUNK"]


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["constant", "aos", "packed", "recur"])
@pytest.mark.parametrize("offset", [-1, 0, 1])
def test_fhd_remainder_chunks(rng, poisoned, variant, offset):
    matrix, coils = (6, 7), 3
    samples = chunk_capacity(variant, 2, coils) + offset
    traj, data = random_problem(rng, matrix, coils, samples)
    d_traj, d_data = on_gpu(traj, data)
    out = ladder.fhd_ladder(d_data, d_traj, matrix, variant=variant)
    assert relative(host(out), nudft_adjoint(data, traj, matrix)) < TOL


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["constant", "aos"] + list(FAST))
@pytest.mark.parametrize("matrix", [(11, 10), (5, 6, 7), (9, 9)], ids=str)
def test_fhd_independent_of_chunk_and_block(rng, poisoned, variant, matrix):
    traj, data = random_problem(rng, matrix, 3, 700)
    d_traj, d_data = on_gpu(traj, data)
    ref = nudft_adjoint(data, traj, matrix)
    results = [host(ladder.fhd_ladder(d_data, d_traj, matrix, variant=variant, chunk=chunk, block=block))
               for chunk, block in [(None, None), (1, 32), (7, 64), (129, 5), (700, 96)]]
    for out in results:
        assert relative(out, ref) < TOL
        assert relative(out, results[0]) < TOL


def oracle_at(data, traj, matrix, voxels):
    """F^H d at the C-order flat voxel indices ``voxels``, float64, a few voxels at a time."""
    r = voxel_positions(matrix)[voxels]
    k = traj.astype(np.float64)
    out = np.zeros((data.shape[0], len(voxels)), dtype=np.complex128)
    for start in range(0, len(voxels), 64):
        cycles = k @ r[start:start + 64].T
        cycles -= np.rint(cycles)
        out[:, start:start + 64] = data.astype(np.complex128) @ np.exp(2j * np.pi * cycles)
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("variant", FAST)
@pytest.mark.parametrize("matrix", [(256, 256), (64, 64, 64), (255, 255), (63, 64, 65)], ids=str)
def test_fhd_accuracy_requirement(rng, variant, matrix):
    """8 coils, k up to Nyquist: relative L2 error <= 2e-5 on random voxels of the full-size problem."""
    traj, data = random_problem(rng, matrix, 8, 6000)
    d_traj, d_data = on_gpu(traj, data)
    out = host(ladder.fhd_ladder(d_data, d_traj, matrix, variant=variant)).reshape(8, -1)
    voxels = rng.choice(math.prod(matrix), 1024, replace=False)
    assert relative(out[:, voxels], oracle_at(data, traj, matrix, voxels)) < TOL


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ladder.FORWARD_VARIANTS + ("best",))
@pytest.mark.parametrize("matrix, coils, samples", [((17, 12), 1, 300), ((9, 10, 7), 3, 200), ((12, 13), 8, 1),
                                                    ((1, 1), 9, 33), ((5, 1, 3), 2, 70), *ODD], ids=str)
def test_forward_matches_oracle(rng, poisoned, variant, matrix, coils, samples):
    traj, _ = random_problem(rng, matrix, 1, samples)
    image = (rng.standard_normal((coils, *matrix)) + 1j * rng.standard_normal((coils, *matrix))).astype(np.complex64)
    d_traj, d_image = on_gpu(traj, image)
    out = ladder.forward_ladder(d_image, d_traj, variant=variant)
    assert out.dtype == np.complex64 and out.shape == (coils, samples)
    assert relative(host(out), nudft_forward(image, traj)) < TOL


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["tiled", "recur"])
@pytest.mark.parametrize("matrix", [(9, 8, 5), (7, 9, 5)], ids=str)
def test_forward_independent_of_chunk_and_block(rng, poisoned, variant, matrix):
    traj, _ = random_problem(rng, matrix, 1, 500)
    image = (rng.standard_normal((2, *matrix)) + 1j * rng.standard_normal((2, *matrix))).astype(np.complex64)
    d_traj, d_image = on_gpu(traj, image)
    ref = nudft_forward(image, traj)
    for chunk, block in [(None, None), (1, 32), (50, 33), (10_000, 256)]:
        out = host(ladder.forward_ladder(d_image, d_traj, variant=variant, chunk=chunk, block=block))
        assert relative(out, ref) < TOL


@pytest.mark.gpu
@pytest.mark.parametrize("matrix", [(14, 11), (15, 13), (7, 5, 9)], ids=str)
def test_forward_and_adjoint_are_adjoint(rng, matrix):
    traj, data = random_problem(rng, matrix, 2, 500)
    image = (rng.standard_normal((2, *matrix)) + 1j * rng.standard_normal((2, *matrix))).astype(np.complex64)
    d_traj, d_data, d_image = on_gpu(traj, data, image)
    fx = host(gpu_fhd.forward_gpu(d_image, d_traj)).astype(np.complex128)
    fhy = host(gpu_fhd.fhd_gpu(d_data, d_traj, matrix)).astype(np.complex128)
    assert adjoint_gap(image, fhy, data, fx) < 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("matrix", [(6, 5), (4, 3, 5), (1, 1), (7, 2), (9, 7, 5)], ids=str)
@pytest.mark.parametrize("weighted", [True, False])
def test_psf_equals_its_definition(rng, poisoned, matrix, weighted):
    traj, _ = random_problem(rng, matrix, 1, 3000, reach=1.0)
    weights = rng.random(traj.shape[0]).astype(np.float32) if weighted else None
    d_traj, d_weights = on_gpu(traj, weights)
    out = host(gpu_fhd.psf_gpu(d_traj, d_weights, matrix))
    big = tuple(2 * n for n in matrix)
    assert out.dtype == np.complex64 and out.shape == big
    w = np.ones(traj.shape[0]) if weights is None else weights.astype(np.float64)
    # p[j] = sum_m w_m exp(+i 2 pi k_m . (j - N) / N), j in [0, 2N) per axis
    j = np.stack([g.ravel() for g in np.meshgrid(*[np.arange(n) for n in big], indexing="ij")], axis=1)
    cycles = traj.astype(np.float64) @ ((j - np.asarray(matrix)) / np.asarray(matrix)).T
    ref = (w @ np.exp(2j * np.pi * (cycles - np.rint(cycles)))).reshape(big)
    assert relative(out, ref) < TOL
    for chunk, block in [(1, 32), (77, 7)]:
        assert relative(host(gpu_fhd.psf_gpu(d_traj, d_weights, matrix, chunk=chunk, block=block)), ref) < TOL


@pytest.mark.gpu
@pytest.mark.parametrize("matrix, coils", [((17, 12), 1), ((12, 13), 8), ((9, 10, 7), 3), ((7, 5), 11), ((1, 1), 2)],
                         ids=str)
def test_frames_in_one_launch_are_each_frames_adjoint(rng, poisoned, matrix, coils):
    """fhd_frames_gpu (FHD_FRAMES 1: records from global memory, one launch per coil group) gives every frame
    the oracle's F^H d of its own samples, frames of different lengths (one of a single sample)."""
    counts = [300, 1, 977, 64]
    problems = [random_problem(rng, matrix, coils, m) for m in counts]
    out = host(gpu_frames.fhd_frames_gpu([on_gpu(d)[0] for _, d in problems], [on_gpu(t)[0] for t, _ in problems],
                                      matrix))
    assert out.dtype == np.complex64 and out.shape == (len(counts), coils, *matrix)
    for frame, (traj, data) in zip(out, problems):
        assert relative(frame, nudft_adjoint(data, traj, matrix)) < TOL


@pytest.mark.gpu
@pytest.mark.parametrize("matrix", [(6, 5), (4, 3, 5), (16, 16)], ids=str)
def test_frames_psfs_in_one_launch_are_each_frames_psf(rng, poisoned, matrix):
    counts = [500, 37, 1200]
    trajs = [random_problem(rng, matrix, 1, m, reach=1.0)[0] for m in counts]
    weights = [rng.random(m).astype(np.float32) for m in counts[:-1]] + [None]
    out = host(gpu_frames.psf_frames_gpu([on_gpu(t)[0] for t in trajs], [on_gpu(w)[0] for w in weights], matrix))
    assert out.shape == (len(counts), *(2 * n for n in matrix))
    for frame, traj, w in zip(out, trajs, weights):
        assert relative(frame, host(gpu_fhd.psf_gpu(*on_gpu(traj, w), matrix))) < TOL


def test_frames_launches_refuse_what_they_cannot_index():
    """Refused before any device work: no frame at all, more frames than gridDim.z takes, and more samples
    than the int32 frame offsets hold."""
    with pytest.raises(InvalidDataError, match="at least one frame"):
        gpu_frames.fhd_frames_gpu([], [], (4, 4))
    with pytest.raises(ValueError, match=f"one launch takes 1 to {gpu_frames.MAX_FRAMES} frames"):
        gpu_frames.fhd_frames_launch(None, None, [1] * (gpu_frames.MAX_FRAMES + 1), (4, 4), {}, 0, None, None)
    with pytest.raises(ResourceError, match="exceeds the 2\\^31 - 1 the frames' offsets take"):
        gpu_frames._frame_start([2**30, 2**30])


@pytest.mark.gpu
def test_frames_of_one_series_share_their_coil_count(rng):
    traj, data = random_problem(rng, (4, 4), 2, 10)
    other = random_problem(rng, (4, 4), 3, 10)[1]
    with pytest.raises(InvalidDataError, match="same number of coils"):
        gpu_frames.fhd_frames_gpu(on_gpu(data, other), on_gpu(traj, traj), (4, 4))


# ----------------------------------------------------------------------------------------------------
# GPU argument errors


@pytest.mark.gpu
def test_host_arrays_are_rejected():
    traj = np.zeros((4, 2), np.float32)
    with pytest.raises(DeviceError, match="kspace must be a CuPy array"):
        gpu_fhd.fhd_gpu(np.zeros((1, 4), np.complex64), on_gpu(traj)[0], (4, 4))
    with pytest.raises(DeviceError, match="image must be a CuPy array"):
        gpu_fhd.forward_gpu(np.zeros((1, 4, 4), np.complex64), on_gpu(traj)[0])


@pytest.mark.gpu
@pytest.mark.skipif(gpu_count() < 2, reason="needs two GPUs")
def test_arrays_on_another_gpu_are_rejected():
    cupy = cupy_module()
    with cupy.cuda.Device(1):
        data = cupy.zeros((1, 4), cupy.complex64)
    with pytest.raises(DeviceError, match="lives on gpu:1"):
        gpu_fhd.fhd_gpu(data, cupy.zeros((4, 2), cupy.float32), (4, 4))


@pytest.mark.gpu
def test_bad_shapes_and_dtypes_are_rejected():
    cupy = cupy_module()
    traj = cupy.zeros((4, 2), cupy.float32)
    with pytest.raises(SchemaError, match="kspace must be complex64"):
        gpu_fhd.fhd_gpu(cupy.zeros((1, 4), cupy.float32), traj, (4, 4))
    with pytest.raises(SchemaError, match="trajectory must have shape \\(4, 3\\)"):
        gpu_fhd.fhd_gpu(cupy.zeros((1, 4), cupy.complex64), traj, (4, 4, 4))
    with pytest.raises(SchemaError, match="image must be complex64 \\(C, Nx, Ny\\)"):
        gpu_fhd.forward_gpu(cupy.zeros((4, 4), cupy.complex64), traj)
    with pytest.raises(SchemaError, match="weights must have shape \\(4,\\)"):
        gpu_fhd.psf_gpu(traj, cupy.ones(5, cupy.float32), (4, 4))


@pytest.mark.gpu
def test_empty_inputs_are_rejected():
    cupy = cupy_module()
    with pytest.raises(InvalidDataError, match="no samples"):
        gpu_fhd.fhd_gpu(cupy.zeros((1, 0), cupy.complex64), cupy.zeros((0, 2), cupy.float32), (4, 4))
    with pytest.raises(InvalidDataError, match="kspace has no coils"):
        gpu_fhd.fhd_gpu(cupy.zeros((0, 4), cupy.complex64), cupy.zeros((4, 2), cupy.float32), (4, 4))
    with pytest.raises(InvalidDataError, match="image has no coils"):
        gpu_fhd.forward_gpu(cupy.zeros((0, 4, 4), cupy.complex64), cupy.zeros((4, 2), cupy.float32))


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["aos", "recur"])
def test_bad_chunk_and_block_are_rejected(variant):
    cupy = cupy_module()
    data, traj = cupy.zeros((1, 4), cupy.complex64), cupy.zeros((4, 2), cupy.float32)
    capacity = chunk_capacity(variant, 2, 1)
    with pytest.raises(InvalidDataError, match=f"chunk .* must be an integer in \\[1, {capacity}\\]"):
        ladder.fhd_ladder(data, traj, (4, 4), variant=variant, chunk=capacity + 1)
    with pytest.raises(InvalidDataError, match="block .* must be an integer in \\[1, "):
        ladder.fhd_ladder(data, traj, (4, 4), variant=variant, block=0)
    with pytest.raises(InvalidDataError, match="block \\(threads per block\\) must be an integer in \\[1, 256\\]"):
        gpu_fhd.forward_gpu(cupy.zeros((1, 4, 4), cupy.complex64), traj, block=257)
