"""``mri-recon reconstruct`` with several scans, a folder, a pattern, ``--workers`` or ``--scheduler``: the
command-line side of :func:`mri_recon.batch.reconstruct_many` (options, progress bar over scans, the
dashboard's address, the summary table, ``--log-json``). Dask is imported only once a batch runs.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import click

from ..errors import printable
from .options import settings_from

log = logging.getLogger("mri_recon.cli")


TLS_OPTIONS = ("tls_ca_file", "tls_cert", "tls_key")
"""The ``--tls-*`` parameters: the user's credentials for a ``tls://`` scheduler."""


def batch_options(func):
    """The options of a batch run: ``--workers``, ``--dashboard``, ``--scheduler`` and its ``--tls-*``,
    ``--overwrite``."""
    func = click.option("--overwrite", is_flag=True,
                        help="Batch: reconstruct again also the scans whose output is complete (recorded settings "
                             "and checksum match); by default they are skipped.")(func)
    for name, what in (("--tls-key", "your private key"), ("--tls-cert", "your certificate"),
                       ("--tls-ca-file", "the certificate authority of the cluster")):
        func = click.option(name, default=None, metavar="FILE",
                            help=f"Batch: {what} (PEM file) for a tls:// --scheduler; default: Dask's "
                                 f"configuration (distributed.comm.tls.*).")(func)
    func = click.option("--scheduler", default=None, metavar="ADDRESS",
                        help="Batch: run the scans on the Dask cluster of this scheduler (tcp://host:8786, or "
                             "tls://host:8786 with --tls-ca-file, --tls-cert and --tls-key).")(func)
    func = click.option("--dashboard", is_flag=True,
                        help="Batch: serve the local cluster's Dask dashboard on 127.0.0.1 (needs bokeh; starts "
                             "the cluster whatever the batch's size).")(func)
    return click.option("--workers", type=click.IntRange(min=1), default=None,
                        help="Batch: run the scans on a local Dask cluster (127.0.0.1, TLS) of N worker processes "
                             "on the CPU, or of one worker on each of the first N visible GPUs (--device gpu, or "
                             "auto with a GPU), when the predicted work pays for starting it; else in this "
                             "process (the summary says which and why).")(func)


def is_batch(scans: tuple[Path, ...], workers: int | None, scheduler: str | None) -> bool:
    """Whether the command runs as a batch: several inputs, a folder, a pattern, or a cluster asked for.

    Raises
    ------
    click.UsageError
        ``--dashboard`` without ``--workers``, or ``--tls-*`` without ``--scheduler`` (they would be ignored).
    """
    params = getattr(click.get_current_context(silent=True), "params", {})
    if params.get("dashboard") and workers is None:
        raise click.UsageError("--dashboard serves a local cluster's dashboard: give --workers too")
    named = [f"--{name.replace('_', '-')}" for name in TLS_OPTIONS if params.get(name) is not None]
    if named and scheduler is None:
        raise click.UsageError(f"{', '.join(named)} apply to a tls:// --scheduler: give --scheduler too")
    if len(scans) != 1 or workers is not None or scheduler is not None:
        return True
    only = scans[0]
    try:
        return only.is_dir() or (not only.exists() and any(c in str(only) for c in "*?["))
    except OSError:  # a name too long, ...: one file, whose reader says what is wrong with it
        return False


def run_batch(params: dict[str, Any]) -> None:
    """Run the batch that the ``reconstruct`` command's ``params`` describe; exit 1 when a scan failed."""
    from ..batch import reconstruct_many
    from .console import cli_logging, typed_settings, write_run_log

    quiet, verbose = params["quiet"], params["verbose"]
    if quiet and verbose:
        raise click.UsageError("--quiet and --verbose contradict each other; give one")
    if params["png"] is not None:
        raise click.UsageError("--png writes one preview and applies to one scan, not to a batch")
    if params["workers"] is not None and params["scheduler"] is not None:
        raise click.UsageError("--workers starts a local cluster and --scheduler uses another; give one")
    settings = settings_from(params)
    protect = _check_batch_log(params, settings.format)
    bar = _ScanBar(enabled=not quiet)
    with cli_logging(verbose, quiet):
        try:
            tls = {"ca_file": params["tls_ca_file"], "cert": params["tls_cert"], "key": params["tls_key"]}
            report = reconstruct_many(params["scans"], params["output"], workers=params["workers"],
                                      scheduler=params["scheduler"], tls=tls if any(tls.values()) else None,
                                      dashboard=params["dashboard"], overwrite=params["overwrite"],
                                      progress=bar, **settings.keywords())
        finally:
            bar.close()
        if params["log_json"] is not None:
            settings = typed_settings(click.get_current_context().command, params, leave=("quiet", "verbose"))
            write_run_log(params["log_json"], {"settings": settings, **report.as_dict()},
                          protect=protect)
    if not quiet:
        click.echo("\n".join(printable(line) for line in report.table().splitlines()), err=True)
    if report.failed:
        first = report.failed[0]
        why = first.reason if first.reason.startswith(first.input) else f"{first.input}: {first.reason}"
        raise click.ClickException(f"{len(report.failed)} of {len(report.outcomes)} scan(s) failed (first: {why}); "
                                   f"the others are complete")


def _check_batch_log(params: dict[str, Any], format: str | None) -> tuple[Path, ...]:
    """The files ``--log-json`` must not replace (every input, folders and patterns expanded, and every
    output); refuses before any work a log that names one of them or cannot be written."""
    from ..batch.inputs import expand_inputs, output_paths
    from ..errors import OutputError
    from ..io.files import FileSet, check_output

    inputs = [p.absolute() for p in expand_inputs(params["scans"])]
    if params["log_json"] is None:
        return tuple(inputs)
    out_dir = None if params["output"] is None else Path(params["output"]).absolute()
    outputs = output_paths(inputs, out_dir, format)
    if params["log_json"] in FileSet(outputs):
        raise OutputError(f"{params['log_json']}: --log-json names an output of the batch; choose another path")
    check_output(params["log_json"], protect=FileSet(inputs))
    return tuple(inputs)


class _ScanBar:
    """One tqdm bar over the scans of a batch (a :func:`reconstruct_many` progress callback)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.bar = None

    def __call__(self, event: str, value: Any) -> None:
        from .console import new_bar

        if event == "cluster":
            message = value.kind + (f"; Dask dashboard: {value.dashboard}" if value.dashboard else "")
            log.info("%s", message)
            if self.enabled and not log.isEnabledFor(logging.INFO):
                click.echo(message, err=True)
        elif event == "planned":
            run, skipped = value
            self.bar = new_bar(self.enabled, run + skipped, unit="scan", desc="scans", dynamic_ncols=True)
        elif event == "scan" and self.bar is not None:
            self.bar.set_postfix_str(f"{Path(value.input).name} {value.status}", refresh=False)
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
