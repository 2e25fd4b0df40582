"""Siemens twix input: files written by twixtools' own writer (and its example files when given).

The synthetic files carry a minimal protocol (the ``MeasYaps`` and ``Meas`` buffers mri-recon reads) and image
readouts made with ``twixtools.mdb.Mdb_local``, written by ``twixtools.write_twix``. Set
``MRI_RECON_TWIX_EXAMPLES`` to a folder holding twixtools' ``example_data`` (``gre.dat``, ``epi.dat``) to check
those too.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np
import pytest
from helpers import relative

import mri_recon
from mri_recon.errors import InvalidDataError, SchemaError
from mri_recon.io import load_scan, load_scans
from mri_recon.sim.phantom import coil_kspace

twixtools = pytest.importorskip("twixtools")


def _header(base: int, lines: int, *, trajectory: int = 1, views: int = 0, partitions: int = 1,
            oversampling: float = 2.0) -> np.ndarray:
    """The ``hdr_str`` bytes of a measurement: its length, the buffer count, then ``name\\0 len text``."""
    yaps = "\n".join([
        "### ASCCONV BEGIN ###",
        f"sKSpace.lBaseResolution = {base}", f"sKSpace.lPhaseEncodingLines = {lines}",
        f"sKSpace.lPartitions = {partitions}", f"sKSpace.ucTrajectory = {hex(trajectory)}",
        f"sKSpace.ucDimension = {hex(4 if partitions > 1 else 2)}", f"sKSpace.lRadialViews = {views}",
        "sSliceArray.asSlice[0].dReadoutFOV = 200", "sSliceArray.asSlice[0].dPhaseFOV = 200",
        "sSliceArray.asSlice[0].dThickness = 4", "### ASCCONV END ###", ""])
    meas = (f'<ParamDouble."flReadoutOSFactor">  {{ <Precision> 6  {oversampling:.6f}  }}\n'
            f'<ParamLong."iPEFTLength">  {{ {lines}  }}\n<ParamLong."iPARFTLength">  {{ {partitions}  }}\n')
    body = b""
    for name, text in (("Meas", meas), ("MeasYaps", yaps)):
        data = text.encode("latin1") + b"\0"
        body += name.encode() + b"\0" + struct.pack("<I", len(data)) + data
    raw = struct.pack("<II", 8 + len(body), 2) + body
    return np.frombuffer(raw, dtype="S1").copy()


def _mdb(data: np.ndarray, *, line: int = 0, partition: int = 0, centre: tuple[int, int, int] = (0, 0, 0),
         flags: tuple[str, ...] = (), slice_: int = 0):
    mdb = twixtools.mdb.Mdb_local(np.ascontiguousarray(data, dtype=np.complex64))
    mdb.mdh.Counter.Lin, mdb.mdh.Counter.Par, mdb.mdh.Counter.Sli = line, partition, slice_
    mdb.mdh.CenterCol, mdb.mdh.CenterLin, mdb.mdh.CenterPar = centre
    for flag in flags:
        mdb.add_flag(flag)
    return mdb


def _write(path: Path, measurements: list[dict]) -> Path:
    twixtools.write_twix(measurements, str(path))
    return path


def _cartesian_file(path: Path, kspace: np.ndarray, *, lines_kept: np.ndarray | None = None,
                    noise: np.ndarray | None = None, noise_first: bool = False, flags: tuple[str, ...] = ()) -> Path:
    """``kspace`` ``(C, 2 base, lines)`` (readout oversampled 2x) as a Cartesian twix file; ``noise`` in the last
    measurement, or in a first one of its own (``noise_first``: a multi-RAID file)."""
    coils, columns, lines = kspace.shape
    base = columns // 2
    kept = np.ones(lines, dtype=bool) if lines_kept is None else lines_kept
    mdbs = [] if noise is None or noise_first else [_mdb(noise, flags=("NOISEADJSCAN",))]
    mdbs += [_mdb(kspace[:, :, line], line=line, centre=(base, lines // 2, 0), flags=flags)
             for line in np.flatnonzero(kept)]
    image = {"hdr_str": _header(base, lines), "mdb": mdbs}
    scans = [image]
    if noise_first:
        scans = [{"hdr_str": _header(base, lines), "mdb": [_mdb(noise, flags=("NOISEADJSCAN",))]}, image]
    return _write(path, scans)


def _random(rng, shape) -> np.ndarray:
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)


def _twixtools_image(path: Path) -> np.ndarray:
    """The root-sum-of-squares image by twixtools' own mapping (oversampling removed) and a float64 FFT."""
    read = twixtools.read_twix(str(path), verbose=False, parse_geometry=False, parse_pmu=False)
    image = twixtools.map_twix(read, verbose=False)[-1]["image"]
    image.flags["remove_os"] = True
    k = np.moveaxis(np.asarray(image[:]).squeeze(), -2, 0)  # (Cha, Lin, Col)
    k = k.astype(np.complex128)
    x = np.fft.fftshift(np.fft.ifft2(np.fft.ifftshift(k, axes=(1, 2))), axes=(1, 2))
    return np.sqrt((np.abs(x) ** 2).sum(axis=0)).T  # (Col, Lin): readout first, as mri-recon's axes


def test_cartesian_twix_reconstructs_to_the_image_of_twixtools_fft(tmp_path):
    rng = np.random.default_rng()
    path = _cartesian_file(tmp_path / "gre.dat", _random(rng, (3, 48, 20)))
    scan = load_scan(path)
    assert scan.matrix == (24, 20) and scan.attrs["source_format"] == "twix"
    assert scan.attrs["readout_oversampling_removed"]
    result = mri_recon.reconstruct(scan, coil_maps="rss", lam=0.0, iterations=3, device="cpu")
    assert relative(result.image, _twixtools_image(path)) < 1e-5


def test_noise_scans_prewhiten_and_the_last_measurement_is_read(tmp_path):
    rng = np.random.default_rng()
    kspace = _random(rng, (2, 32, 16))
    noise = np.array([[1.0, 0.0], [0.5, 0.4]], dtype=np.complex64) @ _random(rng, (2, 256))
    for first in (False, True):
        path = _cartesian_file(tmp_path / f"n{first}.dat", kspace, noise=noise, noise_first=first)
        scan = load_scan(path)
        assert scan.attrs["measurements"] == (2 if first else 1)
        assert relative(scan.noise, noise) == 0.0
        _, record, _ = mri_recon.api.prepare_and_reconstruct(scan, coil_maps="rss", iterations=3, device="cpu")
        assert record["prewhitened"]


def test_undersampled_twix_with_acs_reconstructs_with_espirit(tmp_path):
    from mri_recon.sim.cartesian import cartesian_kspace, undersampling_mask  # noqa: PLC0415

    kspace = cartesian_kspace((48, 48), 4, oversampling=2)
    lines, _ = undersampling_mask(48, 3, 20)
    scan = load_scan(_cartesian_file(tmp_path / "r3.dat", kspace, lines_kept=lines))
    assert scan.n_samples == 48 * int(lines.sum())
    result = mri_recon.reconstruct(scan, iterations=20, device="cpu")
    assert result.parameters["coil_maps"] == "espirit" and result.parameters["method"] == "fft"


def test_radial_twix_spokes_follow_the_line_counter(tmp_path):
    base, views, coils = 16, 24, 2
    samples = 2 * base
    radius = (np.arange(samples) - base) / 2.0
    angles = np.pi * np.arange(views) / views
    traj = np.stack([radius[None] * np.cos(angles)[:, None], radius[None] * np.sin(angles)[:, None]], axis=2)
    data = coil_kspace(traj.reshape(-1, 2), (base, base), coils).reshape(coils, views, samples)
    order = np.random.default_rng().permutation(views)  # spokes in any order: the counter places them
    mdbs = [_mdb(data[:, v], line=int(v), centre=(base, 0, 0)) for v in order]
    path = _write(tmp_path / "radial.dat", [{"hdr_str": _header(base, views, trajectory=2, views=views),
                                             "mdb": mdbs}])
    scan = load_scan(path)
    assert scan.matrix == (base, base) and scan.attrs["trajectory_type"] == "radial"
    assert relative(scan.trajectory, traj[order].reshape(-1, 2)) < 1e-6
    assert relative(scan.kspace, data[:, order].reshape(coils, -1)) == 0.0
    result = mri_recon.reconstruct(scan, coil_maps="rss", iterations=5, device="cpu")
    assert result.parameters["method"] in ("nufft", "exact")


def test_stack_of_stars_twix_is_3d(tmp_path):
    base, views, partitions = 8, 12, 4
    data = _random(np.random.default_rng(), (1, 2 * base))
    mdbs = [_mdb(data, line=v, partition=p, centre=(base, 0, partitions // 2))
            for p in range(partitions) for v in range(views)]
    path = _write(tmp_path / "sos.dat", [{"hdr_str": _header(base, views, trajectory=2, views=views,
                                                             partitions=partitions), "mdb": mdbs}])
    scan = load_scan(path)
    assert scan.matrix == (base, base, partitions)
    assert sorted(np.unique(scan.trajectory[:, 2]).tolist()) == [-2.0, -1.0, 0.0, 1.0]


def test_unsupported_twix_is_refused_in_one_line(tmp_path):
    rng = np.random.default_rng()
    path = _cartesian_file(tmp_path / "epi.dat", _random(rng, (1, 16, 8)), flags=("REFLECT",))
    with pytest.raises(InvalidDataError, match="reversed readouts .REFLECT"):
        load_scans(path)
    spiral = _write(tmp_path / "spiral.dat", [{"hdr_str": _header(8, 8, trajectory=4),
                                               "mdb": [_mdb(_random(rng, (1, 16)))]}])
    with pytest.raises(InvalidDataError, match="spiral trajectories are not supported"):
        load_scans(spiral)
    junk = tmp_path / "junk.dat"
    junk.write_bytes(b"not a twix file" * 20)
    with pytest.raises(SchemaError, match="not a readable Siemens twix file.*MeasYaps"):
        load_scans(junk)


EXAMPLES = os.environ.get("MRI_RECON_TWIX_EXAMPLES")


@pytest.mark.skipif(not EXAMPLES, reason="MRI_RECON_TWIX_EXAMPLES (twixtools' example_data) not set")
def test_twixtools_example_files():
    gre = Path(EXAMPLES) / "gre.dat"
    scan = load_scan(gre)
    assert scan.matrix == (160, 160) and scan.n_coils == 2
    result = mri_recon.reconstruct(scan, coil_maps="rss", lam=0.0, iterations=3, device="cpu")
    assert relative(result.image, _twixtools_image(gre)) < 1e-5
    with pytest.raises(InvalidDataError, match="reversed readouts"):
        load_scans(Path(EXAMPLES) / "epi.dat")


def test_slices_of_a_twix_file_are_separate_images(tmp_path):
    rng = np.random.default_rng()
    kspace = _random(rng, (2, 2, 16, 10))  # slice, coil, readout (2x oversampled), line
    mdbs = [_mdb(kspace[s, :, :, line], line=line, slice_=s, centre=(8, 5, 0)) for s in range(2) for line in range(10)]
    path = _write(tmp_path / "slices.dat", [{"hdr_str": _header(8, 10), "mdb": mdbs}])
    scans = load_scans(path)
    assert [key["slice"] for key, _ in scans] == [0, 1]
    chosen = load_scan(path, slice=1)
    assert relative(chosen.kspace, scans[1][1].kspace) == 0.0
    for (_, scan), k in zip(scans, kspace):
        image = mri_recon.reconstruct(scan, coil_maps="rss", lam=0.0, iterations=3, device="cpu").image
        full = np.fft.fftshift(np.fft.ifft2(np.fft.ifftshift(k.astype(np.complex128), axes=(1, 2))), axes=(1, 2))
        assert relative(image, np.sqrt((np.abs(full[:, 4:12]) ** 2).sum(axis=0))) < 1e-5


def test_a_folder_of_twix_files_is_a_batch(tmp_path):
    from mri_recon.batch.inputs import expand_inputs, output_name  # noqa: PLC0415

    rng = np.random.default_rng()
    _cartesian_file(tmp_path / "a.dat", _random(rng, (1, 16, 8)))
    found = expand_inputs([str(tmp_path)])
    assert [Path(p).name for p in found] == ["a.dat"]
    assert output_name(found[0]) == "a.recon.h5"


def test_3d_cartesian_twix(tmp_path):
    rng = np.random.default_rng()
    kspace = _random(rng, (2, 16, 6, 4))  # coil, readout (2x oversampled), line, partition
    mdbs = [_mdb(kspace[:, :, line, part], line=line, partition=part, centre=(8, 3, 2))
            for part in range(4) for line in range(6)]
    path = _write(tmp_path / "vol.dat", [{"hdr_str": _header(8, 6, partitions=4), "mdb": mdbs}])
    scan = load_scan(path)
    assert scan.matrix == (8, 6, 4)
    image = mri_recon.reconstruct(scan, coil_maps="rss", lam=0.0, iterations=3, device="cpu").image
    axes = (1, 2, 3)
    full = np.fft.fftshift(np.fft.ifftn(np.fft.ifftshift(kspace.astype(np.complex128), axes=axes), axes=axes),
                           axes=axes)
    assert relative(image, np.sqrt((np.abs(full[:, 4:12]) ** 2).sum(axis=0))) < 1e-5


def test_convert_writes_a_radial_twix_as_mrd(tmp_path):
    from click.testing import CliRunner

    from mri_recon.cli import main

    base, views, coils = 16, 12, 2
    radius = (np.arange(2 * base) - base) / 2.0
    angles = np.pi * np.arange(views) / views
    traj = np.stack([radius[None] * np.cos(angles)[:, None], radius[None] * np.sin(angles)[:, None]], axis=2)
    data = coil_kspace(traj.reshape(-1, 2), (base, base), coils).reshape(coils, views, 2 * base)
    mdbs = [_mdb(data[:, v], line=v, centre=(base, 0, 0)) for v in range(views)]
    path = _write(tmp_path / "radial.dat", [{"hdr_str": _header(base, views, trajectory=2, views=views),
                                             "mdb": mdbs}])
    done = CliRunner().invoke(main, ["convert", str(path), str(tmp_path / "radial.mrd.h5")])
    assert done.exit_code == 0, done.output
    twix, mrd = load_scan(path), load_scan(tmp_path / "radial.mrd.h5")
    assert relative(mrd.kspace, twix.kspace) < 1e-6 and relative(mrd.trajectory, twix.trajectory) < 1e-5


def _first_block(path: Path) -> int:
    """The file offset of the first measurement block (a VD file: the raid header, then the protocol)."""
    raid = np.fromfile(path, dtype=twixtools.hdr_def.MultiRaidFileHeader, count=1)[0]
    start = int(raid["entry"][0]["off_"])
    return start + int(np.frombuffer(path.read_bytes()[start:start + 4], "<u4")[0])


def test_a_block_of_dma_length_0_is_refused_not_read_forever(tmp_path):
    rng = np.random.default_rng(1)
    sync = _mdb(_random(rng, (2, 32)), flags=("SYNCDATA",))
    image = _mdb(_random(rng, (2, 32)), centre=(16, 2, 0))
    path = _write(tmp_path / "sync.dat", [{"hdr_str": _header(16, 4), "mdb": [sync, image]}])
    raw = bytearray(path.read_bytes())
    at = _first_block(path)
    flags = int.from_bytes(raw[at:at + 4], "little") & ~((1 << 25) - 1)  # keep the flags, DMA length 0
    raw[at:at + 4] = flags.to_bytes(4, "little")
    path.write_bytes(bytes(raw))
    with pytest.raises(SchemaError, match="declares a DMA length of 0"):
        load_scans(path)
    assert twixtools.mdb.Mdb.__name__ == "Mdb"  # the library's own class is back


def test_a_fifo_named_dat_is_refused(tmp_path):
    fifo = tmp_path / "x.dat"
    os.mkfifo(fifo)
    with pytest.raises(SchemaError, match="is not a regular file"):
        load_scans(fifo)


def test_a_file_cut_short_says_truncated(tmp_path):
    path = _cartesian_file(tmp_path / "c.dat", _random(np.random.default_rng(2), (2, 32, 8)))
    raw = path.read_bytes()
    cut = tmp_path / "cut.dat"
    cut.write_bytes(raw[: len(raw) * 3 // 4])
    with pytest.raises(SchemaError, match=r"truncated: image readout \d+ of \d+ holds"):
        load_scans(cut)


def test_a_protocol_size_beyond_reason_names_its_field(tmp_path):
    readout = _mdb(_random(np.random.default_rng(3), (2, 32)), centre=(16, 2, 0))
    path = _write(tmp_path / "big.dat", [{"hdr_str": _header(10**9, 4), "mdb": [readout]}])
    with pytest.raises(SchemaError, match=r"big.dat: the protocol's lBaseResolution is 1000000000; expected 1 to 8192"):
        load_scans(path)
