"""Every option of a reconstruction, in one place: :class:`ReconSettings`.

Each field carries its :class:`Option`: type, choices, range, help text, and where it belongs (the
``section`` that places it in ``mri-recon reconstruct --help``; whether it is a keyword of
:func:`mri_recon.reconstruct`; whether the output depends on it). Everything else is derived from it: the
click options of ``mri-recon reconstruct`` (:mod:`mri_recon.cli.options`), the batch's settings
(:func:`mri_recon.reconstruct_many` takes its fields), the keywords of :func:`mri_recon.reconstruct` (a test
checks that its signature is :data:`API_FIELDS`, derived from here), the settings
:func:`mri_recon.pipeline.reconstruct` takes and the settings a batch's completion record holds
(:meth:`ReconSettings.record`). An unknown or misspelled option is refused with the valid ones.

Adding an option is one field here (a solver's option, :attr:`Option.solver`, also its parameter in the solver).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .checks.units import TRAJ_UNITS
from .errors import InvalidDataError, listed
from .io.cfl_scan import parse_matrix
from .io.stack import DIMENSIONS
from .io.writers import formats
from .operators.engines import methods as engine_methods
from .operators.offres import CORRECTIONS
from .prep import DCF_CHOICES
from .prep.compress_methods import DEFAULT_METHOD, check_method, choice_help, method_help, method_names, parse_choice
from .prep.gradient_delay import parse_gradient_delay
from .prep.maps_methods import choices as coil_map_choices
from .prep.maps_methods import coil_map_help
from .solvers.registry import joint_names
from .solvers.regularizers import names as regularizer_names
from .solvers.sparse import (
    dense_names,
    lam_help,
    penalty_help,
    regularizer_help,
    solver_help,
    solver_names,
    sparse_names,
)
from .solvers.temporal_terms import SUBSPACE_RANK_DEFAULT, temporal_help, temporal_names
from .solvers.temporal_terms import lam_help as temporal_lam_help

if TYPE_CHECKING:
    from .arrays.backend import Device

SECTIONS = ("output", "solve", "device", "prepare", "input", "cache", "access")
"""Where an option sits: ``output`` (format and values), ``solve`` (the solver and the engine), ``device``,
``prepare`` (prewhitening, coil compression, density weights, coil maps, field map), ``input`` (reading the
scan), ``cache`` (the PSF cache), ``access`` (what the reader may open)."""
API_SECTIONS = ("solve", "device", "prepare")
"""The sections whose options are keywords of :func:`mri_recon.reconstruct`."""
DEVICE_HELP = "Compute device: auto (GPU if present, else CPU), cpu, gpu or gpu:N."


@dataclass(frozen=True)
class Option:
    """How one setting is typed, checked and shown."""

    help: str
    kind: type
    """``int``, ``float``, ``str``, ``bool``, ``dict`` (the image choice) or ``object`` (unchecked)."""
    section: str
    choices: tuple[str, ...] | Callable[[], tuple[str, ...]] | None = None
    """The allowed values, or a function giving them when a value is checked (a registry that can grow)."""
    low: float | None = None
    """The smallest value (``low_open``: excluded)."""
    high: float | None = None
    low_open: bool = False
    optional: bool = False
    """None is a value (the default of a choice made later)."""
    cli: str | None = None
    """The command line's name (``--lambda``); default ``--`` and the field's name with dashes."""
    flag: str | None = None
    """A command-line flag that sets :attr:`flag_value` (``--no-prewhiten``), instead of an option taking one."""
    flag_value: Any = None
    path: bool = False
    """The command line takes a path (kept as text here)."""
    recorded: bool = True
    """The output depends on it (a batch's completion record holds it)."""
    show_default: bool = True
    series: bool = False
    """Applies to a time series only (a file read whole as frames): not a setting of a batch of scans or of the
    server, which reconstruct images one by one."""
    solver: bool = False
    """The solve stage hands it to the solver as a keyword of the same name (None: the solver's own default):
    such an option is this field and the solver function's parameter, nothing in between."""
    check: Any = None
    """A function that refuses a bad value (raising :class:`~mri_recon.errors.InvalidDataError`), in place of
    the checks of :attr:`kind` (a value of several forms, e.g. ``gradient_delay``)."""


def option(default: Any, help: str, kind: type, section: str, **spec: Any) -> Any:
    """A field of :class:`ReconSettings` with its :class:`Option`."""
    meta = {"option": Option(help, kind, section, **spec)}
    if isinstance(default, dict):
        return field(default_factory=dict, metadata=meta)
    return field(default=default, metadata=meta)


SPARSE = ", ".join(sparse_names())
"""The sparse regularizers, as the help texts list them."""
LAMBDA_HELP = (f"Regularization weight. {', '.join(dense_names())}: relative to the largest diagonal entry of the "
               f"normal operator (max over voxels of sum_c |S_c|^2 times the sum of the weights); {SPARSE}: relative "
               f"to max |A^H W d|. Default: the regularizer's ({lam_help()}).")
METHOD_HELP = ("F^H d and PSF engine: exact sums, NUFFT (GPU NUFFT or CPU FINUFFT), or auto (the faster one on a GPU "
               "by a cost model; FINUFFT on the CPU). The output records the engine used.")


@dataclass(frozen=True)
class ReconSettings:
    """The settings of a reconstruction; the defaults are those of ``mri-recon reconstruct``."""

    format: str | None = option(None, "Output format, overriding the one chosen by the output's extension (dicom: "
                                "-o names a folder).",
                                str, "output", choices=formats, optional=True)
    """Output format (:func:`mri_recon.io.writers.formats`; None: chosen by the output's name)."""
    complex_: bool = option(False, "NIfTI: write real and imaginary parts (a last axis of size 2) instead of the "
                            "magnitude. HDF5 and MRD hold the complex image.", bool, "output", cli="--complex")
    magnitude: bool = option(False, "MRD: write magnitude images (float32) instead of complex ones. NIfTI writes "
                             "the magnitude unless --complex; HDF5 always holds the complex image.", bool, "output")
    iterations: int = option(30, f"Maximum CG iterations ({SPARSE}: outer iterations).", int, "solve",
                             low=1, high=10000)
    lam: float | None = option(None, LAMBDA_HELP, float, "solve", low=0.0, optional=True, cli="--lambda")
    """Regularization weight (relative, see :func:`mri_recon.pipeline.reconstruct`); None: the regularizer's
    default (:data:`mri_recon.solvers.sparse.LAM_DEFAULTS`)."""
    regularizer: str = option("l2", regularizer_help(), str, "solve", choices=regularizer_names)
    inner_iterations: int | None = option(None, f"ADMM ({penalty_help()}): CG steps per x-update (default 1 with "
                                          "density weights, 5 without).", int, "solve", low=1, high=1000,
                                          optional=True)
    rho: float | None = option(None, "ADMM penalty, relative like the l2 lambda (default 1 with density weights, "
                               "0.3 without).", float, "solve", low=0.0, low_open=True, optional=True)
    anisotropic: bool = option(False, "tv: anisotropic total variation (sum of |differences|).", bool, "solve")
    solver: str | None = option(None, solver_help(), str, "solve", choices=solver_names, optional=True)
    tol: float = option(1e-6, f"{', '.join(dense_names())}: stop when the relative CG residual falls below this "
                        f"({listed(sparse_names(), 'and')} run every iteration).", float, "solve", low=0.0)
    check_every: int | None = option(None, "How often the solver reads its residual or objective back and checks it, "
                                     "in iterations (default: the solver's, 5 for CG and 10 for the others).",
                                     int, "solve", low=1, high=10000, optional=True, solver=True)
    """Iterations between the solver's checks (:attr:`Option.solver`: handed to the solver as it is)."""
    filter_sigma: float | None = option(None, "Gaussian post-filter width in voxels, at most the image's largest "
                                        "side (off by default).", float,
                                        "solve", low=0.0, low_open=True, optional=True)
    field_map_correction: str = option("auto", "With a field map: exact, segmented (time segmentation) or auto.",
                                       str, "solve", choices=CORRECTIONS)
    segments: int | None = option(None, "Time segments L (default: the fewest with interpolation error <= 1e-3).",
                                  int, "solve", low=1, optional=True)
    method: str = option("auto", METHOD_HELP, str, "solve", choices=engine_methods)
    temporal: str = option("none", temporal_help(), str, "solve", choices=temporal_names, series=True)
    """A time series' temporal term (:mod:`mri_recon.solvers.temporal_terms`)."""
    temporal_lam: float | None = option(None, temporal_lam_help(), float, "solve", low=0.0, optional=True,
                                        cli="--temporal-lambda", series=True)
    temporal_solver: str = option("admm", "Joint time-series solver: ADMM or primal-dual (Condat-Vu).", str,
                                  "solve", choices=joint_names, series=True)
    temporal_block: int | None = option(None, "llr: the side B of its blocks in voxels (default 8, as BART's pics -b).",
                                        int, "solve", low=2, high=128, optional=True, series=True)
    temporal_rank: int | None = option(None, f"subspace: K basis functions (default {SUBSPACE_RANK_DEFAULT}, estimated "
                                       "from the frames' k-space centres; with --temporal-basis its first K).", int,
                                       "solve", low=1, high=4096, optional=True, series=True)
    temporal_basis: str | None = option(None, "subspace: the T x K basis, .npy or BART .cfl (T along dimension 5, K "
                                        "along 6, as pics -B); orthonormalized.", str, "solve", optional=True,
                                        path=True, series=True)
    device: str | int | Device | None = option("auto", DEVICE_HELP, object, "device", recorded=False)
    """``"auto" | "cpu" | "gpu" | "gpu:N"``, an index or a :class:`~mri_recon.arrays.backend.Device` (in a GPU
    cluster every worker sees its own GPU as ``gpu:0``)."""
    coil_maps: str = option("auto", coil_map_help(), str, "prepare", choices=coil_map_choices)
    dcf: str = option("auto", "Density compensation: auto (the file's weights if any), none, ramp, pipe, file.",
                      str, "prepare", choices=DCF_CHOICES)
    prewhiten: bool = option(True, "Do not whiten with the noise samples.", bool, "prepare",
                             flag="--no-prewhiten", flag_value=False)
    field_map: str = option("correct", "Reconstruct without off-resonance correction, dropping the scan's field_map "
                            "and times on purpose (recorded as field_map_correction = ignored).", str, "prepare",
                            choices=("correct", "ignore"), flag="--no-field-map", flag_value="ignore")
    """``"correct"`` or ``"ignore"`` (drop the scan's field map on purpose)."""
    gradient_delay: Any = option("none", "Radial scans: auto (estimate with RING and with opposed spokes, apply "
                                 "only what the data support, and say so), ring or opposed (that estimate, or "
                                 "fail; opposed is bart estdelay's default), none, X,Y[,Z] delays in samples along "
                                 "trajectory columns 0, 1[, 2], or BART's y:x:yx exactly as bart estdelay prints "
                                 "it and bart traj -q takes it (colons; optional bart: prefix). The trajectory is "
                                 "corrected before anything else.", str, "prepare", check=parse_gradient_delay)
    """``"none"``, ``"auto"``, an estimator's name, delays ``"X,Y[,Z]"`` / ``(X, Y[, Z])`` in samples, or
    BART's ``"y:x:yx"`` (:mod:`mri_recon.prep.gradient_delay`)."""
    coil_compress: Any = option("none", choice_help(), str, "prepare", check=parse_choice)
    """``"none"``, ``"auto"`` or a number of virtual coils N (:mod:`mri_recon.prep.compress`)."""
    coil_compress_method: str = option(DEFAULT_METHOD, method_help(), str, "prepare", choices=method_names)
    """:data:`mri_recon.prep.compress_methods.COMPRESSION_METHODS`; another than the default needs coil_compress."""
    traj_units: str = option("auto", "ISMRMRD / BART trajectory units (schema-v1 files are always cycles per FOV).",
                             str, "input", choices=TRAJ_UNITS)
    """:data:`mri_recon.checks.units.TRAJ_UNITS`."""
    trajectory: str | None = option(None, "BART input: the trajectory (3, RO, SPOKES) .cfl of SCAN's k-space (1, RO, "
                                    "SPOKES, COILS); none for Cartesian k-space (X, Y, Z, COILS) with zeros where "
                                    "nothing was sampled, as bart pics takes it.", str, "input", optional=True,
                                    path=True)
    """BART k-space's trajectory file (:func:`mri_recon.io.cfl_scan.load_cfl_scans`; refused for other inputs)."""
    sensitivities: str | None = option(None, "BART input: coil sensitivities (X, Y, Z, COILS) .cfl; they give the "
                                       "matrix.", str, "input", optional=True, path=True)
    matrix: Any = option(None, "BART input without --sensitivities: the image size NxM or NxMxK.", str, "input",
                         optional=True, check=parse_matrix)
    """BART input's image size: ``"NxM[xK]"`` or 2 or 3 sizes."""
    choice: dict = option({}, "ISMRMRD: {verb} only the images with this {name} index (default: every {name}).",
                          dict, "input")
    """ISMRMRD image choice: values of :data:`mri_recon.io.stack.DIMENSIONS` (``slice``, ``contrast``, ...);
    those left at None are dropped."""
    cache: bool = option(True, "Neither read nor write the point-spread-function cache.", bool, "cache",
                         flag="--no-cache", flag_value=False, recorded=False)
    cache_dir: str | None = option(None, "PSF cache folder (default: $MRI_RECON_CACHE_DIR or ~/.cache/mri-recon/psf).",
                                   str, "cache", optional=True, path=True, recorded=False)
    """The PSF cache folder (None: the default one, shared by the workers of one host)."""
    allow_external: bool = option(False, "Read HDF5 external links, external raw storage and virtual datasets that "
                                  "reach other files (refused by default: a scan is read only within itself).", bool,
                                  "access", cli="--allow-external-data", recorded=False)
    """Read datasets and links that reach other files (the image does not depend on it: read or refused)."""

    def __post_init__(self) -> None:
        if isinstance(self.choice, Mapping):
            object.__setattr__(self, "choice", {k: v for k, v in self.choice.items() if v is not None})
        for name in ("cache_dir", "trajectory", "sensitivities", "temporal_basis"):
            if isinstance(getattr(self, name), os.PathLike):
                object.__setattr__(self, name, os.fspath(getattr(self, name)))
        if self.matrix is not None:  # one form, "NxM" or sizes, one record
            object.__setattr__(self, "matrix", parse_matrix(self.matrix))
        object.__setattr__(self, "coil_compress", parse_choice(self.coil_compress))  # "8" and 8: one record
        for name, spec in _OPTIONS.items():
            check_value(name, spec, getattr(self, name))
        check_method(self.coil_compress, self.coil_compress_method)

    @classmethod
    def from_keywords(cls, keywords: Mapping[str, Any], where: str = "ReconSettings",
                      allowed: Iterable[str] | None = None) -> ReconSettings:
        """Settings from keyword arguments; an unknown name is refused, naming the valid ones (and the
        closest, for a misspelling). ``allowed``: the valid names (default: every field)."""
        names = tuple(FIELDS if allowed is None else allowed)
        refuse_unknown(keywords, names, where)
        return cls(**keywords)

    def replace(self, **changes: Any) -> ReconSettings:
        """A copy with ``changes`` (checked like the constructor's keywords)."""
        refuse_unknown(changes, FIELDS, "ReconSettings.replace")
        return dataclasses.replace(self, **changes)

    def keywords(self) -> dict[str, Any]:
        """Every option by name (the keywords that make these settings again)."""
        return {name: getattr(self, name) for name in FIELDS}

    def prepare_keywords(self) -> dict[str, Any]:
        """The keywords of :func:`mri_recon.prep.prepare_scan`."""
        return {name: getattr(self, name) for name in fields_in("prepare")}

    def read_paths(self, source: str | os.PathLike) -> tuple[str | os.PathLike, ...]:
        """Every file a run on ``source`` reads (the scan, a BART trajectory and sensitivities, a temporal basis):
        what none of its outputs may replace (:class:`mri_recon.io.files.FileSet`, which adds each BART file's
        pair)."""
        return tuple(p for p in (source, self.trajectory, self.sensitivities, self.temporal_basis) if p is not None)

    def reader_keywords(self) -> dict[str, Any]:
        """The keywords of :func:`mri_recon.io.load_scans`: the ``input`` options (the image choice as its
        indices: ``slice=``, ...) and ``allow_external``."""
        given = {name: getattr(self, name) for name in fields_in("input")}
        choice = given.pop("choice")
        return {**given, **choice, "allow_external": self.allow_external}

    def record(self) -> dict[str, Any]:
        """What the output depends on (a batch's completion record; not the device or the cache): every
        recorded option, the default ``lam`` as a number where it does not depend on the scan's weights (l2),
        the format ``hdf5`` when left to the output's name."""
        from .solvers.sparse import resolve_lam  # noqa: PLC0415 - the number of a default

        out = {name: getattr(self, name) for name in FIELDS if option_of(name).recorded}
        if self.lam is None:
            used = {resolve_lam(self.regularizer, None, weighted) for weighted in (True, False)}
            out["lam"] = used.pop() if len(used) == 1 else None
        return {**out, "choice": dict(self.choice), "format": self.format or "hdf5"}


FIELDS = tuple(item.name for item in dataclasses.fields(ReconSettings))
"""Every option's name, in order."""
API_FIELDS = tuple(name for name in FIELDS
                   if ReconSettings.__dataclass_fields__[name].metadata["option"].section in API_SECTIONS)
"""The options that are keywords of :func:`mri_recon.reconstruct`, in its signature's order."""


_OPTIONS = {item.name: item.metadata["option"] for item in dataclasses.fields(ReconSettings)}


def option_of(name: str) -> Option:
    """The :class:`Option` of the field ``name``."""
    return _OPTIONS[name]


def series_fields() -> tuple[str, ...]:
    """The options that apply to a time series only (:attr:`Option.series`)."""
    return tuple(name for name, spec in _OPTIONS.items() if spec.series)


def refuse_series_options(settings: ReconSettings, where: str) -> None:
    """Refuse, naming them, the time-series options set away from their defaults where images are reconstructed
    one by one (``where``: a batch, the server)."""
    given = [option_of(name).cli or "--" + name.replace("_", "-") for name in series_fields()
             if getattr(settings, name) != default_of(name)]
    if given:
        raise InvalidDataError(f"{', '.join(given)}: {where} reconstructs images one by one; a time series is one "
                               f"file read whole (mri-recon reconstruct FILE --temporal ..., or "
                               f"mri_recon.reconstruct(mri_recon.load_series(FILE), ...))")


def solver_options(settings: ReconSettings) -> dict[str, Any]:
    """The options the solve stage hands to the solver (:attr:`Option.solver`), those given."""
    return {name: getattr(settings, name) for name, spec in _OPTIONS.items()
            if spec.solver and getattr(settings, name) is not None}


@functools.cache
def fields_in(*sections: str) -> tuple[str, ...]:
    """The names of the options of ``sections``, in order."""
    return tuple(name for name, spec in _OPTIONS.items() if spec.section in sections)


def default_of(name: str) -> Any:
    """The default value of the field ``name``."""
    item = ReconSettings.__dataclass_fields__[name]
    return item.default_factory() if item.default is dataclasses.MISSING else item.default


def refuse_unknown(keywords: Iterable[str], valid: Iterable[str], where: str) -> None:
    """Raise :class:`~mri_recon.errors.InvalidDataError` for the first name of ``keywords`` not in ``valid``:
    ``"WHERE: unexpected keyword argument 'iters' (did you mean 'iterations'?); valid: ..."``."""
    valid = tuple(valid)
    for name in keywords:
        if name not in valid:
            close = difflib.get_close_matches(str(name), valid, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise InvalidDataError(f"{where}: unexpected keyword argument {name!r}{hint}; valid: {', '.join(valid)}")


def _number(kind: type, value: Any) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return False
    if kind is int:
        return isinstance(value, (int, np.integer))
    return isinstance(value, (int, float, np.integer, np.floating)) and math.isfinite(value)


def _bounds(spec: Option) -> str:
    low = "" if spec.low is None else f" {'>' if spec.low_open else '>='} {spec.low:g}"
    return low + ("" if spec.high is None else f" and <= {spec.high:g}")


def check_value(name: str, spec: Option, value: Any) -> None:
    """Refuse a value of the wrong type, outside the choices or the range (one line naming the option)."""
    if value is None and spec.optional or spec.kind is object:
        return
    if spec.check is not None:
        spec.check(value)
        return
    if spec.kind is bool:
        if not isinstance(value, (bool, np.bool_)):
            raise InvalidDataError(f"{name} must be True or False, found {value!r}")
    elif spec.kind is dict:
        _check_choice(name, value)
    elif spec.kind is str:
        choices = allowed(spec)
        if choices is not None and value not in choices:
            raise InvalidDataError(f"{name} must be one of {', '.join(choices)}, found {value!r}")
        if not isinstance(value, str):
            raise InvalidDataError(f"{name} must be text, found {value!r}")
    else:
        inside = _number(spec.kind, value) and not (
            spec.low is not None and (value < spec.low or spec.low_open and value == spec.low)
            or spec.high is not None and value > spec.high)
        if not inside:
            what = "a whole number" if spec.kind is int else "a positive finite number" if (
                spec.low == 0 and spec.low_open) else "a finite number"
            bounds = "" if spec.low == 0 and spec.low_open else _bounds(spec)
            raise InvalidDataError(f"{name} must be {what}{bounds}, found {value!r}")


def allowed(spec: Option) -> tuple[str, ...] | None:
    """The values ``spec`` allows now (its choices, or what its registry holds), None for any."""
    return spec.choices() if callable(spec.choices) else spec.choices


def _check_choice(name: str, value: Any) -> None:
    if not isinstance(value, Mapping):
        raise InvalidDataError(f"{name} must map {', '.join(DIMENSIONS)} to indices, found {value!r}")
    unknown = set(value) - set(DIMENSIONS)
    if unknown:
        raise InvalidDataError(f"{name} takes {', '.join(DIMENSIONS)}; found {sorted(unknown)}")
    for key, index in value.items():
        if not (_number(int, index) and index >= 0):
            raise InvalidDataError(f"{name}: {key} must be a whole number >= 0, found {index!r}")
