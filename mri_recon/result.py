"""The outcome of a reconstruction and its writer (HDF5)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np

from ._version import __version__
from .io.files import atomic_output


@dataclass(frozen=True)
class Result:
    """The outcome of :func:`mri_recon.reconstruct`."""

    image: np.ndarray
    """complex64 ``matrix``: the reconstructed image (real-valued for ``combine == "rss"``)."""
    residuals: tuple[float, ...]
    """Relative CG residuals ``||b - A x|| / ||b||``; the first is that of the zero initial guess."""
    iterations: int
    """CG iterations run (``len(residuals) - 1``)."""
    timings: Mapping[str, float]
    """Seconds per stage: upload, fhd, psf, iterations, filter, download (device synchronized)."""
    device: str
    """Where it ran: ``"cpu"`` or ``"gpu:N"``."""
    parameters: Mapping[str, Any]
    """The settings used (scalars and strings), including the absolute Tikhonov weight ``lam_abs``."""
    combine: str
    """``"sense"`` (coil maps), ``"rss"`` (per-coil images, root-sum-of-squares) or ``"single"``."""

    def __repr__(self) -> str:
        """Image shape, iterations, final residual, device and engine; never the arrays."""
        return (f"Result(image={self.image.dtype}{list(self.image.shape)}, iterations={self.iterations}, "
                f"residual={self.residuals[-1]:.2e}, device={self.device!r}, "
                f"engine={self.parameters.get('method')!r}, combine={self.combine!r})")



def write_result(output: str | os.PathLike, results: list, scan_path: str | os.PathLike) -> None:
    """Write reconstructions to ``output`` (HDF5, atomically; the input ``scan_path`` is never replaced).

    Parameters
    ----------
    output
        The HDF5 file to write: ``image`` (complex64; several images stacked on a leading axis, listed in
        the attribute ``stack``), ``residuals``, and attributes for the version, device, settings, timings
        and the NRMSE against a simulated scan's ground truth.
    results
        ``(key, scan, record, result)`` per image: the stack key (e.g. ``{"slice": 0}``), the scan as
        reconstructed, the preparation record of :func:`mri_recon.prep.prepare_scan` and the
        :class:`Result`.
    scan_path
        The input file (recorded, and protected from being overwritten).
    """
    images = [np.asarray(r.image, dtype=np.complex64) for _, _, _, r in results]
    key, scan, record, first = results[0]
    with atomic_output(output, protect=(scan_path,)) as tmp, h5py.File(tmp, "w") as f:
        f.create_dataset("image", data=images[0] if len(images) == 1 else np.stack(images))
        longest = max(len(r.residuals) for _, _, _, r in results)
        residuals = np.full((len(results), longest), np.nan)
        for i, (_, _, _, r) in enumerate(results):
            residuals[i, : len(r.residuals)] = r.residuals
        f.create_dataset("residuals", data=residuals[0] if len(results) == 1 else residuals)
        if len(results) > 1:
            f.attrs["stack"] = json.dumps([k for k, _, _, _ in results])
        f.attrs["mri_recon_version"] = __version__
        f.attrs["input"] = str(scan_path)
        f.attrs["matrix"] = np.asarray(scan.matrix, dtype=np.int64)
        f.attrs["device"] = str(first.device)
        f.attrs["iterations"] = int(max(r.iterations for _, _, _, r in results))
        f.attrs["final_residual"] = float(max(r.residuals[-1] for _, _, _, r in results))
        f.attrs["combine"] = str(first.combine)
        for name, value in {**record, **{k: v for k, v in scan.attrs.items() if k == "traj_units"}}.items():
            f.attrs[name] = value
        for name, value in first.parameters.items():
            f.attrs[f"param_{name}"] = "none" if value is None else value
        for stage in first.timings:
            f.attrs[f"time_{stage}_s"] = float(sum(r.timings.get(stage, 0.0) for _, _, _, r in results))
        if len(results) == 1 and scan.ground_truth is not None:
            kind, value = nrmse_vs_truth(images[0], scan.ground_truth, first)
            f.attrs["nrmse_vs_ground_truth"] = value
            f.attrs["nrmse_kind"] = kind


def nrmse_vs_truth(image: np.ndarray, truth: np.ndarray, result: Result) -> tuple[str, float]:
    """``("complex" | "magnitude", ||image - truth|| / ||truth||)`` with no fitted scale.

    Complex only where the image's phase is the truth's: SENSE with the scan's own maps. Estimated maps carry
    an arbitrary phase per voxel and root-sum-of-squares images none, so those compare magnitudes.
    """
    if result.combine == "sense" and result.parameters.get("coil_maps") == "scan":
        kind, a, b = "complex", np.asarray(image, np.complex128), np.asarray(truth, np.complex128)
    else:
        kind, a, b = "magnitude", np.abs(np.asarray(image, np.complex128)), np.abs(np.asarray(truth, np.complex128))
    return kind, float(np.linalg.norm(a - b) / max(float(np.linalg.norm(b)), 1e-30))
