"""``python -m mri_recon``: the ``mri-recon`` command."""

from .cli import run

if __name__ == "__main__":  # pragma: no cover - run as a module
    run()
