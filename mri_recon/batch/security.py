"""Who may talk to a batch's Dask cluster: TLS credentials, loopback addresses, and checked scheduler addresses.

A Dask scheduler runs any function a connected client sends it, as the user who started it. A local cluster
of ours therefore listens on ``127.0.0.1`` only (:data:`LOOPBACK`) and requires mutual TLS with a certificate
made afresh for it (:func:`local_security`, Dask's :meth:`distributed.security.Security.temporary`, held in
memory only): a client, worker or nanny without that certificate is refused, so that another user of the host
cannot connect and run code as this one. Without the ``cryptography`` package (which makes the certificate)
no local cluster is started: an unauthenticated one is refused, never started instead.

An existing cluster (``scheduler``) is reached over ``tcp://`` or ``tls://``; for ``tls://`` the user's
certificate, key and certificate authority come from :func:`scheduler_security` (files given, or Dask's
configuration ``distributed.comm.tls.*``).
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

from ..errors import DeviceError, InvalidDataError

LOOPBACK = "127.0.0.1"
"""The one interface a local cluster's scheduler, nannies, workers and dashboard listen on."""
SCHEMES = ("tcp", "tls")
"""Address schemes of a ``scheduler``."""
HEALTH_ONLY = ["distributed.http.health"]
"""The HTTP routes a local cluster's scheduler and workers serve without a dashboard: ``/health`` only (no
information pages, no metrics), on loopback."""


def local_security() -> Any:
    """A fresh :class:`distributed.security.Security` for a local cluster: one temporary self-signed
    certificate (in memory) for every role, encryption and client certificates required.

    Raises
    ------
    DeviceError
        ``cryptography`` is not installed (no certificate can be made; an unauthenticated cluster is refused).
    """
    from distributed.security import Security  # noqa: PLC0415 - with distributed

    if importlib.util.find_spec("cryptography") is None:
        raise DeviceError("a local Dask cluster accepts only connections holding its own TLS certificate, and "
                          "making one needs the 'cryptography' package, which is not installed: pip install "
                          "'mri-recon[batch]' (or run without --workers, in this process)")
    return Security.temporary()


def check_scheduler(address: str) -> tuple[str, str]:
    """``(scheme, host:port)`` of a scheduler's address, checked before any connection.

    Raises
    ------
    InvalidDataError
        Not ``tcp://HOST:PORT`` or ``tls://HOST:PORT`` (another scheme, no port, a malformed host).
    """
    from distributed.comm.addressing import get_address_host_port, parse_address  # noqa: PLC0415

    shown = ascii(address)[1:-1][:200]
    if "://" not in address:
        raise InvalidDataError(f"--scheduler {shown}: expected tcp://HOST:PORT or tls://HOST:PORT")
    try:
        scheme, location = parse_address(address, strict=True)
        if scheme not in SCHEMES:
            raise ValueError(f"the scheme is {scheme!r}")
        get_address_host_port(address, strict=True)
    except ValueError as exc:
        why = str(exc).splitlines()[0] if str(exc) else "malformed"
        raise InvalidDataError(f"--scheduler {shown}: expected tcp://HOST:PORT or tls://HOST:PORT ({why})") \
            from None
    return scheme, location


def scheduler_security(scheme: str, ca_file: str | None = None, cert: str | None = None,
                       key: str | None = None) -> Any:
    """The credentials for a scheduler of ``scheme``: the given files, else Dask's configuration.

    Raises
    ------
    InvalidDataError
        Files given for a ``tcp://`` scheduler (they would be ignored); some but not all of the three; a file
        that does not exist; a ``tls://`` scheduler with neither files nor ``distributed.comm.tls`` settings.
    """
    from distributed.security import Security  # noqa: PLC0415 - with distributed

    given = {"--tls-ca-file": ca_file, "--tls-cert": cert, "--tls-key": key}
    named = [name for name, value in given.items() if value is not None]
    if named and scheme != "tls":
        raise InvalidDataError(f"{', '.join(named)} apply to a tls:// scheduler; this one is {scheme}://")
    if named and len(named) != 3:
        missing = [name for name in given if name not in named]
        raise InvalidDataError(f"a tls:// scheduler needs --tls-ca-file, --tls-cert and --tls-key together; "
                               f"missing {', '.join(missing)}")
    for name, value in given.items():
        if value is not None and not os.path.isfile(value):
            raise InvalidDataError(f"{name} {ascii(value)[1:-1]}: no such file")
    if named:
        return Security(tls_ca_file=ca_file, tls_client_cert=cert, tls_client_key=key, require_encryption=True)
    security = Security()  # Dask's configuration: distributed.comm.tls.ca-file, .client.cert, .client.key
    if scheme == "tls" and not (security.tls_ca_file and security.tls_client_cert):
        raise InvalidDataError("a tls:// scheduler needs your certificate: give --tls-ca-file, --tls-cert and "
                               "--tls-key, or set distributed.comm.tls.ca-file, .client.cert and .client.key in "
                               "Dask's configuration")
    return security


def dashboard_served() -> bool:
    """Whether this installation can serve Dask's dashboard pages (``bokeh`` importable)."""
    return importlib.util.find_spec("bokeh") is not None
