"""FFTs of the NumPy paths' operators and solvers: SciPy's pocketfft on every core, in the input's precision.

The transforms call pocketfft's compiled module, which SciPy ships inside ``scipy.fft``, loaded by itself:
importing the ``scipy.fft`` package also imports SciPy's array-API layer and ``scipy.special``, a cost that a
short CPU process would pay on every run (docs/benchmarks.md, "Whole processes on the same files"). The module is
checked against NumPy's FFT once; where it is not where SciPy keeps it, or answers otherwise, ``scipy.fft``
itself serves. On CuPy arrays the transforms are CuPy's (cuFFT).
"""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
import logging
from pathlib import Path
from typing import Any

import numpy as np

from .backend import cpu_threads, get_xp

log = logging.getLogger(__name__)

MODULE = "scipy.fft._pocketfft.pypocketfft"
"""pocketfft's module as SciPy names it: the same module object serves ``scipy.fft`` once that is imported."""

SCALINGS = {"backward": (0, 2), "ortho": (1, 1), "forward": (2, 0)}
"""``norm`` to pocketfft's scaling code (0 none, 1 ``1/sqrt(n)``, 2 ``1/n``) for the forward and inverse sums."""


def _load_pocketfft() -> Any:
    """pocketfft's compiled module from SciPy's folder, without importing the ``scipy`` package."""
    scipy_spec = importlib.util.find_spec("scipy")
    if scipy_spec is None or not scipy_spec.submodule_search_locations:
        return None
    folder = Path(scipy_spec.submodule_search_locations[0]) / "fft" / "_pocketfft"
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = folder / f"pypocketfft{suffix}"
        if path.is_file():
            loader = importlib.machinery.ExtensionFileLoader(MODULE, str(path))
            module = importlib.util.module_from_spec(importlib.util.spec_from_loader(MODULE, loader))
            loader.exec_module(module)
            return module
    return None


def _answers_like_numpy(module: Any) -> bool:
    """Whether ``module.c2c`` gives NumPy's forward and inverse 2-D FFT of a small complex64 array."""
    x = (np.arange(12.0) + 1j * np.arange(12.0) ** 2).reshape(3, 4).astype(np.complex64)
    forward = module.c2c(x, (0, 1), True, 0, None, 1)
    inverse = module.c2c(x, (0, 1), False, 2, None, 1)
    scale = float(np.abs(np.fft.fft2(x)).max())
    return (forward.dtype == np.complex64 and np.abs(forward - np.fft.fft2(x)).max() <= 1e-5 * scale
            and np.abs(inverse - np.fft.ifft2(x)).max() <= 1e-5 * scale)


@functools.lru_cache(maxsize=1)
def pocketfft() -> Any:
    """pocketfft's module, loaded on first use; None where ``scipy.fft`` must serve instead."""
    try:
        module = _load_pocketfft()
        if module is not None and _answers_like_numpy(module):
            return module
    except Exception as exc:  # noqa: BLE001 - any failure here means: use scipy.fft
        log.debug("pocketfft not loadable on its own (%s): scipy.fft serves", exc)
    return None


def fftn(x: Any, axes: tuple[int, ...], *, inverse: bool = False, norm: str | None = "backward",
         shape: tuple[int, ...] | None = None, overwrite: bool = False) -> Any:
    """The n-D FFT of ``x`` over ``axes`` (``inverse``: the sum with ``exp(+i ...)``), as ``numpy.fft.fftn``
    with ``norm`` (None: ``"backward"``), in the input's precision: complex64 and float32 give complex64,
    other real or integer input complex128.

    ``shape`` zero-pads each of ``axes`` at its end to that length first (NumPy's ``s``, never shorter).
    ``overwrite`` lets the transform reuse ``x``'s memory (NumPy arrays only).
    """
    norm = "backward" if norm is None else norm
    if norm not in SCALINGS:
        raise ValueError(f"fftn: norm must be one of {', '.join(SCALINGS)}, found {norm!r}")
    if shape is not None and len(shape) != len(axes):
        raise ValueError(f"fftn: shape {tuple(shape)} and axes {tuple(axes)} differ in length")
    xp = get_xp(x)
    if xp is not np:
        if len(axes) == 1 and shape is None:
            return (xp.fft.ifft if inverse else xp.fft.fft)(x, axis=axes[0], norm=norm)
        call = xp.fft.ifftn if inverse else xp.fft.fftn
        return call(x, s=shape, axes=axes, norm=norm)
    x = _complex(x)
    axes = _checked_axes(x, axes, shape)
    module = pocketfft()
    if module is None:
        import scipy.fft  # noqa: PLC0415 - only where pocketfft's module could not be loaded by itself

        call = scipy.fft.ifftn if inverse else scipy.fft.fftn
        return call(x, s=shape, axes=axes, norm=norm, overwrite_x=overwrite, workers=cpu_threads())
    if shape is not None and tuple(shape) != tuple(x.shape[a] for a in axes):
        x, overwrite = _padded(x, shape, axes), True
    out = x if overwrite else None
    return module.c2c(x, axes, not inverse, SCALINGS[norm][int(inverse)], out, cpu_threads())


def _complex(x: Any) -> Any:
    """``x`` as a complex array in native byte order: complex input as it is, float32 (or float16) as complex64,
    any other real or integer input as complex128 (NumPy's and SciPy's choice)."""
    x = np.asarray(x)
    if x.dtype.kind != "c":
        x = x.astype(np.complex64 if x.dtype.kind == "f" and x.dtype.itemsize <= 4 else
                     np.result_type(x.dtype, np.complex128))
    return x if x.dtype.isnative else x.astype(x.dtype.newbyteorder("="))


def _checked_axes(x: Any, axes: tuple[int, ...], shape: tuple[int, ...] | None) -> tuple[int, ...]:
    """``axes`` made non-negative, after the checks NumPy makes: each within ``x``'s dimensions, at least one,
    none repeated, none of length zero (after padding to ``shape``), and ``shape`` never shorter than ``x``."""
    if not axes or any(not -x.ndim <= a < x.ndim for a in axes):
        raise ValueError(f"fftn: axes {tuple(axes)} are not axes of an array of shape {x.shape}")
    axes = tuple(a % x.ndim for a in axes)
    lengths = tuple(x.shape[a] for a in axes) if shape is None else tuple(shape)
    if len(set(axes)) != len(axes) or min(lengths) < 1:
        raise ValueError(f"fftn: axes {axes} repeat an axis or have no points (lengths {lengths})")
    if shape is not None and any(n < x.shape[a] for a, n in zip(axes, shape)):
        raise ValueError(f"fftn: shape {tuple(shape)} is shorter than the input's {tuple(x.shape)} on axes {axes}")
    return axes


def _padded(x: Any, shape: tuple[int, ...], axes: tuple[int, ...]) -> Any:
    """``x`` zero-padded at the end of each of ``axes`` to the lengths ``shape``."""
    full = list(x.shape)
    for axis, n in zip(axes, shape):
        full[axis] = n
    padded = np.zeros(full, dtype=x.dtype)
    padded[tuple(slice(0, n) for n in x.shape)] = x
    return padded
