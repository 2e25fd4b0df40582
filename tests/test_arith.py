"""The element-wise operations of ``mri_recon.operators.arith`` and the checks and reductions read back
(``mri_recon.operators.reads``): the NumPy twin against float64 mathematics, and the kernels of
``kernels/arith.cu`` against the twin, over edge sizes (one element, a block
and one more, beyond the most blocks of a launch), with poisoned outputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import poison_empty, relative

from mri_recon.operators import arith, reads

SIZES = [1, 255, 256, 257, 100_003, 256 * 1024 + 1]


def _complex(rng, shape):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)


def test_flags_name_what_an_array_holds():
    flags = reads.Flags(np, 4)
    slots = [flags.check(np.array([1.0, 2.0], np.float32)), flags.check(np.array([0.0, -1.0], np.float32)),
             flags.check(np.array([1 + 1j, np.inf], np.complex64)), flags.check(np.zeros(3, np.float32))]
    bits = flags.read()
    assert [bits[s] for s in slots] == [reads.POSITIVE, reads.NEGATIVE, reads.POSITIVE | reads.NOT_FINITE, 0]
    full = reads.Flags(np, 1)
    full.check(np.ones(1, np.float32))
    with pytest.raises(IndexError, match="Flags holds 1 checks"):
        full.check(np.ones(1, np.float32))
    with pytest.raises(IndexError, match="Flags holds 1 checks"):
        full.compare(np.ones(1, np.float32), np.ones(1, np.float32))


def _comparisons(xp, n: int) -> tuple[list[tuple], list[bool]]:
    """Pairs of arrays of ``n`` items and whether each pair differs bit for bit."""
    rng = np.random.default_rng(n + 7)
    a = rng.standard_normal(n).astype(np.float32)
    last, signed, nan = a.copy(), np.zeros(n, np.float32), np.full(n, np.nan, np.float32)
    last[-1] = np.nextafter(last[-1], np.float32(np.inf))
    signed[n // 2] = -0.0
    wide = rng.standard_normal((n, 2))  # float64: 8-byte items
    wider = wide.copy()
    wider[0, 1] = np.nextafter(wider[0, 1], 0.0)
    pairs = [(a, a.copy()), (a, last), (np.zeros(n, np.float32), signed), (nan, nan.copy()), (wide, wide.copy()),
             (wide, wider)]
    return [(xp.asarray(x), xp.asarray(y)) for x, y in pairs], [False, True, True, False, False, True]


def test_flags_compare_bit_for_bit():
    pairs, differ = _comparisons(np, 5)
    flags = reads.Flags(np, len(pairs))
    slots = [flags.compare(x, y) for x, y in pairs]
    bits = flags.read()
    assert [bool(bits[s] & reads.DIFFERENT) for s in slots] == differ
    with pytest.raises(TypeError, match="compare takes two arrays of one shape"):
        reads.Flags(np, 1).compare(np.ones(3, np.float32), np.ones(4, np.float32))
    with pytest.raises(TypeError, match="4- or 8-byte dtype"):
        reads.Flags(np, 1).compare(np.ones(3, np.float16), np.ones(3, np.float16))


def test_scalars_read_together_what_each_reads_alone():
    rng = np.random.default_rng(3)
    w, k, maps = rng.random(11).astype(np.float32), _complex(rng, (2, 11)), _complex(rng, (3, 4, 5))
    scalars = reads.Scalars()
    slots = [scalars.total(w), scalars.largest(k), scalars.rss_peak(maps), scalars.largest(np.zeros(0, np.float32))]
    assert scalars.read() == [[reads.total(w), reads.largest(k), reads.rss_peak(maps), 0.0][s] for s in slots]
    assert reads.total(w) == float(np.sum(w, dtype=np.float64)) and reads.largest(k) == np.abs(k.view(np.float32)).max()


def test_host_twin_is_the_mathematics():
    rng = np.random.default_rng(1)
    maps, images = _complex(rng, (3, 5, 4)), _complex(rng, (3, 5, 4))
    out = np.empty((5, 4), np.complex64)
    arith.combine_coils(maps, images, out, accumulate=False)
    assert relative(out, np.sum(np.conj(maps.astype(complex)) * images, axis=0)) <= 1e-6
    peak = math.sqrt(np.max(np.sum(np.abs(maps.astype(complex)) ** 2, axis=0)))
    assert reads.rss_peak(maps) == pytest.approx(peak, rel=1e-6)
    assert reads.rss_peak(maps * np.float32(2.0**-100)) == pytest.approx(peak * 2.0**-100, rel=1e-6)
    w = rng.random(7).astype(np.float32)
    k = _complex(rng, (2, 7))
    np.testing.assert_array_equal(arith.weighted(k, w, 0.25), k * (w * np.float32(0.25)))
    assert reads.total(w) == pytest.approx(float(np.sum(w.astype(np.float64))), rel=1e-15)
    big = np.full(4, 2.0**120, np.float32)
    np.testing.assert_array_equal(arith.rescale(big.copy(), 2.0**-200), big * np.float32(2.0**-100)
                                  * np.float32(2.0**-100))
    assert not reads.all_finite(np.array([1.0, np.nan], np.float32)) and reads.all_finite(np.ones(3, np.complex64))


@pytest.mark.gpu
@pytest.mark.parametrize("n", SIZES)
def test_elementwise_kernels_match_numpy(monkeypatch, n):
    poison_empty(monkeypatch, arith)
    import cupy

    rng = np.random.default_rng(n)
    x = _complex(rng, (n,))
    w = rng.random(n).astype(np.float32)
    gx, gw = cupy.asarray(x), cupy.asarray(w)
    np.testing.assert_array_equal(arith.scaled(gx, 0.375).get(), x * np.float32(0.375))
    big = (w + 1) * np.float32(512)  # times a subnormal factor: normal results, not flushed to zero
    np.testing.assert_array_equal(arith.scaled(cupy.asarray(big), 2.0**-130).get(), big * np.float32(2.0**-130))
    np.testing.assert_array_equal(arith.copy(gx).get(), x)
    k = _complex(rng, (3, n))
    np.testing.assert_array_equal(arith.weighted(cupy.asarray(k), gw, 0.5).get(), k * (w * np.float32(0.5)))
    same = gx.copy()
    np.testing.assert_array_equal(arith.rescale(same, 2.0**-3).get(), x * np.float32(0.125))


@pytest.mark.gpu
@pytest.mark.parametrize("n", SIZES)
def test_reductions_match_float64(n):
    import cupy

    rng = np.random.default_rng(n + 1)
    a, b = _complex(rng, (n,)), _complex(rng, (n,))
    w = rng.random(n).astype(np.float32)
    ga, gb = cupy.asarray(a), cupy.asarray(b)
    exact = np.vdot(a.astype(np.complex128), b.astype(np.complex128))
    got = reads.inner(ga, gb)
    assert abs(got - exact) <= 1e-12 * np.linalg.norm(a) * np.linalg.norm(b)
    assert reads.inner(ga, gb) == got  # deterministic: the same bits again
    assert reads.total(cupy.asarray(w)) == pytest.approx(float(np.sum(w, dtype=np.float64)), rel=1e-13)
    assert reads.largest(ga) == float(np.max(np.abs(a.view(np.float32))))
    assert reads.largest(cupy.asarray(-w)) == float(np.max(w))
    maps = _complex(rng, (3, n))
    peak = math.sqrt(float(np.max(np.sum(np.abs(maps.astype(np.complex128)) ** 2, axis=0))))
    assert reads.rss_peak(cupy.asarray(maps)) == pytest.approx(peak, rel=1e-13)


@pytest.mark.gpu
@pytest.mark.parametrize("n", SIZES)
def test_scalars_and_comparisons_on_the_gpu(n):
    import cupy

    rng = np.random.default_rng(n + 2)
    w, k, maps = rng.random(n).astype(np.float32), _complex(rng, (2, n)), _complex(rng, (3, n))
    gw, gk, gmaps = cupy.asarray(w), cupy.asarray(k), cupy.asarray(maps)
    scalars = reads.Scalars()  # device and host reductions interleaved, one read
    slots = [scalars.largest(gk), scalars.total(w), scalars.total(gw), scalars.rss_peak(gmaps), scalars.largest(gw)]
    alone = [reads.largest(gk), reads.total(w), reads.total(gw), reads.rss_peak(gmaps), reads.largest(gw)]
    values = scalars.read()
    assert [values[s] for s in slots] == alone  # the same bits as read alone
    assert values[slots[0]] == float(np.abs(k.view(np.float32)).max())
    assert values[slots[2]] == pytest.approx(float(np.sum(w, dtype=np.float64)), rel=1e-13)
    full = reads.Scalars()
    for _ in range(reads.Scalars.CAPACITY):
        full.largest(gw)
    with pytest.raises(IndexError, match="Scalars holds 8 device reductions"):
        full.largest(gw)
    pairs, differ = _comparisons(cupy, n)
    flags = reads.Flags(cupy, len(pairs))
    slots = [flags.compare(x, y) for x, y in pairs]
    bits = flags.read()
    assert [bool(bits[s] & reads.DIFFERENT) for s in slots] == differ


@pytest.mark.gpu
@pytest.mark.parametrize("coils", [1, 3, 8])
def test_coil_combination_and_flags_on_the_gpu(monkeypatch, coils):
    import cupy

    rng = np.random.default_rng(coils)
    maps, images, start = _complex(rng, (coils, 33, 7)), _complex(rng, (coils, 33, 7)), _complex(rng, (33, 7))
    exact = np.sum(np.conj(maps.astype(np.complex128)) * images, axis=0)
    out = cupy.full((33, 7), np.nan, np.complex64)  # every element written
    arith.combine_coils(cupy.asarray(maps), cupy.asarray(images), out, accumulate=False)
    assert relative(out.get(), exact) <= 1e-6
    out = cupy.asarray(start)
    arith.combine_coils(cupy.asarray(maps), cupy.asarray(images), out, accumulate=True)
    assert relative(out.get(), exact + start) <= 1e-6
    flags = reads.Flags(cupy, 3)
    bad = np.ones(257 * 1024 + 3, np.float32)
    bad[-1] = np.inf
    slots = [flags.check(cupy.asarray(bad)), flags.check(cupy.asarray(-np.ones(5, np.float32))),
             flags.check(cupy.zeros(4, np.complex64))]
    bits = flags.read()
    assert [bits[s] for s in slots] == [reads.POSITIVE | reads.NOT_FINITE, reads.NEGATIVE, 0]
    assert not reads.all_finite(cupy.asarray(np.array([0, np.nan], np.complex64)))
    strided = cupy.asarray(np.concatenate([maps, maps], axis=-1))[..., ::2]  # views, not C-contiguous
    out = cupy.empty((33, 7), np.complex64)
    arith.combine_coils(strided, cupy.asarray(images), out, accumulate=False)
    want = np.sum(np.conj(np.concatenate([maps, maps], axis=-1)[..., ::2].astype(np.complex128)) * images, axis=0)
    assert relative(out.get(), want) <= 1e-6
    w = cupy.asarray(rng.random((2, 7)).astype(np.float32))[0]
    k = cupy.asarray(_complex(rng, (coils, 14)))[:, ::2]
    np.testing.assert_array_equal(arith.weighted(k, w, 2.0).get(), k.get() * (w.get() * np.float32(2.0)))


@pytest.mark.gpu
@pytest.mark.parametrize("grid", [(4,), (6, 8), (4, 6, 10)])
def test_alternate_is_the_spectrum_of_the_ifftshift(grid):
    import cupy

    rng = np.random.default_rng(len(grid))
    x = _complex(rng, (2, *grid))
    axes = tuple(range(1, x.ndim))
    want = np.fft.fftn(np.fft.ifftshift(x.astype(np.complex128), axes=axes), axes=axes)
    spectrum = cupy.asarray(np.fft.fftn(x.astype(np.complex128), axes=axes).astype(np.complex64))
    assert relative(arith.alternate(spectrum, 1.0).get(), want) <= 1e-6
    with pytest.raises(ValueError, match="even size"):
        arith.alternate(cupy.zeros((1, 5), np.complex64), 1.0)


@pytest.mark.gpu
@pytest.mark.parametrize(("matrix", "coils"), [((16, 12), 1), ((8, 6, 10), 3)])
def test_exact_sums_inputs_are_the_host_bits(monkeypatch, matrix, coils):
    poison_empty(monkeypatch, arith)
    import cupy

    from mri_recon.operators.engines.gpu_layout import fixed_point_turns, scaled_turns

    rng = np.random.default_rng(coils)
    k = ((rng.random((1001, len(matrix))) - 0.5) * 3 * np.asarray(matrix)).astype(np.float32)
    for mult in (1.0, 2.0):
        np.testing.assert_array_equal(scaled_turns(cupy.asarray(k), matrix, mult).get(), scaled_turns(k, matrix, mult))
    kfix = fixed_point_turns(k, matrix)
    data = _complex(rng, (coils, 1001))
    words = len(matrix) + 1 + 2 * coils  # one word of padding
    want = np.zeros((1001, words), np.uint32)
    want[:, :len(matrix)] = kfix
    want[:, words - 2 * coils:] = np.ascontiguousarray(data.T).view(np.float32).view(np.uint32)
    got = arith.records(cupy.asarray(kfix), cupy.asarray(data), words)
    np.testing.assert_array_equal(got.get(), want)
    weights = rng.random(1001).astype(np.float32)
    real = arith.records(cupy.asarray(kfix), cupy.asarray(weights[None]), len(matrix) + 1).get()
    np.testing.assert_array_equal(real[:, -1], weights.view(np.uint32))
    np.testing.assert_array_equal(real[:, :len(matrix)], kfix)


def test_alternate_refuses_what_it_cannot_change_in_place():
    with pytest.raises(ValueError, match="1 to 3 grid axes of even size"):
        arith.alternate(np.zeros((1, 4, 3), np.complex64), 1.0)
    with pytest.raises(TypeError, match="in place on a C-contiguous complex64 array"):
        arith.alternate(np.zeros((1, 4), np.complex128), 1.0)
    with pytest.raises(TypeError, match="in place on a C-contiguous complex64 array"):
        arith.alternate(np.zeros((1, 4, 8), np.complex64)[:, :, ::2], 1.0)
