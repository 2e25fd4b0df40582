"""The encoding operator on torch tensors, with autograd: :class:`TorchEncoding`.

``A = TorchEncoding(trajectory, matrix, maps=S)`` plans an :class:`~mri_recon.operators.EncodingOperator` once
for the C coils of the maps (on the maps' device unless ``device`` says otherwise). Then ``A(x)`` is the SENSE
forward model ``y_c = F (S_c x)``, ``A.H(y)`` its adjoint ``sum_c conj(S_c) F^H y_c`` and ``A.normal(x)`` the
normal operator ``A^H W A x + lam x`` (the operator's Toeplitz normal, as the solvers apply it). Without maps
the operator is F on C coil images, ``(C, *matrix) -> (C, M)``. Any leading axes are a batch: each item is
transformed in turn.

Each is a :class:`torch.autograd.Function` whose backward is the adjoint map: PyTorch's gradient of a real loss
L with respect to a complex tensor z is ``2 dL/d(conj z)`` (the conjugate Wirtinger derivative), so the backward
of a linear map ``y = A x`` takes the output's gradient g to ``A^H g``: the forward's backward is the adjoint, the
adjoint's is the forward and the normal's (A^H A is Hermitian) is the normal itself. The backward is again
such a Function, so gradients of gradients work too. The maps, weights and trajectory are constants: no
gradient reaches them.

Precision: complex64 in, complex64 out, by the chosen engine. complex128 in, complex128 out: on the CPU with
the ``exact`` engine the sums are evaluated in float64 (:mod:`~mri_recon.operators.engines.nudft`, the
oracle; the normal operator is then ``A^H (W (A x)) + lam x``, no Toeplitz kernel), which is what a
double-precision ``torch.autograd.gradcheck`` needs; on any other engine the input is rounded to complex64,
transformed, and the result widened to complex128 (float32 accuracy). A real input is taken as complex of
its precision.

The work runs on the tensors' memory seen as NumPy or CuPy arrays (:mod:`.tensors`), the maps' products
included: torch computes nothing here but the stacking of a batch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from ..arrays.backend import to_host
from ..checks.validation import check_trajectory, validate_matrix
from ..errors import SchemaError
from ..operators import EncodingOperator, NudftEncoding, choose_engine
from ..operators.engines.nudft import nudft_adjoint, nudft_forward
from .tensors import COMPLEX, as_array, as_tensor, complex_input, device_of, on_stream, torch_device

NAME = "TorchEncoding"
Transform = Callable[[torch.Tensor], torch.Tensor]


class _Linear(torch.autograd.Function):
    """``A x`` for a linear map given as two functions on tensors outside autograd, ``A`` and ``A^H``; the
    gradient is ``A^H g``, itself recorded as this Function (with the two swapped) when a graph is built."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, apply: Transform, adjoint: Transform) -> torch.Tensor:
        ctx.pair = (apply, adjoint)  # not ctx.apply: that is the node's own method
        return apply(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        apply, adjoint = ctx.pair
        return _Linear.apply(grad, adjoint, apply), None, None


class TorchEncoding:
    """The encoding (SENSE with ``maps``) of one trajectory on torch tensors, planned once.

    Parameters
    ----------
    trajectory
        float ``(M, D)`` in cycles per field of view (tensor, NumPy or CuPy), D = ``len(matrix)``.
    matrix
        Image size ``(Nx, Ny)`` or ``(Nx, Ny, Nz)``.
    maps
        complex ``(C, *matrix)`` coil sensitivities S (tensor or NumPy), or None: then images are ``(coils,
        *matrix)`` and no coils are combined.
    coils
        Without maps, the coil images per item (default 1); with maps it is the maps' C.
    weights
        float ``(M,)`` density weights W of :meth:`normal`, or None for ones.
    lam
        Tikhonov weight of :meth:`normal` (absolute).
    device
        A torch device (``"cuda:1"``, ``torch.device("cpu")``) or the package's names (``"cpu"``, ``"gpu:N"``,
        ``"auto"``); None: the device of the maps, else of the trajectory (the CPU for NumPy). Inputs must be
        on this device.
    method
        ``"auto" | "exact" | "nufft"``, as for :class:`~mri_recon.operators.EncodingOperator`.
    """

    def __init__(
        self,
        trajectory: Any,
        matrix: Sequence[int],
        *,
        maps: Any = None,
        coils: int | None = None,
        weights: Any = None,
        lam: float = 0.0,
        device: Any = None,
        method: str = "auto",
    ) -> None:
        self.matrix = validate_matrix(matrix, NAME)
        name, _ = device_of(device, maps, trajectory)
        traj = _array(trajectory)
        coils = self._coils(maps, coils)
        self.operator = EncodingOperator(traj, self.matrix, coils=coils, device=name, method=method)
        self.device = torch_device(self.operator.device)
        self.coils, self.samples = coils, self.operator.samples
        engine = choose_engine(self.operator.device, method, like=traj, problem=(self.matrix, self.samples, coils))[1]
        self._float64 = engine is NudftEncoding and not self.operator.device.is_gpu
        self._k64 = np.asarray(to_host(check_trajectory(NAME, traj, self.matrix)), dtype=np.float64)
        self._maps = None if maps is None else _maps(_tensor(maps, self.device))
        self._weights = None if weights is None else _tensor(weights, self.device)
        self._lam = float(lam)
        self._normal: Any = None
        self.image_shape = self.matrix if maps is not None else (coils, *self.matrix)
        """Shape of an image (after any batch axes)."""
        self.kspace_shape = (coils, self.samples)
        """Shape of the samples of an image (after any batch axes)."""

    def _coils(self, maps: Any, coils: int | None) -> int:
        if maps is None:
            return 1 if coils is None else int(coils)
        shape = tuple(maps.shape)
        if len(shape) != len(self.matrix) + 1 or shape[1:] != self.matrix:
            raise SchemaError(f"{NAME}: maps must have shape (C, {', '.join(map(str, self.matrix))}), found {shape}")
        if coils is not None and int(coils) != shape[0]:
            raise SchemaError(f"{NAME}: coils = {coils} but the maps have {shape[0]} coils")
        return shape[0]

    @property
    def lam(self) -> float:
        """The Tikhonov weight of :meth:`normal`, fixed when the operator is made (its Toeplitz normal operator
        is planned with it): a new weight is a new ``TorchEncoding``."""
        return self._lam

    @property
    def name(self) -> str:
        """The engine (:attr:`~mri_recon.operators.EncodingOperator.name`)."""
        return self.operator.name

    def __repr__(self) -> str:
        maps = "SENSE, " if self._maps is not None else ""
        return f"<{NAME} {maps}{self.name} on {self.device}: {self.image_shape} -> {self.kspace_shape}>"

    # -- the public maps, with autograd -----------------------------------------------------------------------

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``A x``: images ``(..., *image_shape)`` -> samples ``(..., *kspace_shape)``; backward: :meth:`adjoint`."""
        x = complex_input(NAME, "image", x, self.device)
        return _Linear.apply(x, self._forward, self._adjoint)

    def adjoint(self, y: torch.Tensor) -> torch.Tensor:
        """``A^H y``: samples ``(..., *kspace_shape)`` -> images ``(..., *image_shape)``; backward: :meth:`forward`."""
        y = complex_input(f"{NAME}.H", "kspace", y, self.device)
        return _Linear.apply(y, self._adjoint, self._forward)

    def normal(self, x: torch.Tensor) -> torch.Tensor:
        """``A^H W A x + lam x`` on images ``(..., *image_shape)``; Hermitian: its backward is itself."""
        x = complex_input(f"{NAME}.normal", "image", x, self.device)
        return _Linear.apply(x, self._normal_map, self._normal_map)

    @property
    def H(self) -> _Adjoint:  # noqa: N802 - the conventional name of the adjoint
        """The adjoint as an operator: ``A.H(y)`` is :meth:`adjoint`, ``A.H.H`` is ``A``."""
        return _Adjoint(self)

    # -- the maps on tensors, outside autograd ----------------------------------------------------------------

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._batched(self._forward_array, x, self.image_shape, "image")

    def _adjoint(self, y: torch.Tensor) -> torch.Tensor:
        return self._batched(self._adjoint_array, y, self.kspace_shape, "kspace")

    def _normal_map(self, x: torch.Tensor) -> torch.Tensor:
        return self._batched(self._normal_array, x, self.image_shape, "image")

    def _batched(self, fn: Callable[[Any], Any], x: torch.Tensor, shape: tuple[int, ...], name: str) -> torch.Tensor:
        """``fn`` (on arrays) of each item of ``x`` (``(..., *shape)``), at the precision the engine gives
        ``x``'s dtype."""
        if tuple(x.shape[x.ndim - len(shape) :]) != shape or x.ndim < len(shape):
            raise SchemaError(
                f"{NAME}: {name} must have shape (..., {', '.join(map(str, shape))}), found {tuple(x.shape)}"
            )
        if x.dtype == torch.complex128 and not self._float64:  # rounded to the engine's precision
            return self._batched(fn, x.to(torch.complex64), shape, name).to(torch.complex128)
        lead = x.shape[: x.ndim - len(shape)]
        if not lead:
            return _through(fn, x)
        items = [_through(fn, item) for item in x.reshape(-1, *shape)]
        return torch.stack(items).reshape(*lead, *items[0].shape)

    # -- the maps on arrays (NumPy or CuPy, the tensors' memory): complex64 by the engine, complex128 by the sums

    def _forward_array(self, x: Any) -> Any:
        images = x if self._maps is None else self._maps[x.dtype][0] * x
        if x.dtype == np.complex128:
            return nudft_forward(images, self._k64)
        return self.operator(images)

    def _adjoint_array(self, y: Any) -> Any:
        if y.dtype == np.complex128:
            images = nudft_adjoint(y, self._k64, self.matrix)
        else:
            images = self.operator.H(y)
        return images if self._maps is None else (self._maps[y.dtype][1] * images).sum(axis=0)

    def _normal_array(self, x: Any) -> Any:
        if x.dtype == np.complex128:  # the float64 sums: A^H (W (A x)) + lam x
            y = self._forward_array(x)
            out = self._adjoint_array(y if self._weights is None else y * as_array(self._weights.double()))
            return out + self._lam * x if self._lam else out
        return self._planned_normal()(x)

    def _planned_normal(self) -> Any:
        """The operator's Toeplitz normal for these weights, maps and lam, made on first use."""
        if self._normal is None:
            with on_stream(self.device):
                maps = None if self._maps is None else self._maps[np.dtype(np.complex64)][0]
                weights = None if self._weights is None else as_array(self._weights.float())
                self._normal = self.operator.normal(weights, maps, self._lam)
        return self._normal


class _Adjoint:
    """``A.H`` of a :class:`TorchEncoding`: called, it is ``A.adjoint``; ``.H`` is ``A`` again."""

    def __init__(self, op: TorchEncoding) -> None:
        self.H = op

    def __call__(self, y: torch.Tensor) -> torch.Tensor:
        return self.H.adjoint(y)


def _through(fn: Callable[[Any], Any], tensor: torch.Tensor) -> torch.Tensor:
    """``fn`` (NumPy or CuPy in, the same out) of the tensor's memory, on its device and stream."""
    with on_stream(tensor.device):
        return as_tensor(fn(as_array(tensor)))


def _array(value: Any) -> Any:
    """A tensor's values as NumPy or CuPy (made on its stream); anything else as given."""
    if isinstance(value, torch.Tensor):
        with on_stream(value.device):
            return as_array(value)
    return value


def _maps(maps: torch.Tensor) -> dict[np.dtype, tuple[Any, Any]]:
    """The maps and their conjugates in both complex precisions, as arrays (NumPy or CuPy) by dtype: the views
    keep their tensors."""
    out = {}
    with on_stream(maps.device):
        for dtype in (torch.complex64, torch.complex128):
            m = maps.to(dtype)
            out[np.dtype(COMPLEX[dtype])] = (as_array(m), as_array(m.conj()))
    return out


def _tensor(value: Any, device: torch.device) -> torch.Tensor:
    """``value`` (tensor, NumPy or CuPy) as a detached tensor on ``device``."""
    if not isinstance(value, torch.Tensor):
        value = as_tensor(value if not isinstance(value, (list, tuple)) else np.asarray(value))
    if not (value.is_complex() or value.is_floating_point()) or not math.prod(value.shape):
        raise SchemaError(
            f"{NAME}: maps and weights must be non-empty float or complex, found {value.dtype} "
            f"of shape {tuple(value.shape)}"
        )
    return value.detach().to(device)
