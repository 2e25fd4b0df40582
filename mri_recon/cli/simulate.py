"""``mri-recon simulate``: a Shepp-Logan phantom scan (schema v1, with its ground truth)."""

from __future__ import annotations

from pathlib import Path

import click

from ..sim.simulate import DCFS, KINDS
from .common import QUIET, friendly, parse_matrix, say
from .options import finite
from .temporal import simulate_options


def delays(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[float, ...] | None:
    """``--gradient-delay X,Y[,Z]`` (Z: a kooshball's) or BART's ``y:x:yx`` as the simulator's numbers (auto
    and the estimators are reconstruct's)."""
    from ..errors import InvalidDataError
    from ..prep.gradient_delay import parse_gradient_delay

    try:
        choice, numbers = parse_gradient_delay(value) if value is not None else (None, None)
    except InvalidDataError as exc:
        raise click.BadParameter(str(exc), param=param) from None
    if choice not in (None, "given", "bart"):
        raise click.BadParameter(f"simulate takes delays X,Y[,Z] or BART's y:x:yx in samples, found {value!r}",
                                 param=param)
    ctx.meta["gradient_delay_form"] = choice  # checked against the trajectory once every option is read
    return numbers


def check_delay_form(ctx: click.Context, trajectory: str, numbers: tuple | None) -> None:
    """Refuse three comma values for an in-plane delay (a Z is a kooshball's) and BART's form for a kooshball."""
    form, three_d = ctx.meta.get("gradient_delay_form"), trajectory == "kooshball"
    if form == "given" and len(numbers) == 3 and not three_d:
        raise click.BadParameter(f"a {trajectory} scan takes X,Y (a Z only for a kooshball; a cross term as "
                                 f"BART's y:x:yx)", param_hint="--gradient-delay")
    if form == "bart" and three_d:
        raise click.BadParameter("BART's y:x:yx delays are in-plane; a kooshball takes X,Y,Z",
                                 param_hint="--gradient-delay")


@click.command()
@click.argument("output", type=click.Path(path_type=Path))
@click.option("--matrix", default=None,
              help="N, NxM or NxMxK (one number: square for 2D kinds, cube for 3D kinds); default 128 for 2D "
                   "kinds and 64 for 3D kinds (kooshball, stack-of-stars).")
@click.option("--trajectory", type=click.Choice(list(KINDS)),
              default="golden", show_default=True)
@click.option("--coils", type=click.IntRange(1, 128), default=8, show_default=True)
@click.option("--snr", type=click.FloatRange(min=0.0, min_open=True), default=30.0, show_default=True,
              help="Image-domain SNR per coil of an equivalent fully sampled Cartesian scan.")
@click.option("--spokes", type=click.IntRange(min=1), default=None, help="Spokes (radial kinds).")
@click.option("--interleaves", type=click.IntRange(min=1), default=None, help="Interleaves (spiral).")
@click.option("--samples", type=click.IntRange(min=1), default=None, help="Samples per spoke/interleaf.")
@click.option("--dcf", type=click.Choice([d or "none" for d in DCFS]), default="pipe", show_default=True,
              help="Density compensation stored as 'weights'.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--field-map", "field_map", type=click.FloatRange(min=0.0), default=None, callback=finite,
              help="Peak (Hz) of a smooth synthetic field map: the data include the off-resonance, and the file "
                   "gets field_map and times.")
@click.option("--readout-ms", type=click.FloatRange(min=0.0, min_open=True), default=16.0, show_default=True,
              callback=finite, help="Duration of each readout (spoke or interleaf) for the sample times.")
@click.option("--gradient-delay", default=None, callback=delays,
              help="Radial kinds: X,Y (kooshball X,Y,Z) delays in samples; the data are those of the delayed "
                   "positions, the file's trajectory the nominal one.")
@QUIET
@simulate_options
@friendly
def simulate(output: Path, matrix: str, trajectory: str, coils: int, snr: float, spokes: int | None,
             interleaves: int | None, samples: int | None, dcf: str, seed: int, field_map: float | None,
             readout_ms: float, gradient_delay: tuple | None, quiet: bool) -> None:
    """Write a Shepp-Logan phantom scan to OUTPUT: schema v1 with its ground truth, or MRD raw data for a name
    ending .mrd.h5 or .mrd."""
    from ..io import save_scan
    from ..io.mrd_image import is_mrd_name
    from ..io.schema import check_scan_name
    from ..sim.simulate import simulate_scan
    from .console import sample_bar

    check_delay_form(click.get_current_context(), trajectory, gradient_delay)
    three = trajectory in ("kooshball", "stack-of-stars")
    size = parse_matrix(matrix if matrix is not None else "64" if three else "128")
    if len(size) == 1:  # one number: a square (2D kinds) or a cube (3D kinds)
        size = size * (3 if three else 2)
    check_scan_name(output)
    mrd = is_mrd_name(output)
    if mrd and field_map is not None:
        raise click.UsageError(f"{output}: MRD raw data has no place for a field map; simulate --field-map into a "
                               f"schema-v1 file (.h5)")
    with sample_bar(quiet) as progress:
        scan = simulate_scan(size, trajectory, coils=coils, snr=snr, spokes=spokes, samples=samples,
                             interleaves=interleaves, seed=seed, dcf=None if dcf == "none" else dcf,
                             field_map_peak=field_map, readout_ms=readout_ms, gradient_delay=gradient_delay,
                             progress=progress)
    if mrd:
        from ..io.ismrmrd_write import write_ismrmrd

        write_ismrmrd(output, scan)
    else:
        save_scan(output, scan)
    kind = " (MRD raw data: no ground truth or coil maps)" if mrd else ""
    say(quiet, f"wrote {output}{kind}: matrix {list(scan.matrix)}, {scan.n_coils} coil(s), {scan.n_samples} samples")
