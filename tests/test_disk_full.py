"""Writing on a full disk, past a file size limit, or where the system refuses: one line, exit 1, nothing
written, no temporary file left, the earlier file at the path unchanged; never a traceback or a crash.

The command line runs in a subprocess, so that a crash is seen (a segmentation fault is return code -11).
Two ways to make writes fail, both real errors of the kernel:

- a file size limit (``RLIMIT_FSIZE``; a write past it fails with EFBIG), always available: on the whole
  process, or only while the file under test is written (a PNG or a JSON log is written after the image);
- a full tmpfs (ENOSPC), mounted in a private user and mount namespace (``unshare``); skipped where the
  system does not allow one.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mri_recon.errors import OutputError
from mri_recon.io import files, save_scan
from mri_recon.io.files import write_file, write_files
from mri_recon.io.ismrmrd_write import write_ismrmrd
from mri_recon.sim.simulate import simulate_scan

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 200
"""File size limit (bytes) of the limited runs: below every output of a 32x32 scan."""
LIMITED = """
import contextlib, resource, signal, sys
from pathlib import Path
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead of killing
name, limit = sys.argv[1], int(sys.argv[2])
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
if name == "*":  # every file
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
else:  # only while the file of this name is written
    from mri_recon.io import files
    real = files.atomic_output

    @contextlib.contextmanager
    def limited(path, **kwargs):
        with real(path, **kwargs) as tmp:
            if Path(path).name == name:
                resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
            try:
                yield tmp
            finally:
                resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))

    files.atomic_output = limited
from mri_recon.cli import main
sys.argv = ["mri-recon", *sys.argv[3:]]
main()
"""
RECON = ["--device", "cpu", "--iterations", "2", "--no-cache", "-q"]
KINDS = {  # the file under test, and the command (OUT: its folder; OTHER: a folder for the other outputs)
    "hdf5": ("x.h5", ["reconstruct", "{scan}", "-o", "{out}/x.h5", *RECON]),
    "nifti": ("x.nii.gz", ["reconstruct", "{scan}", "-o", "{out}/x.nii.gz", *RECON]),
    "mrd": ("x.mrd.h5", ["reconstruct", "{scan}", "-o", "{out}/x.mrd.h5", *RECON]),
    "png": ("p.png", ["reconstruct", "{scan}", "-o", "{other}/x.h5", "--png", "{out}/p.png", *RECON]),
    "log-json": ("run.json", ["reconstruct", "{scan}", "-o", "{other}/x.h5", "--log-json", "{out}/run.json",
                              *RECON]),
    "batch-mrd": ("scan.recon.mrd.h5", ["reconstruct", "{folder}", "-o", "{out}", "--format", "mrd", *RECON]),
    "convert": ("c.h5", ["convert", "{mrd}", "{out}/c.h5", "-q"]),
}
AFTER_THE_IMAGE = ("png", "log-json")
"""Kinds written after the image: the limit applies only to them."""


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A fresh random 32x32 scan (schema v1, in a folder of its own for the batch) and the same as MRD."""
    folder = tmp_path_factory.mktemp("inputs")
    seed = int(np.random.SeedSequence().entropy % 2**31)
    scan = simulate_scan((32, 32), "golden", coils=2, seed=seed)
    (folder / "one").mkdir()
    save_scan(folder / "one" / "scan.h5", scan)
    write_ismrmrd(folder / "scan.mrd", scan)
    return {"scan": str(folder / "one" / "scan.h5"), "folder": str(folder / "one"), "mrd": str(folder / "scan.mrd")}


def _command(kind: str, inputs: dict, out: Path, other: Path) -> list[str]:
    return [a.format(out=out, other=other, **inputs) for a in KINDS[kind][1]]


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}


def _snapshot(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def _earlier(folder: Path, name: str) -> dict[str, str]:
    """An earlier file at the path under test (random bytes); the folder's snapshot."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(os.urandom(5000))
    return _snapshot(folder)


def _assert_one_line(rc: int, stderr: str, target: Path, cause: str) -> None:
    assert rc == 1, f"return code {rc} (a crash is negative): {stderr[-2000:]}"
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert re.search(f"{cause} writing {re.escape(str(target))}[ ;].*nothing was written", lines[0]), lines[0]


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_write_past_the_file_size_limit_is_one_line_and_leaves_the_earlier_file(inputs, tmp_path, kind):
    name = KINDS[kind][0]
    out, other = tmp_path / "out", tmp_path / "other"
    other.mkdir()
    before = _earlier(out, name)
    limited = name if kind in AFTER_THE_IMAGE else "*"
    proc = subprocess.run([sys.executable, "-c", LIMITED, limited, str(LIMIT), *_command(kind, inputs, out, other)],
                          capture_output=True, text=True, env=_env(), timeout=600, check=False)
    _assert_one_line(proc.returncode, proc.stderr, out / name, r"file too large \(over the file system's or this "
                                                               r"process's file size limit\)")
    assert _snapshot(out) == before
    assert not [p for p in other.iterdir() if p.name.startswith(files.PREFIX)]


# ----------------------------------------------------------------------------------------------------------
# A full file system: a tmpfs in a private namespace

FULL = """
import hashlib, json, os, subprocess, sys
config = json.load(open(sys.argv[1]))
mount = config["mount"]
done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", mount], capture_output=True, text=True)
if done.returncode != 0:
    print(json.dumps({"skip": done.stderr.strip() or "mount failed"}))
    sys.exit(0)

def snapshot(folder):
    names = sorted(os.listdir(folder))
    return {n: hashlib.sha256(open(os.path.join(folder, n), "rb").read()).hexdigest() for n in names}

results = {}
for case in config["cases"]:
    out = os.path.join(mount, case["id"])
    os.mkdir(out)
    with open(os.path.join(out, case["name"]), "wb") as f:
        f.write(os.urandom(5000))
    before = snapshot(out)
    filler = os.path.join(mount, "filler")
    with open(filler, "wb", buffering=0) as f:  # the file system full: not one byte free
        try:
            while True:
                f.write(b"\\0" * 4096)
        except OSError:
            pass
    free = os.statvfs(mount).f_bavail
    done = subprocess.run([sys.executable, "-c", case["code"], *case["args"]], capture_output=True, text=True,
                          timeout=600)
    os.unlink(filler)
    results[case["id"]] = {"rc": done.returncode, "stderr": done.stderr, "before": before, "after": snapshot(out),
                           "free_blocks": free}
print(json.dumps(results))
"""
PLAIN = "import sys; from mri_recon.cli import main; sys.argv[0] = 'mri-recon'; main()"
UNCHECKED = ("import sys; from mri_recon.io import files; files.free_bytes = lambda folder: None; "
             "from mri_recon.cli import main; sys.argv[0] = 'mri-recon'; main()")
"""The command with the free-space check blind (the file system says nothing): the write itself meets ENOSPC."""
MID_WRITE = ("hdf5", "mrd", "png", "batch-mrd")


@pytest.fixture(scope="module")
def full_disk(inputs, tmp_path_factory):
    """Every kind written into a full tmpfs (free space checked first), and some with the check blind."""
    unshare = shutil.which("unshare")
    if unshare is None or shutil.which("mount") is None:
        pytest.skip("needs unshare and mount (util-linux)")
    base = tmp_path_factory.mktemp("full")
    (base / "mnt").mkdir()
    cases = []
    for kind in KINDS:
        for blind in (False, True) if kind in MID_WRITE else (False,):
            case = f"{kind}{'-unchecked' if blind else ''}"
            other = base / "other" / case
            other.mkdir(parents=True)
            cases.append({"id": case, "name": KINDS[kind][0], "code": UNCHECKED if blind else PLAIN,
                          "args": _command(kind, inputs, base / "mnt" / case, other)})
    (base / "config.json").write_text(json.dumps({"mount": str(base / "mnt"), "cases": cases}))
    try:
        proc = subprocess.run([unshare, "--map-root-user", "--mount", sys.executable, "-c", FULL,
                               str(base / "config.json")], capture_output=True, text=True, env=_env(), timeout=1200,
                              check=False)
    except OSError as exc:
        pytest.skip(f"unshare cannot run here ({exc})")
    if proc.returncode != 0 and not proc.stdout.strip():
        pytest.skip(f"no private mount namespace here: {proc.stderr.strip()[:200]}")
    results = json.loads(proc.stdout)
    if "skip" in results:
        pytest.skip(f"cannot mount a tmpfs: {results['skip'][:200]}")
    return base, results


@pytest.mark.parametrize("case", [k for k in KINDS] + [f"{k}-unchecked" for k in MID_WRITE])
def test_a_full_disk_is_one_line_and_leaves_the_earlier_file(full_disk, case):
    base, results = full_disk
    result = results[case]
    kind = case.removesuffix("-unchecked")
    assert result["free_blocks"] == 0
    target = base / "mnt" / case / KINDS[kind][0]
    _assert_one_line(result["rc"], result["stderr"], target, "no space left on device")
    if not case.endswith("-unchecked"):
        assert re.search(r"\(\d+ bytes to write, 0 free in ", result["stderr"]), result["stderr"]
    assert result["after"] == result["before"]  # no temporary file, the earlier file unchanged
    assert not [p for p in (base / "other" / case).iterdir() if p.name.startswith(files.PREFIX)]


# ----------------------------------------------------------------------------------------------------------
# The library


def test_too_little_free_space_is_refused_before_writing(tmp_path, monkeypatch, rng):
    target = tmp_path / "out.bin"
    target.write_bytes(b"earlier")
    data = rng.bytes(int(rng.integers(100, 5000)))
    monkeypatch.setattr(files, "free_bytes", lambda folder: len(data) - 1)
    with pytest.raises(OutputError, match=rf"^no space left on device writing {re.escape(str(target))} "
                                          rf"\({len(data)} bytes to write, {len(data) - 1} free in .*\); "
                                          r"nothing was written$"):
        write_file(target, data)
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"] and target.read_bytes() == b"earlier"
    monkeypatch.setattr(files, "free_bytes", lambda folder: len(data))
    write_file(target, data)
    assert target.read_bytes() == data


def test_several_files_are_written_all_or_none(tmp_path, rng):
    small, large = rng.bytes(100), rng.bytes(5000)
    first, second = tmp_path / "a.nii", tmp_path / "b.nii"
    second.write_bytes(b"earlier")
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1000, hard))  # Python ignores SIGXFSZ: the write fails with EFBIG
    try:
        with pytest.raises(OutputError, match=rf"^file too large .* writing {re.escape(str(second))}; nothing"):
            write_files([(first, small), (second, large)])
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.nii"] and second.read_bytes() == b"earlier"
    assert write_files([(first, small), (second, large)]) == [first, second]
    assert first.read_bytes() == small and second.read_bytes() == large


def test_os_errors_name_their_cause(tmp_path):
    error = files.write_error(tmp_path / "x.h5", OSError(28, "No space left on device"))
    assert str(error) == f"no space left on device writing {tmp_path / 'x.h5'}; nothing was written"
    assert str(files.write_error("y", OSError(122, "Disk quota exceeded"))).startswith("disk quota exceeded writing y")
    assert str(files.write_error("z", OSError(5, "Input/output error"))) == \
        "input/output error writing z; nothing was written"


# ----------------------------------------------------------------------------------------------------------
# Other refusals of the system: one line each, before any work

READ_ONLY = """
import json, os, subprocess, sys
mount, earlier, args = sys.argv[1], sys.argv[2], sys.argv[3:]
done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mount], capture_output=True, text=True)
if done.returncode != 0:
    print(json.dumps({"skip": done.stderr.strip() or "mount failed"}))
    sys.exit(0)
with open(os.path.join(mount, "x.h5"), "wb") as f:
    f.write(bytes.fromhex(earlier))
done = subprocess.run(["mount", "-o", "remount,ro", mount], capture_output=True, text=True)
if done.returncode != 0:
    print(json.dumps({"skip": done.stderr.strip() or "remount failed"}))
    sys.exit(0)
done = subprocess.run([sys.executable, "-m", "mri_recon.cli", *args], capture_output=True, text=True, timeout=600)
print(json.dumps({"rc": done.returncode, "stderr": done.stderr, "files": sorted(os.listdir(mount)),
                  "earlier": open(os.path.join(mount, "x.h5"), "rb").read().hex()}))
"""


def _cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mri_recon.cli", *map(str, args)], capture_output=True, text=True,
                          env=_env(), timeout=600, check=False)


def _refused(proc: subprocess.CompletedProcess, pattern: str) -> None:
    assert proc.returncode == 1, f"return code {proc.returncode}: {proc.stderr[-2000:]}"
    lines = proc.stderr.strip().splitlines()
    assert "Traceback" not in proc.stderr and len(lines) == 1, proc.stderr
    assert re.search(pattern, lines[0]), lines[0]


def test_a_path_over_path_max_is_one_line(inputs, tmp_path):
    deep = tmp_path.joinpath(*["d" * 200] * 21) / "x.h5"
    assert len(os.fsencode(str(deep))) > 4096
    _refused(_cli("reconstruct", inputs["scan"], "-o", deep, *RECON),
             rf"output path is {len(os.fsencode(str(deep)))} bytes long; the system allows at most \d+")
    _refused(_cli("reconstruct", inputs["scan"], "-o", tmp_path / "x.h5", "--log-json", deep.with_suffix(".json"),
                  *RECON), r"output path is \d+ bytes long")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("option", ["--png", "--log-json"])
def test_an_output_path_that_is_a_directory_is_one_line(inputs, tmp_path, option):
    """(``-o`` of an existing folder writes NAME.recon.h5 into it: tests/test_cli.py.)"""
    folder = tmp_path / "x.png"  # a folder with the name of a file
    folder.mkdir()
    args = ["-o", tmp_path / "x.h5", option, folder]
    _refused(_cli("reconstruct", inputs["scan"], *args, *RECON), rf"{re.escape(str(folder))}: output path is a "
                                                                   r"directory")
    assert [p.name for p in tmp_path.iterdir()] == ["x.png"] and list(folder.iterdir()) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a folder without write permission")
def test_a_folder_without_write_permission_is_one_line(inputs, tmp_path):
    folder = tmp_path / "locked"
    folder.mkdir()
    (folder / "x.h5").write_bytes(b"earlier")
    folder.chmod(0o555)
    try:
        _refused(_cli("reconstruct", inputs["scan"], "-o", folder / "x.h5", *RECON),
                 r"output folder .* is not writable \(permission denied\); nothing was written")
    finally:
        folder.chmod(0o755)
    assert [p.name for p in folder.iterdir()] == ["x.h5"] and (folder / "x.h5").read_bytes() == b"earlier"


def test_a_read_only_file_system_is_one_line(inputs, tmp_path):
    unshare = shutil.which("unshare")
    if unshare is None or shutil.which("mount") is None:
        pytest.skip("needs unshare and mount (util-linux)")
    mount, earlier = tmp_path / "ro", os.urandom(300)
    mount.mkdir()
    try:
        proc = subprocess.run([unshare, "--map-root-user", "--mount", sys.executable, "-c", READ_ONLY, str(mount),
                               earlier.hex(), "reconstruct", inputs["scan"], "-o", str(mount / "x.h5"), *RECON],
                              capture_output=True, text=True, env=_env(), timeout=600, check=False)
    except OSError as exc:
        pytest.skip(f"unshare cannot run here ({exc})")
    if proc.returncode != 0 and not proc.stdout.strip():
        pytest.skip(f"no private mount namespace here: {proc.stderr.strip()[:200]}")
    result = json.loads(proc.stdout)
    if "skip" in result:
        pytest.skip(f"cannot mount a tmpfs: {result['skip'][:200]}")
    _refused(subprocess.CompletedProcess([], result["rc"], "", result["stderr"]),
             rf"{re.escape(str(mount / 'x.h5'))}: output folder .* is not writable \(read-only file system\); "
             r"nothing was written")
    assert result["files"] == ["x.h5"] and bytes.fromhex(result["earlier"]) == earlier
