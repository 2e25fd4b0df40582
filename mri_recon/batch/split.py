"""The images of one MRD file over several workers: when a batch has fewer files than worker threads, the
slices, contrasts, phases, sets and repetitions of an MRD file are reconstructed in several parts (one task
each: one read of the file, its share of the images), and one more task writes the output from the parts.

Each part reads the whole file once (the reader has no per-image access), so a file split in ``g`` parts is
read ``g + 1`` times (once here, to learn its images). A part that fails fails its file; a part lost with its
worker is run again by Dask.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

from .task import ScanOutcome, ScanTask, failed, here, reconstruct_images, write_images


@dataclasses.dataclass(frozen=True)
class Part:
    """What a part returns: its images, or the outcome of its failure, and its time in its worker."""

    images: list
    """``(key, scan, record, result)`` per image, in file order."""
    seconds: float
    failure: Any = None
    """The failed :class:`~mri_recon.batch.task.ScanOutcome`, or None."""


def plan_parts(tasks: list[ScanTask], threads: int) -> dict[int, list[list[dict]]]:
    """For each task (by index) to split, its images' keys in parts; tasks not split are absent.

    Files are split only when there are fewer of them than ``threads``: each MRD file with several images
    into ``min(images, ceil(threads / files))`` parts of consecutive images. A file that cannot be read here
    is left whole (its task reports why).
    """
    from ..io import load_scans
    from ..io.schema import is_hdf5_scan

    if not tasks or len(tasks) >= threads:
        return {}
    wanted = math.ceil(threads / len(tasks))
    plans = {}
    for index, task in enumerate(tasks):
        try:
            if is_hdf5_scan(task.input, task.settings.allow_external) != "ismrmrd":
                continue
            keys = [key for key, _ in load_scans(task.input, **task.settings.reader_keywords())]
        except Exception:  # noqa: BLE001 - the whole-file task reports the error
            continue
        count = min(len(keys), wanted)
        if count > 1:
            size = math.ceil(len(keys) / count)
            plans[index] = [keys[i:i + size] for i in range(0, len(keys), size)]
    return plans


def run_part(task: ScanTask, keys: list[dict]) -> Part:
    """Reconstruct the images ``keys`` of ``task.input`` (in a worker)."""
    started = time.perf_counter()
    try:
        images = reconstruct_images(task, keys)
    except Exception as exc:  # noqa: BLE001 - reported through the file's outcome
        return Part([], time.perf_counter() - started, failed(task, exc, started))
    return Part(images, time.perf_counter() - started)


def write_parts(task: ScanTask, *parts: Part) -> ScanOutcome:
    """Write the output of ``task`` from its parts (in a worker); the first failed part fails it. The
    outcome's seconds are those of every part and of the writing."""
    started = time.perf_counter()
    spent = sum(part.seconds for part in parts)
    for part in parts:
        if part.failure is not None:
            return dataclasses.replace(part.failure, seconds=spent, parts=len(parts))
    try:
        done = write_images(task, [image for part in parts for image in part.images], parts=len(parts))
    except Exception as exc:  # noqa: BLE001 - one bad scan must not stop the others
        return failed(task, exc, started)
    done = done.with_note(f"{done.images} images in {len(parts)} parts")
    return dataclasses.replace(done, seconds=spent + time.perf_counter() - started, worker=here())
