"""``python -m mri_recon.cli``: the ``mri-recon`` command."""

import sys

from . import main

if __name__ == "__main__":  # pragma: no cover - run as a module
    sys.exit(main())
