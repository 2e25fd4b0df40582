"""An MRD (ISMRMRD) streaming server and pipe mode: scans in over TCP or stdin, images out, as scanners' clients
(python-ismrmrd-server's ``client.py``, Gadgetron's ``gadgetron_ismrmrd_client``) speak the protocol.

- :mod:`.protocol`: the messages, read with size limits, written by ``ismrmrd.ProtocolSerializer``.
- :mod:`.config`: presets and JSON settings a connection's config messages may choose, applied to the server's
  :class:`~mri_recon.settings.ReconSettings`.
- :mod:`.recon`: one image group reconstructed as ``mri-recon reconstruct`` reconstructs a file.
- :mod:`.session`: one connection's state (config, header, noise, data, CLOSE).
- :mod:`.service`: the TCP server (threads, limits, idle timeouts, shutdown).
- :mod:`.client`: streaming a file to a server and writing the images returned.
"""

from __future__ import annotations

import importlib

_LAZY = {
    "PRESETS": "config",
    "ConfigError": "config",
    "configurator": "config",
    "Limits": "protocol",
    "MessageID": "protocol",
    "MessageWriter": "protocol",
    "ProtocolError": "protocol",
    "read_message": "protocol",
    "Reconstructor": "recon",
    "Server": "service",
    "Session": "session",
}
"""Each public name and its module, imported on first use (``mri-recon reconstruct`` reads the pipe mode's
settings from :mod:`.config` without loading the TCP server)."""

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'mri_recon.server' has no attribute {name!r}")
