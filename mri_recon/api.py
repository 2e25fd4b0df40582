"""The reconstruction the CLI runs, as one call: :func:`mri_recon.prepare_scan`, then the solver; and a whole
file, read, reconstructed and written (:func:`reconstruct_file`, which the CLI and the batch workers call).

``mri_recon.reconstruct(mri_recon.load_scan(path))`` gives the image ``mri-recon reconstruct path`` writes,
bit for bit (same defaults, :class:`~mri_recon.settings.ReconSettings`: prewhitening with the scan's noise,
its density weights, its coil maps or Walsh estimates, 30 CG iterations, the regularizer's default ``lam``:
1e-3 for l2). ``prepare=False`` reconstructs the scan exactly as given (:func:`mri_recon.pipeline.reconstruct`,
the solver alone).
"""

from __future__ import annotations

import functools
import inspect
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from . import pipeline, stages
from .arrays.backend import Device, synchronize
from .errors import InvalidDataError, ResourceError
from .io import load_scans
from .io.frames import TimeSeries
from .io.writers import write_result
from .kernels import prefetch
from .operators.engines import Encoding
from .planning.planner import Plan
from .planning.preparation import preparation_of
from .prep import coil_map_method, prepare_scan
from .prep.compress import Compression, parse_coil_compress, planned_coils, wanted
from .prep.compress_methods import compression_method, one_matrix
from .prep.device import DeviceScan, prepare_on_device
from .prep.gradient_delay import shared_gradient_delay
from .prep.maps_methods import COIL_MAPS
from .prep.maps_stage import CoilMapEstimate
from .result import Result
from .scan import Scan
from .settings import API_FIELDS, FIELDS, ReconSettings, default_of, refuse_unknown

if TYPE_CHECKING:
    from .io.cache import PsfCache
    from .progress import Progress

P = ParamSpec("P")
R = TypeVar("R")
RUNTIME = ("prepare", "progress", "psf_cache", "psf", "estimate_maps", "maps_basis")
"""The keywords of :func:`reconstruct` that are not settings: how it runs and what the caller computed."""


def keywords_checked(func: Callable[P, R]) -> Callable[P, R]:
    """``func`` refusing an unknown keyword with :class:`~mri_recon.errors.InvalidDataError` that names the
    valid ones and the closest (its signature unchanged for IDEs and ``help``)."""
    valid = [p.name for p in inspect.signature(func).parameters.values() if p.kind is p.KEYWORD_ONLY]

    @functools.wraps(func)
    def checked(*args: P.args, **kwargs: P.kwargs) -> R:
        refuse_unknown(kwargs, valid, func.__name__)
        return func(*args, **kwargs)

    return checked


def with_keywords(settings: ReconSettings | None, keywords: Mapping[str, Any], where: str) -> ReconSettings:
    """``settings`` (default: the defaults) with ``keywords`` changed; an unknown name refused."""
    refuse_unknown(keywords, FIELDS, where)
    base = settings if settings is not None else ReconSettings()
    return base.replace(**keywords) if keywords else base


def prepare_and_reconstruct(scan: Scan, settings: ReconSettings | None = None, *, progress: Any = None,
                            psf_cache: PsfCache | None = None, psf: Any = None,
                            **keywords: Any) -> tuple[Scan | DeviceScan, dict[str, Any], Result]:
    """``(prepared scan, preparation record, result)``: :func:`~mri_recon.prep.prepare_scan` with the
    settings' choices, then the solver's stages with theirs (:func:`mri_recon.pipeline.run`, on the memory plan
    made here, the preparation counted) and the coil-map estimation and receiver basis the preparation asks
    for. ``keywords``: fields of
    :class:`~mri_recon.settings.ReconSettings` that change ``settings``. On a GPU the preparation runs there
    (:func:`~mri_recon.prep.device.prepare_on_device`) and the prepared scan is a
    :class:`~mri_recon.prep.device.DeviceScan` (``.to_scan()`` brings it to the host)."""
    taken = sorted({"estimate_maps", "maps_basis"} & set(keywords))
    if taken:
        raise InvalidDataError(f"{' and '.join(taken)} come from the preparation (coil_maps=...); pass them to "
                               f"mri_recon.pipeline.reconstruct, or reconstruct(..., prepare=False)")
    settings = with_keywords(settings, keywords, "prepare_and_reconstruct")
    if isinstance(scan, TimeSeries):
        return _prepare_series_and_reconstruct(scan, settings, progress=progress, psf_cache=psf_cache, psf=psf)
    # the memory of the whole run, preparation included, is checked before anything is prepared
    dev, engine, memory, after_upload = _planned(scan, settings)
    if dev.is_gpu:  # the run's CUDA modules build on threads while CuPy's own are compiled ahead (kernels.warmup)
        prefetch(stages.run_kernels(engine, len(scan.matrix), memory.coil_batch), dev)
    # on a GPU the scan goes up once and is prepared there (mri_recon.prep.device); the CPU path is unchanged
    prepare = (functools.partial(prepare_on_device, device=dev, compress_after_upload=after_upload) if dev.is_gpu
               else prepare_scan)
    start = time.perf_counter()
    ready, record = prepare(scan, **settings.prepare_keywords())
    synchronize(dev)  # timed as the pipeline's stages are
    prepared_s = time.perf_counter() - start
    maps = CoilMapEstimate.take(record)  # the coil-map stage, run by the pipeline on the uploaded data
    options = pipeline.options_of(ready, settings, estimate_maps=maps.method, maps_basis=maps.basis,
                                  progress=progress, psf_cache=psf_cache, psf=psf)
    result = pipeline.run(ready, options, planned=(dev, engine, memory), prepared_s=prepared_s)  # planned above
    return ready, record, result


def _planned(scan: Scan, settings: ReconSettings) -> tuple[Device, type[Encoding], Plan, bool]:
    """:func:`plan_prepared` with the settings, and whether a coil compression of one matrix is applied on the
    GPU after the receivers' k-space went up (their plan fits the device: no host product then), rather than on
    the way up (the plan that holds only the virtual coils on the device). ``auto``, whose virtual coils the data
    decide, is planned for the run with the scan's coils, and the upload's peak checked with one coil fewer (the
    most it compresses to: the receivers and that many virtual coils held at once)."""
    keywords = {"prewhiten": settings.prewhiten, "dcf": settings.dcf, "coil_maps": settings.coil_maps,
                "method": settings.method, "iterations": settings.iterations,
                "coil_compress_method": settings.coil_compress_method}
    choice = settings.coil_compress
    dev, engine, memory = plan_prepared(scan, device=settings.device, coil_compress=choice, **keywords)
    if not (dev.is_gpu and wanted(choice) and one_matrix(choice, settings.coil_compress_method)):
        return dev, engine, memory, False
    decided = isinstance(choice, Compression) or parse_coil_compress(choice) != "auto"
    bound = choice if decided else max(1, scan.n_coils - 1)
    try:
        after = plan_prepared(scan, device=dev, coil_compress=bound, compress_on_the_way=False, **keywords)
    except ResourceError:
        return dev, engine, memory, False
    return (*after, True) if decided else (dev, engine, memory, True)


def _prepare_series_and_reconstruct(series: TimeSeries, settings: ReconSettings, **runtime: Any
                                    ) -> tuple[TimeSeries, dict[str, Any], Result]:
    """A time series prepared (:func:`~mri_recon.prep.frames.prepare_series`) and reconstructed by the same
    stages as one scan (:func:`mri_recon.pipeline.run`, which plans it)."""
    from .prep.frames import prepare_series  # noqa: PLC0415 - time series only

    # the frames' memory is checked before anything is prepared (with the coils as read: compression only lowers it)
    planned = pipeline.plan_series(series, settings.device, settings.method, settings.iterations,
                                   pipeline.series_splits(series, settings))
    start = time.perf_counter()
    ready, record = prepare_series(series, **settings.prepare_keywords())
    prepared_s = time.perf_counter() - start
    maps = CoilMapEstimate.take(record)
    options = pipeline.options_of(ready, settings, estimate_maps=maps.method, maps_basis=maps.basis, **runtime)
    return ready, record, pipeline.run(ready, options, planned=planned, prepared_s=prepared_s)


def settings_signature(func: Callable[P, R]) -> Callable[P, R]:
    """``func`` with the settings' keywords (:data:`~mri_recon.settings.API_FIELDS`, their types and defaults)
    in its signature in place of ``**settings``, after ``prepare``: what ``help``, IDEs that read signatures and
    :func:`keywords_checked` see. A field added to the settings is a keyword here without a line here."""
    signature = inspect.signature(func)
    fields = ReconSettings.__dataclass_fields__
    settings = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default_of(name),
                                  annotation=fields[name].type) for name in API_FIELDS]
    own = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
    at = [p.name for p in own].index("prepare") + 1
    func.__signature__ = signature.replace(parameters=[*own[:at], *settings, *own[at:]])
    return func


@keywords_checked
@settings_signature
def reconstruct(scan: Scan | TimeSeries, *, prepare: bool = True, progress: Progress | bool | None = None,
                psf_cache: PsfCache | None = None, psf: Any = None, estimate_maps: str | None = None,
                maps_basis: Any = None, **settings: Any) -> Result:
    """Reconstruct ``scan`` as the CLI does.

    Parameters
    ----------
    scan
        A :class:`~mri_recon.scan.Scan` (``mri_recon.load_scan(path)``, ``simulate_scan(...)``), or a
        :class:`~mri_recon.io.frames.TimeSeries` (``mri_recon.load_series(path, ...)``,
        ``simulate_series(...)``): each frame prepared as one scan (one gradient-delay estimate and one set of
        coil maps for all frames) and reconstructed as one scan is, or all frames together with ``temporal``.
    prepare
        True: prewhiten, choose density weights and coil maps like ``mri-recon reconstruct`` (see
        :func:`mri_recon.prepare_scan`); False: solve with the scan exactly as given.
    **settings
        The fields of :class:`~mri_recon.settings.ReconSettings` of its ``solve``, ``device`` and ``prepare``
        sections, each a keyword of this signature (``iterations``, ``lam``, ``regularizer``, ``method``,
        ``temporal``, ``device``, ``coil_maps``, ``dcf``, ``gradient_delay``, ...): the fields say each one's
        type, choices, range, default and what it does.
    progress, psf_cache, psf
        A progress callback, a :class:`~mri_recon.io.cache.PsfCache`, a PSF computed before
        (:func:`mri_recon.pipeline.reconstruct`).
    estimate_maps, maps_basis
        With ``prepare=False`` only (the preparation decides them otherwise).

    Returns
    -------
    Result
        The image (a time series' frames first: ``Result.frames``) and the run's settings
        (:func:`prepare_and_reconstruct` also returns what the preparation did).

    Raises
    ------
    InvalidDataError
        ``scan`` neither a Scan nor a TimeSeries (a file's name: :func:`reconstruct_file`), an unknown keyword
        (the message names the valid ones), a value of the wrong type or range, or ``coil_compress`` with
        ``prepare=False``.
    """
    if not isinstance(scan, (Scan, TimeSeries)):
        hint = " (a file: mri_recon.load_scan(path), or reconstruct_file(path, output))" if isinstance(
            scan, (str, os.PathLike)) else ""
        raise InvalidDataError(f"reconstruct takes a Scan or a TimeSeries, not {type(scan).__name__}{hint}")
    chosen = ReconSettings(**pipeline.series_keywords(scan, settings))
    if not prepare:
        if chosen.coil_compress != default_of("coil_compress"):
            raise InvalidDataError(f"coil_compress={chosen.coil_compress!r} compresses the coils in the preparation, "
                                   f"and prepare=False reconstructs the scan as given; compress it first "
                                   f"(mri_recon.prepare_scan(scan, coil_compress=...)) or let reconstruct prepare it")
        return pipeline.reconstruct(scan, chosen, progress=progress, psf_cache=psf_cache, psf=psf,
                                    estimate_maps=estimate_maps, maps_basis=maps_basis)
    computed = {name: value for name, value in (("estimate_maps", estimate_maps), ("maps_basis", maps_basis))
                if value is not None}
    return prepare_and_reconstruct(scan, chosen, progress=progress, psf_cache=psf_cache, psf=psf, **computed)[2]


def plan_prepared(scan: Scan, *, prewhiten: bool = True, dcf: str = "auto", coil_maps: str = "auto",
                  device: str | int | Device | None = "auto", method: str = "auto",
                  iterations: int = 30, coil_compress: Any = "none", coil_compress_method: str = "svd",
                  compress_on_the_way: bool | None = None) -> tuple[Device, type[Encoding], Plan]:
    """:func:`mri_recon.pipeline.plan_reconstruction` of ``scan`` as :func:`mri_recon.prepare_scan` with these
    choices will prepare it, the preparation's stages included (prewhitening, coil compression, density weights,
    coil-map estimate): what :func:`mri_recon.reconstruct` checks before it prepares anything, and ``mri-recon
    info`` reports. Coil compression to N coils plans the reconstruction with N; ``"auto"``, which decides from
    the data, with the scan's coils. ``compress_on_the_way``: whether a GPU receives only the virtual coils of a
    compression of one matrix, applied on the host as the data go up (None: wherever the compression is one
    matrix); False plans the receivers' k-space on the device, compressed there."""
    coils = planned_coils(coil_compress, scan.n_coils)
    if compress_on_the_way is None:
        compress_on_the_way = one_matrix(coil_compress, coil_compress_method)
    maps = coil_map_method(scan, coil_maps, coils)
    estimate = maps if COIL_MAPS[maps].estimated else None
    compression = compression_method(coil_compress_method)
    preparation = preparation_of(scan, prewhiten=prewhiten, dcf=dcf, estimate_maps=estimate, coils=coils,
                                 compress_working=compression.working(scan.n_coils, scan.n_samples),
                                 compress_on_the_way=compress_on_the_way)
    sense = COIL_MAPS[maps].sense
    return pipeline.plan_reconstruction(scan, device, method, iterations, sense, preparation)


@dataclass(frozen=True)
class FileResult:
    """What :func:`reconstruct_file` did."""

    results: list
    """``(key, scan, record, result)`` per image, in file order (as :func:`mri_recon.io.writers.write_result`
    takes them)."""
    written: list[Path]
    """The files written (none when no output was asked for)."""


def load_images(source: str | os.PathLike, settings: ReconSettings,
                keys: list[dict] | None = None) -> list[tuple[dict, Scan]]:
    """The images of ``source`` that the settings' choice keeps (and of those, the ones with these ``keys``)."""
    images = load_scans(source, **settings.reader_keywords())
    return images if keys is None else [(key, scan) for key, scan in images if key in keys]


def write_images(output: str | os.PathLike, results: list, source: str | os.PathLike,
                 settings: ReconSettings) -> list[Path]:
    """Write ``results`` (in file order) to ``output`` in the settings' format and values."""
    return write_result(output, results, source, format=settings.format, complex_=settings.complex_,
                        magnitude=settings.magnitude, protect=settings.read_paths(source))


def reconstruct_file(source: str | os.PathLike, output: str | os.PathLike | None,
                     settings: ReconSettings | None = None, *, keys: list[dict] | None = None,
                     progress: Any = None, on_load: Callable[[list], None] | None = None,
                     on_image: Callable[[int, dict, Scan], None] | None = None,
                     on_done: Callable[[list], None] | None = None) -> FileResult:
    """Read ``source``, prepare and reconstruct each of its images, write them to ``output`` (atomically;
    None: nothing written).

    ``keys``: only these images (a part of an MRD file's images). ``progress``: the solver's progress callback.
    ``on_load(images)``: called once the file is read, before any work (checks, a progress bar);
    ``on_image(index, key, scan)``: before each image; ``on_done(results)``: before writing. The PSF cache
    is the settings' (``cache``, ``cache_dir``).
    """
    from .io.cache import PsfCache  # noqa: PLC0415 - with the reconstruction

    settings = settings if settings is not None else ReconSettings()
    images = load_images(source, settings, keys)
    if on_load is not None:
        on_load(images)
    cache = PsfCache(settings.cache_dir) if settings.cache else None
    images, delays = shared_gradient_delay(images, settings.gradient_delay)  # one estimate for all the images
    settings = settings.replace(gradient_delay="none") if delays else settings
    results = []
    for index, (key, scan) in enumerate(images):
        if on_image is not None:
            on_image(index, key, scan)
        ready, record, result = prepare_and_reconstruct(scan, settings, progress=progress, psf_cache=cache)
        results.append((key, ready, {**delays, **record}, result))
    if on_done is not None:
        on_done(results)
    written = [] if output is None else write_images(output, results, source, settings)
    return FileResult(results, written)

