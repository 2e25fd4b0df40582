"""GPU off-resonance kernels (fhd.cu FHD_OFFRES 1, forward.cu FWD_OFFRES 1) and the reconstruction with a field
map on the GPU, against the float64 oracle of the model and the CPU path."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import adjoint_gap, kernel_offres_turns, kernel_phasor, relative

import mri_recon
from mri_recon.arrays.backend import cupy_module
from mri_recon.errors import DeviceError, InvalidDataError, SchemaError
from mri_recon.operators.offres.model import OffresEncoding, offres_adjoint, offres_forward

TOL = 2e-5  # the exact kernels' accuracy requirement (relative L2 error against float64)
CASES = [((6, 5), 1, 97), ((33, 30), 3, 400), ((1, 1), 1, 1), ((7, 1), 9, 130), ((4, 3, 5), 2, 211),
         ((17, 16, 15), 1, 300), ((9, 7, 2), 8, 64)]


def _problem(rng, matrix, coils, samples, peak=150.0, readout=16e-3):
    k = ((rng.random((samples, len(matrix))) - 0.5) * np.asarray(matrix)).astype(np.float32)
    f = (peak * (2 * rng.random(matrix) - 1)).astype(np.float32)
    t = (rng.random(samples) * readout).astype(np.float32)
    x = (rng.standard_normal((coils, *matrix)) + 1j * rng.standard_normal((coils, *matrix))).astype(np.complex64)
    d = (rng.standard_normal((coils, samples)) + 1j * rng.standard_normal((coils, samples))).astype(np.complex64)
    return k, f, t, x, d


def _gpu(*arrays):
    cupy = cupy_module()
    return [cupy.asarray(a) for a in arrays]


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("chunk, tensor", [(None, None), (None, False), (7, False)],
                         ids=["default", "fhd", "fhd-chunk-7"])
def test_adjoint_kernel_against_the_oracle(rng, case, chunk, tensor):
    from mri_recon.operators.offres.gpu_offres import fhd_offres_gpu

    matrix, coils, samples = case
    k, f, t, _, d = _problem(rng, matrix, coils, samples)
    out = fhd_offres_gpu(*_gpu(d, k), matrix, *_gpu(f, t), chunk=chunk, tensor=tensor)
    assert out.shape == (coils, *matrix)
    assert relative(out.get(), offres_adjoint(d, k, f, t)) < TOL


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("chunk", [None, 5])
def test_forward_kernel_against_the_oracle(rng, case, chunk):
    from mri_recon.operators.offres.gpu_offres import forward_offres_gpu

    matrix, coils, samples = case
    k, f, t, x, _ = _problem(rng, matrix, coils, samples)
    out = forward_offres_gpu(*_gpu(x, k, f, t), chunk=chunk)
    assert out.shape == (coils, samples)
    assert relative(out.get(), offres_forward(x, k, f, t)) < TOL


@pytest.mark.gpu
@pytest.mark.parametrize("peak, readout", [(1000.0, 50e-3), (5.0, 1e-3)], ids=["50-turns", "tiny"])
def test_kernels_keep_their_accuracy_for_large_and_small_phases(rng, peak, readout):
    from mri_recon.operators.offres.gpu_offres import fhd_offres_gpu, forward_offres_gpu

    matrix = (40, 36)
    k, f, t, x, d = _problem(rng, matrix, 2, 2000, peak, readout)
    assert relative(fhd_offres_gpu(*_gpu(d, k), matrix, *_gpu(f, t)).get(), offres_adjoint(d, k, f, t)) < TOL
    assert relative(forward_offres_gpu(*_gpu(x, k, f, t)).get(), offres_forward(x, k, f, t)) < TOL


@pytest.mark.gpu
@pytest.mark.parametrize("tensor", [None, False], ids=["default", "fhd"])
def test_zero_field_matches_the_plain_kernels(rng, tensor):
    from mri_recon.operators.engines.gpu_exact import fhd_gpu, forward_gpu
    from mri_recon.operators.offres.gpu_offres import fhd_offres_gpu, forward_offres_gpu

    matrix = (32, 28)
    k, _, t, x, d = _problem(rng, matrix, 3, 500)
    zero = np.zeros(matrix, np.float32)
    gd, gk, gx, gz, gt = _gpu(d, k, x, zero, t)
    adjoint = fhd_offres_gpu(gd, gk, matrix, gz, gt, tensor=tensor).get()
    assert relative(adjoint, fhd_gpu(gd, gk, matrix).get()) < TOL
    assert relative(forward_offres_gpu(gx, gk, gz, gt).get(), forward_gpu(gx, gk).get()) < TOL


@pytest.mark.gpu
def test_gpu_encoding_is_adjoint_and_inputs_are_checked(rng):
    from mri_recon.operators.offres.gpu_offres import fhd_offres_gpu

    matrix = (20, 24)
    k, f, t, x, d = _problem(rng, matrix, 2, 300)
    op = OffresEncoding(*_gpu(k, f, t), batch=2)
    gx, gd = _gpu(x, d)
    assert adjoint_gap(x, op.H(gd).get(), d, op(gx).get()) < 1e-5
    with pytest.raises(SchemaError, match=r"field_map must have the image's shape \(20, 24\)"):
        fhd_offres_gpu(gd, _gpu(k)[0], matrix, *_gpu(f[:, :20], t))
    with pytest.raises(DeviceError, match="times must be a CuPy array"):
        fhd_offres_gpu(gd, _gpu(k)[0], matrix, _gpu(f)[0], t)


@pytest.mark.gpu
@pytest.mark.parametrize("correction", ["segmented", "exact"])
@pytest.mark.parametrize("method", ["exact", "nufft"])
def test_gpu_reconstruction_matches_the_cpu(correction, method):
    scan = mri_recon.simulate_scan((32, 32), "spiral", coils=4, snr=None, field_map_peak=150, readout_ms=16)
    options = {"iterations": 10, "lam": 1e-3, "progress": False, "field_map_correction": correction}
    gpu = mri_recon.reconstruct(scan, device="gpu", method=method, **options)
    cpu = mri_recon.reconstruct(scan, device="cpu", **{**options, "field_map_correction": "segmented"})
    assert gpu.parameters["field_map_correction"] == cpu.parameters["field_map_correction"] or correction == "exact"
    assert relative(gpu.image, cpu.image) < 3e-3


# ----------------------------------------------------------------------------------------------------
# The kernels' arithmetic emulated in NumPy on the host records (no GPU): layout, fixed point, sign


@pytest.mark.parametrize("matrix", [(9, 6), (4, 5, 3)], ids=["2d", "3d"])
def test_host_records_and_phase_arithmetic_reproduce_the_model(rng, matrix):
    from mri_recon.kernels.configs import fhd_record_words
    from mri_recon.operators.engines.gpu_layout import fixed_point_turns
    from mri_recon.operators.offres.gpu_offres_layout import (
        adjoint_records,
        centre_phase,
        fixed_point_offres,
        forward_records,
        voxel_headers,
    )

    dim, coils = len(matrix), 3
    k, f, t, x, d = _problem(rng, matrix, coils, 120, peak=400.0, readout=30e-3)
    t = (t + np.float32(0.2)).astype(np.float32)  # an origin far from the readout: the centring must handle it
    fixed, taus, centre = fixed_point_offres(f.reshape(-1), t)
    assert fixed.dtype == np.int32 and taus.dtype == np.int32 and abs(centre - 0.215) < 0.016
    shift = centre_phase(f.reshape(-1), centre)  # exp(+i 2 pi f t_c)
    records = adjoint_records(fixed_point_turns(k, matrix), taus, d)
    assert records.shape == (120, fhd_record_words(dim, coils, False, True)) and records.dtype == np.uint32
    q = voxel_headers(matrix).astype(np.int64).astype(np.uint32)  # Q_d of every voxel, C order
    big_t = np.zeros((120, q.shape[0]), np.uint32)
    for axis in range(dim):
        big_t += records[:, axis:axis + 1] * q[None, :, axis]
    big_t += kernel_offres_turns(fixed[None, :], records[:, dim].view(np.int32)[:, None]) + np.uint32(0x100)
    data = records[:, -2 * coils:].view(np.float32).view(np.complex64)  # (M, coils)
    c, s = kernel_phasor(big_t)
    adjoint = ((data.T.astype(np.complex128) @ (c + 1j * s)) * shift).reshape(coils, *matrix)
    assert relative(adjoint, offres_adjoint(d, k, f, t)) < TOL
    voxels = forward_records(voxel_headers(matrix), fixed, x.reshape(coils, -1) * shift.conj())
    assert voxels.shape[1] % 4 == 0
    kfix = fixed_point_turns(k, matrix)
    big_t = np.zeros((120, voxels.shape[0]), np.uint32)
    for axis in range(dim):
        big_t += kfix[:, axis:axis + 1] * voxels[None, :, axis]
    big_t += kernel_offres_turns(voxels[:, 3].view(np.int32)[None, :], taus[:, None]) + np.uint32(0x100)
    c, s = kernel_phasor(big_t)
    values = voxels[:, 4:4 + 2 * coils].view(np.float32).view(np.complex64)  # (voxels, coils)
    forward = (c - 1j * s) @ values.astype(np.complex128)
    assert relative(forward.T, offres_forward(x, k, f, t)) < TOL


def test_fixed_point_limits_are_refused():
    from mri_recon.operators.offres.gpu_offres_layout import fixed_point_offres

    f = np.zeros((4, 4), np.float32)
    with pytest.raises(InvalidDataError, match="the sample times span 1.5 s; the exact GPU off-resonance kernels"):
        fixed_point_offres(f, np.array([0.0, 1.5], np.float32))
    with pytest.raises(InvalidDataError, match=r"the field map reaches 40000 Hz; .* take \|f\| <= 32767 Hz"):
        fixed_point_offres(f + np.float32(4e4), np.array([0.0, 0.01], np.float32))


def test_launchers_take_arrays_and_check_them_before_anything_else(rng):
    """The launchers accept arrays (unhashable, so never a cache key) and name a host array's problem: here
    NumPy arrays, refused with DeviceError on a machine with a GPU and without one alike."""
    from mri_recon.operators.offres.gpu_offres import fhd_offres_gpu, forward_offres_gpu

    matrix = (6, 5)
    k, f, t, x, d = _problem(rng, matrix, 2, 40)
    with pytest.raises(DeviceError):
        forward_offres_gpu(x, k, f, t)
    with pytest.raises(DeviceError):
        fhd_offres_gpu(d, k, matrix, f, t)
