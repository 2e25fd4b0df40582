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

from .config import PRESETS, ConfigError, configurator
from .protocol import Limits, MessageID, MessageWriter, ProtocolError, read_message
from .recon import Reconstructor
from .service import Server
from .session import Session

__all__ = ["PRESETS", "ConfigError", "Limits", "MessageID", "MessageWriter", "ProtocolError", "Reconstructor",
           "Server", "Session", "configurator", "read_message"]
