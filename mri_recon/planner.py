"""Memory and time planning for a reconstruction, before anything is allocated.

The planner follows the pipeline stage by stage and takes the largest: F^H d (the samples in double
precision, FINUFFT's oversampled complex128 fine grid per transform in flight, the complex128 images), the
PSF (FINUFFT's fine grid of the 2x grid, about ``(2.5 N)^D * 16`` bytes, and the complex128 PSF), the
kernel spectrum's FFT, and the CG iterations (spectrum, CG vectors and per-coil Toeplitz FFT work). It picks
how many coils go through the Toeplitz operator at once so that the peak fits the memory available; when
even one coil at a time does not fit it raises :class:`~mri_recon.errors.ResourceError` naming the size
needed and the size available. Measured against max RSS on the CPU in ``docs/planner.md``
(``scripts/bench_planner.py``). The GPU figures count the device arrays only.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from .backend import cpu_threads
from .errors import ResourceError
from .operators.encoding import NUFFT_EPS

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
    """The largest of ``stages``: on the GPU fixed_bytes + coil_batch * per_coil_bytes; on the CPU often
    the PSF stage (FINUFFT's oversampled grid of the 2x grid)."""
    available_bytes: int | None
    estimated_seconds: float
    stages: Mapping[str, int] = field(default_factory=dict)
    """Bytes held at the peak of each stage: ``fhd``, ``psf``, ``spectrum`` (CPU only) and ``iterations``."""

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


COMPLEX128 = 16
FLOAT64 = 8
EXACT_CHUNK = 128 * 2**20
"""Working memory of the NumPy exact DFT: its block (64 MiB counted at 24 bytes per phase) holds 48 bytes
per phase at its peak (float64 cycles and angle, the complex128 phase, and the previous block's phase)."""
METHODS = ("auto", "exact", "nufft", "gpu", "gpu-nufft")
NUFFT_MAX_GROUP = 8
"""Most coils the GPU NUFFT spreads onto fine grids at once."""


def _cpu_stages(matrix: tuple[int, ...], n_coils: int, n_samples: int, *, sense: bool, method: str,
                workers: int) -> dict[str, int]:
    """Bytes held at the peak of each CPU stage before the CG iterations (inputs included)."""
    from .operators.finufft import fine_grid_shape  # noqa: PLC0415 - numpy only; keeps this module light

    d, m, c = len(matrix), n_samples, n_coils
    n_vox = math.prod(matrix)
    big = tuple(2 * n for n in matrix)
    grid2 = math.prod(big)
    inputs = c * m * COMPLEX64 + m * (d + 1) * FLOAT32 + (c * n_vox * COMPLEX64 if sense else 0)
    coords = m * d * FLOAT64 * 2 + m * COMPLEX128  # float64 trajectory, scaled coordinates, phase
    if method == "nufft":
        in_flight = min(workers, c)
        fhd_work = (2 * c * m * COMPLEX128  # the samples in complex128, and times the phase
                    + in_flight * (math.prod(fine_grid_shape(matrix, NUFFT_EPS)) * COMPLEX128 + m * FLOAT64))
        psf_work = (3 * m * COMPLEX128 + math.prod(fine_grid_shape(big, NUFFT_EPS)) * COMPLEX128
                    + m * FLOAT64)
    else:
        fhd_work = c * m * COMPLEX128 + n_vox * d * FLOAT64 + EXACT_CHUNK
        psf_work = m * COMPLEX128 + grid2 * d * FLOAT64 + EXACT_CHUNK
    weighted = c * m * COMPLEX64
    fhd = inputs + weighted + coords + fhd_work + c * n_vox * (COMPLEX128 + COMPLEX64)
    rhs = (1 if sense else c) * n_vox * COMPLEX64
    psf = inputs + rhs + coords + max(psf_work + grid2 * COMPLEX128, grid2 * (COMPLEX128 + COMPLEX64))
    spectrum = inputs + rhs + 3 * grid2 * COMPLEX64
    return {"fhd": int(fhd), "psf": int(psf), "spectrum": int(spectrum)}


def _gpu_nufft_stages(matrix: tuple[int, ...], n_coils: int, n_samples: int, *, fixed: int) -> dict[str, int]:
    """Bytes at the peak of the GPU NUFFT's F^H d and PSF stages, on top of the ``fixed`` arrays."""
    from .operators.encoding import GPU_NUFFT_EPS  # noqa: PLC0415 - plain Python; keeps this module light
    from .operators.nufft_params import nufft_params  # noqa: PLC0415

    d, m, c = len(matrix), n_samples, n_coils
    big = tuple(2 * n for n in matrix)
    fine = math.prod(nufft_params(matrix, GPU_NUFFT_EPS).fine)
    fine2 = math.prod(nufft_params(big, GPU_NUFFT_EPS).fine)
    per_sample = 12 + 8 * d + 4 * d  # the plan's sort buffers and its copy of the trajectory
    group = min(c, NUFFT_MAX_GROUP)
    fhd = m * per_sample + group * fine * COMPLEX64 + c * m * COMPLEX64  # + the weighted samples
    psf = m * (per_sample + 4 * d) + fine2 * COMPLEX64 + math.prod(big) * COMPLEX64
    return {"fhd": int(fixed + fhd), "psf": int(fixed + psf)}


def plan(matrix: tuple[int, ...], n_coils: int, n_samples: int, *, sense: bool, iterations: int,
         available_bytes: int | None, gpu: bool, max_coil_batch: int | None = None,
         what: str = "memory", method: str = "auto", workers: int | None = None) -> Plan:
    """Plan the memory of a reconstruction of ``n_coils`` x ``n_samples`` samples onto ``matrix``.

    Parameters
    ----------
    sense
        True for CG-SENSE (one image, coil maps); False solves each coil (C images) and combines.
    available_bytes
        Memory the run may use (None: do not check).
    gpu
        Plan the GPU path (device arrays) instead of the CPU one.
    max_coil_batch
        Force at most this many coils per Toeplitz batch (tests, and users who share the device).
    method
        The engine. CPU: ``"auto"`` or ``"nufft"`` (FINUFFT, whose oversampled complex128 grids dominate the
        F^H d and PSF stages) or ``"exact"`` (the NumPy DFT, block by block). GPU: ``"gpu-nufft"`` (the GPU
        NUFFT: its fine grids, up to 8 coils at once, and the PSF's fine grid on the 2x grid) or anything
        else (the exact kernels, which need no work arrays).
    workers
        CPU transforms in flight at once (default: the CPUs this process may use).

    Raises
    ------
    ResourceError
        Even one coil at a time needs more than ``available_bytes``.
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}: expected one of {', '.join(METHODS)}")
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
    stages: dict[str, int] = {}
    if gpu and method == "gpu-nufft":
        stages = _gpu_nufft_stages(tuple(matrix), n_coils, n_samples, fixed=fixed)
    if not gpu:
        stages = _cpu_stages(tuple(matrix), n_coils, n_samples, sense=sense,
                             method="exact" if method == "exact" else "nufft",
                             workers=cpu_threads() if workers is None else max(1, int(workers)))
    before_cg = max(stages.values(), default=0)
    batch = n_coils if max_coil_batch is None else max(1, min(n_coils, int(max_coil_batch)))
    if available_bytes is not None:
        budget = int(available_bytes * HEADROOM)
        least = max(before_cg, fixed + per_coil)
        if least > budget:
            raise ResourceError(
                f"problem too large for {what}: needs at least {human_bytes(least)} "
                f"(matrix {list(matrix)}, {n_coils} coils, {n_samples} samples) but "
                f"{human_bytes(available_bytes)} is available"
            )
        batch = max(1, min(batch, (budget - fixed) // per_coil))
    fft_work = iterations * n_coils * grid2 * max(1.0, math.log2(grid2))
    if gpu and method == "gpu-nufft":
        from .operators.cost import nufft_seconds  # noqa: PLC0415

        seconds = nufft_seconds(tuple(matrix), n_samples, n_coils) + fft_work * GPU_FFT_S
    elif gpu:
        seconds = (n_coils * n_vox * n_samples / GPU_TRIPLES_PER_S + grid2 * n_samples / GPU_PAIRS_PER_S
                   + fft_work * GPU_FFT_S)
    else:
        seconds = (n_coils + 1) * n_samples / CPU_SAMPLES_PER_S + fft_work * CPU_FFT_S
    stages["iterations"] = int(fixed + batch * per_coil)
    return Plan(fixed_bytes=int(fixed), per_coil_bytes=int(per_coil), coil_batch=int(batch),
                n_coils=int(n_coils), peak_bytes=int(max(stages.values())),
                available_bytes=available_bytes, estimated_seconds=float(seconds), stages=stages)
