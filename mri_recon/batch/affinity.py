"""A GPU worker's CPUs: the cores next to its GPU (dask-cuda's ``CPUAffinity``, for the pinned nannies that
run when dask-cuda does not start).

A worker process loads scans, prewhitens and writes on the host between its GPU's work. On a host of several
NUMA nodes its memory and its copies to the GPU are fastest from the cores of the GPU's node, and two
workers left to the kernel's scheduler may share a core while others idle. The pinned nannies therefore
preload this module in each worker (:func:`dask_setup`): it moves every thread of the process to the CPUs
that the GPU's PCI device lists as local (``/sys/bus/pci/devices/BUS/local_cpulist``), within those the
process may use. Where that list is missing or shares no CPU with them, nothing changes.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)

SYSFS_PCI = Path("/sys/bus/pci/devices")


def parse_cpulist(text: str) -> set[int]:
    """The CPUs of a kernel CPU list (``"0-15,32-47"``, ``"3"``, ``""``).

    Raises
    ------
    ValueError
        Text that is not such a list.
    """
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        low, high = int(first), int(last or first)
        if low < 0 or high < low:
            raise ValueError(f"not a CPU list: {text!r}")
        cpus.update(range(low, high + 1))
    return cpus


def sysfs_bus_id(bus_id: str) -> str | None:
    """A PCI address as sysfs names it (``"0000:1b:00.0"``) from CuPy's or NVML's form (``"0000:1B:00.0"``,
    ``"00000000:1B:00.0"``), or None for text that is not one."""
    try:
        domain, bus, rest = bus_id.strip().split(":")
        device, function = rest.split(".")
        return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}.{int(function, 16):x}"
    except ValueError:
        return None


def local_cpus(bus_id: str, sysfs: Path | None = None) -> set[int] | None:
    """The CPUs local to the PCI device ``bus_id`` (:func:`sysfs_bus_id`'s forms) by ``sysfs`` (default
    :data:`SYSFS_PCI`), or None where it does not say."""
    name = sysfs_bus_id(bus_id)
    if name is None:
        return None
    try:
        return parse_cpulist(((sysfs or SYSFS_PCI) / name / "local_cpulist").read_text()) or None
    except (OSError, ValueError):
        return None


def gpu_bus_id(index: int = 0) -> str | None:
    """The PCI bus id of CUDA device ``index`` of this process, or None without CuPy or a GPU."""
    from ..arrays.backend import cupy_module  # noqa: PLC0415 - the worker's backend, on use

    cupy = cupy_module()
    if cupy is None:
        return None
    try:
        return str(cupy.cuda.runtime.deviceGetPCIBusId(index))
    except Exception:  # noqa: BLE001 - no driver or no such device: nothing to pin to
        return None


def pin_process(cpus: set[int]) -> set[int] | None:
    """Move every thread of this process (and the threads it starts later) to ``cpus`` within the CPUs it
    may use now; the CPUs this thread runs on afterwards, or None when the two sets share none or the system
    refuses (nothing changed)."""
    allowed = os.sched_getaffinity(0)
    chosen = allowed & cpus
    if not chosen:
        return None
    try:
        threads = [int(task.name) for task in Path("/proc/self/task").iterdir()]
        os.sched_setaffinity(0, chosen)  # this thread first: a refusal leaves every thread as it was
    except OSError:
        return None
    for thread in threads:
        try:
            os.sched_setaffinity(thread, chosen)
        except OSError:  # a thread that has just ended
            continue
    return os.sched_getaffinity(0)


def pin_to_gpu(index: int = 0) -> set[int] | None:
    """Pin this process to the CPUs local to its CUDA device ``index``; the CPUs, or None when unchanged."""
    bus = gpu_bus_id(index)
    cpus = local_cpus(bus) if bus else None
    chosen = pin_process(cpus) if cpus else None
    log.info("GPU %s (%s): worker on CPUs %s", index, bus, sorted(chosen) if chosen else "as before")
    return chosen


def dask_setup(worker: object) -> None:
    """Dask's preload hook: pin the worker process to its GPU's CPUs (device 0: its ``CUDA_VISIBLE_DEVICES``).
    A failure is logged, never raised: Dask would not start the worker."""
    try:
        pin_to_gpu(0)
    except Exception as exc:  # noqa: BLE001 - the worker runs unpinned rather than not at all
        log.warning("worker left on its CPUs: %s: %s", type(exc).__name__, exc)

