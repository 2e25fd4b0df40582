"""BART scans and images: k-space, trajectory and sensitivities as :class:`~mri_recon.scan.Scan` objects, and
reconstructed images in BART's layout.

Conventions (checked against ``bart nufft`` and ``bart pics``: ``tests/test_cfl_scan.py``,
``scripts/bench_bart_cfl.py``)
----------------------------------------------------------------------------------------------------------
- k-space ``(1, RO, SPOKES, COILS, ...)``: sample ``m = ro + RO * spoke`` (Fortran order) of coil ``c`` is
  ``Scan.kspace[c, m]``. The trajectory ``(3, RO, SPOKES)`` holds ``(kx, ky, kz)`` of each sample in
  cycles per field of view, the units of ``Scan.trajectory`` (``bart traj`` spans ``[-N/2, N/2)``); its
  imaginary part must be zero. A 2-D image (Z = 1) needs ``kz = 0`` and drops it.
- Image axes 0, 1, 2 are BART's READ, PHS1, PHS2 (X, Y, Z); BART's and mri-recon's forward models are the
  same (``exp(-2 pi i k r)``, voxel ``N // 2`` at ``r = 0``), so an image needs no flip, shift or
  conjugation between the two. BART's NUFFT carries a constant factor (``1 / sqrt(prod(matrix))``), which
  scales the image and nothing else.
- Sensitivities ``(X, Y, Z, COILS[, 1])`` become ``Scan.coil_maps[c] = sens[:, :, :, c]``; several sets of
  maps (``ecalib -m 2``) are refused (mri-recon solves with one set).
- Dimensions TE (5), TIME (10), TIME2 (11), SLICE (13) and BATCH (15) of the k-space are separate images,
  keyed as contrast, repetition, phase, slice and set (:data:`~mri_recon.io.cfl.STACK_DIMS`); the
  trajectory may vary along them or not (size 1). Any other dimension above 1 is refused.
- Written images are ``(X, Y, Z)`` (Z = 1 for 2-D), the stack's indices on the same dimensions.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..checks.units import check_units, suspect_units, to_cycles_per_fov, wrong_units_error
from ..checks.validation import trajectory_extent, validate_matrix
from ..errors import InvalidDataError, SchemaError, printable
from ..scan import Scan
from .cfl import COIL_DIM, DIM_NAMES, DIMS, MAPS_DIM, STACK_DIMS, cfl_pair, is_cfl_name, read_cfl, trimmed, write_cfl
from .files import FileSet
from .inputs import InputFormat, Probe
from .outputs import ImageStack, OutputFormat
from .stack import DIMENSIONS, select, stack_layout

IMAGINARY_TOL = 1e-6
"""Largest ``|imag| / max |real|`` of a trajectory taken as real (``bart traj`` writes exact zeros)."""
_INDEX = {dim: name for name, dim in STACK_DIMS.items()}


def _refuse_other_dims(source: str, what: str, dims: Sequence[int], allowed: Sequence[int]) -> None:
    bad = [d for d in range(DIMS) if dims[d] != 1 and d not in allowed]
    if bad:
        named = ", ".join(f"{d} ({DIM_NAMES[d]}) = {dims[d]}" for d in bad)
        raise SchemaError(f"{source}: BART {what} has dimension {named}; mri-recon reads "
                          f"{', '.join(f'{d} ({DIM_NAMES[d]})' for d in allowed)} of it")


def parse_matrix(value: str | Sequence[int]) -> tuple[int, ...]:
    """The image size ``"128x96"`` / ``"64,64,32"`` / ``(128, 96)`` as 2 or 3 sizes (``matrix=``, ``--matrix``).

    Raises
    ------
    InvalidDataError
        Anything else (the sizes themselves are checked with the scan,
        :func:`mri_recon.checks.validation.validate_matrix`).
    """
    parts = value.replace("x", ",").split(",") if isinstance(value, str) else value
    try:
        sizes = tuple(int(p) for p in parts if not isinstance(p, str) or p.strip())
        whole = isinstance(value, str) or all(int(p) == p for p in parts)
    except (TypeError, ValueError):
        sizes, whole = (), False
    if not whole or len(sizes) not in (2, 3):
        raise InvalidDataError(f"matrix must be NxM or NxMxK (BART input's image size), found {value!r}")
    return sizes


def _matrix(source: str, sens_dims: Sequence[int] | None, matrix: Sequence[int] | None) -> tuple[int, ...]:
    if sens_dims is not None:
        found = tuple(int(n) for n in sens_dims[:3])
        if matrix is not None and tuple(trimmed(matrix)) != trimmed(found):
            raise SchemaError(f"{source}: matrix {list(matrix)} differs from the sensitivities' {list(found)}; "
                              f"give one or make them agree")
        matrix = found
    if matrix is None:
        raise SchemaError(f"{source}: BART k-space does not say the image size: give --sensitivities "
                          f"(sensitivities=) or --matrix NxM[xK] (matrix=)")
    sizes = list(matrix) + [1] * (3 - len(matrix))
    return validate_matrix(sizes[:2] if sizes[2] == 1 else sizes, source)


def _trajectory(source: str, traj: np.ndarray, matrix: tuple[int, ...], units: str) -> np.ndarray:
    """float32 ``(M, D)`` in cycles per FOV from one image's BART trajectory ``(3, RO, SPOKES)``."""
    real = np.asarray(traj.real, dtype=np.float64).reshape(3, -1, order="F").T
    scale = max(float(np.max(np.abs(real))), 1e-30)
    if float(np.max(np.abs(traj.imag))) > IMAGINARY_TOL * scale:
        raise SchemaError(f"{source}: BART trajectory has non-zero imaginary parts (max "
                          f"{float(np.max(np.abs(traj.imag))):.3g}); expected real k-space positions")
    if len(matrix) == 2:
        if np.any(real[:, 2] != 0):
            top = float(np.max(np.abs(real[:, 2])))
            raise SchemaError(f"{source}: BART trajectory has kz != 0 (max |kz| {top:.4g}) but the image is 2-D "
                              f"{list(matrix)}; give a 3-D matrix or a 2-D trajectory")
        real = real[:, :2]
    if units == "auto":
        extent = trajectory_extent(real)
        suspect = suspect_units(extent, matrix)
        if suspect is not None:
            raise wrong_units_error(source, suspect, extent, matrix)
        units = "cycles-per-fov"
    return to_cycles_per_fov(real, units, matrix, None, source)


def _images(kdims: Sequence[int], tdims: Sequence[int], source: str) -> list[tuple[dict, tuple, tuple]]:
    """``(key, k-space index, trajectory index)`` of every image: one per combination of the stack dims."""
    for d in STACK_DIMS.values():
        if tdims[d] not in (1, kdims[d]):
            raise SchemaError(f"{source}: BART trajectory has {tdims[d]} along dimension {d} ({DIM_NAMES[d]}) "
                              f"but the k-space {kdims[d]}; expected 1 or the same")
    out = []
    for flat in np.ndindex(*(kdims[d] for d in STACK_DIMS.values())):
        at = dict(zip(STACK_DIMS.values(), flat))
        key = {name: int(at.get(STACK_DIMS[name], 0)) for name in DIMENSIONS}
        kindex = tuple(at.get(d, slice(None) if d in (1, 2, COIL_DIM) else 0) for d in range(DIMS))
        tindex = tuple(slice(None) if d < 3 else at.get(d, 0) if tdims[d] > 1 else 0 for d in range(DIMS))
        out.append((key, kindex, tindex))
    return sorted(out, key=lambda item: tuple(item[0][name] for name in DIMENSIONS))


def _coil_maps(source: str, sens: np.ndarray, coils: int, matrix: tuple[int, ...]) -> np.ndarray:
    dims = sens.shape
    if dims[MAPS_DIM] > 1:
        raise SchemaError(f"{source}: BART sensitivities hold {dims[MAPS_DIM]} sets of maps (dimension 4, MAPS); "
                          f"mri-recon uses one: compute them with 'bart ecalib -m 1' or pick one with 'bart slice 4 0'")
    _refuse_other_dims(source, "sensitivities", dims, (0, 1, 2, COIL_DIM))
    if dims[COIL_DIM] != coils:
        raise SchemaError(f"{source}: BART sensitivities have {dims[COIL_DIM]} coils but the k-space {coils}")
    maps = np.moveaxis(np.asarray(sens).reshape(dims[:4]), 3, 0)
    return np.ascontiguousarray(maps.reshape(coils, *matrix), dtype=np.complex64)


def load_cfl_scans(path: str | os.PathLike, *, trajectory: str | os.PathLike | None = None,
                   sensitivities: str | os.PathLike | None = None, matrix: str | Sequence[int] | None = None,
                   traj_units: str = "auto", allow_external: bool = False,
                   **chosen: int | None) -> list[tuple[dict, Scan]]:
    """Every image of a BART k-space file as ``(key, Scan)`` pairs (see the module docstring).

    Parameters
    ----------
    path
        The k-space (``ksp.cfl``, ``ksp.hdr`` or ``ksp``).
    trajectory
        The trajectory file (required: mri-recon reconstructs non-Cartesian k-space).
    sensitivities
        Coil sensitivities (optional); they give the matrix.
    matrix
        The image size, when no sensitivities give it (2 or 3 sizes, or ``"NxM[xK]"``: :func:`parse_matrix`).
    traj_units
        ``"auto"`` / ``"cycles-per-fov"`` (BART's units), ``"normalized"`` or ``"radians"``; ``"auto"``
        refuses a trajectory that looks like radians, 1/m or normalized units, naming the fix.
    allow_external
        Read a data file another header names (``# Data``).
    **chosen
        ``slice``, ``contrast``, ``phase``, ``set``, ``repetition``: keep only those images.

    Raises
    ------
    SchemaError
        Missing trajectory or matrix; dimensions that do not fit each other or BART's layout.
    TrajectoryUnitsError
        A trajectory in other units than cycles per FOV with ``traj_units="auto"``.
    """
    source = printable(cfl_pair(path)[1])
    units = check_units(traj_units)
    ksp = read_cfl(path, allow_external=allow_external)
    sens = None if sensitivities is None else read_cfl(sensitivities, allow_external=allow_external)
    if trajectory is None:
        return _cartesian(source, ksp, sens, sensitivities, matrix, chosen)
    traj = read_cfl(trajectory, allow_external=allow_external)
    kdims, tdims = ksp.shape, traj.shape
    if kdims[0] != 1:
        raise SchemaError(f"{source}: BART k-space has {kdims[0]} along dimension 0 (READ); non-Cartesian BART "
                          f"k-space is (1, RO, SPOKES, COILS, ...) with the trajectory (3, RO, SPOKES)")
    _refuse_other_dims(source, "k-space", kdims, (1, 2, COIL_DIM, *STACK_DIMS.values()))
    if tdims[0] != 3 or tdims[1:3] != kdims[1:3] or tdims[COIL_DIM] != 1:
        raise SchemaError(f"{printable(cfl_pair(trajectory)[1])}: BART trajectory has dimensions "
                          f"{list(trimmed(tdims))}; the k-space {list(trimmed(kdims))} needs "
                          f"(3, {kdims[1]}, {kdims[2]})")
    _refuse_other_dims(source, "trajectory", tdims, (0, 1, 2, *STACK_DIMS.values()))
    shape = _matrix(source, None if sens is None else sens.shape, None if matrix is None else parse_matrix(matrix))
    maps = None if sens is None else _coil_maps(printable(cfl_pair(sensitivities)[1]), sens, kdims[COIL_DIM], shape)
    images = _images(kdims, tdims, source)
    keep = select([key for key, _, _ in images], source, **chosen)
    out = []
    for key, kindex, tindex in (images[i] for i in keep):
        data = np.asarray(ksp[kindex]).reshape(-1, kdims[COIL_DIM], order="F").T
        k = _trajectory(source, np.asarray(traj[tindex]), shape, units)
        attrs = {"source_format": "cfl", "traj_units": "cycles-per-fov" if units == "auto" else units,
                 "samples_per_readout": int(kdims[1]),
                 **{name: value for name, value in key.items()}}
        out.append((key, Scan(kspace=np.ascontiguousarray(data, dtype=np.complex64), trajectory=k,
                              matrix=shape, coil_maps=maps, attrs=attrs, source=source)))
    return out


def _cartesian(source: str, ksp: np.ndarray, sens: np.ndarray | None, sensitivities, matrix,
               chosen: Mapping[str, int | None]) -> list[tuple[dict, Scan]]:
    """A k-space without trajectory: BART's Cartesian layout (:mod:`~mri_recon.io.cfl_cartesian`)."""
    from .cfl_cartesian import cartesian_scans  # noqa: PLC0415 - the Cartesian reader, on use

    kdims = ksp.shape
    if kdims[0] == 1:
        raise SchemaError(f"{source}: BART k-space (1, {kdims[1]}, {kdims[2]}, ...) is non-Cartesian and needs its "
                          f"trajectory: --trajectory traj.cfl (trajectory=); Cartesian k-space is (X, Y, Z, COILS)")
    _refuse_other_dims(source, "k-space", kdims, (0, 1, 2, COIL_DIM, *STACK_DIMS.values()))
    grid = tuple(int(n) for n in kdims[:3])
    shape = grid[:2] if grid[2] == 1 else grid
    if sens is not None and tuple(sens.shape[:3]) != grid:
        raise SchemaError(f"{printable(cfl_pair(sensitivities)[1])}: BART sensitivities of matrix "
                          f"{list(trimmed(sens.shape[:3]))} do not fit the Cartesian k-space grid "
                          f"{list(trimmed(grid))}")
    maps = None if sens is None else _coil_maps(printable(cfl_pair(sensitivities)[1]), sens, kdims[COIL_DIM], shape)
    return cartesian_scans(source, ksp, maps, None if matrix is None else parse_matrix(matrix), **chosen)


def cfl_image(image: np.ndarray, keys: Sequence[Mapping[str, int]], ndim: int) -> np.ndarray:
    """The 16-dimensional BART array of a stack of images (``(*stack, *matrix)``, or one image)."""
    image = np.asarray(image)
    layout = stack_layout(list(keys))
    matrix = image.shape[image.ndim - ndim:]
    dims = [1] * DIMS
    dims[:ndim] = matrix
    order = list(range(image.ndim - ndim, image.ndim))
    for name, size in zip(layout.axes, layout.shape):
        dim = STACK_DIMS.get(name, STACK_DIMS["set"])
        dims[dim] = size
    stack_axes = list(range(image.ndim - ndim))
    by_dim = sorted(zip((STACK_DIMS.get(n, STACK_DIMS["set"]) for n in layout.axes), stack_axes))
    data = np.transpose(image, order + [axis for _, axis in by_dim]) if stack_axes else image
    return data.reshape(dims)


def write_cfl_images(path: str | os.PathLike, image: np.ndarray, keys: Sequence[Mapping[str, Any]], ndim: int, *,
                     magnitude: bool = False, protect: tuple[str | os.PathLike, ...] | FileSet = ()) -> list:
    """Write the reconstructed image (or stack) as a BART pair (complex64, or its magnitude); returns both paths."""
    data = cfl_image(np.abs(image) if magnitude else image, keys, ndim)
    return write_cfl(path, data, protect=protect)


def convert_cfl(source: str | os.PathLike, output: str | os.PathLike, **options: Any) -> list:
    """Convert a BART k-space (``options``: those of :func:`load_cfl_scans`) to MRD raw data (``output``
    ending ``.mrd.h5`` / ``.mrd``: every image in one file, through
    :func:`mri_recon.io.ismrmrd_write.write_ismrmrd`; sensitivities, which have no place there, are refused)
    or to schema v1 (one image; its sensitivities as ``coil_maps``). Returns the file written.

    Raises
    ------
    SchemaError
        Several images for a schema-v1 output (choose one, or write MRD).
    InvalidDataError
        Sensitivities for an MRD output.
    """
    from .ismrmrd_write import write_ismrmrd  # noqa: PLC0415 - the ismrmrd package on use
    from .mrd_image import is_mrd_name  # noqa: PLC0415
    from .schema import save_scan  # noqa: PLC0415

    if is_mrd_name(output) and options.get("sensitivities") is not None:
        raise InvalidDataError(f"{printable(output)}: MRD raw data has no place for coil sensitivities; convert to "
                               f"schema v1 (.h5) to keep them, or leave --sensitivities out")
    scans = load_cfl_scans(source, **options)
    if is_mrd_name(output):
        write_ismrmrd(output, scans)
    elif len(scans) == 1:
        save_scan(output, scans[0][1], protect=(cfl_pair(source)[1],))
    else:
        raise SchemaError(f"{printable(output)}: {len(scans)} images ({len(scans)} along BART's TE / TIME / SLICE "
                          f"dimensions) go to one MRD file (.mrd.h5), or choose one (--slice, --repetition, ...)")
    return [output]


def _load_one(probe: Probe, **options: Any) -> Scan:
    scans = load_cfl_scans(probe.path, allow_external=probe.allow_external, **options)
    if len(scans) != 1:
        raise InvalidDataError(f"{printable(probe.path)}: holds {len(scans)} images; choose one (slice=, contrast=, "
                               f"phase=, set=, repetition=) or use load_scans")
    return scans[0][1]


INPUT = InputFormat("cfl", (".cfl",), lambda probe: is_cfl_name(probe.path),
                    lambda probe, **options: load_cfl_scans(probe.path, allow_external=probe.allow_external,
                                                            **options),
                    _load_one, options=("trajectory", "sensitivities", "matrix"), title="BART .cfl k-space")
"""BART k-space input (``ksp.cfl``, ``ksp.hdr`` or the stem ``ksp``), with its own reader options."""


def cfl_values(complex_: bool, magnitude: bool) -> str:
    del complex_
    return "magnitude" if magnitude else "complex"


def write_cfl_output(output: str | os.PathLike, stack: ImageStack, *, complex_: bool = False,
                     magnitude: bool = False, protect: tuple = ()) -> list:
    """The :class:`~mri_recon.io.outputs.OutputFormat` writer: :func:`write_cfl_images` of the stack."""
    del complex_
    return write_cfl_images(output, stack.image, stack.keys, stack.results[0][1].ndim, magnitude=magnitude,
                            protect=protect)


FORMAT = OutputFormat("cfl", "BART", (".cfl",), ".cfl", write_cfl_output, values=cfl_values,
                      shown="{label} cfl, {values}")
"""BART output: the image (or stack) as ``OUT.cfl`` / ``OUT.hdr`` (complex, or the magnitude with ``--magnitude``)."""
