"""The host memory the planner may plan with: MemAvailable, cgroup v2 and v1 limits, RLIMIT_AS.

cgroups of 1 or 12 GiB cannot be made here (no privileges in CI): fake /proc and /sys roots stand for them.
RLIMIT_AS can be set by any process, so it is tested for real, in a subprocess.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from mri_recon.arrays.backend import host_memory_available, host_memory_limits

GIB, MIB = 2**30, 2**20
ROOT = Path(__file__).resolve().parents[1]


def _write(root: Path, path: str, text: str) -> None:
    target = root / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


def _fake(tmp_path: Path, cgroup: str, files: dict[str, str], available_kib: int | None) -> tuple[str, str]:
    proc, sys_ = tmp_path / "proc", tmp_path / "sys"
    _write(proc, "self/cgroup", cgroup)
    if available_kib is not None:
        _write(proc, "meminfo", f"MemTotal:       99999999 kB\nMemFree:  1 kB\nMemAvailable:   {available_kib} kB\n")
    for path, text in files.items():
        _write(sys_, path, text)
    return str(proc), str(sys_)


def test_cgroup_v2_limit_minus_current_is_the_least(tmp_path):
    rng = np.random.default_rng()
    limit, current = int(rng.integers(1, 4)) * GIB, int(rng.integers(1, 500)) * MIB
    proc, sys_ = _fake(tmp_path, "0::/user.slice/job.scope\n", {
        "fs/cgroup/user.slice/memory.max": "max\n",
        "fs/cgroup/user.slice/memory.current": "123\n",
        "fs/cgroup/user.slice/job.scope/memory.max": f"{limit}\n",
        "fs/cgroup/user.slice/job.scope/memory.current": f"{current}\n"}, available_kib=8 * 2**20)
    limits = host_memory_limits(proc, sys_)
    assert limits["cgroup memory.max"] == limit - current and limits["MemAvailable"] == 8 * GIB
    assert host_memory_available(proc, sys_) == limit - current


def test_cgroup_v2_parent_limit_binds_and_max_means_none(tmp_path):
    proc, sys_ = _fake(tmp_path, "0::/a/b\n", {
        "fs/cgroup/a/memory.max": f"{GIB}\n", "fs/cgroup/a/memory.current": f"{900 * MIB}\n",
        "fs/cgroup/a/b/memory.max": "max\n", "fs/cgroup/a/b/memory.current": f"{800 * MIB}\n"}, 4 * 2**20)
    assert host_memory_limits(proc, sys_)["cgroup memory.max"] == 124 * MIB
    unlimited = tmp_path / "unlimited"
    proc, sys_ = _fake(unlimited, "0::/a\n", {"fs/cgroup/a/memory.max": "max\n",
                                              "fs/cgroup/a/memory.current": "5\n"}, 4 * 2**20)
    assert host_memory_limits(proc, sys_) == {"MemAvailable": 4 * GIB}


def test_cgroup_v1_limit_and_its_unlimited_value(tmp_path):
    proc, sys_ = _fake(tmp_path, "5:cpu,cpuacct:/x\n4:memory:/docker/abc\n0::/\n", {
        "fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",  # the root: no limit
        "fs/cgroup/memory/memory.usage_in_bytes": f"{20 * GIB}\n",
        "fs/cgroup/memory/docker/abc/memory.limit_in_bytes": f"{12 * GIB}\n",
        "fs/cgroup/memory/docker/abc/memory.usage_in_bytes": f"{9 * GIB}\n"}, 16 * 2**20)
    limits = host_memory_limits(proc, sys_)
    assert limits["cgroup memory.limit_in_bytes"] == 3 * GIB and "cgroup memory.max" not in limits
    assert host_memory_available(proc, sys_) == 3 * GIB


def test_cgroup_namespace_reads_the_root_of_the_hierarchy(tmp_path):
    """Inside a container /proc/self/cgroup names the host's path, absent from the container's /sys."""
    proc, sys_ = _fake(tmp_path, "0::/system.slice/docker-1.scope\n", {
        "fs/cgroup/memory.max": f"{GIB}\n", "fs/cgroup/memory.current": f"{GIB + 5}\n"}, 4 * 2**20)
    assert host_memory_limits(proc, sys_)["cgroup memory.max"] == 0  # over its limit: nothing left


def test_nothing_known_falls_back_to_free_pages(tmp_path):
    proc, sys_ = _fake(tmp_path, "garbage line\n", {}, available_kib=None)
    assert host_memory_limits(proc, sys_) == {}
    assert host_memory_available(proc, sys_) > 0  # sysconf's free pages


RLIMIT = """
import resource, sys
from mri_recon.arrays.backend import host_memory_limits
from mri_recon.errors import ResourceError
from mri_recon.sim.simulate import simulate_scan
import mri_recon
scan = simulate_scan((128, 128), "golden", coils=12, snr=30.0, seed=1, dcf="ramp").replace(coil_maps=None)
with open("/proc/self/status") as f:
    size = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
room = int(sys.argv[1]) * 2**20
resource.setrlimit(resource.RLIMIT_AS, (size + room, resource.RLIM_INFINITY))
print("room", host_memory_limits()["RLIMIT_AS"], room)
try:
    mri_recon.reconstruct(scan, device="cpu", iterations=2, progress=False)
except ResourceError as exc:
    print("refused", exc)
"""


def test_rlimit_as_is_read_and_a_scan_that_does_not_fit_is_refused():
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MRI_RECON_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", RLIMIT, "64"], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert "MemoryError" not in out.stderr and "Traceback" not in out.stderr
    (room_line, refused) = out.stdout.strip().splitlines()
    _, seen, room = room_line.split()
    assert 0 <= int(room) - int(seen) < 64 * MIB  # less what was mapped since VmSize was read
    assert refused.startswith("refused problem too large for host memory: needs at least ")
    assert "at its coil_maps stage" in refused and "(the tightest limit: RLIMIT_AS)" in refused
    assert "--coil-maps file" in refused
