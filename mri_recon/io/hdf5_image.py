"""HDF5 output: ``image`` (complex64; several images on named leading axes), ``residuals``, and attributes
for the version, device, settings, timings, the geometry and the NRMSE against a simulated scan's ground
truth (see :func:`mri_recon.io.writers.write_result`)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import h5py

from .._version import __version__
from ..errors import OutputError
from .files import memory_output
from .geometry import geometry_attrs
from .outputs import ImageStack, OutputFormat, nrmse_vs_truth


def hdf5_values(complex_: bool, magnitude: bool) -> str:
    """HDF5 always holds the complex image."""
    del complex_
    if magnitude:
        raise OutputError("HDF5 output always holds the complex image; magnitude output applies to MRD "
                          "(--format mrd) and is NIfTI's default")
    return "complex"


def _residuals(stack: ImageStack) -> np.ndarray:
    """One row of residuals per image (NaN after its last), on the stack's leading axes."""
    results = stack.results
    longest = max(len(r.residuals) for _, _, _, r in results)
    residuals = np.full((len(results), longest), np.nan)
    for i, (_, _, _, r) in enumerate(results):
        residuals[i, : len(r.residuals)] = r.residuals
    return residuals.reshape(*stack.layout.shape, longest)


def _run_attrs(f: h5py.File, stack: ImageStack) -> None:
    """The version, input, device, iterations, preparation record, parameters and timings."""
    results = stack.results
    _, scan, record, first = results[0]
    if len(results) > 1:
        f.attrs["stack"] = json.dumps(stack.keys)
    f.attrs["mri_recon_version"] = __version__
    f.attrs["input"] = str(stack.source)
    f.attrs["matrix"] = np.asarray(scan.matrix, dtype=np.int64)
    f.attrs["device"] = str(first.device)
    f.attrs["iterations"] = int(max(r.iterations for _, _, _, r in results))
    f.attrs["final_residual"] = float(max(r.residuals[-1] for _, _, _, r in results))
    f.attrs["combine"] = str(first.combine)
    for name, value in {**record, **{k: v for k, v in scan.attrs.items() if k == "traj_units"}}.items():
        f.attrs[name] = value
    for name, value in first.parameters.items():
        f.attrs[f"param_{name}"] = "none" if value is None else value


def write_hdf5(output: str | os.PathLike, stack: ImageStack, *, complex_: bool = False, magnitude: bool = False,
               protect: tuple = ()) -> list[Path]:
    """Write ``stack`` to ``output`` as HDF5 (built in memory, then written atomically)."""
    import h5py  # noqa: PLC0415 - h5py imported on use: a run on .cfl files reads no HDF5

    del complex_, magnitude
    results, layout = stack.results, stack.layout
    _, scan, _, first = results[0]
    with memory_output(output, protect=protect) as buffer, h5py.File(buffer, "w") as f:
        f.create_dataset("image", data=stack.image)
        f.attrs["axes"] = np.array(layout.names(scan.ndim), dtype=h5py.string_dtype())
        f.create_dataset("residuals", data=_residuals(stack))
        _run_attrs(f, stack)
        for name, value in geometry_attrs(stack.geometries).items():
            f.attrs[name] = value if isinstance(value, str) or len(results) == 1 else \
                value.reshape(*layout.shape, *value.shape[1:])
        for stage in first.timings:
            f.attrs[f"time_{stage}_s"] = float(sum(r.timings.get(stage, 0.0) for _, _, _, r in results))
        if len(results) == 1 and scan.ground_truth is not None:
            kind, value = nrmse_vs_truth(stack.image, scan.ground_truth, first)
            f.attrs["nrmse_vs_ground_truth"] = value
            f.attrs["nrmse_kind"] = kind
    return [Path(output)]


FORMAT = OutputFormat("hdf5", "HDF5", (".h5", ".hdf5"), ".h5", write_hdf5, values=hdf5_values)
"""HDF5 output (``.h5``, ``.hdf5``; ``.mrd.h5`` chooses MRD, whose suffix is longer)."""
