"""The encoding planned once and applied many times: :class:`EncodingOperator` (public: ``mri_recon.EncodingOperator``).

``op = EncodingOperator(trajectory, matrix, coils=C, device="gpu")`` checks the trajectory, chooses the engine
as :func:`~mri_recon.operators.fhd` would for C coils, and makes its plan once (the GPU NUFFT's sorted samples,
work buffers and cuFFT plans). Then ``op(x)`` is F x, ``op.H(y)`` is F^H y and ``op.normal(weights, maps, lam)``
is the Toeplitz normal operator the solver uses, with the conventions of :func:`~mri_recon.operators.fhd`,
:func:`~mri_recon.operators.forward` and :func:`~mri_recon.operators.psf`: trajectory in cycles per field of
view, ``F x = sum_n x_n exp(-i 2 pi k_m . r_n)``, no scaling, complex64 results, inputs of any complex
precision, the same checks and messages. Each input is checked (finiteness, shape) and may be NumPy or CuPy
on any device: it is moved to the operator's device and the result comes back as the input's type (NumPy in,
NumPy out; CuPy in, CuPy out on the input's GPU), as the one-shot functions do.

The operator owns its plan and a private copy of the trajectory (the caller's array may change afterwards). One
thread at a time uses it; on a GPU, calls from different streams are ordered on the device
(:class:`~mri_recon.operators.memo.UseGuard`). On a GPU the GPU NUFFT's transforms of a small problem are
replayed as CUDA graphs from the second call on (:mod:`~mri_recon.operators.replay`): the host launches one
graph and two copies instead of the transform's launches.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..arrays.backend import Device, cupy_module, is_gpu_array, to_device
from ..checks.validation import check_any_array, check_trajectory, nonfinite_error, positive_int, validate_matrix
from ..errors import InvalidDataError, SchemaError
from .base import Adjoint, LinearOperator
from .engines import choose_engine
from .memo import UseGuard
from .public import owned, returned_like
from .reads import NOT_FINITE, Flags
from .replay import Replay, replayable

NAME = "EncodingOperator"


class EncodingOperator(LinearOperator):
    """F for one trajectory, planned once: images ``(coils, *matrix)`` -> samples ``(coils, M)``.

    Parameters
    ----------
    trajectory
        float ``(M, D)`` in cycles per field of view (NumPy or CuPy), D = ``len(matrix)``.
    matrix
        Image size ``(Nx, Ny)`` or ``(Nx, Ny, Nz)``.
    coils
        Images transformed per call (C). With C = 1 the coil axis may be left out: ``matrix`` -> ``(M,)``.
    device
        ``"auto" | "cpu" | "gpu" | "gpu:N"``; ``"auto"`` keeps a CuPy trajectory's GPU.
    method
        ``"auto" | "exact" | "nufft"``, chosen as by :func:`~mri_recon.operators.fhd` for C coils; the engine
        is :attr:`name`.
    """

    def __init__(self, trajectory: Any, matrix: Sequence[int], *, coils: int = 1,
                 device: str | int | Device | None = "auto", method: str = "auto") -> None:
        matrix = validate_matrix(matrix, NAME)
        coils = positive_int(f"{NAME}: coils", coils)
        traj = check_trajectory(NAME, trajectory, matrix)
        samples = int(traj.shape[0])
        dev, engine = choose_engine(device, method, like=trajectory, problem=(matrix, samples, coils))
        super().__init__((coils, *matrix), (coils, samples))
        self.device, self.matrix, self.coils, self.samples = dev, matrix, coils, samples
        with dev.use():
            self._encoding = engine(owned(traj, dev), matrix, coils).prepare()
        self._guard = UseGuard(dev)
        self._side_check = _SideCheck()
        self._forward, self._backward = self._transforms()

    def _transforms(self) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
        """F and F^H of the plan: replayed as CUDA graphs where the engine allows it and the problem is small
        (:mod:`mri_recon.operators.replay`), else the engine's own calls."""
        into = self._encoding.transforms_into() if self.device.is_gpu else None
        if into is None or not replayable(self.ishape, self.oshape):
            return self._encoding.apply, self._encoding.H.apply
        return Replay(into[0], self.ishape, self.oshape), Replay(into[1], self.oshape, self.ishape)

    @property
    def name(self) -> str:
        """The engine: ``"exact"`` or ``"nufft"`` (on :attr:`device`)."""
        return self._encoding.name

    def __repr__(self) -> str:
        return f"<{NAME} {self.name} on {self.device}: {self.ishape} -> {self.oshape}>"

    def _check(self, array: Any, shape: tuple[int, ...], what: str) -> None:
        """Shapes are checked with the values, in :meth:`_apply` and :meth:`_adjoint`."""

    @property
    def H(self) -> LinearOperator:  # noqa: N802 - the conventional name of the adjoint
        """F^H: samples ``(coils, M)`` (or ``(M,)`` for one coil) -> images."""
        return _CheckedAdjoint(self)

    @property
    def N(self) -> LinearOperator:  # noqa: N802 - the conventional name of the normal operator
        """F^H F: :meth:`normal` with unit weights and no maps (the engine's Toeplitz normal operator), on
        images ``(coils, *matrix)`` (or ``matrix`` for one coil)."""
        return self.normal()

    def _input(self, source: str, name: str, value: Any, shape: tuple[int, ...],
               finite: bool = True) -> tuple[Any, bool]:
        """``value`` checked (complex, finite unless ``finite`` is False for a CuPy input, shape ``shape`` or,
        for one coil, ``shape[1:]``), complex64, with a coil axis; and whether it had none."""
        array = check_any_array(source, name, value, complex_=True, ranks=(len(shape) - 1, len(shape)),
                                finite=finite)
        single = array.ndim == len(shape) - 1
        if tuple(array.shape) != (shape[1:] if single else shape) or (single and self.coils != 1):
            also = f" or {shape[1:]}" if self.coils == 1 else ""
            raise SchemaError(f"{source}: {name} must have shape {shape}{also}, found {tuple(array.shape)}")
        return (array[None] if single else array), single

    def _run(self, fn: Any, source: str, name: str, value: Any, shape: tuple[int, ...]) -> Any:
        """``fn`` of the checked input. On a GPU, ``fn``'s work is queued first and a CuPy input's finiteness is
        checked beside it (:class:`_SideCheck`): the call waits for the check, not for the work (which stays
        queued, as CuPy's own calls do). NaN or Inf then raise, and the result is dropped. Other inputs are
        checked before the work."""
        deferred = is_gpu_array(value) and self.device.is_gpu
        array, single = self._input(source, name, value, shape, finite=not deferred)
        with self.device.use(), self._guard():
            moved = to_device(array, self.device)
            if deferred:
                self._side_check.mark()
            out = returned_like(fn(moved), value)
            if deferred and self._side_check.not_finite(moved):
                raise nonfinite_error(source, name, moved) or InvalidDataError(
                    f"{source}: dataset '{name}' contains NaN or Inf values")
        return out[0] if single else out

    def _apply(self, x: Any) -> Any:
        return self._run(self._forward, NAME, "image", x, self.ishape)

    def _adjoint(self, y: Any) -> Any:
        return self._run(self._backward, f"{NAME}.H", "kspace", y, self.oshape)

    def normal(self, weights: Any = None, maps: Any = None, lam: float = 0.0,
               coil_batch: int | None = None) -> PlannedNormal:
        """The normal operator ``x -> F^H W F x + lam x`` as the solver applies it: a convolution with the
        Toeplitz kernel of these weights on the 2x grid (the engine's ``normal``; on a GPU with maps the fused
        operator), exact up to float32 rounding, no sample touched per application.

        Parameters
        ----------
        weights
            float ``(M,)`` density weights W, or None for ones.
        maps
            complex ``(coils, *matrix)`` coil sensitivities S: then ``x -> sum_c conj(S_c) F^H W F (S_c x) +
            lam x`` on images ``matrix``. None: ``F^H W F x + lam x`` of each coil image, inputs shaped as
            this operator's (``(coils, *matrix)``, or ``matrix`` for one coil).
        lam
            Tikhonov weight, absolute (``mri_recon.reconstruct``'s ``lam`` is relative to the operator's peak).
        coil_batch
            Coils pushed through the 2x-grid FFTs at once (bounds the memory); None: all.
        """
        source = f"{NAME}.normal"
        lam = float(lam)
        if not math.isfinite(lam) or lam < 0:
            raise InvalidDataError(f"{source}: lam must be a finite number >= 0, found {lam}")
        if coil_batch is not None:
            coil_batch = positive_int(f"{source}: coil_batch", coil_batch)
        with self.device.use(), self._guard():
            w = self._weights(source, weights)
            s = None if maps is None else to_device(self._input(source, "maps", maps, self.ishape)[0], self.device)
            inner = self._encoding.normal(w, s, lam, coil_batch=coil_batch)
        shape = self.matrix if maps is not None else self.ishape
        return PlannedNormal(inner, self.device, shape, self.coils == 1 and maps is None)

    def _weights(self, source: str, weights: Any) -> Any:
        if weights is None:
            return self.device.xp.ones(self.samples, dtype=np.float32)
        w = check_any_array(source, "weights", weights, complex_=False, ranks=(1,))
        if w.shape[0] != self.samples:
            raise SchemaError(f"{source}: weights has {w.shape[0]} samples but trajectory has {self.samples}")
        return to_device(w, self.device)


class _SideCheck:
    """The finiteness check of an operator's CuPy inputs, on a stream of its own at the device's highest
    priority: queued after the transform's launches, so that the device starts the transform first (the
    host's launches of the check no longer stand before it), run beside it, and read alone. One use at a time
    (the operator's :class:`~mri_recon.operators.memo.UseGuard`): its flags are reused."""

    def __init__(self) -> None:
        self._stream: Any = None
        self._flags: Flags | None = None
        self._ready: Any = None  # one event, recorded anew by each use (waited for before the next records it)

    def mark(self) -> None:
        """Record on the current stream (of the operator's GPU) where the input is ready."""
        cupy = cupy_module()
        if self._stream is None:  # CUDA clamps a priority to the device's range: this is its highest
            self._stream = cupy.cuda.Stream(non_blocking=True, priority=-1 << 16)
            self._flags, self._ready = Flags(cupy, 1), cupy.cuda.Event(block=False, disable_timing=True)
        self._ready.record()

    def not_finite(self, array: Any) -> bool:
        """Whether ``array`` (on the current GPU) holds NaN or Inf, checked once the last :meth:`mark` passed."""
        self._stream.wait_event(self._ready)
        with self._stream:
            self._flags.clear()
            self._flags.check(array)
            self._flags.send()
        return bool(self._flags.read()[0] & NOT_FINITE)


class _CheckedAdjoint(Adjoint):
    """``op.H`` of an :class:`EncodingOperator`: its shapes checked with the values, by the operator."""

    def _check(self, array: Any, shape: tuple[int, ...], what: str) -> None:
        """Checked in :meth:`EncodingOperator._adjoint`."""


class PlannedNormal(LinearOperator):
    """What :meth:`EncodingOperator.normal` returns: the solver's normal operator (:attr:`operator`) behind the
    public checks (complex input of shape :attr:`ishape`, NumPy or CuPy, the result of the input's type).
    Hermitian; :meth:`apply_into` is the operator's own (arrays on its device, complex64, C-contiguous,
    unchecked), so the GPU conjugate gradients capture it as a CUDA graph when it writes in place."""

    hermitian = True

    def __init__(self, operator: LinearOperator, device: Device, shape: tuple[int, ...], bare: bool) -> None:
        super().__init__(shape, shape)
        self.operator, self.device = operator, device
        self.writes_into = operator.writes_into
        self._bare = bare  # one coil without maps: the image may come without its coil axis
        self._guard = UseGuard(device)

    def _check(self, array: Any, shape: tuple[int, ...], what: str) -> None:
        """Checked in :meth:`_apply`."""

    def apply_into(self, x: Any, out: Any) -> None:
        self.operator.apply_into(x, out)

    def _apply(self, x: Any) -> Any:
        source = f"{NAME}.normal"
        shape = self.ishape
        ranks = (len(shape) - 1, len(shape)) if self._bare else (len(shape),)
        array = check_any_array(source, "image", x, complex_=True, ranks=ranks)
        single = self._bare and array.ndim == len(shape) - 1
        if tuple(array.shape) != (shape[1:] if single else shape):
            also = f" or {shape[1:]}" if self._bare else ""
            raise SchemaError(f"{source}: image must have shape {shape}{also}, found {tuple(array.shape)}")
        with self.device.use(), self._guard():
            return returned_like(self.operator.apply(to_device(array, self.device)), x)
