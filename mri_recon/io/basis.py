"""A temporal basis from a file (``temporal_basis=``, ``--temporal-basis``): the ``T x K`` matrix whose columns
span the frames of a subspace reconstruction (:mod:`mri_recon.solvers.subspace`).

Two forms, read as data only:

- NumPy ``.npy``: a ``(T, K)`` array (or ``(T,)`` for one column), real or complex; read with
  ``allow_pickle=False`` (an object array is refused, nothing in the file is run).
- BART ``.cfl`` / ``.hdr`` (a path to either, or the stem): the layout ``bart pics -B`` takes, ``T`` along
  dimension 5 (TE) and ``K`` along dimension 6 (COEFF), every other dimension 1; read by
  :func:`mri_recon.io.cfl.read_cfl`.

The values come back as complex128; whether the columns fit the frames is the solver's check
(:func:`mri_recon.solvers.subspace.orthonormal_basis`).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..errors import InvalidDataError, ScanFileError, printable
from .cfl import is_cfl_name, read_cfl, trimmed

TE_DIM, COEFF_DIM = 5, 6
"""BART's dimensions of a basis: the frames (``TE``) and the basis functions (``COEFF``)."""
MAX_VALUES = 1 << 24
"""The most values a basis file may hold (a ``T x K`` matrix is small; a larger file is not a basis)."""


def load_basis(path: str | os.PathLike, *, allow_external: bool = False) -> np.ndarray:
    """The ``(T, K)`` complex128 matrix of a basis file (see the module docstring); :class:`InvalidDataError`
    for a file of another form or shape, :class:`~mri_recon.errors.ScanFileError` for one that cannot be read.
    ``allow_external``: a BART header may name another data file (as for a scan)."""
    text = os.fspath(path)
    shown = printable(text)
    if text.lower().endswith(".npy"):
        values = _npy(Path(text), shown)
    elif is_cfl_name(text):
        values = _cfl(text, shown, allow_external)
    else:
        raise InvalidDataError(f"temporal_basis {shown}: expected a NumPy .npy file or a BART .cfl/.hdr pair")
    if not np.all(np.isfinite(values)):
        raise InvalidDataError(f"temporal_basis {shown}: holds values that are not finite")
    return values


def _npy(path: Path, shown: str) -> np.ndarray:
    if not path.is_file():
        raise ScanFileError(f"temporal_basis {shown}: no such file" if not path.exists()
                            else f"temporal_basis {shown}: is not a regular file")
    try:
        mapped = np.load(path, mmap_mode="r", allow_pickle=False)
    except OSError as exc:
        raise InvalidDataError(f"temporal_basis {shown}: not a NumPy array file of numbers ({exc})") from None
    except ValueError:  # NumPy's words for a file it cannot read (pickled data, a bad header) suggest pickle
        raise InvalidDataError(f"temporal_basis {shown}: not a NumPy .npy file of numbers (np.save of a (T, K) "
                               f"array), or one that holds Python objects, which are not read") from None
    if mapped.dtype.kind not in "iufc" or mapped.ndim not in (1, 2) or mapped.size > MAX_VALUES:
        raise InvalidDataError(f"temporal_basis {shown}: expected a (T, K) array of numbers, found shape "
                               f"{tuple(mapped.shape)} of {mapped.dtype}")
    values = np.array(mapped, dtype=np.complex128)
    return values[:, None] if values.ndim == 1 else values


def _cfl(path: str, shown: str, allow_external: bool) -> np.ndarray:
    mapped = read_cfl(path, allow_external=allow_external)
    others = [d for d, n in enumerate(mapped.shape) if n != 1 and d not in (TE_DIM, COEFF_DIM)]
    if others or mapped.size > MAX_VALUES:
        raise InvalidDataError(f"temporal_basis {shown}: BART dimensions {list(trimmed(mapped.shape))}; a basis "
                               f"has T along dimension {TE_DIM} (TE) and K along {COEFF_DIM} (COEFF), as bart pics "
                               f"-B takes it, every other dimension 1")
    return np.array(mapped[0, 0, 0, 0, 0, :, :].reshape(mapped.shape[TE_DIM], mapped.shape[COEFF_DIM]),
                    dtype=np.complex128)


CONDITION_MAX = 1e6
"""A basis whose columns, each scaled to norm 1, have a largest singular value this many times their smallest
is refused as rank-deficient (the columns do not span K dimensions in the file's precision)."""


def orthonormal_basis(values: np.ndarray, frames: int, source: str = "temporal_basis") -> np.ndarray:
    """The ``(T, K)`` basis ``values`` with orthonormal columns spanning the same space, for ``frames`` frames.

    Gram-Schmidt in its stable form (QR, ``values = Q R``) with the diagonal of ``R`` made real positive, so
    column ``k`` of the result spans what the first ``k + 1`` columns given span, and a basis that is already
    orthonormal comes back as it is (to rounding). Refused with :class:`InvalidDataError`: ``T`` other than
    ``frames``, more columns than frames, or columns that are (numerically) linearly dependent."""
    values = np.asarray(values, dtype=np.complex128)
    if values.ndim != 2 or values.shape[0] != frames:
        raise InvalidDataError(f"{source}: {values.shape[0]} rows (frames) for a series of {frames} frames"
                               if values.ndim == 2 else f"{source}: expected a (T, K) matrix, found shape "
                               f"{values.shape}")
    if values.shape[1] > frames:
        raise InvalidDataError(f"{source}: {values.shape[1]} basis functions for {frames} frames; at most "
                               f"{frames} are independent")
    norms = np.linalg.norm(values, axis=0)
    s = np.linalg.svd(values / np.where(norms > 0, norms, 1.0), compute_uv=False)  # each column's scale aside
    if not np.all(norms > 0) or s[-1] * CONDITION_MAX < s[0]:
        raise InvalidDataError(f"{source}: the {values.shape[1]} columns are linearly dependent (singular values "
                               f"of the unit columns from {s[0]:.3g} to {s[-1]:.3g}); give independent temporal "
                               f"basis functions")
    q, r = np.linalg.qr(values)
    diagonal = np.diagonal(r)
    return q * (diagonal / np.abs(diagonal))[None, :]


def read_basis(path: str | os.PathLike, frames: int, rank: int | None = None, *,
               allow_external: bool = False) -> np.ndarray:
    """The orthonormal ``(T, K)`` basis of a file (:func:`load_basis`, :func:`orthonormal_basis`): its first
    ``rank`` columns when ``rank`` is given (refused beyond the file's), else all of them."""
    values = load_basis(path, allow_external=allow_external)
    source = f"temporal_basis {printable(os.fspath(path))}"
    if rank is not None and rank > values.shape[1]:
        raise InvalidDataError(f"{source}: temporal_rank {rank} exceeds the file's {values.shape[1]} basis "
                               f"functions")
    return orthonormal_basis(values if rank is None else values[:, :rank], frames, source)
