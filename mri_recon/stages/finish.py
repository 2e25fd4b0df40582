"""The last stages of a reconstruction: the image from the solution (combine, back to the data's units), the
post-filter, the download, and the :class:`~mri_recon.result.Result` with the settings used."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..arrays.backend import get_xp, to_host
from ..errors import InvalidDataError
from ..operators import arith, reads
from ..prep.maps_stage import in_receivers, unit_basis
from ..result import FrameAxis, Result
from .options import Options
from .state import Encoded, FrameNormal, Planned, Solution


def _combined(x: Any, combine: str, basis: Any = None) -> tuple[Any, float]:
    """The image from CG's solution and the power of two it is to be multiplied by: itself (SENSE), the
    root-sum-of-squares of the per-coil images (taken in the receiver's channels when ``basis`` takes the
    whitened channels back there), or the one image. The basis enters divided by a power of two near its
    largest entry (:func:`~mri_recon.prep.maps_stage.unit_basis`), so that no square over- or underflows
    whatever the noise's scale."""
    xp = get_xp(x)
    unit, scale = unit_basis(basis)
    if combine == "rss":
        if basis is not None:
            x = in_receivers(unit, x)
        return xp.sqrt((x.real**2 + x.imag**2).sum(axis=0)).astype(np.complex64), scale
    if combine == "single":  # one (virtual) coil: the norm of its receiver column (per readout position)
        if basis is None:
            return x[0], scale
        if unit.ndim == 3:
            column = np.linalg.norm(unit[:, :, 0], axis=1).astype(np.float32)
            return x[0] * xp.asarray(column.reshape(-1, *[1] * (x.ndim - 2))), scale
        column = abs(complex(unit.reshape(-1)[0])) if unit.size == 1 else float(np.linalg.norm(unit))
        return x[0] * np.float32(column), scale
    return x, scale


def combine(options: Options, planned: Planned, x: Any, data_scale: float, maps_scale: float) -> Any:
    """The image (SENSE, root-sum-of-squares or the one coil) from the solution ``x``, back in the data's units
    (powers of two: exact); refuse an image beyond float32's range."""
    image, combine_scale = _combined(x, planned.combine, options.maps.basis if not planned.sense else None)
    image = arith.rescale(image, data_scale * combine_scale / maps_scale)
    if not reads.all_finite(image):
        raise InvalidDataError(f"{planned.scan.source}: the image exceeds the float32 range (the k-space is near "
                               f"float32's largest values and the coil maps are small); scale the data down")
    return image


def post_filter(options: Options, planned: Planned, image: Any) -> Any:
    """The Gaussian post-filter of width ``filter_sigma`` voxels (:func:`mri_recon.filters.smooth`)."""
    from ..filters import smooth  # noqa: PLC0415 - loaded on use

    if planned.series is None:
        return smooth(image, options.filter_sigma, device=planned.device)
    frames = [smooth(frame, options.filter_sigma, device=planned.device) for frame in image]
    return get_xp(image).stack(frames)


def download(image: Any) -> np.ndarray:
    """The image to the host, once."""
    return np.ascontiguousarray(to_host(image), dtype=np.complex64)


def _psf_word(options: Options, normals: tuple[FrameNormal, ...]) -> str:
    """Where the PSF came from (each frame's, where they differ)."""
    words = dict.fromkeys(n.cache_state for n in normals if n.cache_state)
    if words:
        return "/".join(words)
    return ("given" if options.psf is not None else
            "computed (disk cache not used by the GPU NUFFT)" if options.psf_cache is not None else "computed")


def _frames(planned: Planned) -> FrameAxis | None:
    series = planned.series
    if series is None:
        return None
    return FrameAxis(labels=series.labels, axis=series.axis, duration_s=series.frame_duration_s,
                     dropped_readouts=series.dropped_readouts)


def result(options: Options, planned: Planned, timings: dict[str, float], encoded: tuple[Encoded, ...],
           normals: tuple[FrameNormal, ...], solution: Solution, image: np.ndarray) -> Result:
    """The :class:`~mri_recon.result.Result`: the image on the host (a time series' frames first), residuals or
    objective, ``timings`` and the settings used (``lam_abs`` in the data's units)."""
    scan, iterated = planned.scan, not options.by_cg
    sigma = None if options.filter_sigma is None else float(options.filter_sigma)
    parameters = {"iterations": int(options.iterations), "tol": float(options.tol), "lam": float(options.lam),
                  "lam_abs": solution.lam_abs, "filter_sigma": sigma, "method": encoded[0].encoding.name,
                  "weights": "scan" if scan.weights is not None else "ones", "psf": _psf_word(options, normals),
                  "coil_batch": int(planned.budget.coil_batch),
                  "coil_maps": options.maps.method or ("scan" if planned.sense else "none"),
                  "field_map_correction": (planned.offres.label if planned.offres
                                           else scan.attrs.get("field_map_correction", "none")),
                  **({"temporal": options.temporal.name} if planned.series is not None else {}), **solution.extra}
    return Result(image=image, residuals=solution.residuals,
                  iterations=options.iterations if iterated else len(solution.residuals) - 1,
                  timings=dict(timings), device=str(planned.device), parameters=parameters,
                  combine=planned.combine, frames=_frames(planned))
