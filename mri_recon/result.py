"""The outcome of a reconstruction: :class:`Result`, the image and the record of the run. The writers are in
:mod:`mri_recon.io.writers`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import OutputError


@dataclass(frozen=True)
class FrameAxis:
    """The time axis of a time series' :class:`Result` (its image is ``(T, *matrix)``)."""

    labels: tuple[int, ...]
    """Each frame's repetition / phase, or its number."""
    axis: str
    """Where the frames came from: ``"repetition"``, ``"phase"`` or ``"readouts"``."""
    duration_s: float | None = None
    """Seconds per frame; None when unknown."""
    dropped_readouts: int = 0
    """Readouts at the end of a stream that did not fill a frame."""


@dataclass(frozen=True)
class Result:
    """The outcome of :func:`mri_recon.reconstruct`."""

    image: np.ndarray
    """complex64 ``matrix``: the reconstructed image (real-valued for ``combine == "rss"``)."""
    residuals: tuple[float, ...]
    """Relative CG residuals ``||b - A x|| / ||b||``; the first is that of the zero initial guess. For the tv
    and wavelet regularizers: the objective relative to its value at zero (1 first), at the solver's checks."""
    iterations: int
    """CG iterations run (``len(residuals) - 1``); outer iterations for the tv and wavelet regularizers."""
    timings: Mapping[str, float]
    """Seconds per stage (device synchronized): prepare (:func:`mri_recon.reconstruct`'s preparation; 0 without
    one), upload, coil_maps, fhd, psf, iterations, filter, download."""
    device: str
    """Where it ran: ``"cpu"`` or ``"gpu:N"``."""
    parameters: Mapping[str, Any]
    """The settings used (scalars and strings), including the absolute Tikhonov weight ``lam_abs``."""
    combine: str
    """``"sense"`` (coil maps), ``"rss"`` (per-coil images, root-sum-of-squares) or ``"single"``."""
    frames: FrameAxis | None = None
    """A time series' frame axis (the image's first axis); None for one image."""

    @property
    def history(self) -> tuple[float, ...]:
        """:attr:`residuals` (a sparse or joint solve's relative objective)."""
        return self.residuals

    def __repr__(self) -> str:
        """Image shape, iterations, final residual, device and engine; never the arrays."""
        return (f"Result(image={self.image.dtype}{list(self.image.shape)}, iterations={self.iterations}, "
                f"residual={self.residuals[-1]:.2e}, device={self.device!r}, "
                f"engine={self.parameters.get('method')!r}, combine={self.combine!r}"
                + (f", frames={len(self.frames.labels)}" if self.frames is not None else "") + ")")

    def _repr_png_(self) -> bytes:
        """The magnitude preview as PNG bytes (Jupyter shows it; a 3-D image as a montage of its slices)."""
        from .io.png import encode_png, montage  # noqa: PLC0415 - on use

        return encode_png(montage(self.image)[0])

    def show(self, axis: int = 2, ax: Any = None) -> Any:
        """Draw the magnitude with matplotlib (optional: ``pip install matplotlib``); a 3-D image as a montage
        of its slices across ``axis``. Returns the matplotlib image; ``ax``: the axes to draw in."""
        from .io.png import montage  # noqa: PLC0415 - on use

        try:
            import matplotlib.pyplot as plt  # noqa: PLC0415 - optional
        except ImportError as exc:
            raise OutputError("Result.show needs matplotlib (pip install matplotlib); Jupyter shows a Result "
                              "without it (its PNG preview)") from exc
        pixels, what = montage(self.image, axis=axis)
        ax = ax if ax is not None else plt.figure().gca()
        ax.set_title(what, fontsize=9)
        ax.set_axis_off()
        return ax.imshow(pixels, cmap="gray", vmin=0, vmax=255)


def magnitude_nrmse(image: np.ndarray, truth: np.ndarray | None) -> float | None:
    """``|| |image| - |truth| || / || |truth| ||`` (estimated maps carry a phase per voxel); None without a
    truth."""
    if truth is None:
        return None
    a, b = np.abs(np.asarray(image, np.complex128)), np.abs(np.asarray(truth, np.complex128))
    return float(np.linalg.norm(a - b) / max(float(np.linalg.norm(b)), 1e-30))
