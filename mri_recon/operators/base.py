"""The linear-operator protocol: shapes, adjoint, normal operator and composition.

In the spirit of SigPy's ``Linop`` and mrpro's ``LinearOperator``: an operator maps arrays of shape
:attr:`LinearOperator.ishape` to arrays of shape :attr:`LinearOperator.oshape`, on whatever device its input
lives (NumPy or CuPy); ``A.H`` is the adjoint (itself an operator), ``A.N`` the normal operator ``A^H A``, and
``A @ B`` the composition ``x -> A(B(x))``. Operators are callables, so any solver that takes ``x -> A x``
takes them too.

A subclass implements :meth:`LinearOperator._apply` and :meth:`LinearOperator._adjoint` (or declares itself
Hermitian with ``hermitian = True``). One that can write its result into a given array without allocating
(and without synchronizing the host) overrides :meth:`LinearOperator.apply_into` and sets ``writes_into =
True``: the GPU conjugate-gradient solver then captures its iterations as a CUDA graph.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..arrays.backend import get_xp
from ..errors import SchemaError


def _shape(shape: Sequence[int]) -> tuple[int, ...]:
    return tuple(int(n) for n in shape)


class LinearOperator:
    """A linear map from arrays of shape ``ishape`` to arrays of shape ``oshape``.

    Parameters
    ----------
    ishape
        Shape of the input.
    oshape
        Shape of the output.
    """

    hermitian: bool = False
    """True when the operator equals its adjoint (then ``A.H is A``)."""
    writes_into: bool = False
    """True when :meth:`apply_into` writes the result without allocating or waiting for the device."""

    def __init__(self, ishape: Sequence[int], oshape: Sequence[int]) -> None:
        self.ishape = _shape(ishape)
        self.oshape = _shape(oshape)

    # -- what subclasses implement -------------------------------------------------------------------------

    def _apply(self, x: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not implement its forward map")

    def _adjoint(self, y: Any) -> Any:
        if self.hermitian:
            return self._apply(y)
        raise NotImplementedError(f"{type(self).__name__} does not implement its adjoint")

    # -- the protocol --------------------------------------------------------------------------------------

    def apply(self, x: Any) -> Any:
        """``A x`` for ``x`` of shape :attr:`ishape` (NumPy or CuPy); the result has shape :attr:`oshape`."""
        self._check(x, self.ishape, "input")
        return self._apply(x)

    def __call__(self, x: Any) -> Any:
        return self.apply(x)

    def apply_into(self, x: Any, out: Any) -> None:
        """Write ``A x`` into ``out`` (shape :attr:`oshape`). The default allocates; see ``writes_into``."""
        out[...] = self.apply(x)

    @property
    def H(self) -> LinearOperator:  # noqa: N802 - the conventional name of the adjoint
        """The adjoint operator ``A^H`` (``oshape -> ishape``)."""
        if self.hermitian:
            return self
        return Adjoint(self)

    @property
    def N(self) -> LinearOperator:  # noqa: N802 - the conventional name of the normal operator
        """The normal operator ``A^H A`` (``ishape -> ishape``); subclasses may return a faster equivalent."""
        return self.H @ self

    def __matmul__(self, other: Any) -> Any:
        """``A @ B``: the composition of two operators; ``A @ x``: ``A`` applied to an array (as SciPy's)."""
        if isinstance(other, LinearOperator):
            return Compose(self, other)
        if hasattr(other, "shape") and hasattr(other, "dtype"):  # a NumPy or CuPy array
            return self.apply(other)
        return NotImplemented

    def __add__(self, other: LinearOperator) -> LinearOperator:
        if not isinstance(other, LinearOperator):
            return NotImplemented
        return Sum(self, other)

    def __mul__(self, factor: float) -> LinearOperator:
        if isinstance(factor, LinearOperator):
            return NotImplemented
        return Compose(Scale(self.oshape, factor), self)

    __rmul__ = __mul__

    def __repr__(self) -> str:
        return f"<{type(self).__name__}: {self.ishape} -> {self.oshape}>"

    def _check(self, array: Any, shape: tuple[int, ...], what: str) -> None:
        if tuple(array.shape) != shape:
            raise SchemaError(f"{type(self).__name__} {what} must have shape {shape}, found {tuple(array.shape)}")


class Adjoint(LinearOperator):
    """``A^H`` of an operator ``A`` (built by ``A.H``)."""

    def __init__(self, op: LinearOperator) -> None:
        super().__init__(op.oshape, op.ishape)
        self.op = op

    def _apply(self, x: Any) -> Any:
        return self.op._adjoint(x)

    def _adjoint(self, y: Any) -> Any:
        return self.op._apply(y)

    @property
    def H(self) -> LinearOperator:  # noqa: N802
        return self.op


class Compose(LinearOperator):
    """``A @ B``: ``x -> A(B(x))``; the adjoint is ``B^H A^H``."""

    def __init__(self, outer: LinearOperator, inner: LinearOperator) -> None:
        if outer.ishape != inner.oshape:
            raise SchemaError(f"cannot compose {outer!r} @ {inner!r}: {outer.ishape} != {inner.oshape}")
        super().__init__(inner.ishape, outer.oshape)
        self.outer, self.inner = outer, inner

    def _apply(self, x: Any) -> Any:
        return self.outer._apply(self.inner._apply(x))

    def _adjoint(self, y: Any) -> Any:
        return self.inner._adjoint(self.outer._adjoint(y))


class Sum(LinearOperator):
    """``A + B`` (same shapes)."""

    def __init__(self, a: LinearOperator, b: LinearOperator) -> None:
        if (a.ishape, a.oshape) != (b.ishape, b.oshape):
            raise SchemaError(f"cannot add {a!r} and {b!r}: shapes differ")
        super().__init__(a.ishape, a.oshape)
        self.a, self.b = a, b
        self.hermitian = a.hermitian and b.hermitian

    def _apply(self, x: Any) -> Any:
        return self.a._apply(x) + self.b._apply(x)

    def _adjoint(self, y: Any) -> Any:
        return self.a._adjoint(y) + self.b._adjoint(y)


class Scale(LinearOperator):
    """``x -> factor * x`` on arrays of ``shape``; ``Scale(shape, 1)`` is the identity.

    Tikhonov regularization is ``A.N + Scale(A.ishape, lam)``. A complex factor's adjoint is its conjugate.
    """

    def __init__(self, shape: Sequence[int], factor: complex = 1.0) -> None:
        super().__init__(shape, shape)
        self.factor = factor
        self.hermitian = complex(factor).imag == 0

    def _apply(self, x: Any) -> Any:
        return x * self.factor if self.factor != 1 else x.copy()

    def _adjoint(self, y: Any) -> Any:
        factor = complex(self.factor).conjugate() if not self.hermitian else self.factor
        return y * factor if factor != 1 else y.copy()


def Identity(shape: Sequence[int]) -> Scale:  # noqa: N802 - reads as a class at call sites
    """The identity on arrays of ``shape``."""
    return Scale(shape, 1.0)


class Multiply(LinearOperator):
    """Element-wise multiplication by a fixed array (broadcast against the input): ``x -> w * x``.

    With ``oshape`` larger than ``ishape`` the input is broadcast (e.g. one image times C coil maps), and the
    adjoint sums the broadcast axes back: ``y -> sum conj(w) * y``.
    """

    def __init__(self, ishape: Sequence[int], weights: Any) -> None:
        oshape = np.broadcast_shapes(tuple(weights.shape), _shape(ishape))
        super().__init__(ishape, oshape)
        self.weights = weights
        self.hermitian = self.ishape == self.oshape and weights.dtype.kind != "c"

    def _apply(self, x: Any) -> Any:
        return self.weights * x

    def _adjoint(self, y: Any) -> Any:
        xp = get_xp(y)
        product = xp.conj(self.weights) * y if self.weights.dtype.kind == "c" else self.weights * y
        extra = len(self.oshape) - len(self.ishape)
        axes = tuple(range(extra)) + tuple(
            extra + i for i, n in enumerate(self.ishape) if n == 1 and self.oshape[extra + i] != 1)
        if axes:
            product = product.sum(axis=axes).reshape(self.ishape)
        return product


def Sense(maps: Any) -> Multiply:  # noqa: N802 - reads as a class at call sites
    """The coil-sensitivity operator ``x -> (S_1 x, ..., S_C x)``: image ``matrix`` -> ``(C, *matrix)``.

    Its adjoint combines the coils: ``y -> sum_c conj(S_c) y_c``.
    """
    return Multiply(tuple(maps.shape[1:]), maps)


class SenseNormal(LinearOperator):
    """Base of normal operators built per coil image: ``sum_c conj(S_c) N(S_c x) + lam x`` with coil maps
    ``maps``, or ``N`` of each coil image (a leading coil axis, any length) without; subclasses give ``N``
    as ``_normal(images)`` for a batch ``(B, *matrix)`` and set ``maps``, ``lam`` and ``coil_batch``."""

    hermitian = True
    maps: Any = None
    lam: float = 0.0
    coil_batch: int | None = None

    def _normal(self, images: Any) -> Any:
        raise NotImplementedError

    def _check(self, array: Any, shape: tuple[int, ...], what: str) -> None:
        if self.maps is None and array.ndim > len(shape):
            shape = (*array.shape[:array.ndim - len(shape)], *shape)
        super()._check(array, shape, what)

    def _apply(self, x: Any) -> Any:
        return apply_sense_normal(x, self._normal, self.ishape, self.maps, self.lam, self.coil_batch)


def apply_sense_normal(x: Any, normal: Callable[[Any], Any], ishape: tuple[int, ...], maps: Any, lam: float,
                       coil_batch: int | None) -> Any:
    """``sum_c conj(S_c) N(S_c x) + lam x`` with coil maps, or ``N`` of each coil image without, coils
    ``coil_batch`` at a time (all at once for None); ``normal`` applies a per-image normal operator ``N`` to a
    batch ``(B, *matrix)``. Shared by the normal operators built on an encoding (exact or segmented)."""
    xp = get_xp(x)
    if maps is None:
        stack = x.reshape(-1, *ishape)
        step = stack.shape[0] if coil_batch is None else max(1, int(coil_batch))
        y = xp.concatenate([normal(stack[i:i + step]) for i in range(0, stack.shape[0], step)]).reshape(x.shape)
    else:
        n_coils = int(maps.shape[0])
        step = n_coils if coil_batch is None else max(1, min(n_coils, int(coil_batch)))
        y = xp.zeros_like(x)
        for start in range(0, n_coils, step):
            part = maps[start:start + step]
            y += (xp.conj(part) * normal(part * x)).sum(axis=0)
    if lam:
        y += np.float32(lam) * x
    return y
