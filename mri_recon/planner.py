"""Memory and time planning for a reconstruction, before anything is allocated.

The planner counts the arrays the pipeline holds (data, trajectory, weights, coil maps, the PSF spectrum
on the 2x grid, the CG vectors and the per-coil FFT work) and picks how many coils go through the Toeplitz
operator at once so that the peak fits the memory available. When even one coil at a time does not fit it
raises :class:`~mri_recon.errors.ResourceError` naming the size needed and the size available.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from .errors import ResourceError

COMPLEX64 = 8
FLOAT32 = 4
HEADROOM = 0.9  # leave 10% for allocator fragmentation and library workspaces
# Rates behind the time estimate, measured (docs/benchmarks.md): an H200 and a 2-core CPU. Estimates only.
GPU_TRIPLES_PER_S = 6.2e12  # coil-voxel-sample triples of the F^H d kernel, 8 coils
GPU_PAIRS_PER_S = 5.0e12  # voxel-sample pairs of the PSF kernel on the 2x grid
GPU_FFT_S = 1.0e-11  # seconds per (coil x 2x-grid voxel x log2 size) of one CG iteration
CPU_SAMPLES_PER_S = 5.0e6  # FINUFFT coil-samples per second (F^H d and PSF), two cores
CPU_FFT_S = 1.5e-9  # seconds per (coil x 2x-grid voxel x log2 size) of one CG iteration


@dataclass(frozen=True)
class Plan:
    """What a reconstruction will hold in memory and roughly how long it will take."""

    fixed_bytes: int
    """Bytes held for the whole run: data, trajectory, weights, maps, PSF spectrum, CG vectors."""
    per_coil_bytes: int
    """Bytes of Toeplitz work per coil processed at once (padded grid and its FFT)."""
    coil_batch: int
    """Coils pushed through the Toeplitz operator at once."""
    n_coils: int
    peak_bytes: int
    """fixed_bytes + coil_batch * per_coil_bytes."""
    available_bytes: int | None
    estimated_seconds: float

    @property
    def batched(self) -> bool:
        return self.coil_batch < self.n_coils


def host_memory_available() -> int | None:
    """Bytes of memory available to this process without swapping (Linux ``MemAvailable``, which counts
    reclaimable page cache; free pages elsewhere), or None when unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"


def plan(matrix: tuple[int, ...], n_coils: int, n_samples: int, *, sense: bool, iterations: int,
         available_bytes: int | None, gpu: bool, max_coil_batch: int | None = None,
         what: str = "memory") -> Plan:
    """Plan the memory of a reconstruction of ``n_coils`` x ``n_samples`` samples onto ``matrix``.

    Parameters
    ----------
    sense
        True for CG-SENSE (one image, coil maps); False solves each coil (C images) and combines.
    available_bytes
        Memory the run may use (None: do not check).
    max_coil_batch
        Force at most this many coils per Toeplitz batch (tests, and users who share the device).
    """
    n_vox = math.prod(matrix)
    grid2 = n_vox * 2 ** len(matrix)
    images = 1 if sense else n_coils
    fixed = (
        n_coils * n_samples * COMPLEX64  # k-space
        + n_samples * (len(matrix) + 1) * FLOAT32  # trajectory and weights
        + (n_coils * n_vox * COMPLEX64 if sense else 0)  # coil maps
        + grid2 * COMPLEX64  # PSF spectrum
        + 5 * images * n_vox * COMPLEX64  # CG: x, r, p, A p, right-hand side
        + n_coils * n_vox * COMPLEX64  # F^H d of every coil before the coil combination
    )
    per_coil = 2 * grid2 * COMPLEX64  # padded grid and the FFT's work area
    batch = n_coils if max_coil_batch is None else max(1, min(n_coils, int(max_coil_batch)))
    if available_bytes is not None:
        budget = int(available_bytes * HEADROOM)
        if fixed + per_coil > budget:
            raise ResourceError(
                f"problem too large for {what}: needs at least {human_bytes(fixed + per_coil)} "
                f"(matrix {list(matrix)}, {n_coils} coils, {n_samples} samples) but "
                f"{human_bytes(available_bytes)} is available"
            )
        batch = max(1, min(batch, (budget - fixed) // per_coil))
    fft_work = iterations * n_coils * grid2 * max(1.0, math.log2(grid2))
    if gpu:
        seconds = (n_coils * n_vox * n_samples / GPU_TRIPLES_PER_S + grid2 * n_samples / GPU_PAIRS_PER_S
                   + fft_work * GPU_FFT_S)
    else:
        seconds = (n_coils + 1) * n_samples / CPU_SAMPLES_PER_S + fft_work * CPU_FFT_S
    return Plan(fixed_bytes=int(fixed), per_coil_bytes=int(per_coil), coil_batch=int(batch),
                n_coils=int(n_coils), peak_bytes=int(fixed + batch * per_coil),
                available_bytes=available_bytes, estimated_seconds=float(seconds))
