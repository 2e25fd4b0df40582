"""The off-resonance encoding: F with a field map, exact (NumPy float64 on the CPU, CUDA kernels on the GPU).

Model and sign. With the field map f (Hz, one value per voxel) and the sample times t (s, one per sample),

    d_m = sum_n x_n exp(-i 2 pi (k_m . r_n + f_n t_m)),
    (F^H d)_n = sum_m d_m exp(+i 2 pi (k_m . r_n + f_n t_m)).

A spin precessing f Hz faster than the reference accumulates the phase ``-2 pi f t`` by time t, the same sign
as the trajectory term (BART ``nufft`` and SigPy's convention, extended; IMPATIENT, Stone et al. 2008, and
Sutton, Noll and Fessler 2003 write the same model). With ``f = 0`` it is the plain encoding of
:mod:`.encoding`. Times count from any origin (usually the excitation): a shift of t by t0 multiplies the
image by ``exp(-i 2 pi f t0)``, which only moves phase between the image and the data.

:class:`OffresEncoding` is an engine of the encoding protocol (:class:`~mri_recon.operators.engines.Encoding`):
``(batch, *matrix)`` -> ``(batch, M)``, with ``.H``, ``.N``, :meth:`OffresEncoding.batched` and
:meth:`OffresEncoding.normal`; the float64 sum below (chunked) on the CPU, the CUDA kernels of
:mod:`.gpu_offres` on a GPU. The time-segmented approximation, which runs through any plain engine, lives in
:mod:`.time_segments` (the fit) and :mod:`.segmented` (its operators).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...arrays.backend import get_xp
from ...checks.grid import voxel_positions
from ...errors import InvalidDataError, SchemaError
from ..base import LinearOperator, SenseNormal
from ..engines.encoding import Encoding
from ..engines.nudft import DEFAULT_CHUNK_BYTES, _blocks


def _phases(k: np.ndarray, r: np.ndarray, t: np.ndarray, f: np.ndarray, sign: float) -> np.ndarray:
    """exp(sign i 2 pi (k . r + f t)) for every pair (row of k, row of r), complex128 (len(k), len(r))."""
    cycles = k @ r.T + t[:, None] * f[None, :]
    cycles -= np.rint(cycles)  # 1-periodic: keep the argument within half a turn
    return np.exp((2j * np.pi * sign) * cycles)


def _inputs(trajectory: Any, field_map: Any, times: Any, matrix: Sequence[int]
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    matrix = tuple(int(n) for n in matrix)
    k = np.asarray(trajectory, dtype=np.float64)
    if k.ndim != 2 or k.shape[1] != len(matrix):
        raise SchemaError(f"trajectory must have shape (M, {len(matrix)}), found {k.shape}")
    f = np.asarray(field_map, dtype=np.float64)
    t = np.asarray(times, dtype=np.float64)
    if f.shape != matrix:
        raise SchemaError(f"field_map must have the image's shape {matrix}, found {f.shape}")
    if t.shape != (k.shape[0],):
        raise SchemaError(f"times must have shape ({k.shape[0]},) (one per sample), found {t.shape}")
    return k, voxel_positions(matrix), t, f.reshape(-1)


def offres_adjoint(kspace: Any, trajectory: Any, field_map: Any, times: Any, *,
                   chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> np.ndarray:
    """Exact F^H d with off-resonance in float64: complex128 ``(C, *matrix)`` from ``kspace`` ``(C, M)``.

    ``matrix`` is ``field_map.shape``; ``trajectory`` ``(M, D)`` in cycles per FOV, ``field_map`` in Hz,
    ``times`` ``(M,)`` in s. Blocks of (samples x voxels) phases bound the memory by ``chunk_bytes``.
    """
    matrix = tuple(np.shape(field_map))
    k, r, t, f = _inputs(trajectory, field_map, times, matrix)
    data = np.asarray(kspace, dtype=np.complex128)
    if data.ndim != 2 or data.shape[1] != k.shape[0]:
        raise SchemaError(f"kspace must have shape (C, {k.shape[0]}), found {data.shape}")
    out = np.zeros((data.shape[0], r.shape[0]), dtype=np.complex128)
    n_samples, n_voxels = _blocks(k.shape[0], r.shape[0], 16, chunk_bytes)
    for v in range(0, r.shape[0], n_voxels):
        for m in range(0, k.shape[0], n_samples):
            ms, vs = slice(m, m + n_samples), slice(v, v + n_voxels)
            out[:, vs] += data[:, ms] @ _phases(k[ms], r[vs], t[ms], f[vs], +1.0)
    return out.reshape(data.shape[0], *matrix)


def offres_forward(image: Any, trajectory: Any, field_map: Any, times: Any, *,
                   chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> np.ndarray:
    """Exact F x with off-resonance in float64: complex128 ``(C, M)`` from ``image`` ``(C, *matrix)``."""
    matrix = tuple(np.shape(field_map))
    k, r, t, f = _inputs(trajectory, field_map, times, matrix)
    x = np.asarray(image, dtype=np.complex128)
    if x.shape[1:] != matrix:
        raise SchemaError(f"image must have shape (C, {', '.join(map(str, matrix))}), found {x.shape}")
    flat = x.reshape(x.shape[0], -1)
    out = np.zeros((x.shape[0], k.shape[0]), dtype=np.complex128)
    n_samples, n_voxels = _blocks(k.shape[0], r.shape[0], 16, chunk_bytes)
    for m in range(0, k.shape[0], n_samples):
        for v in range(0, r.shape[0], n_voxels):
            ms, vs = slice(m, m + n_samples), slice(v, v + n_voxels)
            out[:, ms] += flat[:, vs] @ _phases(k[ms], r[vs], t[ms], f[vs], -1.0).T
    return out


class OffresEncoding(Encoding):
    """F with off-resonance, exact: ``(batch, *matrix)`` complex64 -> ``(batch, M)`` complex64.

    Parameters
    ----------
    trajectory
        float32 ``(M, D)`` in cycles per field of view, on the engine's device.
    field_map
        float32 ``matrix`` (Hz), same device.
    times
        float32 ``(M,)`` (s), same device.
    batch
        Images transformed at once (coils).

    An engine of the encoding protocol (``name = "exact"``) whose device follows the arrays: NumPy arrays use the
    float64 sum (:func:`offres_forward`, :func:`offres_adjoint`), CuPy arrays the CUDA kernels of
    :mod:`.gpu_offres`. Its normal operator applies A and A^H every iteration (:class:`EncodingNormal`).
    """

    name = "exact"
    caches_psf = False
    time_segmentation = False
    auto = False

    def __init__(self, trajectory: Any, field_map: Any, times: Any, batch: int = 1) -> None:
        super().__init__(trajectory, tuple(int(n) for n in field_map.shape), batch)
        self.field_map, self.times = field_map, times
        self.gpu = get_xp(trajectory) is not np
        self.device_kind = "gpu" if self.gpu else "cpu"
        self.key = f"offres-{self.name}-{self.device_kind}"
        self._prepared = None
        if self.gpu:  # the kernels' fixed-point field map and times, once (checks their range here)
            from .gpu_offres_layout import prepare_offres  # noqa: PLC0415 - needs CuPy

            self._prepared = prepare_offres(field_map, times)

    def batched(self, batch: int) -> OffresEncoding:
        """The same operator for ``batch`` images at once."""
        if batch == self.ishape[0]:
            return self
        twin = object.__new__(OffresEncoding)
        twin.__dict__.update(self.__dict__)
        LinearOperator.__init__(twin, (batch, *self.matrix), (batch, self.oshape[1]))
        return twin

    def _apply(self, x: Any) -> Any:
        if self.gpu:
            from .gpu_offres import forward_offres_gpu  # noqa: PLC0415 - needs CuPy and a GPU

            return forward_offres_gpu(x, self.trajectory, self.field_map, self.times, prepared=self._prepared)
        return offres_forward(x, self.trajectory, self.field_map, self.times).astype(np.complex64)

    def _adjoint(self, y: Any) -> Any:
        if self.gpu:
            from .gpu_offres import fhd_offres_gpu  # noqa: PLC0415 - needs CuPy and a GPU

            return fhd_offres_gpu(y, self.trajectory, self.matrix, self.field_map, self.times,
                                  prepared=self._prepared)
        return offres_adjoint(y, self.trajectory, self.field_map, self.times).astype(np.complex64)

    def psf(self, weights: Any) -> Any:
        raise InvalidDataError("the exact off-resonance encoding has no Toeplitz PSF (the field map breaks the "
                               "shift invariance): use normal(weights, maps, lam)")

    def normal(self, weights: Any, maps: Any = None, lam: float = 0.0, *, coil_batch: int | None = None,
               spectrum: Any = None) -> LinearOperator:
        """``A^H W A + lam I`` with A and A^H applied every iteration (:class:`EncodingNormal`)."""
        if spectrum is not None:
            raise InvalidDataError("the exact off-resonance encoding has no Toeplitz spectrum; pass spectrum=None")
        return EncodingNormal(self, weights, coil_maps=maps, lam=lam, coil_batch=coil_batch)


class EncodingNormal(SenseNormal):
    """The CG operator ``x -> sum_c conj(S_c) A^H W A (S_c x) + lam x`` with any encoding ``A`` applied every
    iteration (no Toeplitz embedding: the way IMPATIENT solves with a field map). Without maps ``x`` holds one
    image per coil, each solved on its own. Coils go through ``A`` ``coil_batch`` at a time. Hermitian.

    Parameters
    ----------
    encoding
        An operator ``(batch, *matrix) -> (batch, M)`` with ``batched(n)``.
    weights
        Real ``(M,)`` density weights W (same array type).
    coil_maps
        ``(C, *matrix)`` or None.
    lam
        Absolute Tikhonov weight.
    coil_batch
        Coils per pass; None: all.
    """

    def __init__(self, encoding: Any, weights: Any, *, coil_maps: Any = None, lam: float = 0.0,
                 coil_batch: int | None = None) -> None:
        matrix = tuple(encoding.ishape[1:])
        super().__init__(matrix, matrix)
        self.encoding, self.weights, self.maps, self.lam = encoding, weights, coil_maps, float(lam)
        self.coil_batch = coil_batch

    def _normal(self, images: Any) -> Any:
        op = self.encoding.batched(images.shape[0])
        return op.H(op(images) * self.weights)

