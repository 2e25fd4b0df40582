"""Helpers shared by the tests: random problems and the relative error against a float64 reference."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
from pytest import approx

ROOT = Path(__file__).resolve().parents[1]


def poison_empty(monkeypatch, *modules) -> None:
    """Every buffer the launchers of ``modules`` take from their ``empty`` starts with all bytes 0xFF (NaN in
    float and complex arrays, -1 in integer ones), so an element a kernel leaves unwritten shows."""
    from mri_recon.arrays.backend import cupy_module

    cupy = cupy_module()

    def empty(shape, dtype):
        out = cupy.empty(shape, dtype)
        out.view(cupy.uint8).fill(0xFF)
        return out

    for module in modules:
        monkeypatch.setattr(module, "empty", empty)


def relative(out, ref) -> float:
    """``||out - ref|| / ||ref||`` in float64, after checking that the shapes agree."""
    out = np.asarray(out, dtype=np.complex128)
    ref = np.asarray(ref, dtype=np.complex128)
    assert out.shape == ref.shape
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def adjoint_gap(x, fhy, y, fx) -> float:
    """``|<F x, y> - <x, F^H y>|`` over the Cauchy-Schwarz bound ``max(||F x|| ||y||, ||x|| ||F^H y||)``.

    The bound is the scale of the rounding in either inner product, so the gap measures adjointness without
    the cancellation that can make ``|<F x, y>|`` itself small.
    """
    x, fhy, y, fx = (np.asarray(a, dtype=np.complex128) for a in (x, fhy, y, fx))
    assert x.shape == fhy.shape and y.shape == fx.shape
    bound = max(np.linalg.norm(fx) * np.linalg.norm(y), np.linalg.norm(x) * np.linalg.norm(fhy))
    return float(abs(np.vdot(fx, y) - np.vdot(x, fhy)) / bound)


def random_problem(rng, matrix, coils, samples, reach=0.5):
    """Trajectory uniform in reach * [-N, N) per axis (0.5: Nyquist), complex64 data of ``coils`` coils."""
    traj = ((rng.random((samples, len(matrix))) - 0.5) * 2 * reach * np.asarray(matrix)).astype(np.float32)
    data = (rng.standard_normal((coils, samples)) + 1j * rng.standard_normal((coils, samples))).astype(np.complex64)
    return traj, data


def kernel_phasor(big_t):
    """mri_recon_phase.cuh's phasor: the top 23 bits of T + 2^31 as a float turn in [-1/2, 1/2) (exact in
    NumPy), then the sine and cosine (float64 here; __sincosf on the GPU)."""
    t = ((big_t >> np.uint32(9)) ^ np.uint32(0x3FC00000)).astype(np.uint32).view(np.float32) - np.float32(1.5)
    angle = 2 * np.pi * t.astype(np.float64)
    return np.cos(angle), np.sin(angle)


def kernel_offres_turns(fixed, tau):
    """mri_recon_phase.cuh's offres_turns: bits 16..47 of the 64-bit product F tau."""
    product = np.asarray(fixed).astype(np.int64) * np.asarray(tau).astype(np.int64)
    return (product >> 16).astype(np.uint64).astype(np.uint32)


def load_script(name: str):
    """The module of ``scripts/<name>.py`` (the scripts are not a package), loaded afresh."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read_png(path) -> np.ndarray:
    """The pixels of an 8-bit, non-interlaced PNG (grey ``(H, W)``, RGB ``(H, W, 3)``), every row filter undone
    (PNG spec 9.2): enough to read ours and ``bart toimg``'s."""
    import struct
    import zlib

    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        tag, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        if tag == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour in (0, 2) and interlace == 0
        elif tag == b"IDAT":
            idat += body
        pos += 12 + length
    step = 3 if colour == 2 else 1
    raw = np.frombuffer(zlib.decompress(idat), np.uint8).reshape(height, 1 + width * step)
    out = np.zeros((height, width * step), np.int32)
    for y in range(height):
        kind, line, up = raw[y, 0], raw[y, 1:].astype(np.int32), out[y - 1] if y else np.zeros(width * step, np.int32)
        for x in range(width * step):
            left = out[y, x - step] if x >= step else 0
            corner = up[x - step] if x >= step and y else 0
            guess = {0: 0, 1: left, 2: up[x], 3: (left + up[x]) // 2}.get(int(kind))
            if guess is None:  # Paeth
                p = left + up[x] - corner
                guess = min((abs(p - left), 0, left), (abs(p - up[x]), 1, up[x]), (abs(p - corner), 2, corner))[2]
            out[y, x] = (line[x] + guess) % 256
    return out.reshape(height, width, 3) if step == 3 else out


def assert_same_preparation(ours, record, theirs, their_record, basis_tolerance: float) -> None:
    """Two preparations of one scan (the device's NumPy twin and ``prepare_scan``) made the same scan and record:
    k-space, noise and maps to float32 precision, the receiver basis to ``basis_tolerance``, the compression's
    energy to 1e-12 and every other entry of the record equal."""
    for name in ("kspace", "noise", "coil_maps"):
        a, b = getattr(ours, name), getattr(theirs, name)
        assert (a is None) == (b is None), name
        if b is not None:
            assert relative(a, b) < 1e-6, name
    record, their_record = dict(record), dict(their_record)
    basis, their_basis = record.pop("maps_basis"), their_record.pop("maps_basis")
    assert (basis is None) == (their_basis is None)
    assert basis is None or relative(basis, their_basis) < basis_tolerance
    assert record.pop("coil_compress_energy") == approx(their_record.pop("coil_compress_energy"), rel=1e-12)
    assert record == their_record


def smallest_traced_peak(call, repeats: int = 3) -> int:
    """The smallest of ``repeats`` tracemalloc peaks of ``call()`` (its result included). tracemalloc counts
    every thread of the process, and a test worker has others (pytest-xdist's messages, threads left by earlier
    tests): the call's buffers repeat from trace to trace, the other threads' allocations do not."""
    import tracemalloc

    peaks = []
    for _ in range(repeats):
        tracemalloc.start()
        try:
            call()
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
    return min(peaks)
