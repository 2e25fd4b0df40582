"""The command line's hooks around one file's reconstruction: the warning about an unplaced image, the device
notice, the progress bar and the log line of each image (``reconstruct`` of a scan and of a time series)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from ..settings import ReconSettings
from ..solvers.regularizers import regularizer as regularizer_of
from .common import say

log = logging.getLogger("mri_recon.cli")


class ProgressHooks:
    """The hooks of one file's reconstruction on the command line: the warning about an unplaced image, the
    device notice, the progress bar and the log line of each image."""

    def __init__(self, scan: Path, chosen: Any, settings: ReconSettings, quiet: bool) -> None:
        self.scan, self.chosen, self.settings, self.quiet = scan, chosen, settings, quiet
        self.bar = None
        self.device = None

    def loaded(self, images: list) -> None:
        from ..io.geometry import geometry_of
        from .console import ProgressBar

        geometry = geometry_of(images[0][1].matrix, images[0][1].attrs, str(self.scan))  # malformed: refused
        if not geometry.oriented and self.chosen.placed is not None:  # HDF5 records it in `geometry`
            voxel = "x".join(f"{v:g}" for v in geometry.voxel_size_mm)
            say(self.quiet, f"warning: {self.scan} does not say where the image lies (no position or orientation): "
                            f"the output's {self.chosen.placed} axis 0 posterior and axis 1 left (LPS: shown as "
                            f"the PNG) and {voxel} mm voxels"
                            + ("" if geometry.voxel_size_known else " (voxel size unknown)"))
        self.device = resolve_with_notice(self.settings.device)
        chosen = regularizer_of(self.settings.regularizer)
        self.bar = ProgressBar(len(images), self.settings.iterations, enabled=not self.quiet,
                               value="objective" if chosen.sparse else "residual", name=chosen.label or chosen.name)

    def image(self, index: int, key: dict, loaded: Any) -> None:
        self.bar.start_image(index)
        log.info("%s%s: matrix %s, %d coil(s), %d samples, device %s", self.scan,
                 "".join(f", {name} {value}" for name, value in key.items()), list(loaded.matrix),
                 loaded.n_coils, loaded.n_samples, self.device)

    def __call__(self, *event: Any) -> None:
        self.bar(*event)

    def close(self, *results: Any) -> None:
        del results
        if self.bar is not None:
            self.bar.close()


def resolve_with_notice(device: Any) -> Any:
    """The device ``device`` names; logs why ``auto`` chose the CPU."""
    from ..arrays.backend import cupy_module, resolve_device

    resolved = resolve_device(device)
    if device == "auto" and not resolved.is_gpu:
        why = "CuPy is not installed" if cupy_module() is None else "no CUDA GPU was found"
        log.info("note: %s; reconstructing on the CPU", why)
    return resolved
