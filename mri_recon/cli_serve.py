"""``mri-recon serve`` (an MRD streaming server), ``mri-recon send`` (its small client) and the pipe mode of
``mri-recon reconstruct - -o -``: a thin click layer over :mod:`mri_recon.server`.

The settings a server applies, and a connection's config messages may choose, are ``reconstruct``'s own
options (the click objects themselves, see :func:`register`), so they are checked exactly as the command
line checks them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from .cli_solver import solver_settings
from .errors import MriReconError, OutputError, printable
from .server.config import ALLOWED, ConfigError, ReconSettings, config_arguments
from .server.protocol import DEFAULT_MAX_MESSAGE, DEFAULT_MAX_SCAN, Limits

if TYPE_CHECKING:
    from .server.session import Configure

log = logging.getLogger("mri_recon.cli")


def _typed(param: click.Parameter) -> str:
    """An option's name as typed (``--lambda``: ``lambda``), as :func:`mri_recon.console.typed_settings`."""
    return max(param.opts, key=len).lstrip("-").replace("-", "_")


def shared_options(command: click.Command) -> list[click.Parameter]:
    """``command``'s options a client may set (:data:`mri_recon.server.config.ALLOWED`)."""
    return [p for p in command.params if isinstance(p, click.Option) and _typed(p) in ALLOWED]


def settings_from_params(params: Mapping[str, Any]) -> ReconSettings:
    """The :class:`ReconSettings` of ``reconstruct``'s parameters, as that command passes them on."""
    return ReconSettings(
        prepare={"prewhiten": not params["no_prewhiten"], "dcf": params["dcf"], "coil_maps": params["coil_maps"],
                 "field_map": "ignore" if params["no_field_map"] else "correct"},
        solver=solver_settings(params), traj_units=params["traj_units"], magnitude=params["magnitude"],
        use_cache=not params["no_cache"])


def configurator(options: list[click.Parameter], base: Mapping[str, Any] | None = None) -> Configure:
    """Settings from config messages: ``base`` (the server's parameters; by default the options' defaults),
    then each message's choices, parsed by ``options`` (refusals become :class:`ConfigError` with click's
    message)."""
    command = click.Command("config", params=options, add_help_option=False)
    defaults = {p.name: base[p.name] for p in options} if base is not None else None

    def configure(configs: Sequence[tuple[str, str]]) -> ReconSettings:
        words = config_arguments(configs)
        try:
            ctx = command.make_context("config", list(words), default_map=defaults)
        except click.ClickException as exc:
            raise ConfigError(printable(f"config: {exc.format_message()}")) from None
        return settings_from_params(ctx.params)

    return configure


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


def _reconstructor(device: str, no_cache: bool, cache_dir: Path | None):
    from .backend import resolve_device
    from .io.cache import PsfCache
    from .server.recon import Reconstructor

    return Reconstructor(resolve_device(device), None if no_cache else PsfCache(cache_dir))


def _friendly(func):
    """Library errors as one line and exit code 1 (as the other commands)."""
    import functools

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except MriReconError as exc:
            raise click.ClickException(printable(exc)) from None

    return wrapper


def serve_command(options: list[click.Parameter]) -> click.Command:
    """The ``serve`` command, with ``reconstruct``'s client-settable ``options`` as its settings."""

    @click.command("serve")
    @click.option("--host", default="127.0.0.1", show_default=True,
                  help="Address to listen on (another than loopback is warned about: the protocol has no "
                       "authentication).")
    @click.option("--port", type=click.IntRange(0, 65535), default=9002, show_default=True,
                  help="TCP port (0: any free port, logged).")
    @click.option("--device", default="auto", show_default=True, help="auto, cpu, gpu or gpu:N.")
    @click.option("--max-message-bytes", type=click.IntRange(min=4096), default=DEFAULT_MAX_MESSAGE,
                  show_default=True, help="Largest message payload accepted; larger ones are refused.")
    @click.option("--max-scan-bytes", type=click.IntRange(min=4096), default=DEFAULT_MAX_SCAN, show_default=True,
                  help="Largest total of acquisition bytes one connection may send.")
    @click.option("--idle-timeout", type=click.FloatRange(min=0.0, min_open=True), default=60.0, show_default=True,
                  help="Seconds a connection may stay silent before it is closed.")
    @click.option("--max-clients", type=click.IntRange(1, 1024), default=16, show_default=True,
                  help="Connections served at once (more are answered 'server busy').")
    @click.option("--cache-dir", type=click.Path(path_type=Path), default=None, help="PSF cache folder.")
    @click.option("-q", "--quiet", is_flag=True, help="Log errors only.")
    @click.option("-v", "--verbose", count=True, help="-v: the pipeline's stages and timings too; -vv debug.")
    @_friendly
    def serve(host: str, port: int, device: str, max_message_bytes: int, max_scan_bytes: int, idle_timeout: float,
              max_clients: int, cache_dir: Path | None, quiet: bool, verbose: int, **settings: Any) -> None:
        """Serve MRD streaming connections: config, XML header, noise and data in; MRD images and CLOSE out.

        The reconstruction options (--iterations, --regularizer, --coil-maps, ...) are reconstruct's and set
        the server's defaults; a connection may choose others by a preset name (CONFIG_FILE: default, fast,
        tv, wavelet, rss, magnitude) or JSON (CONFIG_TEXT). SIGTERM stops accepting and finishes the running
        scans.
        """
        from .server.service import Server

        with server_logging(verbose, quiet):
            recon = _reconstructor(device, settings["no_cache"], cache_dir)
            try:
                server = Server(recon, configurator(options, settings), host, port,
                                limits=Limits(max_message_bytes, min(max_message_bytes, 16 * 2 ** 20), max_scan_bytes),
                                idle_timeout=idle_timeout, max_clients=max_clients)
            except OSError as exc:
                why = exc.strerror or exc
                raise click.ClickException(printable(f"cannot listen on {host}:{port} ({why})")) from None
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: server.stop())
            try:
                server.serve_forever()
            finally:
                recon.close()

    serve.params.extend(options)
    return serve


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
@_friendly
def send(scan: Path, host: str, port: int, output: Path | None, config: str | None, settings: str | None,
         timeout: float, quiet: bool) -> None:
    """Stream the ISMRMRD file SCAN to an MRD server and write the images it returns as an MRD file."""
    from .batch.inputs import output_name
    from .io.files import check_output, same_file
    from .server.client import send_scan, write_images

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


_PIPE_OPTIONS = {"scans", "output", "format_", "device", "quiet", "verbose", "cache_dir"}
"""reconstruct's parameters pipe mode reads besides the client-settable ones."""


def is_pipe(scans: Sequence[Path]) -> bool:
    """``reconstruct -``: pipe mode."""
    return len(scans) == 1 and str(scans[0]) == "-"


def run_pipe() -> None:
    """``mri-recon reconstruct - -o -`` (the current click context): read the MRD stream on stdin, write the
    images' stream on stdout (the process's file descriptor 1 points at stderr meanwhile, so nothing else
    reaches the stream)."""
    from .server.protocol import MessageWriter
    from .server.session import Session

    ctx = click.get_current_context()
    params = ctx.params
    options = shared_options(ctx.command)
    given = [p.opts[0] for p in ctx.command.params if p.name not in _PIPE_OPTIONS | {o.name for o in options}
             and ctx.get_parameter_source(p.name) == click.core.ParameterSource.COMMANDLINE]
    if str(params["output"]) != "-" or params["format_"] not in (None, "mrd") or given:
        raise click.UsageError("pipe mode is 'reconstruct - -o -' with reconstruction options only"
                               + (f" (not {', '.join(given)})" if given else ""))
    with server_logging(params["verbose"], params["quiet"]):
        recon = _reconstructor(params["device"], params["no_cache"], params["cache_dir"])
        stream_fd = os.dup(1)
        os.dup2(2, 1)
        try:
            with os.fdopen(stream_fd, "wb", closefd=False) as out, contextlib.redirect_stdout(sys.stderr):
                session = Session(sys.stdin.buffer, MessageWriter(out), recon, configurator(options, params),
                                  name="stdin")
                ending = session.run()
        finally:
            os.dup2(stream_fd, 1)
            os.close(stream_fd)
            recon.close()
    if ending != "closed":
        raise click.ClickException(f"the input stream {'ended early' if ending == 'disconnected' else 'was refused'}"
                                   f" (see the log above); {session.images_sent} image(s) written")


def register_serve(main: click.Group) -> None:
    """Add ``serve`` and ``send`` to the ``mri-recon`` group (``serve`` takes ``reconstruct``'s options)."""
    main.add_command(serve_command(shared_options(main.commands["reconstruct"])))
    main.add_command(send)
