"""Acquisitions in memory (the server's) read as the ISMRMRD reader reads a file of them: the same scans, bit for
bit, without the file (mri_recon.io.mrd_stream)."""

from __future__ import annotations

import numpy as np
import pytest

from mri_recon.errors import InvalidDataError, SchemaError
from mri_recon.io import load_scans
from mri_recon.io.ismrmrd_write import write_ismrmrd
from mri_recon.io.mrd_stream import load_stream
from mri_recon.server.client import read_scan
from mri_recon.sim.simulate import simulate_scan

ARRAYS = ("kspace", "trajectory", "weights", "noise", "coil_maps")


@pytest.fixture
def stream(tmp_path):
    seed = int(np.random.SeedSequence().entropy % 2**20)
    scans = [simulate_scan((40, 36), "golden", coils=3, snr=30.0, spokes=24, samples=80, seed=seed + i)
             for i in range(3)]
    path = tmp_path / "series.mrd.h5"
    write_ismrmrd(path, [({"slice": 0, "repetition": 0}, scans[0]), ({"slice": 1, "repetition": 0}, scans[1]),
                         ({"slice": 0, "repetition": 1}, scans[2])])
    return path, *read_scan(path)


def _same(a, b):
    for name in ARRAYS:
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), name
    assert a.matrix == b.matrix
    assert set(a.attrs) == set(b.attrs)
    for key in a.attrs:
        np.testing.assert_array_equal(np.asarray(a.attrs[key], dtype=object), np.asarray(b.attrs[key], dtype=object))


def test_a_stream_gives_the_scans_of_its_file(stream):
    path, xml, acquisitions = stream
    from_file, from_memory = load_scans(path), load_stream(xml, acquisitions)
    assert [key for key, _ in from_file] == [key for key, _ in from_memory] and len(from_file) == 3
    for (_, a), (_, b) in zip(from_file, from_memory, strict=True):
        _same(a, b)
        assert b.source == "the stream"


def test_the_choice_of_images_is_the_files(stream):
    path, xml, acquisitions = stream
    chosen = load_stream(xml, acquisitions, slice=0, repetition=1)
    assert [key for key, _ in chosen] == [key for key, _ in load_scans(path, slice=0, repetition=1)]
    _same(load_scans(path, slice=0, repetition=1)[0][1], chosen[0][1])
    with pytest.raises(SchemaError):
        load_stream(xml, acquisitions, slice=7)


def test_a_bad_header_or_no_acquisitions_is_named(stream):
    _, xml, acquisitions = stream
    with pytest.raises(SchemaError, match="the stream: the ISMRMRD XML header does not follow"):
        load_stream(b"<ismrmrdHeader><bogus/></ismrmrdHeader" , acquisitions)
    with pytest.raises(SchemaError, match="the stream: holds no acquisitions"):
        load_stream(xml, [])


def test_each_caller_gets_its_own_header(stream):
    from mri_recon.io.mrd_stream import stream_header

    _, xml, _ = stream
    first, second = stream_header(xml), stream_header(xml)
    assert first is not second and first == second


def test_a_dataset_name_is_refused_for_a_stream(stream):
    _, xml, acquisitions = stream
    assert len(load_stream(xml, acquisitions, dataset="dataset")) == 3
    with pytest.raises(InvalidDataError, match="a stream has none"):
        load_stream(xml, acquisitions, dataset="other")
