"""A scan file is read only within itself: external links, external raw storage and virtual datasets are refused
unless asked for, missing targets are refused even then, and file strings are escaped in messages."""

from __future__ import annotations

import os
import re

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from mri_recon.cli import main
from mri_recon.errors import ExternalDataError, SchemaError, printable
from mri_recon.io import load_scan, load_scans, save_scan
from mri_recon.scan import Scan

FAST = ("--iterations", "2", "--device", "cpu", "--no-cache", "-q")
REFUSED = "refused: a scan file is read only within itself"


def _run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _one_line_error(result, pattern: str) -> str:
    assert result.exit_code != 0, result.output
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit), result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.output
    assert re.search(pattern, errors[0]), errors[0]
    return errors[0]


def _arrays(rng, samples=40, coils=2, matrix=(8, 8)):
    kspace = (rng.standard_normal((coils, samples)) + 1j * rng.standard_normal((coils, samples))).astype(np.complex64)
    traj = ((rng.random((samples, len(matrix))) - 0.5) * np.asarray(matrix)).astype(np.float32)
    return kspace, traj, matrix


def _scan_file(path, kspace, traj, matrix, /, **datasets):
    """A schema-v1 file whose datasets may be replaced by links or special layouts (``datasets``: name -> a
    callable ``(f, name)`` that creates it)."""
    with h5py.File(path, "w") as f:
        f.attrs["matrix"] = list(matrix)
        for name, value in (("kspace", kspace), ("trajectory", traj)):
            if name in datasets:
                datasets[name](f, name)
            else:
                f[name] = value
    return path


# ------------------------------------------------------------------------------------------------------------
# The exfiltration: crafted 1x1 scans whose k-space is another file's bytes


def _leaky(path, secret, offset):
    with h5py.File(path, "w") as f:
        f.attrs["matrix"] = [1, 1]
        f.create_dataset("kspace", shape=(1, 1), dtype=np.complex64, external=[(str(secret), offset, 8)])
        f["trajectory"] = np.zeros((1, 2), np.float32)


def test_a_batch_of_crafted_scans_reads_no_byte_of_another_file(tmp_path, rng):
    secret = tmp_path / "secret.bin"
    data = rng.standard_normal(64).astype(np.float32).tobytes()  # 256 bytes, finite as complex64
    secret.write_bytes(data)
    scans = tmp_path / "scans"
    scans.mkdir()
    for i in range(32):
        _leaky(scans / f"s{i:02d}.h5", secret, 8 * i)
    with pytest.raises(ExternalDataError, match=rf"dataset '/kspace' stores its data in the external file "
                                                rf"'{re.escape(str(secret))}'; {REFUSED}"):
        load_scans(scans / "s05.h5")
    out = tmp_path / "out"
    result = _run("reconstruct", scans, "-o", out, *FAST)
    _one_line_error(result, r"32 of 32 scan\(s\) failed \(first: .*s00.h5: dataset '/kspace' stores its data in "
                            r"the external file")
    written = [p.read_bytes() for p in out.rglob("*") if p.is_file()] if out.exists() else []
    assert written == [] or not any(data[i:i + 8] in blob for blob in written for i in range(0, 256, 8))

    # asked for, the same files read the secret: the refusal above is what stopped it
    read = b"".join(load_scan(scans / f"s{i:02d}.h5", allow_external=True).kspace.tobytes() for i in range(32))
    assert read == data
    result = _run("reconstruct", scans, "-o", out, "--allow-external-data", *FAST)
    assert result.exit_code == 0, result.output
    assert len(list(out.glob("*.recon.h5"))) == 32


# ------------------------------------------------------------------------------------------------------------
# Links


def test_an_external_link_is_refused_and_read_when_allowed(tmp_path, rng):
    kspace, traj, matrix = _arrays(rng)
    with h5py.File(tmp_path / "other.h5", "w") as g:
        g["k"] = kspace
    path = _scan_file(tmp_path / "scan.h5", kspace, traj, matrix,
                      kspace=lambda f, n: f.__setitem__(n, h5py.ExternalLink("other.h5", "/k")))
    with pytest.raises(ExternalDataError, match=rf"'/kspace' is an external link to 'other.h5:/k'; {REFUSED}"):
        load_scan(path)
    _one_line_error(_run("info", path), r"'/kspace' is an external link to 'other.h5:/k'; refused")
    assert np.array_equal(load_scan(path, allow_external=True).kspace, kspace)
    result = _run("info", path, "--allow-external-data")
    assert result.exit_code == 0 and f"samples     {kspace.shape[1]} per coil" in result.output, result.output


def test_soft_links_inside_the_file_are_read_and_through_an_external_link_refused(tmp_path, rng):
    kspace, traj, matrix = _arrays(rng)

    def inside(f, name):
        f["store/k"] = kspace
        f[name] = h5py.SoftLink("/store/k")

    path = _scan_file(tmp_path / "soft.h5", kspace, traj, matrix, kspace=inside)
    assert np.array_equal(load_scan(path).kspace, kspace)
    with h5py.File(tmp_path / "other.h5", "w") as g:
        g["grp/k"] = kspace

    def through(f, name):
        f["outer"] = h5py.ExternalLink("other.h5", "/grp")
        f[name] = h5py.SoftLink("/outer/k")

    path = _scan_file(tmp_path / "through.h5", kspace, traj, matrix, kspace=through)
    with pytest.raises(ExternalDataError, match=rf"'/outer' is an external link to 'other.h5:/grp'; {REFUSED}"):
        load_scan(path)
    assert np.array_equal(load_scan(path, allow_external=True).kspace, kspace)


def test_an_external_link_deep_in_an_unused_group_is_refused_too(tmp_path, rng):
    kspace, traj, matrix = _arrays(rng)
    path = _scan_file(tmp_path / "deep.h5", kspace, traj, matrix)
    with h5py.File(path, "a") as f:
        f["extra/deeper/x"] = h5py.ExternalLink("/etc/hostname", "/x")
    with pytest.raises(ExternalDataError, match=r"'/extra/deeper/x' is an external link to '/etc/hostname:/x'"):
        load_scan(path)


# ------------------------------------------------------------------------------------------------------------
# External raw storage and virtual datasets


def test_external_raw_storage_is_refused_and_a_short_file_refused_when_allowed(tmp_path, rng):
    kspace, traj, matrix = _arrays(rng)
    raw = tmp_path / "raw.bin"
    raw.write_bytes(kspace.tobytes())

    def external(size):
        return lambda f, n: f.create_dataset(n, shape=kspace.shape, dtype=np.complex64,
                                             external=[(str(raw), 0, size)])

    path = _scan_file(tmp_path / "ext.h5", kspace, traj, matrix, kspace=external(kspace.nbytes))
    with pytest.raises(ExternalDataError, match=rf"stores its data in the external file '{re.escape(str(raw))}'"):
        load_scan(path)
    assert np.array_equal(load_scan(path, allow_external=True).kspace, kspace)
    raw.write_bytes(kspace.tobytes()[:-8])  # HDF5 reads zeros for the missing last sample
    with pytest.raises(ExternalDataError, match=rf"reads {kspace.nbytes} bytes at offset 0 of the external file "
                                                rf"'{re.escape(str(raw))}', which holds {kspace.nbytes - 8}"):
        load_scan(path, allow_external=True)
    raw.unlink()
    with pytest.raises(ExternalDataError, match="which cannot be opened"):
        load_scan(path, allow_external=True)


def _virtual(source_file, source_name, shape, dtype=np.complex64):
    def make(f, name):
        layout = h5py.VirtualLayout(shape, dtype)
        layout[:] = h5py.VirtualSource(source_file, source_name, shape=shape)
        f.create_virtual_dataset(name, layout)
    return make


def test_a_virtual_dataset_of_another_file_is_refused_and_read_when_allowed(tmp_path, rng):
    kspace, traj, matrix = _arrays(rng)
    with h5py.File(tmp_path / "other.h5", "w") as g:
        g["k"] = kspace
    path = _scan_file(tmp_path / "vds.h5", kspace, traj, matrix, kspace=_virtual("other.h5", "k", kspace.shape))
    with pytest.raises(ExternalDataError, match=rf"dataset '/kspace' is a virtual dataset reading 'other.h5:k'; "
                                                rf"{REFUSED}"):
        load_scan(path)
    _one_line_error(_run("reconstruct", path, *FAST), r"is a virtual dataset reading 'other.h5:k'; refused")
    assert np.array_equal(load_scan(path, allow_external=True).kspace, kspace)
    result = _run("reconstruct", path, "--allow-external-data", *FAST)
    assert result.exit_code == 0, result.output


def test_a_virtual_dataset_with_a_missing_source_is_refused_even_when_allowed(tmp_path, rng):
    kspace, traj, matrix = _arrays(rng)
    path = _scan_file(tmp_path / "gone.h5", kspace, traj, matrix, kspace=_virtual("gone.h5x", "k", kspace.shape))
    with h5py.File(path, "r") as f:
        assert not np.any(f["kspace"][()])  # what HDF5 reads: the fill value, an all-zero image
    missing = r"virtual dataset '/kspace' maps the source 'gone.h5x:k', which cannot be found"
    with pytest.raises(ExternalDataError, match=missing):
        load_scan(path, allow_external=True)
    _one_line_error(_run("reconstruct", path, "--allow-external-data", *FAST), missing)
    with h5py.File(tmp_path / "gone.h5x", "w") as g:  # the file, but not the dataset, or too small a one
        g["other"] = kspace
    with pytest.raises(ExternalDataError, match=r"'gone.h5x:k', which is not a dataset of"):
        load_scan(path, allow_external=True)
    with h5py.File(tmp_path / "gone.h5x", "a") as g:
        g["k"] = kspace[:, :-1]
    with pytest.raises(ExternalDataError, match=r"which has shape \(2, 39\), smaller than the selection"):
        load_scan(path, allow_external=True)


def test_a_virtual_dataset_of_its_own_file_is_read_and_its_missing_source_refused(tmp_path, rng):
    kspace, traj, matrix = _arrays(rng)

    def own(f, name):
        f["store"] = kspace
        _virtual(".", "store", kspace.shape)(f, name)

    path = _scan_file(tmp_path / "own.h5", kspace, traj, matrix, kspace=own)
    assert np.array_equal(load_scan(path).kspace, kspace)
    path = _scan_file(tmp_path / "own_gone.h5", kspace, traj, matrix, kspace=_virtual(".", "nothere", kspace.shape))
    with pytest.raises(ExternalDataError, match=r"maps the source '.:nothere', which is not a dataset of"):
        load_scan(path)


def test_a_user_block_is_part_of_the_file_and_reads(tmp_path, rng):
    kspace, traj, matrix = _arrays(rng)
    path = tmp_path / "ub.h5"
    with h5py.File(path, "w", userblock_size=512) as f:
        f.attrs["matrix"] = list(matrix)
        f["kspace"], f["trajectory"] = kspace, traj
    with open(path, "r+b") as raw:
        raw.write(b"\x1b]0;user block\x07" + bytes(rng.integers(0, 256, 100, dtype=np.uint8)))
    assert np.array_equal(load_scan(path).kspace, kspace)


# ------------------------------------------------------------------------------------------------------------
# ISMRMRD


@pytest.fixture
def mrd(tmp_path, rng):
    pytest.importorskip("ismrmrd")
    from mri_recon.io.ismrmrd_write import write_ismrmrd
    from mri_recon.sim.simulate import simulate_scan

    path = tmp_path / "raw.mrd.h5"
    write_ismrmrd(path, simulate_scan((16, 16), "radial", coils=2, spokes=12, seed=int(rng.integers(1 << 30))))
    return path


def test_an_ismrmrd_file_reaching_another_is_refused_before_the_ismrmrd_package_reads_it(tmp_path, mrd):
    path = tmp_path / "linked.mrd.h5"
    with h5py.File(mrd, "r") as src, h5py.File(path, "w") as f:
        f.create_group("dataset")
        f["dataset/xml"] = src["dataset/xml"][()]
        f["dataset/data"] = h5py.ExternalLink(str(mrd), "/dataset/data")
    with pytest.raises(ExternalDataError, match=r"'/dataset/data' is an external link to '.*raw.mrd.h5:/dataset/"
                                                r"data'; refused"):
        load_scans(path)
    _one_line_error(_run("convert", path, tmp_path / "out.h5"), r"'/dataset/data' is an external link")
    assert not (tmp_path / "out.h5").exists()
    direct, linked = load_scan(mrd), load_scan(path, allow_external=True)
    assert np.array_equal(direct.kspace, linked.kspace)
    result = _run("convert", path, tmp_path / "out.h5", "--allow-external-data", "-q")
    assert result.exit_code == 0, result.output
    assert np.array_equal(load_scan(tmp_path / "out.h5").kspace, direct.kspace)


def test_an_mrd_image_file_is_named_as_images_not_raw_data(tmp_path, mrd):
    images = tmp_path / "out.mrd.h5"
    assert _run("reconstruct", mrd, "-o", images, *FAST).exit_code == 0
    with pytest.raises(SchemaError, match=r"holds MRD images \(dataset/image_0\), not raw acquisitions; "
                                          r"reconstruct needs k-space"):
        load_scan(images)
    for args in (("reconstruct", images, *FAST), ("info", images), ("convert", images, tmp_path / "x.h5")):
        _one_line_error(_run(*args), r"holds MRD images \(dataset/image_0\), not raw acquisitions")


# ------------------------------------------------------------------------------------------------------------
# Strings from files, attributes that are not UTF-8


def test_printable_escapes_control_characters_and_keeps_printable_text():
    assert printable("scan é 1.h5") == "scan é 1.h5"
    assert printable("a\x1b]0;owned\x07b\nc\u202ed") == "a\\x1b]0;owned\\x07b\\nc\\u202ed"
    assert all(ch.isprintable() for ch in printable("".join(map(chr, range(0x2000)))))


def test_an_escape_sequence_in_a_name_from_the_file_never_reaches_the_terminal(tmp_path, rng):
    kspace, traj, matrix = _arrays(rng)
    name = "k\x1b]0;owned\x07"
    path = _scan_file(tmp_path / "title.h5", kspace, traj, matrix)
    with h5py.File(path, "a") as f:
        f[name] = h5py.ExternalLink("other.h5", "/x\x1b[2J")
    for args in (("info", path), ("reconstruct", path, *FAST)):
        result = _run(*args)
        assert "\x1b" not in result.output and "\x07" not in result.output
        _one_line_error(result, r"'/k\\x1b\]0;owned\\x07' is an external link to 'other.h5:/x\\x1b\[2J'")


def test_an_escape_sequence_in_an_attribute_shown_by_info_is_escaped(tmp_path, rng):
    kspace, traj, matrix = _arrays(rng)
    path = tmp_path / "attr.h5"
    save_scan(path, Scan(kspace, traj, matrix, attrs={"traj_units": "x\x1b]0;owned\x07"}))
    result = _run("info", path, "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output and "traj units  x\\x1b]0;owned\\x07" in result.output


def test_an_escape_sequence_in_the_input_name_is_escaped_in_the_error(tmp_path):
    result = _run("reconstruct", tmp_path / "x\x1b]0;owned\x07.h5", *FAST)
    assert "\x1b" not in result.output
    _one_line_error(result, r"x\\x1b\]0;owned\\x07.h5: no such file")


@pytest.mark.parametrize("kind", ["fixed bytes", "variable-length utf-8", "byte array", "attribute name"])
def test_an_attribute_that_is_not_utf8_is_a_schema_error_naming_it(tmp_path, rng, kind):
    kspace, traj, matrix = _arrays(rng)
    path = _scan_file(tmp_path / "attr.h5", kspace, traj, matrix)
    bad = bytes([0xFF, 0xFE]) + b"abc"
    with h5py.File(path, "a") as f:
        if kind == "fixed bytes":
            f.attrs["note"] = np.bytes_(bad)
        elif kind == "variable-length utf-8":
            f.attrs.create("note", bad, dtype=h5py.string_dtype("utf-8"))
        elif kind == "byte array":
            f.attrs["note"] = np.array([b"ok", bad])
        else:
            f.attrs.create(b"n\xffote", 1)
    name = r"b'n\\xffote'" if kind == "attribute name" else "'note'"
    with pytest.raises(SchemaError, match=rf"root attribute {name} is not valid UTF-8 text"):
        load_scan(path)
    _one_line_error(_run("info", path), rf"root attribute {name} is not valid UTF-8 text")


# ------------------------------------------------------------------------------------------------------------
# Inputs the OS refuses to open


def test_a_path_beyond_path_max_is_one_line(tmp_path):
    long = tmp_path / ("a" * 250) / ("b" * 4100 + ".h5")
    for args in (("reconstruct", long, *FAST), ("info", long), ("convert", long, tmp_path / "o.h5"),
                 ("reconstruct", long, tmp_path / "other.h5", "-o", tmp_path / "out", *FAST)):
        # the input itself, or the default output beside it, which reconstruct checks before any work
        _one_line_error(_run(*args), r"(cannot be opened \(File name too long\)|file name is \d+ bytes long|"
                                     r"output path is \d+ bytes long)")


@pytest.mark.parametrize("command", ["info", "convert"])
def test_a_directory_a_fifo_and_an_unreadable_file_are_one_line(tmp_path, command):
    folder = tmp_path / "folder.h5"
    folder.mkdir()
    fifo = tmp_path / "pipe.h5"
    os.mkfifo(fifo)
    extra = (tmp_path / "o.h5",) if command == "convert" else ()
    _one_line_error(_run(command, folder, *extra), r"folder.h5: is a directory, expected an HDF5 scan file")
    _one_line_error(_run(command, fifo, *extra), r"pipe.h5: is not a regular file")
    if os.geteuid() != 0:  # root reads any file
        locked = tmp_path / "locked.h5"
        locked.write_bytes(b"\x89HDF\r\n\x1a\n")
        locked.chmod(0)
        _one_line_error(_run(command, locked, *extra), r"locked.h5: cannot be opened \(Permission denied\)")


def test_a_link_name_that_is_not_utf8_is_refused_with_its_bytes_shown(tmp_path, rng):
    kspace, traj, matrix = _arrays(rng)
    path = _scan_file(tmp_path / "name.h5", kspace, traj, matrix)
    with h5py.File(path, "a") as f:
        f[b"x\xff\x1b"] = h5py.ExternalLink("other.h5", "/k")
    with pytest.raises(ExternalDataError, match=r"'/x\\xff\\x1b' is an external link to 'other.h5:/k'; refused"):
        load_scan(path)


def test_an_allowed_external_group_is_checked_for_missing_virtual_sources(tmp_path, rng):
    kspace, traj, matrix = _arrays(rng)
    _scan_file(tmp_path / "inner.h5", kspace, traj, matrix, kspace=_virtual("absent.h5", "k", kspace.shape))

    def through(f, name):
        f["g"] = h5py.ExternalLink("inner.h5", "/")
        f[name] = h5py.SoftLink("/g/kspace")

    path = _scan_file(tmp_path / "outer.h5", kspace, traj, matrix, kspace=through)
    with pytest.raises(ExternalDataError, match=r"'/g' is an external link to 'inner.h5:/'; refused"):
        load_scan(path)
    with pytest.raises(ExternalDataError, match=r"virtual dataset '/kspace' maps the source 'absent.h5:k', which "
                                                r"cannot be found"):
        load_scan(path, allow_external=True)


def test_a_virtual_source_of_its_own_file_through_an_external_link_is_refused(tmp_path, rng):
    kspace, traj, matrix = _arrays(rng)
    with h5py.File(tmp_path / "other.h5", "w") as g:
        g["k"] = kspace

    def own(f, name):
        f["zz"] = h5py.ExternalLink("other.h5", "/")  # after 'kspace' in name order
        _virtual(".", "/zz/k", kspace.shape)(f, name)

    path = _scan_file(tmp_path / "own_ext.h5", kspace, traj, matrix, kspace=own)
    with pytest.raises(ExternalDataError, match=r"'/zz' is an external link to 'other.h5:/'; refused"):
        load_scan(path)
    assert np.array_equal(load_scan(path, allow_external=True).kspace, kspace)
