"""The ``mri-recon`` command: a thin click layer over the library.

Library errors (:class:`~mri_recon.errors.MriReconError`) become one-line messages and exit code 1; the
command never prints a traceback for bad input. Outputs are written to a temporary file and renamed, and
never replace the input.
"""

from __future__ import annotations

import functools
import logging
import sys
import time
from pathlib import Path
from typing import Any

import click
import numpy as np

from ._version import __version__
from .batch.inputs import output_name
from .cli_batch import batch_options, is_batch, run_batch
from .cli_solver import finite as _finite
from .cli_solver import simulate_options, solver_options, solver_settings
from .errors import MriReconError, OutputError, printable
from .prep import COIL_MAP_CHOICES, DCF_CHOICES
from .validation import trajectory_extent

log = logging.getLogger("mri_recon.cli")
DEVICE_HELP = "Compute device: auto (GPU if present, else CPU), cpu, gpu or gpu:N."
ALLOW_EXTERNAL = click.option(
    "--allow-external-data", "allow_external", is_flag=True,
    help="Read HDF5 external links, external raw storage and virtual datasets that reach other files (refused "
         "by default: a scan is read only within itself).")


def _friendly(func):
    """Turn library errors into click errors (one line, exit code 1, no traceback)."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except MriReconError as exc:
            raise click.ClickException(printable(exc)) from None
        except click.ClickException as exc:  # strings from files escaped here too, the last line of defence
            exc.message = printable(exc.message)
            raise
        except MemoryError:
            raise click.ClickException("out of host memory; try a smaller problem or --device gpu") from None

    return wrapper


def _log(quiet: bool, message: str) -> None:
    if not quiet:
        click.echo(message, err=True)


def _parse_matrix(text: str) -> tuple[int, ...]:
    parts = [p for p in text.replace("x", ",").split(",") if p.strip()]
    try:
        values = tuple(int(p) for p in parts)
    except ValueError:
        raise click.BadParameter(f"expected N, NxM or NxMxK, got {text!r}") from None
    if not values:
        raise click.BadParameter(f"expected N, NxM or NxMxK, got {text!r}")
    return values


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="mri-recon")
def main() -> None:
    """Exact non-Cartesian MRI reconstruction (radial, spiral, 3D) on NVIDIA GPUs, with a CPU twin."""


def _default_output(scan_path: Path, format: str | None = None) -> Path:
    return scan_path.with_name(output_name(scan_path, format))


def _resolve_device_with_notice(device: str):
    from .backend import cupy_module, resolve_device

    resolved = resolve_device(device)
    if device == "auto" and not resolved.is_gpu:
        why = "CuPy is not installed" if cupy_module() is None else "no CUDA GPU was found"
        log.info("note: %s; reconstructing on the CPU", why)
    return resolved


def _image_choice(verb: str):
    """The ``--slice``, ``--contrast``, ``--phase``, ``--set`` and ``--repetition`` options (ISMRMRD input)."""

    def decorate(func):
        for name in reversed(("slice", "contrast", "phase", "set", "repetition")):
            func = click.option(f"--{name}", f"{name}_", type=click.IntRange(min=0), default=None,
                                help=f"ISMRMRD: {verb} only the images with this {name} index "
                                     f"(default: every {name}).")(func)
        return func

    return decorate


def _choice(slice_, contrast_, phase_, set_, repetition_) -> dict:
    return {"slice": slice_, "contrast": contrast_, "phase": phase_, "set": set_, "repetition": repetition_}


def _varying(keys: list[dict]) -> list[str]:
    """The image indices that differ between these images (``"slice 0"``, ``"slice 1 contrast 1"``, ...)."""
    names = [name for name in (keys[0] if keys else {}) if len({key[name] for key in keys}) > 1]
    return [" ".join(f"{name} {key[name]}" for name in names) for key in keys]


@main.command()
@click.argument("scans", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("-o", "--output", type=click.Path(path_type=Path), default=None,
              help="Several scans: the output folder (default: beside each scan). One scan: the output file: "
                   "NIfTI for .nii / .nii.gz, MRD images for .mrd.h5 / .mrd, HDF5 for .h5 / .hdf5; another extension "
                   "is refused unless --format is given (default: SCAN's name with .recon.h5, or .recon.nii.gz / "
                   ".recon.mrd.h5 with --format, beside it).")
@click.option("--format", "format_", type=click.Choice(["hdf5", "nifti", "mrd"]), default=None,
              help="Output format, overriding the one chosen by the output's extension.")
@click.option("--complex", "complex_", is_flag=True,
              help="NIfTI: write real and imaginary parts (a last axis of size 2) instead of the magnitude. "
                   "HDF5 and MRD hold the complex image.")
@click.option("--magnitude", is_flag=True,
              help="MRD: write magnitude images (float32) instead of complex ones. NIfTI writes the magnitude "
                   "unless --complex; HDF5 always holds the complex image.")
@solver_options
@click.option("--device", default="auto", show_default=True, help=DEVICE_HELP)
@click.option("--png", type=click.Path(path_type=Path), default=None,
              help="Also write a PNG preview (.png): the image, or a montage of a stack's images or a 3D "
                   "image's slices.")
@click.option("--png-axis", type=click.IntRange(0, 2), default=2, show_default=True,
              help="3-D images: the PNG montage shows the slices across this axis.")
@click.option("--coil-maps", type=click.Choice(COIL_MAP_CHOICES), default="auto", show_default=True,
              help="auto: the file's maps, else Walsh; file; walsh; espirit; rss (no maps, root-sum-of-squares).")
@click.option("--dcf", type=click.Choice(DCF_CHOICES), default="auto", show_default=True,
              help="Density compensation: auto (the file's weights if any), none, ramp, pipe, file.")
@click.option("--no-prewhiten", is_flag=True, help="Do not whiten with the noise samples.")
@click.option("--no-field-map", is_flag=True,
              help="Reconstruct without off-resonance correction, dropping the scan's field_map and times on "
                   "purpose (recorded as field_map_correction = ignored).")
@click.option("--traj-units", type=click.Choice(["auto", "cycles-per-fov", "normalized"]), default="auto",
              show_default=True, help="ISMRMRD trajectory units (schema-v1 files are always cycles per FOV).")
@_image_choice("reconstruct")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the point-spread-function cache.")
@click.option("--cache-dir", type=click.Path(path_type=Path), default=None,
              help="PSF cache folder (default: $MRI_RECON_CACHE_DIR or ~/.cache/mri-recon/psf).")
@ALLOW_EXTERNAL
@click.option("-q", "--quiet", is_flag=True, help="No progress bar and no result line (errors only).")
@click.option("-v", "--verbose", count=True, help="Show the log on stderr: -v stages and timings, -vv iterations too.")
@click.option("--log-json", type=click.Path(path_type=Path), default=None,
              help="Write the run's settings, engine, stages, timings and residuals to this JSON file.")
@batch_options
@_friendly
def reconstruct(scans: tuple[Path, ...], output: Path | None, format_: str | None, complex_: bool, magnitude: bool,
                device: str, png: Path | None, png_axis: int, coil_maps: str,
                dcf: str, no_prewhiten: bool, no_field_map: bool, traj_units: str, slice_: int | None,
                contrast_: int | None, phase_: int | None, set_: int | None, repetition_: int | None,
                no_cache: bool, cache_dir: Path | None, allow_external: bool, quiet: bool, verbose: int,
                log_json: Path | None,
                workers: int | None, scheduler: str | None, overwrite: bool, **solver: Any) -> None:
    """Reconstruct SCANS (schema-v1 HDF5 or ISMRMRD: files, folders or 'patterns*.h5') into image files.

    The images of an ISMRMRD file (every slice, contrast, phase, set and repetition, or those chosen) are
    reconstructed one by one and arranged on named leading axes of the HDF5 image, in that order (attribute
    `axes`); a NIfTI image has them on its 4th axis, MRD output one image record each. Several scans, a
    folder or a pattern run as a batch (one output each in -o OUTDIR, failures reported, complete outputs
    skipped), on a Dask cluster with --workers or --scheduler.
    """
    if is_batch(scans, workers, scheduler):
        return run_batch(click.get_current_context().params)
    scan = scans[0]
    from .api import prepare_and_reconstruct
    from .console import ProgressBar, cli_logging, run_log, truth_summary, typed_settings, write_run_log
    from .io import load_scans
    from .io.cache import PsfCache
    from .io.geometry import geometry_of
    from .result import output_format, output_values, write_result

    if quiet and verbose:
        raise click.UsageError("--quiet and --verbose contradict each other; give one")
    ctx = click.get_current_context()
    settings = typed_settings(ctx.command, ctx.params, leave=("quiet", "verbose"))
    output = output or _default_output(scan, format_)
    _check_outputs(scan, output, png)
    _check_log_json(scan, log_json, output, png)
    chosen = output_format(output, format_)  # a name of no output format: refused before work
    values = output_values(chosen, complex_=complex_, magnitude=magnitude)  # contradictions: refused before work
    with cli_logging(verbose, quiet):
        started = time.perf_counter()
        picked = {k: v for k, v in _choice(slice_, contrast_, phase_, set_, repetition_).items() if v is not None}
        scans = load_scans(scan, traj_units=traj_units, allow_external=allow_external, **picked)
        geometry = geometry_of(scans[0][1].matrix, scans[0][1].attrs, str(scan))  # malformed: refused before work
        if not geometry.oriented and chosen in ("nifti", "mrd"):  # HDF5 records it in its `geometry` attribute
            voxel = "x".join(f"{v:g}" for v in geometry.voxel_size_mm)
            placed = "affine has" if chosen == "nifti" else "image headers have position 0,"
            _log(quiet, f"warning: {scan} does not say where the image lies (no position or orientation): the "
                        f"output's {placed} identity directions (LPS) and {voxel} mm voxels"
                        + ("" if geometry.voxel_size_known else " (voxel size unknown)"))
        dev = _resolve_device_with_notice(device)
        cache = None if no_cache else PsfCache(cache_dir)
        results = []
        regularizer = solver["regularizer"]
        bar = ProgressBar(len(scans), solver["iterations"], enabled=not quiet, value="residual" if regularizer == "l2"
                          else "objective", name={"l2": "CG", "tv": "TV"}.get(regularizer, "wavelet"))
        try:
            for index, (key, loaded) in enumerate(scans):
                bar.start_image(index)
                log.info("%s%s: matrix %s, %d coil(s), %d samples, device %s", scan,
                         "".join(f", {name} {value}" for name, value in key.items()), list(loaded.matrix),
                         loaded.n_coils, loaded.n_samples, dev)
                ready, record, result = prepare_and_reconstruct(
                    loaded, prewhiten=not no_prewhiten, dcf=dcf, coil_maps=coil_maps,
                    field_map="ignore" if no_field_map else "correct", device=dev, progress=bar, psf_cache=cache,
                    **solver_settings(solver))
                results.append((key, ready, record, result))
        finally:
            bar.close()
        written = write_result(output, results, scan, format=chosen, complex_=complex_, magnitude=magnitude)
        what = {"hdf5": "HDF5", "nifti": f"NIfTI, {values}", "mrd": f"MRD, {values} images"}[chosen]
        shown = ""
        if png is not None:
            from .io.png import write_png

            images = [r.image for _, _, _, r in results]
            shown = write_png(png, images[0] if len(images) == 1 else np.stack(images), stacked=len(images) > 1,
                              axis=png_axis, protect=(scan,))
            shown = f" and {png} ({shown})"
        seconds = time.perf_counter() - started
        if log_json is not None:
            write_run_log(log_json, run_log({**settings, "output": output}, results, seconds), protect=(scan,))
    last = results[-1][3]
    files = str(output) if len(written) == 1 else f"{len(written)} files {written[0]} .. {written[-1].name}"
    _log(quiet, f"wrote {files} ({what}){shown}" + (f" and {log_json}" if log_json else "")
         + f": {len(results)} image(s), {sum(r.iterations for *_, r in results)} "
         + ("CG iterations, final residual " if regularizer == "l2" else f"{regularizer} iterations, final objective ")
         + f"{max(r.residuals[-1] for *_, r in results):.1e}{truth_summary(results)}, "
         f"{last.parameters['method']} on {last.device}, "
         f"{seconds:.2f} s")


def _check_log_json(scan: Path, log_json: Path | None, output: Path, png: Path | None) -> None:
    """Fail before any work when the JSON log cannot be written or would replace another output."""
    from .io.files import check_output, same_file

    if log_json is None:
        return
    for other, option in ((output, "-o"), (png, "--png")):
        if other is not None and same_file(log_json, other):
            raise OutputError(f"{log_json}: --log-json names the same file as {option}; choose another path")
    check_output(log_json, protect=(scan,))


def _check_outputs(scan: Path, output: Path, png: Path | None) -> None:
    """Fail before any work when an output cannot be written (the same checks the writers make)."""
    from .io.files import check_output, same_file
    from .io.png import check_png_name

    if png is not None and same_file(png, output):
        raise OutputError(f"{png}: --png names the same file as the output (-o); choose another PNG path")
    for target in (output, png):
        if target is not None:
            check_output(target, protect=(scan,))
    if png is not None:
        check_png_name(png)


@main.command()
@click.argument("output", type=click.Path(path_type=Path))
@click.option("--matrix", default="128", show_default=True,
              help="N, NxM or NxMxK (one number: square for 2D kinds, cube for 3D kinds).")
@click.option("--trajectory", type=click.Choice(["radial", "golden", "spiral", "kooshball", "stack-of-stars"]),
              default="golden", show_default=True)
@click.option("--coils", type=click.IntRange(1, 128), default=8, show_default=True)
@click.option("--snr", type=click.FloatRange(min=0.0, min_open=True), default=30.0, show_default=True,
              help="Image-domain SNR per coil of an equivalent fully sampled Cartesian scan.")
@click.option("--spokes", type=click.IntRange(min=1), default=None, help="Spokes (radial kinds).")
@click.option("--interleaves", type=click.IntRange(min=1), default=None, help="Interleaves (spiral).")
@click.option("--samples", type=click.IntRange(min=1), default=None, help="Samples per spoke/interleaf.")
@click.option("--dcf", type=click.Choice(["pipe", "ramp", "none"]), default="pipe", show_default=True,
              help="Density compensation stored as 'weights'.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--field-map", "field_map", type=click.FloatRange(min=0.0), default=None, callback=_finite,
              help="Peak (Hz) of a smooth synthetic field map: the data include the off-resonance, and the file "
                   "gets field_map and times.")
@click.option("--readout-ms", type=click.FloatRange(min=0.0, min_open=True), default=16.0, show_default=True,
              callback=_finite, help="Duration of each readout (spoke or interleaf) for the sample times.")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
@simulate_options
@_friendly
def simulate(output: Path, matrix: str, trajectory: str, coils: int, snr: float, spokes: int | None,
             interleaves: int | None, samples: int | None, dcf: str, seed: int, field_map: float | None,
             readout_ms: float, quiet: bool) -> None:
    """Write a Shepp-Logan phantom scan (schema v1, with its ground truth) to OUTPUT."""
    from .io import save_scan
    from .sim.simulate import simulate_scan

    size = _parse_matrix(matrix)
    if len(size) == 1:  # one number: a square (2D kinds) or a cube (3D kinds)
        size = size * (3 if trajectory in ("kooshball", "stack-of-stars") else 2)
    scan = simulate_scan(size, trajectory, coils=coils, snr=snr, spokes=spokes, samples=samples,
                         interleaves=interleaves, seed=seed, dcf=None if dcf == "none" else dcf,
                         field_map_peak=field_map, readout_ms=readout_ms)
    save_scan(output, scan)
    _log(quiet, f"wrote {output}: matrix {list(scan.matrix)}, {scan.n_coils} coil(s), {scan.n_samples} samples")


@main.command()
@click.argument("scan", type=click.Path(path_type=Path))
@click.option("--device", default="auto", show_default=True, help=DEVICE_HELP)
@click.option("--traj-units", type=click.Choice(["auto", "cycles-per-fov", "normalized"]), default="auto",
              show_default=True, help="ISMRMRD trajectory units.")
@ALLOW_EXTERNAL
@_friendly
def info(scan: Path, device: str, traj_units: str, allow_external: bool) -> None:
    """Describe SCAN: shapes, coils, trajectory extent against Nyquist, memory and time estimates."""
    from .api import plan_prepared
    from .backend import device_memory
    from .errors import ResourceError
    from .io import load_scans
    from .planner import host_memory_available, human_bytes

    scans = load_scans(scan, traj_units=traj_units, allow_external=allow_external)
    s = scans[0][1]
    lines = [f"file        {scan}"]
    if len(scans) > 1:
        keys = ", ".join(_varying([key for key, _ in scans]))
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
        from .operators.offres_setup import describe_correction

        lines.append(f"off-res     {describe_correction(s.field_map, s.times, s.n_coils, device)}")
    # the estimate reconstruct acts on, with its defaults: method auto, 30 iterations, the preparation's defaults
    try:
        dev, engine, p = plan_prepared(s, device=device, iterations=30)
    except ResourceError as exc:
        lines.append(f"memory      does not fit: {exc}")
        click.echo("\n".join(lines))
        return
    available = device_memory(dev)[0] if dev.is_gpu else host_memory_available()
    lines.append(f"engine      {engine.name} (method auto)")
    lines.append(f"memory      about {human_bytes(p.peak_bytes)} on {dev}"
                 + (f" ({human_bytes(available)} available)" if available else "")
                 + (f", {p.coil_batch} coil(s) per batch" if p.coil_batch < s.n_coils else ""))
    lines.append(f"time        about {p.estimated_seconds * len(scans):.2g} s for 30 iterations"
                 + (f" of all {len(scans)} images" if len(scans) > 1 else "") + f" on {dev} (estimate)")
    click.echo("\n".join(lines))


@main.command()
@click.argument("source", type=click.Path(path_type=Path))
@click.argument("output", type=click.Path(path_type=Path))
@click.option("--traj-units", type=click.Choice(["auto", "cycles-per-fov", "normalized"]), default="auto",
              show_default=True, help="Units of the ISMRMRD trajectory.")
@_image_choice("convert")
@ALLOW_EXTERNAL
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
@_friendly
def convert(source: Path, output: Path, traj_units: str, slice_: int | None, contrast_: int | None,
            phase_: int | None, set_: int | None, repetition_: int | None, allow_external: bool,
            quiet: bool) -> None:
    """Convert an ISMRMRD file SOURCE to schema v1 (one OUTPUT file per image: slice, contrast, phase, set
    and repetition; the indices that vary are appended to OUTPUT's name)."""
    from .io.files import same_file
    from .io.ismrmrd_write import convert as run

    if same_file(source, output):
        raise OutputError(f"{output}: output would overwrite the input file; choose another path")
    for path in run(source, output, traj_units=traj_units, allow_external=allow_external,
                    **_choice(slice_, contrast_, phase_, set_, repetition_)):
        _log(quiet, f"wrote {path}")


@main.command()
@click.option("--device", default="auto", show_default=True, help=DEVICE_HELP)
@_friendly
def doctor(device: str) -> None:
    """Print versions, self-test the CPU path, compile the GPU kernels and self-test each against the CPU oracle."""
    from .doctor import run

    rows, cpu_checks, gpu_checks = run(device)
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        click.echo(f"{name:<{width}}  {value}")
    for check in cpu_checks + gpu_checks:
        status = "PASS" if check.passed else "FAIL"
        detail = check.message or (f"relative error {check.error:.2e} (tolerance {check.tolerance:.0e})"
                                   if check.name != "compile kernels" else "every registry configuration built")
        click.echo(f"{status}  {check.name:<22} {detail}  {check.seconds:.2f} s")
    if not gpu_checks:
        click.echo("no GPU: GPU self-test skipped (the CPU path needs none)")
    failed = [c.name for c in cpu_checks + gpu_checks if not c.passed]
    if failed:
        raise click.ClickException(f"self-test failed: {', '.join(failed)}")
    click.echo("all self-tests passed")


@main.group()
def cache() -> None:
    """Show or empty the point-spread-function cache (size cap: $MRI_RECON_CACHE_MAX bytes, default 8 GiB)."""


_CACHE_DIR = click.option("--cache-dir", type=click.Path(path_type=Path), default=None,
                          help="PSF cache folder (default: $MRI_RECON_CACHE_DIR or ~/.cache/mri-recon/psf).")


@cache.command("info")
@_CACHE_DIR
@_friendly
def cache_info(cache_dir: Path | None) -> None:
    """Print the cache's folder, number of entries, total size and cap."""
    from .io.cache import PsfCache
    from .planner import human_bytes

    info = PsfCache(cache_dir).info()
    click.echo(f"folder   {info.directory}\nentries  {info.entries}\n"
               f"size     {info.total_bytes} bytes ({human_bytes(info.total_bytes)})\n"
               f"cap      {info.max_bytes} bytes ({human_bytes(info.max_bytes)}; MRI_RECON_CACHE_MAX)")
    if info.problem is not None:
        click.echo(f"refused  {info.problem}: not used until only you may write it (chmod 700)")


@cache.command("clear")
@_CACHE_DIR
@_friendly
def cache_clear(cache_dir: Path | None) -> None:
    """Remove the cache's own entries, lock files and abandoned temporary files; nothing else in the folder."""
    from .io.cache import PsfCache

    store = PsfCache(cache_dir)
    removed = store.clear()
    click.echo(f"removed {len(removed)} file(s) from {store.directory}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
