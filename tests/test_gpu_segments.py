"""The fused time-segmented CG-SENSE operator (kernels/segments.cu) equals SegmentedNormal on CuPy and NumPy,
and a reconstruction with it equals one with the unfused operator; its storage of the spectra, its memory
count and the kernels' order of operations are checked on the host (NumPy)."""

from __future__ import annotations

import ctypes
import re
from types import SimpleNamespace

import host_kernels as host
import numpy as np
import pytest
from helpers import relative

import mri_recon
from mri_recon.arrays.backend import cupy_module
from mri_recon.errors import ResourceError
from mri_recon.kernels import KERNEL_DIR
from mri_recon.operators.gpu import fft as gpu_fft
from mri_recon.operators.normal import gpu_toeplitz
from mri_recon.operators.offres import gpu_segments, segmented
from mri_recon.operators.offres.gpu_segments import MAX_FUSED_SEGMENTS, pair_row, spectra_store
from mri_recon.operators.offres.segmented import SegmentedNormal
from mri_recon.operators.offres.time_segments import segment_phases, segment_times

MATRICES = [(16, 16), (13, 7), (6, 5, 4), (5, 7, 3)]
MATRIX_IDS = ["2d-even", "2d-odd", "3d-even", "3d-odd"]


def _crandn(rng, *shape):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)


def _problem(rng, matrix, segments, coils):
    """Random Hermitian kernel spectra (real on the diagonal, as the PSF spectra of real weights), the phases
    of a random field map, coil maps and an image."""
    big = tuple(2 * n for n in matrix)
    spectra = {}
    for first in range(segments):
        for second in range(first, segments):
            spectrum = _crandn(rng, *big)
            spectra[(first, second)] = spectrum.real.astype(np.complex64) if first == second else spectrum
    field = (80 * rng.standard_normal(matrix)).astype(np.float32)
    phases = segment_phases(field, segment_times(np.array([0.0, 8e-3]), segments))
    return spectra, phases, _crandn(rng, coils, *matrix), _crandn(rng, *matrix)


def _emulate(store, phases, maps, x, lam, step):
    """The kernels' order of operations on the host: expand (L B grids), unnormalized FFT, the mixing at every
    frequency from the pair store (conjugated below the diagonal), unnormalized inverse FFT, crop, conj(c_l),
    sum over l, conj(S_c), sum over coils, + lam x."""
    segments, matrix = phases.shape[0], phases.shape[1:]
    big = tuple(2 * n for n in matrix)
    axes = tuple(range(2, 2 + len(matrix)))
    out = lam * x.astype(np.complex128)
    for start in range(0, maps.shape[0], step):
        part = maps[start:start + step]
        work = np.zeros((len(part), segments, *big), np.complex128)
        work[(slice(None), slice(None), *(slice(0, n) for n in matrix))] = phases[None] * (part * x)[:, None]
        work = np.fft.fftn(work, axes=axes).reshape(len(part), segments, -1)
        mixed = np.zeros_like(work)
        for row in range(segments):
            for col in range(segments):
                h = store[pair_row(row, col, segments)] if col >= row else np.conj(store[pair_row(col, row, segments)])
                mixed[:, row] += h * work[:, col]
        mixed = np.fft.ifftn(mixed.reshape(len(part), segments, *big), axes=axes) * np.prod(big)
        y = mixed[(slice(None), slice(None), *(slice(0, n) for n in matrix))]
        out += (np.conj(part) * (np.conj(phases)[None] * y).sum(axis=1)).sum(axis=0)
    return out


def test_pair_rows_enumerate_the_upper_triangle():
    for segments in (1, 2, 7, 10, MAX_FUSED_SEGMENTS):
        rows = [pair_row(i, j, segments) for i in range(segments) for j in range(i, segments)]
        assert rows == list(range(segments * (segments + 1) // 2))


@pytest.mark.parametrize("matrix", MATRICES[:3], ids=MATRIX_IDS[:3])
@pytest.mark.parametrize("segments", [1, 2, 7])
def test_kernel_arithmetic_on_the_host_is_the_segmented_normal(rng, matrix, segments):
    spectra, phases, maps, x = _problem(rng, matrix, segments, 3)
    store = spectra_store(spectra, segments)
    assert store.dtype == np.complex64
    assert store.shape == (segments * (segments + 1) // 2, np.prod([2 * n for n in matrix]))
    ref = SegmentedNormal(spectra, phases, coil_maps=maps, lam=0.3)(x)
    for step in (3, 2):
        assert relative(_emulate(store, phases, maps, x, 0.3, step), ref) < 1e-5


@pytest.fixture(scope="module")
def host_kernels(tmp_path_factory):
    """``segments.cu`` built for the host (tests/host/segments_host.cpp) per SEG_MAX: ``get_kernel``'s twin."""
    folder = tmp_path_factory.mktemp("segments_host")
    libraries = {}

    def get_kernel(filename, name, defines, device):
        assert filename == "segments.cu" and name.startswith("mri_recon_segments_")
        tier = defines["SEG_MAX"]
        if tier not in libraries:
            libraries[tier] = host.build("segments_host.cpp", folder / f"segments_{tier}.so",
                                                 f"-DSEG_MAX={tier}")
        function = getattr(libraries[tier], "emu_" + name.removeprefix("mri_recon_segments_"))

        def launch(grid, block, args, shared_mem=0):
            if name == "mri_recon_segments_mix" and tier <= gpu_segments.SHARED_MIX_MAX:
                segments = int(args[3])
                assert shared_mem >= segments * (segments + 1) // 2 * 32 * 8  # the staged spectra fit
            function(ctypes.c_uint(grid[0]), ctypes.c_uint(block[0]), ctypes.c_uint(block[1] if len(block) > 1 else 1),
                     *(host.argument(a) for a in args))
        return launch

    return get_kernel


@pytest.mark.parametrize("matrix", MATRICES, ids=MATRIX_IDS)
@pytest.mark.parametrize("segments", [1, 2, 7, 10, 40])
@pytest.mark.parametrize("coil_batch", [None, 2], ids=["all-coils", "two-of-three"])
def test_kernels_run_on_the_host_are_the_segmented_normal(rng, monkeypatch, host_kernels, matrix, segments,
                                                          coil_batch):
    """segments.cu itself (built for the host, threads run in turn) behind FusedSegmentedNormal's launches,
    with NumPy FFTs for cuFFT: every element written (poisoned buffers), equal to SegmentedNormal."""
    monkeypatch.setattr(gpu_segments, "cupy_module", lambda: np)
    monkeypatch.setattr(gpu_toeplitz, "cupy_module", lambda: np)  # the shared grid set-up (GridNormal)
    monkeypatch.setattr(gpu_segments, "get_kernel", host_kernels)
    monkeypatch.setattr(gpu_fft, "fft_plan", host.HostPlan)
    spectra, phases, maps, x = _problem(rng, matrix, segments, 3)
    op = gpu_segments.FusedSegmentedNormal(spectra, phases, maps.view(host.HostMaps), 0.3, coil_batch)
    ref = SegmentedNormal(spectra, phases, coil_maps=maps, lam=0.3)(x)
    op._work[...] = np.nan
    out = np.full(matrix, np.nan, np.complex64)
    op.apply_into(x, out)
    assert relative(out, ref) < 1e-5
    assert relative(op(x), ref) < 1e-5


def test_segment_batch_counts_the_fused_work(monkeypatch):
    """Fused: the spectra twice (the PSF spectra and the store) and 2 L grids per coil; unfused: the (P, L, L)
    matrices as well and 4 L grids per coil."""
    matrix, segments = (32, 24), 5
    points = 4 * 32 * 24
    phases = segment_phases(np.zeros(matrix), np.arange(segments) * 1e-3)
    weights = SimpleNamespace(device=SimpleNamespace(id=0))
    monkeypatch.setattr(segmented, "is_gpu_array", lambda array: True)
    pairs = 8 * points * segments * (segments + 1)
    for fused, kernels, per_coil in ((True, pairs, 8 * points * 2 * segments),
                                     (False, pairs + 8 * points * segments * (segments - 1) // 2,
                                      8 * points * 4 * segments)):
        monkeypatch.setattr(segmented, "device_memory", lambda device, k=kernels, c=per_coil: (k + 3 * c + 5, 0))
        assert segmented.segment_batch(phases, weights, 8, fused) == 3
        assert segmented.segment_batch(phases, weights, 2, fused) == 2
        monkeypatch.setattr(segmented, "device_memory", lambda device, k=kernels: (k, 0))
        with pytest.raises(ResourceError, match="time segmentation with L = 5 needs"):
            segmented.segment_batch(phases, weights, 8, fused)


@pytest.mark.gpu
@pytest.mark.parametrize("matrix", MATRICES, ids=MATRIX_IDS)
@pytest.mark.parametrize("segments", [1, 2, 7, 10])
@pytest.mark.parametrize("coil_batch", [None, 2], ids=["all-coils", "two-of-three"])
def test_fused_operator_matches_the_segmented_normal(rng, matrix, segments, coil_batch):
    from mri_recon.operators.offres.gpu_segments import FusedSegmentedNormal

    cupy = cupy_module()
    spectra, phases, maps, x = _problem(rng, matrix, segments, 3)
    gpu = {pair: cupy.asarray(s) for pair, s in spectra.items()}
    gphases, gmaps, gx = cupy.asarray(phases), cupy.asarray(maps), cupy.asarray(x)
    op = segmented.segmented_normal(gpu, gphases, coil_maps=gmaps, lam=0.3, coil_batch=coil_batch)
    assert isinstance(op, FusedSegmentedNormal) and op.writes_into and op.hermitian
    unfused = SegmentedNormal(gpu, gphases, coil_maps=gmaps, lam=0.3, coil_batch=coil_batch)(gx).get()
    ref = SegmentedNormal(spectra, phases, coil_maps=maps, lam=0.3)(x)
    assert relative(unfused, ref) < 1e-5
    op._work[...] = cupy.nan  # every work element is written before it is read
    out = cupy.full(matrix, cupy.nan, dtype=cupy.complex64)
    op.apply_into(gx, out)
    assert relative(out.get(), unfused) < 1e-5 and relative(out.get(), ref) < 1e-5
    assert relative(op(gx).get(), unfused) < 1e-5  # the reused work buffer does not leak between calls
    y = cupy.asarray(_crandn(rng, *matrix))
    lhs, rhs = complex(cupy.vdot(op(gx), y)), complex(cupy.vdot(gx, op(y)))
    assert abs(lhs - rhs) <= 1e-5 * abs(lhs)


@pytest.mark.gpu
def test_fused_operator_takes_only_what_it_can():
    """No maps (one image per coil), or more segments than the kernels hold: the unfused operator."""
    from mri_recon.errors import SchemaError
    from mri_recon.operators.offres.gpu_segments import FusedSegmentedNormal

    cupy = cupy_module()
    rng = np.random.default_rng(3)
    spectra, phases, maps, _ = _problem(rng, (6, 4), 2, 2)
    gpu = {pair: cupy.asarray(s) for pair, s in spectra.items()}
    assert isinstance(segmented.segmented_normal(gpu, cupy.asarray(phases)), SegmentedNormal)
    many = cupy.zeros((MAX_FUSED_SEGMENTS + 1, 6, 4), cupy.complex64)
    assert not segmented.fused_normal(cupy.asarray(maps), MAX_FUSED_SEGMENTS + 1)
    with pytest.raises(SchemaError, match=r"phases must have shape \(L, \*\(6, 4\)\) with 1 <= L <= 64"):
        FusedSegmentedNormal(gpu, many, cupy.asarray(maps), 0.0, None)


@pytest.mark.gpu
@pytest.mark.parametrize("coil_batch", [None, 2], ids=["all-coils", "batches"])
def test_fused_cg_graph_replay_equals_eager_launches(rng, coil_batch):
    from mri_recon.solvers.cg import cg

    cupy = cupy_module()
    matrix, segments = (20, 18), 4
    spectra, phases, maps, b = _problem(rng, matrix, segments, 3)
    spectra = {pair: s * np.float32(0.05) for pair, s in spectra.items()}
    for index in range(segments):  # a positive definite operator: a dominant positive diagonal
        spectra[(index, index)] = (np.abs(spectra[(index, index)]) + np.float32(4.0)).astype(np.complex64)
    gpu = {pair: cupy.asarray(s) for pair, s in spectra.items()}
    op = segmented.segmented_normal(gpu, cupy.asarray(phases), coil_maps=cupy.asarray(maps), lam=0.1,
                                        coil_batch=coil_batch)
    runs = [cg(op, cupy.asarray(b), max_iterations=10, tolerance=0.0) for _ in range(2)]
    eager = cg(lambda v: op(v), cupy.asarray(b), max_iterations=10, tolerance=0.0)
    for x, residuals in runs[1:] + [eager]:
        np.testing.assert_array_equal(cupy.asnumpy(x), cupy.asnumpy(runs[0][0]))
        assert residuals == runs[0][1]
    # against the same 10 iterations of the complex64 host operator: one application agrees to 1e-5
    # (test_fused_operator_matches_the_segmented_normal); ten iterations carry the two float32 roundings through
    # the operator's conditioning (1.4e-4 seen on one random problem)
    reference = SegmentedNormal(spectra, phases, coil_maps=maps, lam=0.1)
    cpu_x, _ = cg(reference, b.astype(np.complex64), max_iterations=10, tolerance=0.0)
    assert relative(cupy.asnumpy(runs[0][0]), cpu_x) < 5e-4


@pytest.mark.gpu
@pytest.mark.parametrize("segments", [None, 1, 3], ids=["auto", "one", "three"])
@pytest.mark.parametrize("method", ["nufft", "exact"])
def test_reconstruction_with_the_fused_operator_equals_the_unfused(monkeypatch, segments, method):
    from mri_recon.operators.offres import gpu_segments

    scan = mri_recon.simulate_scan((40, 40), "spiral", coils=4, snr=None, field_map_peak=150, readout_ms=16)
    options = {"iterations": 12, "tol": 0.0, "lam": 1e-3, "progress": False, "device": "gpu", "method": method,
               "field_map_correction": "segmented", "segments": segments}
    built = []
    original = gpu_segments.FusedSegmentedNormal.__init__

    def counted(self, *args, **kwargs):
        built.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(gpu_segments.FusedSegmentedNormal, "__init__", counted)
    fused = mri_recon.reconstruct(scan, **options)
    assert len(built) == 1
    monkeypatch.setattr(segmented, "fused_normal", lambda maps, count: False)
    unfused = mri_recon.reconstruct(scan, **options)
    assert len(built) == 1
    assert fused.parameters["field_map_correction"] == unfused.parameters["field_map_correction"]
    assert relative(fused.image, unfused.image) < 1e-4
    np.testing.assert_allclose(fused.residuals, unfused.residuals, rtol=1e-3)


def test_shared_mixing_tiers_agree_with_the_kernel():
    """The launch passes shared memory exactly for the tiers segments.cu stages in it."""
    source = (KERNEL_DIR / "segments.cu").read_text()
    defined = int(re.search(r"#define SEG_SHARED_MAX (\d+)", source).group(1))
    assert gpu_segments.SHARED_MIX_MAX == defined
