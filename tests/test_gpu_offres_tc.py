"""F^H d with off-resonance on the tensor cores (offres_tc.cu): the packed layout and the warp's fragment
arithmetic emulated in NumPy (no GPU), then the kernels against the float64 oracle and that emulation."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import kernel_offres_turns, kernel_phasor, poison_empty, relative

from mri_recon.arrays.backend import cupy_module
from mri_recon.errors import InvalidDataError, KernelError
from mri_recon.kernels.configs import MAX_GROUP, offres_tc_defines
from mri_recon.operators.offres.model import offres_adjoint

TOL = 2e-5  # the exact kernels' accuracy requirement (relative L2 error against float64)


def _problem(rng, matrix, coils, samples, peak=150.0, readout=16e-3):
    k = ((rng.random((samples, len(matrix))) - 0.5) * np.asarray(matrix)).astype(np.float32)
    f = (peak * (2 * rng.random(matrix) - 1)).astype(np.float32)
    t = (rng.random(samples) * readout).astype(np.float32)
    d = (rng.standard_normal((coils, samples)) + 1j * rng.standard_normal((coils, samples))).astype(np.complex64)
    return k, f, t, d


def split(x):
    """The kernel's split of float32 values: hi = half(x), lo = half(x - hi), round to nearest (as float64)."""
    x = np.asarray(x, dtype=np.float32)
    hi = x.astype(np.float16)
    lo = (x - hi.astype(np.float32)).astype(np.float16)
    return hi.astype(np.float64), lo.astype(np.float64)


def scale_of(values):
    """mri_recon_offres_tc_scale for one coil: s = 2^-e for its largest |Re|, |Im| = m 2^e, m in [0.5, 1) (s = 1
    for zeros)."""
    largest = float(np.abs(np.asarray(values, np.complex64).view(np.float32)).max(initial=0.0))
    exponent = int(np.clip(np.frexp(np.float32(largest))[1], -125, 126)) if largest > 0 else 0
    return np.float32(2.0**-exponent)


def reference_records(kfix, taus, data, start, size):
    """The sample records of offres_tc.cu (scaled values), written from the layout its header documents."""
    n_samples, dim = kfix.shape
    rows = 16 * max(1, -(-n_samples // 16))
    tiles = (size + 3) // 4
    records = np.zeros((rows, 4 + 8 * tiles), np.uint32)
    records[:n_samples, :dim] = kfix
    records[:n_samples, 3] = taus.astype(np.int32).view(np.uint32)
    group = data[start:start + size]
    scales = np.asarray([scale_of(coil) for coil in group], np.float32)[:, None]
    values = np.ascontiguousarray((group * scales).T.astype(np.complex64))
    records[:n_samples, 4:4 + 2 * size] = values.view(np.float32).view(np.uint32)
    return records


def emulate_warps(records, fixed, matrix, coils, scales):
    """The kernel's arithmetic with the PTX fragment layouts (mma.m16n8k16, half operands): per 16-voxel tile and
    block of 16 samples, every lane builds its A fragments (phasors of voxels g, g + 8 at samples 2t, 2t + 1,
    2t + 8, 2t + 9) and its B fragments (coil 4 j + g / 2 at the same samples: real or imaginary part by g's
    parity), both split into halves; the 16 x 8 x 16 products are assembled from the 32 lanes' registers and
    multiplied in float64; the accumulator is read back lane by lane as the kernel writes it, times 1 / s_c."""
    from mri_recon.operators.offres.gpu_offres_layout import voxel_headers

    q = voxel_headers(matrix).astype(np.int64).astype(np.uint32)
    n_voxels, tiles = q.shape[0], (coils + 3) // 4
    out = np.full((coils, n_voxels), np.nan, np.complex128)
    for first in range(0, n_voxels, 16):
        acc = np.zeros((tiles, 16, 8))
        for block in records.reshape(-1, 16, records.shape[1]):
            a = {name: np.zeros((16, 16)) for name in ("c_hi", "c_lo", "s_hi", "s_lo")}
            b = {name: np.zeros((tiles, 16, 8)) for name in ("re_hi", "re_lo", "im_hi", "im_lo")}
            for lane in range(32):
                g, t = lane >> 2, lane & 3
                samples = (2 * t, 2 * t + 1, 2 * t + 8, 2 * t + 9)
                for row in (g, g + 8):
                    v = first + row
                    qv = q[v] if v < n_voxels else np.zeros(3, np.uint32)
                    fv = fixed[v] if v < n_voxels else 0
                    for col in samples:
                        kr = int(block[col, :3].astype(np.uint64) @ qv.astype(np.uint64)) & 0xFFFFFFFF
                        turns = int(kernel_offres_turns(fv, block[col, 3:4].view(np.int32))[0])
                        c, s = kernel_phasor(np.asarray([(kr + turns + 0x100) & 0xFFFFFFFF], np.uint32))
                        for name, value in (("c", c[0]), ("s", s[0])):
                            a[name + "_hi"][row, col], a[name + "_lo"][row, col] = split(np.float32(value))
                for j in range(tiles):
                    for col in samples:  # b0 = rows 2t..2t+1, b1 = rows 2t+8..2t+9, column g
                        values = block[col, 4:].view(np.float32)
                        re, im = values[2 * (4 * j + g // 2)], values[2 * (4 * j + g // 2) + 1]
                        for mat, value in (("re", im if g & 1 else re), ("im", re if g & 1 else -im)):
                            b[mat + "_hi"][j, col, g], b[mat + "_lo"][j, col, g] = split(value)
            for j in range(tiles):
                acc[j] += (a["c_hi"] @ b["re_lo"][j] + a["c_lo"] @ b["re_hi"][j] + a["s_hi"] @ b["im_lo"][j]
                           + a["s_lo"] @ b["im_hi"][j] + a["c_hi"] @ b["re_hi"][j] + a["s_hi"] @ b["im_hi"][j])
        for lane in range(32):
            g, t = lane >> 2, lane & 3  # c0, c1 = (g, 2t), (g, 2t + 1); c2, c3 = row g + 8
            for j in range(tiles):
                c = 4 * j + t
                for r in range(2):
                    v = first + g + 8 * r
                    if c < coils and v < n_voxels:
                        out[c, v] = (acc[j, g + 8 * r, 2 * t] + 1j * acc[j, g + 8 * r, 2 * t + 1]) / scales[c]
    return out


@pytest.mark.parametrize("matrix, coils, samples", [((9, 6), 3, 61), ((4, 5, 3), 6, 20), ((5, 4), 1, 8)],
                         ids=["2d-3coils", "3d-6coils", "2d-1coil"])
def test_layout_and_fragments_reproduce_the_model(rng, matrix, coils, samples):
    from mri_recon.operators.engines.gpu_layout import fixed_point_turns
    from mri_recon.operators.offres.gpu_offres_layout import centre_phase, fixed_point_offres

    k, f, t, d = _problem(rng, matrix, coils, samples, peak=400.0, readout=30e-3)
    fixed, taus, centre = fixed_point_offres(f.reshape(-1), t)
    # any scale, and coils of different strength: the records hold each coil times a power of two of its own
    d = (d * np.float32(3e-7) * np.float32(7.0) ** -np.arange(coils, dtype=np.float32)[:, None]).astype(np.complex64)
    records = reference_records(fixed_point_turns(k, matrix), taus, d, 0, coils)
    assert records.shape == (16 * -(-samples // 16), 4 + 8 * ((coils + 3) // 4))
    scaled = records[:samples, 4:4 + 2 * coils].view(np.float32).reshape(samples, coils, 2)
    assert np.all((np.abs(scaled).max(axis=(0, 2)) >= 0.5) & (np.abs(scaled).max(axis=(0, 2)) < 1.0))
    scales = [scale_of(coil) for coil in d]
    image = emulate_warps(records, fixed, matrix, coils, scales) * centre_phase(f.reshape(-1), centre)
    assert not np.isnan(image).any()
    assert relative(image.reshape(coils, *matrix), offres_adjoint(d, k, f, t)) < 2e-6


def record_phasors(records, fixed, matrix):
    """cos and sin (float64, ``(N, M)``) of the kernel's fixed-point phase of every voxel and record."""
    from mri_recon.operators.offres.gpu_offres_layout import voxel_headers

    q = voxel_headers(matrix).astype(np.int64)
    kr = (records[:, :3].astype(np.int64) @ q.T) & 0xFFFFFFFF  # (M, N) mod 2^32
    turns = kernel_offres_turns(fixed[None, :], records[:, 3:4].view(np.int32)).astype(np.int64)
    c, s = kernel_phasor(((kr + turns + 0x100) & 0xFFFFFFFF).astype(np.uint32))
    return c.T, s.T


def split_product(records, fixed, matrix, coils, scales):
    """The kernel's three-term product of the split halves (whole matrices, float64: no fragments), coil c
    divided by ``scales[c]``: the arithmetic whose accuracy the scales decide."""
    c, s = record_phasors(records, fixed, matrix)
    (ch, cl), (sh, sl) = split(c), split(s)
    values = records[:, 4:4 + 2 * coils].view(np.float32).reshape(-1, coils, 2)

    def three(ah, al, b):
        bh, bl = split(b)
        return ah @ bh + ah @ bl + al @ bh

    return np.asarray([(three(ch, cl, values[:, j, 0]) - three(sh, sl, values[:, j, 1])
                        + 1j * (three(ch, cl, values[:, j, 1]) + three(sh, sl, values[:, j, 0]))) / scales[j]
                       for j in range(coils)])


def test_a_scale_per_coil_keeps_a_weak_coil_exact_on_k_space_of_high_dynamic_range(rng):
    """Coils 100x apart on k-space falling 1e5 from its centre: with each coil scaled by its own power of two
    the weak coil meets 2e-5 against the same phasors in float64; one scale for both does not."""
    from mri_recon.operators.engines.gpu_layout import fixed_point_turns
    from mri_recon.operators.offres.gpu_offres_layout import fixed_point_offres

    matrix, samples = (16, 16), 20000
    k, f, t, d = _problem(rng, matrix, 2, samples)
    falloff = 1.0 / (1.0 + np.linalg.norm(k, axis=1) ** 3)
    d = (d * falloff * np.asarray([[1.0], [1e-2]])).astype(np.complex64)
    fixed, taus, _ = fixed_point_offres(f.reshape(-1), t)
    records = reference_records(fixed_point_turns(k, matrix), taus, d, 0, 2)
    own = split_product(records, fixed, matrix, 2, [scale_of(coil) for coil in d])
    shared_scale = scale_of(d)
    shared_records = records.copy()
    shared_records[:samples, 4:8] = np.ascontiguousarray((d.T * shared_scale).astype(np.complex64)) \
        .view(np.float32).view(np.uint32)
    shared = split_product(shared_records, fixed, matrix, 2, [shared_scale, shared_scale])
    c, s = record_phasors(records, fixed, matrix)
    exact = (c + 1j * s)[:, :samples] @ d.T.astype(np.complex128)  # (N, coils)
    weak = [relative(result[1], exact[:, 1]) for result in (own, shared)]
    assert weak[0] < 2e-5 < weak[1], weak
    assert relative(own[0], exact[:, 0]) < 2e-5


def test_half_split_carries_22_bits_within_the_scaled_range():
    """|x| <= 1: the error is below 2^-22 |x| + 2^-25 (the halves' subnormal step is 2^-24: absolute)."""
    x = np.random.default_rng(5).uniform(-1, 1, 100000).astype(np.float32)
    for values in (x, x * np.float32(2.0**-8), x * np.float32(2.0**-20)):
        hi, lo = split(values)
        assert np.all(np.abs(hi + lo - values) <= 2.0**-22 * np.abs(values) + 2.0**-25)
    hi, lo = split(x)
    assert np.max(np.abs(hi + lo - x)[np.abs(x) > 0.5] / np.abs(x[np.abs(x) > 0.5])) <= 2.0**-23
    assert scale_of(np.asarray([0.0, 3.0 - 1e-3j])) == 0.25 and scale_of(np.zeros(3)) == 1.0
    assert scale_of(np.asarray([1e-44])) == np.float32(2.0**125)  # a subnormal largest: the scale stays finite


def test_defines_and_groups():
    from mri_recon.operators.offres.gpu_offres_tc import record_words, slice_count, tc_groups

    assert [offres_tc_defines(2, c)["OTC_NTILES"] for c in range(1, 9)] == [1, 1, 1, 1, 2, 2, 2, 2]
    assert record_words(4) == 12 and record_words(5) == 20
    with pytest.raises(KernelError):
        offres_tc_defines(2, MAX_GROUP + 1)
    assert tc_groups(8) == [(0, 8)] and tc_groups(12) == [(0, 8), (8, 4)] and tc_groups(3) == [(0, 3)]
    # 168 registers: 3 blocks of 4 warps per multiprocessor, 396 slots on 132; 256^2 in tiles of 64 voxels per
    # warp is 256 blocks, 65% of a wave with one or two slices, 97% with three
    assert slice_count(256 * 256, 16384, 4, 132, 168) == 3
    assert slice_count(256 * 256, 16384, 4, 132, 64) == 4  # 64 registers: 8 blocks each, 1024 of 1056 slots
    assert slice_count(64 * 64, 16384, 4, 132, 168) == 23  # 16 blocks: 368 of 396 slots
    assert slice_count(64 * 64, 6, 1, 132, 168) == 1  # one staged chunk at least per slice
    assert slice_count(8, 10**9, 4, 132, 168) == 357  # one block per slice: 357 of 396 slots reach 90%


def test_coil_launches_put_three_or_more_coils_on_the_tensor_cores(monkeypatch):
    """By default groups of 8 coils, each on the tensor cores from TC_MIN_COILS coils, the rest in fhd.cu; no
    tensor cores (here: the CPU) means fhd.cu's even groups, and tensor=True is then refused with the reason."""
    from mri_recon.arrays.backend import Device
    from mri_recon.kernels.configs import TC_MIN_COILS
    from mri_recon.operators.engines.gpu_layout import coil_groups
    from mri_recon.operators.offres import gpu_offres

    cpu = Device(-1)
    for coils in (1, 2, 3, 8, 9, 17):
        fhd = [(start, size, False) for start, size in coil_groups(coils)]
        assert gpu_offres.coil_launches(coils, cpu, None) == gpu_offres.coil_launches(coils, cpu, False) == fhd
    with pytest.raises(InvalidDataError, match="compute capability 8.0"):
        gpu_offres.coil_launches(4, cpu, True)
    monkeypatch.setattr(gpu_offres, "tensor_cores_available", lambda device: True)
    assert TC_MIN_COILS == 3  # the measured crossing (docs/benchmarks.md); the cases below follow it
    assert gpu_offres.coil_launches(2, cpu, None) == [(0, 2, False)]
    assert gpu_offres.coil_launches(3, cpu, None) == [(0, 3, True)]
    assert gpu_offres.coil_launches(9, cpu, None) == [(0, 8, True), (8, 1, False)]
    assert gpu_offres.coil_launches(11, cpu, None) == [(0, 8, True), (8, 3, True)]
    assert gpu_offres.coil_launches(9, cpu, True) == [(0, 8, True), (8, 1, True)]
    assert gpu_offres.coil_launches(9, cpu, False) == [(0, 5, False), (5, 4, False)]
    for coils in range(1, 40):
        launches = gpu_offres.coil_launches(coils, cpu, None)
        assert [start for start, _, _ in launches] == list(np.cumsum([0] + [n for _, n, _ in launches])[:-1])
        assert sum(n for _, n, _ in launches) == coils
        assert all(tc == (n >= TC_MIN_COILS) and n <= 8 for _, n, tc in launches)


def test_fhd_options_ask_for_fhd_and_are_refused_with_tensor_true():
    """recur, rotate, chunk and block choose among fhd.cu's kernels: given, they ask for fhd.cu; with
    tensor=True they are refused, never ignored."""
    from mri_recon.operators.offres.gpu_offres import tensor_request

    for tensor in (None, True, False):
        assert tensor_request(tensor, None, None, None, None) is tensor
    for options in ({"recur": True}, {"recur": False}, {"rotate": False}, {"chunk": 7}, {"block": 64}):
        full = {"recur": None, "rotate": None, "chunk": None, "block": None, **options}
        assert tensor_request(None, **full) is False and tensor_request(False, **full) is False
        with pytest.raises(InvalidDataError, match=f"{next(iter(options))} is an fhd.cu option: not with tensor=True"):
            tensor_request(True, **full)
    with pytest.raises(InvalidDataError, match="recur, chunk are fhd.cu options"):
        tensor_request(True, True, None, 5, None)


@pytest.mark.parametrize("options, message", [({"mtiles": 5}, "1 to 4 tiles of 16 voxels per warp, found mtiles=5"),
                                              ({"slices": 0}, "must lie in 1..65535, found 0"),
                                              ({}, "needs compute capability 8.0 or newer")])
def test_the_launcher_refuses_what_it_cannot_run(options, message):
    from mri_recon.arrays.backend import Device
    from mri_recon.operators.offres.gpu_offres_tc import fhd_offres_tc

    with pytest.raises(KernelError, match=message):  # checked before any array is touched
        fhd_offres_tc(None, None, None, None, None, (8, 8), Device(-1), **options)


# ----------------------------------------------------------------------------------------------------
# GPU


def _gpu(*arrays):
    cupy = cupy_module()
    return [cupy.asarray(a) for a in arrays]


@pytest.fixture
def poisoned(monkeypatch):
    """Every buffer the launchers fill starts as NaN (0xFFFFFFFF for the record words)."""
    from mri_recon.operators.offres import gpu_offres, gpu_offres_tc

    poison_empty(monkeypatch, gpu_offres, gpu_offres_tc)


@pytest.mark.gpu
@pytest.mark.parametrize("dim", [2, 3])
@pytest.mark.parametrize("coils, start, size", [(1, 0, 1), (3, 0, 3), (8, 0, 8), (12, 8, 4), (7, 2, 5)])
def test_record_kernel_matches_the_layout(rng, poisoned, dim, coils, start, size):
    from mri_recon.arrays.backend import Device
    from mri_recon.operators.engines.gpu_layout import fixed_point_turns
    from mri_recon.operators.offres.gpu_offres_layout import fixed_point_offres
    from mri_recon.operators.offres.gpu_offres_tc import pack_samples, sample_scale

    matrix = (6, 5, 4)[:dim]
    k, f, t, d = _problem(rng, matrix, coils, 45)
    d *= (np.float32(1e-12) * np.float32(10.0) ** np.arange(coils, dtype=np.float32)[:, None] / 1e4).astype(np.float32)
    fixed, taus, _ = fixed_point_offres(f.reshape(-1), t)
    kfix = fixed_point_turns(k, matrix)
    gk, gt, gd = _gpu(kfix, taus, d)
    scale = sample_scale(gd, start, size, dim, Device(0))
    expected = np.asarray([scale_of(coil) for coil in d[start:start + size]], np.float32)
    np.testing.assert_array_equal(scale.get()[:size], expected)
    np.testing.assert_array_equal(scale.get()[8:8 + size], 1 / expected)
    records = pack_samples(gk, gt, gd, scale, start, size, Device(0)).get()
    np.testing.assert_array_equal(records, reference_records(kfix, taus, d, start, size))


CASES = [((6, 5), 1, 97), ((33, 30), 3, 400), ((1, 1), 2, 1), ((7, 1), 9, 130), ((4, 3, 5), 2, 211),
         ((17, 16, 15), 4, 300), ((9, 7, 2), 8, 64), ((64, 63), 12, 1001), ((16, 16), 5, 16), ((20, 19), 16, 333),
         ((12, 12), 6, 15)]


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("mtiles, slices", [(None, None), (2, 3), (4, 1)])
def test_tensor_core_kernel_against_the_oracle(rng, poisoned, case, mtiles, slices):
    from mri_recon.arrays.backend import Device
    from mri_recon.operators.engines.gpu_layout import fixed_point_turns
    from mri_recon.operators.offres.gpu_offres_layout import centre_phase, fixed_point_offres
    from mri_recon.operators.offres.gpu_offres_tc import fhd_offres_tc

    cupy = cupy_module()
    matrix, coils, samples = case
    k, f, t, d = _problem(rng, matrix, coils, samples)
    fixed, taus, centre = fixed_point_offres(f.reshape(-1), t)
    out = cupy.full((coils, int(np.prod(matrix))), np.nan, np.complex64)
    fhd_offres_tc(out, *_gpu(d, fixed_point_turns(k, matrix), taus, fixed), matrix, Device(0), mtiles=mtiles,
                  slices=slices)
    image = out.get() * centre_phase(f.reshape(-1), centre)
    assert relative(image.reshape(coils, *matrix), offres_adjoint(d, k, f, t)) < TOL


@pytest.mark.gpu
@pytest.mark.parametrize("peak, readout", [(1000.0, 50e-3), (5.0, 1e-3)], ids=["50-turns", "tiny"])
def test_tensor_cores_keep_their_accuracy_for_large_and_small_phases_and_long_sums(rng, poisoned, peak, readout):
    from mri_recon.operators.offres.gpu_offres import fhd_offres_gpu

    matrix = (40, 36)
    k, f, t, d = _problem(rng, matrix, 8, 20000, peak, readout)
    for scale in (1e30, 1e-30):  # the records hold the samples times a power of two: any scale
        data = (d * np.float32(scale)).astype(np.complex64)
        out = fhd_offres_gpu(*_gpu(data, k), matrix, *_gpu(f, t), tensor=True)
        assert relative(out.get(), offres_adjoint(data, k, f, t)) < TOL


@pytest.mark.gpu
def test_tensor_cores_keep_their_accuracy_on_k_space_of_high_dynamic_range(rng, poisoned):
    """MRI data falls by orders of magnitude from the centre of k-space, and coils differ in strength: the half
    split loses an absolute amount (up to 2^-24 of the coil's largest sample), which must not show in any
    coil's image."""
    from mri_recon.operators.offres.gpu_offres import fhd_offres_gpu

    matrix = (48, 48)
    k, f, t, d = _problem(rng, matrix, 4, 30000)
    radius = np.linalg.norm(k, axis=1)
    strength = np.asarray([[1.0], [1e-1], [1e-2], [3e-3]])
    d = (d * (1.0 / (1.0 + radius**3)) * strength).astype(np.complex64)  # 1e5 between centre and corners
    assert np.abs(d[0]).max() / np.abs(d[0]).min() > 1e4
    out = fhd_offres_gpu(*_gpu(d, k), matrix, *_gpu(f, t), tensor=True).get()
    reference = offres_adjoint(d, k, f, t)
    for coil in range(4):
        assert relative(out[coil], reference[coil]) < TOL, coil


@pytest.mark.gpu
def test_default_launches_and_agreement_with_fhd(rng, poisoned):
    """The default follows coil_launches bit for bit: 9 coils are 8 on the tensor cores and 1 in fhd.cu; an
    fhd.cu option (recur=False: random times take the phasor kernel anyway) gives fhd.cu; the two kernels
    agree, and both meet the oracle."""
    from mri_recon.arrays.backend import Device
    from mri_recon.operators.offres import gpu_offres
    from mri_recon.operators.offres.gpu_offres_tc import tensor_cores_available

    if not tensor_cores_available(Device(0)):
        pytest.skip("no tensor cores (compute capability below 8.0)")
    matrix = (24, 21)
    k, f, t, d = _problem(rng, matrix, 9, 700)
    gk, gf, gt = _gpu(k, f, t)
    gd = _gpu(d)[0]
    default = gpu_offres.fhd_offres_gpu(gd, gk, matrix, gf, gt).get()
    np.testing.assert_array_equal(default[:8], gpu_offres.fhd_offres_gpu(gd[:8], gk, matrix, gf, gt,
                                                                        tensor=True).get())
    np.testing.assert_array_equal(default[8:], gpu_offres.fhd_offres_gpu(gd[8:], gk, matrix, gf, gt,
                                                                        tensor=False).get())
    tensor = gpu_offres.fhd_offres_gpu(gd, gk, matrix, gf, gt, tensor=True).get()
    fhd = gpu_offres.fhd_offres_gpu(gd, gk, matrix, gf, gt, tensor=False).get()
    np.testing.assert_array_equal(fhd, gpu_offres.fhd_offres_gpu(gd, gk, matrix, gf, gt, recur=False).get())
    with pytest.raises(InvalidDataError, match="chunk is an fhd.cu option"):
        gpu_offres.fhd_offres_gpu(gd, gk, matrix, gf, gt, chunk=7, tensor=True)
    reference = offres_adjoint(d, k, f, t)
    assert relative(tensor, fhd) < 2 * TOL
    for image in (default, tensor, fhd):
        assert relative(image, reference) < TOL
