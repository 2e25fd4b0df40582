"""``mri-recon serve`` (an MRD streaming server), ``mri-recon send`` (its small client) and the pipe mode of
``mri-recon reconstruct - -o -``: a thin click layer over :mod:`mri_recon.server`.

The settings a server applies are a :class:`~mri_recon.settings.ReconSettings`: ``serve`` takes the options
of its fields that a client may also choose (:data:`mri_recon.server.config.CLIENT_FIELDS`, the very options
of ``reconstruct``, :mod:`.options`), and ``--device`` and ``--cache-dir``; a connection's config messages
change the fields it may choose (:func:`mri_recon.server.config.configured`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click

from ..errors import OutputError, printable
from ..server.config import CLIENT_FIELDS, DEFAULT_BOUNDS, MAX_SPOKES_PER_FRAME
from ..server.protocol import DEFAULT_MAX_MESSAGE, DEFAULT_MAX_SCAN, Limits
from ..settings import ReconSettings
from .common import friendly
from .options import param_name, settings_from, settings_option

log = logging.getLogger("mri_recon.cli")


def client_options(func: Callable) -> Callable:
    """The options of the settings a client may choose (:data:`~mri_recon.server.config.CLIENT_FIELDS`), as
    ``reconstruct`` has them."""
    for name in reversed(CLIENT_FIELDS):
        func = settings_option(name)(func)
    return func


@contextlib.contextmanager
def server_logging(verbose: int, quiet: bool) -> Iterator[None]:
    """The log on stderr with timestamps: the server's INFO (connections, images, latencies) and the library's
    warnings; ``verbose`` 1 adds the library's INFO (stages, timings), 2 DEBUG; ``quiet`` errors only."""
    logger, server = logging.getLogger("mri_recon"), logging.getLogger("mri_recon.server")
    level = logging.ERROR if quiet else {0: logging.WARNING, 1: logging.INFO}.get(verbose, logging.DEBUG)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    previous = logger.level, server.level
    logger.addHandler(handler)
    logger.setLevel(level)
    server.setLevel(logging.ERROR if quiet else min(level, logging.INFO))
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous[0])
        server.setLevel(previous[1])


def _reconstructor(settings: ReconSettings):
    """The server's :class:`~mri_recon.server.recon.Reconstructor`: the settings' device and PSF cache."""
    from ..arrays.backend import resolve_device
    from ..io.cache import PsfCache
    from ..server.recon import Reconstructor

    return Reconstructor(resolve_device(settings.device), PsfCache(settings.cache_dir) if settings.cache else None)


@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (another than loopback is warned about: the protocol has no "
                   "authentication).")
@click.option("--port", type=click.IntRange(0, 65535), default=9002, show_default=True,
              help="TCP port (0: any free port, logged).")
@settings_option("device")
@click.option("--max-message-bytes", type=click.IntRange(min=4096), default=DEFAULT_MAX_MESSAGE,
              show_default=True, help="Largest message payload accepted; larger ones are refused.")
@click.option("--max-scan-bytes", type=click.IntRange(min=4096), default=DEFAULT_MAX_SCAN, show_default=True,
              help="Largest total of acquisition bytes one connection may send.")
@click.option("--idle-timeout", type=click.FloatRange(min=0.0, min_open=True), default=60.0, show_default=True,
              help="Seconds a connection may stay silent before it is closed.")
@click.option("--max-clients", type=click.IntRange(1, 1024), default=16, show_default=True,
              help="Connections served at once (when full, the oldest that has sent no header makes way; else "
                   "'server busy').")
@click.option("--header-timeout", type=click.FloatRange(min=0.0, min_open=True), default=10.0, show_default=True,
              help="Seconds a new connection may take to send its XML header.")
@click.option("--allow-users", default=None,
              help="Users served besides the server's own (names or uids, comma-separated), or 'any' (every "
                   "peer, remote ones too). Default: only the user running the server.")
@click.option("--max-iterations", type=click.IntRange(min=1), default=DEFAULT_BOUNDS.iterations, show_default=True,
              help="The most iterations a client may choose.")
@click.option("--max-inner-iterations", type=click.IntRange(min=1), default=DEFAULT_BOUNDS.inner_iterations,
              show_default=True, help="The most inner (ADMM) iterations a client may choose.")
@click.option("--max-filter-sigma", type=click.FloatRange(min=0.0), default=DEFAULT_BOUNDS.filter_sigma,
              show_default=True, help="The widest post-filter (voxels) a client may choose.")
@settings_option("cache_dir")
@click.option("--spokes-per-frame", type=click.IntRange(1, MAX_SPOKES_PER_FRAME), default=None,
              help="Stream a time series: each K consecutive readouts (of a slice) are one frame, reconstructed "
                   "and sent as soon as its K-th arrives, with repetition = frame number.")
@click.option("-q", "--quiet", is_flag=True, help="Log errors only.")
@click.option("-v", "--verbose", count=True, help="-v: the pipeline's stages and timings too; -vv debug.")
@client_options
@friendly
def serve(host: str, port: int, max_message_bytes: int, max_scan_bytes: int, idle_timeout: float,
          max_clients: int, header_timeout: float, allow_users: str | None, max_iterations: int,
          max_inner_iterations: int, max_filter_sigma: float, spokes_per_frame: int | None, quiet: bool,
          verbose: int, **options: Any) -> None:
    """Serve MRD streaming connections: config, XML header, noise and data in; MRD images and CLOSE out.

    The reconstruction options (--iterations, --regularizer, --coil-maps, ...) are reconstruct's and set
    the server's defaults; a connection may choose others by a preset name (CONFIG_FILE: default, fast,
    tv, wavelet, rss, magnitude) or JSON (CONFIG_TEXT). --spokes-per-frame K streams frames of K readouts
    back as they complete (docs/server.md). SIGTERM stops accepting and finishes the running scans.
    """
    from ..server.config import Bounds, configurator
    from ..server.peers import parse_users
    from ..server.service import Server

    settings = settings_from(options)
    try:
        users = parse_users(allow_users) if allow_users is not None else frozenset({os.getuid()})
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--allow-users") from None
    bounds = Bounds(max_iterations, max_inner_iterations, max_filter_sigma)
    with server_logging(verbose, quiet):
        recon = _reconstructor(settings)
        try:
            server = Server(recon, configurator(settings, spokes_per_frame, bounds), host, port,
                            limits=Limits(max_message_bytes, min(max_message_bytes, 16 * 2 ** 20), max_scan_bytes),
                            idle_timeout=idle_timeout, max_clients=max_clients, allowed_users=users,
                            header_timeout=header_timeout)
        except OSError as exc:
            why = exc.strerror or exc
            raise click.ClickException(printable(f"cannot listen on {host}:{port} ({why})")) from None
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: server.stop())
        server.serve_forever()


@click.command("send")
@click.argument("scan", type=click.Path(path_type=Path))
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(1, 65535), default=9002, show_default=True)
@click.option("-o", "--output", type=click.Path(path_type=Path), default=None,
              help="MRD file for the images (default: SCAN's name with .recon.mrd.h5, beside it).")
@click.option("--config", default=None, help="A preset name sent as CONFIG_FILE (default, fast, tv, ...).")
@click.option("--settings", default=None, help='JSON settings sent as CONFIG_TEXT, e.g. \'{"iterations": 10}\'.')
@click.option("--timeout", type=click.FloatRange(min=0.0, min_open=True), default=600.0, show_default=True,
              help="Seconds to wait for each reply.")
@click.option("-q", "--quiet", is_flag=True, help="No result line.")
@friendly
def send(scan: Path, host: str, port: int, output: Path | None, config: str | None, settings: str | None,
         timeout: float, quiet: bool) -> None:
    """Stream the ISMRMRD file SCAN to an MRD server and write the images it returns as an MRD file."""
    from ..batch.inputs import output_name
    from ..io.files import check_output, same_file
    from ..server.client import send_scan, write_images

    output = output or scan.with_name(output_name(scan, "mrd"))
    if same_file(output, scan):
        raise OutputError(f"{output}: output would overwrite the input file; choose another path")
    check_output(output, protect=(scan,))
    xml, reply = send_scan(scan, host, port, config=config, settings=settings, timeout=timeout)
    for text in reply.errors:
        click.echo(f"server: {printable(text)}", err=True)
    if not reply.images:
        raise click.ClickException(f"{host}:{port} returned no images" + ("" if reply.closed else
                                                                          " (the connection ended without CLOSE)"))
    write_images(output, xml, reply.images, protect=(scan,))
    if not quiet:
        slowest = max(reply.latencies_ms)
        click.echo(f"wrote {output}: {len(reply.images)} image(s) from {host}:{port}, latency up to "
                   f"{slowest:.0f} ms", err=True)
    if reply.errors:
        raise click.ClickException(f"{len(reply.errors)} error(s) from the server (above)")


PIPE_PARAMS = frozenset({"scans", "output", "format_", "device", "quiet", "verbose", "cache_dir", "spokes_per_frame",
                         "temporal", "temporal_solver",
                         *(param_name(name) for name in CLIENT_FIELDS)})
"""reconstruct's parameters pipe mode reads: the client-settable settings and these."""


def _check_pipe(ctx: click.Context) -> None:
    """Refuse pipe mode with another output than ``-o -`` or options it does not read."""
    given = [p.opts[0] for p in ctx.command.params if p.name not in PIPE_PARAMS
             and ctx.get_parameter_source(p.name) == click.core.ParameterSource.COMMANDLINE]
    if str(ctx.params["output"]) != "-" or ctx.params["format_"] not in (None, "mrd") or given:
        raise click.UsageError("pipe mode is 'reconstruct - -o -' with reconstruction options only"
                               + (f" (not {', '.join(given)})" if given else ""))


def run_pipe(ctx: click.Context) -> None:
    """``mri-recon reconstruct - -o -`` (the command's context ``ctx``): read the MRD stream on stdin, write the
    images' stream on stdout (the process's file descriptor 1 points at stderr meanwhile, so nothing else
    reaches the stream)."""
    from ..server.config import configurator
    from ..server.protocol import MessageWriter
    from ..server.session import Session

    _check_pipe(ctx)
    settings = settings_from(ctx.params)
    with server_logging(ctx.params["verbose"], ctx.params["quiet"]):
        recon = _reconstructor(settings)
        stream_fd = os.dup(1)
        os.dup2(2, 1)
        try:
            with os.fdopen(stream_fd, "wb", closefd=False) as out, contextlib.redirect_stdout(sys.stderr):
                configure = configurator(settings, ctx.params.get("spokes_per_frame"))
                session = Session(sys.stdin.buffer, MessageWriter(out), recon, configure, name="stdin")
                ending = session.run()
        finally:
            os.dup2(stream_fd, 1)
            os.close(stream_fd)
    if ending != "closed":
        raise click.ClickException(f"the input stream {'ended early' if ending == 'disconnected' else 'was refused'}"
                                   f" (see the log above); {session.images_sent} image(s) written")
