"""Shared by the server tests: small simulated MRD scans, a loopback server in a thread, and image comparison."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

import ismrmrd
import numpy as np
from click.testing import CliRunner

from mri_recon.arrays.backend import resolve_device
from mri_recon.cli import main
from mri_recon.io.ismrmrd_write import write_ismrmrd
from mri_recon.server import Limits, Reconstructor, Server, configurator
from mri_recon.settings import ReconSettings
from mri_recon.sim.simulate import simulate_scan


def make_scan(path: Path, seed: int, slices: int = 1, repetitions: int = 1, matrix: int = 16) -> Path:
    """A simulated golden-angle scan (4 coils, noise) with ``slices`` x ``repetitions`` images, as MRD."""
    scans = [({"slice": s, "repetition": r},
              simulate_scan((matrix, matrix), "golden", coils=4, snr=30.0, spokes=20, samples=2 * matrix,
                            seed=seed + 100 * s + 1000 * r))
             for s in range(slices) for r in range(repetitions)]
    write_ismrmrd(path, scans)
    return path


def reference(path: Path, tmp: Path, *options: str) -> list:
    """The image records ``mri-recon reconstruct path -o out.mrd.h5 --device cpu --no-cache`` writes."""
    out = tmp / f"{path.stem}.ref{len(options)}.mrd.h5"
    result = CliRunner().invoke(main, ["reconstruct", str(path), "-o", str(out), "--device", "cpu", "--no-cache",
                                       "-q", *options])
    assert result.exit_code == 0, result.output
    return read_images(out)


def read_images(path: Path) -> list:
    with ismrmrd.Dataset(str(path), "dataset", create_if_needed=False, mode="r") as dataset:
        return [dataset.read_image("image_0", i) for i in range(dataset.number_of_images("image_0"))]


def header_fields(image) -> dict:
    """Every image header field, arrays as lists; ``attribute_string_len`` left out: the stream's header
    carries the length of its attribute string (``ismrmrd``'s serializer sets it), a file's record 0
    (``ismrmrd.Dataset.append_image`` leaves it)."""
    head = image.getHead()
    out = {}
    for name, _ in head._fields_:
        value = getattr(head, name)
        out[name] = list(value) if hasattr(value, "__len__") else value
    out.pop("attribute_string_len")
    return out


def assert_same_images(got: list, want: list) -> None:
    """Equal bit for bit: data, header fields, meta attributes."""
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.data.dtype == b.data.dtype
        assert a.data.tobytes() == b.data.tobytes()
        assert header_fields(a) == header_fields(b)
        assert a.attribute_string == b.attribute_string


def image_of(record) -> np.ndarray:
    return record.data[0, 0].T


@contextlib.contextmanager
def running_server(**options):
    """A loopback server on a free port, served by a thread; stopped (and its connections awaited) after."""
    options.setdefault("idle_timeout", 10.0)
    recon = Reconstructor(resolve_device(options.pop("device", "cpu")), None)
    limits = options.pop("limits", Limits())
    host = options.pop("host", "127.0.0.1")
    configure = configurator(ReconSettings(), options.pop("spokes_per_frame", None))
    server = Server(recon, configure, host, 0, limits=limits, **options)
    thread = threading.Thread(target=server.serve_forever)
    thread.start()
    try:
        yield server
    finally:
        server.stop()
        thread.join(60)
        assert not thread.is_alive()
