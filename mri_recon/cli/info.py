"""``mri-recon info``: what a scan holds, and what its reconstruction would take."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ..checks.validation import trajectory_extent
from ..errors import printable
from .common import friendly
from .options import settings_from, settings_option


def varying(keys: list[dict]) -> list[str]:
    """The image indices that differ between these images (``"slice 0"``, ``"slice 1 contrast 1"``, ...)."""
    names = [name for name in (keys[0] if keys else {}) if len({key[name] for key in keys}) > 1]
    return [" ".join(f"{name} {key[name]}" for name in names) for key in keys]


def scan_lines(path: Path, scans: list, device: str) -> list[str]:
    """The description of the first image of ``scans``: sizes, extent against Nyquist, arrays present."""
    s = scans[0][1]
    lines = [f"file        {path}"]
    if len(scans) > 1:
        keys = ", ".join(varying([key for key, _ in scans]))
        lines.append(f"images      {len(scans)} ({keys}); the first is described")
    lines += [f"matrix      {list(s.matrix)} ({s.ndim}-D)",
              f"coils       {s.n_coils}",
              f"samples     {s.n_samples} per coil"]
    extent = trajectory_extent(s.trajectory)
    for axis, (reach, n) in enumerate(zip(extent, s.matrix)):
        lines.append(f"k extent    axis {axis}: |k| <= {reach:.4g} cycles/FOV, Nyquist {n / 2:g} "
                     f"({reach / (n / 2):.2f}x)")
    for name in ("weights", "coil_maps", "field_map", "times", "noise", "ground_truth"):
        value = getattr(s, name)
        lines.append(f"{name:<11} {'absent' if value is None else f'{value.dtype} {value.shape}'}")
    if "traj_units" in s.attrs:
        lines.append(f"traj units  {printable(s.attrs['traj_units'])}")
    if s.field_map is not None and s.times is not None:
        from ..operators.offres.setup import describe_correction

        lines.append(f"off-res     {describe_correction(s.field_map, s.times, s.n_coils, device)}")
    return lines


def estimate_lines(scans: list, device: str) -> list[str]:
    """The memory and time ``reconstruct`` would take with its defaults (method auto, 30 iterations, the
    preparation's defaults), or why it does not fit."""
    from ..api import plan_prepared
    from ..arrays.backend import device_memory
    from ..errors import ResourceError
    from ..planning.planner import host_memory_available, human_bytes

    s = scans[0][1]
    try:
        dev, engine, p = plan_prepared(s, device=device, iterations=30)
    except ResourceError as exc:
        return [f"memory      does not fit: {exc}"]
    available = device_memory(dev)[0] if dev.is_gpu else host_memory_available()
    return [f"engine      {engine.name} (method auto)",
            f"memory      about {human_bytes(p.peak_bytes)} on {dev}"
            + (f" ({human_bytes(available)} available)" if available else "")
            + (f", {p.coil_batch} coil(s) per batch" if p.coil_batch < s.n_coils else ""),
            f"time        about {p.estimated_seconds * len(scans):.2g} s for 30 iterations"
            + (f" of all {len(scans)} images" if len(scans) > 1 else "") + f" on {dev} (estimate)"]


@click.command()
@click.argument("scan", type=click.Path(path_type=Path))
@settings_option("device")
@settings_option("traj_units", help="ISMRMRD / BART trajectory units.")
@settings_option("trajectory")
@settings_option("sensitivities")
@settings_option("matrix")
@settings_option("allow_external")
@friendly
def info(scan: Path, device: str, **options: Any) -> None:
    """Describe SCAN: shapes, coils, trajectory extent against Nyquist, memory and time estimates."""
    from ..io import load_scans

    scans = load_scans(scan, **settings_from(options).reader_keywords())
    click.echo("\n".join(scan_lines(scan, scans, device) + estimate_lines(scans, device)))
