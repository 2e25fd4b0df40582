"""``mri-recon doctor``: versions, and self-tests of the CPU path and of every GPU kernel."""

from __future__ import annotations

import click

from .common import friendly
from .options import settings_option


@click.command()
@settings_option("device")
@friendly
def doctor(device: str) -> None:
    """Print versions, self-test the CPU path, compile the GPU kernels and self-test each against the CPU oracle."""
    from ..doctor import run

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
