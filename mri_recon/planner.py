"""Memory and time planning for a reconstruction, before anything is allocated.

The planner follows the run stage by stage and takes the largest: the preparation (prewhitening, density
weights, coil-map estimates: :mod:`mri_recon.prep_memory`), F^H d (the samples in double
precision, FINUFFT's oversampled complex128 fine grid per transform in flight, the complex128 images), the
PSF (FINUFFT's fine grid of the 2x grid, about ``(2.5 N)^D * 16`` bytes, and the complex128 PSF), the
kernel spectrum's FFT, and the CG iterations (spectrum, CG vectors and per-coil Toeplitz FFT work). It picks
how many coils go through the Toeplitz operator at once so that the peak fits the memory available; when
even one coil at a time does not fit it raises :class:`~mri_recon.errors.ResourceError` naming the size
needed and the size available, the stage and what to change. The memory available on the host is the least
of MemAvailable, the cgroup's limit and RLIMIT_AS (:func:`~mri_recon.backend.host_memory_limits`). Measured
against tracemalloc and peak RSS on the CPU in ``docs/planner.md`` (``scripts/measure_planner.py``). The GPU
figures count the device arrays only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from . import prep_memory
from .backend import cpu_threads, host_memory_available, host_memory_limits
from .errors import ResourceError
from .operators.engines.encoding import NUFFT_EPS
from .prep_memory import Preparation

__all__ = ["Plan", "Preparation", "host_memory_available", "host_memory_limits", "human_bytes", "plan"]

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
    """Bytes held at the peak of each stage: the preparation's ``prewhiten`` and ``dcf`` (CPU only) and
    ``coil_maps`` (when maps are estimated), then ``fhd``, ``psf``, ``spectrum`` (CPU only) and ``iterations``."""

    @property
    def batched(self) -> bool:
        return self.coil_batch < self.n_coils


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
    from .operators.engines.finufft import fine_grid_shape  # noqa: PLC0415 - numpy only; keeps this module light

    d, m, c = len(matrix), n_samples, n_coils
    n_vox = math.prod(matrix)
    big = tuple(2 * n for n in matrix)
    grid2 = math.prod(big)
    inputs = c * m * COMPLEX64 + m * (d + 1) * FLOAT32 + (c * n_vox * COMPLEX64 if sense else 0)
    coords = m * d * FLOAT64 * 2  # the float64 trajectory and FINUFFT's scaled coordinates
    if method == "nufft":
        in_flight = min(workers, c)
        fhd_work = (c * m * COMPLEX128  # the samples in complex128
                    + in_flight * math.prod(fine_grid_shape(matrix, NUFFT_EPS)) * COMPLEX128)
        psf_work = (m * COMPLEX128 + m * d * FLOAT64  # the weights in complex128, the doubled trajectory
                    + math.prod(fine_grid_shape(big, NUFFT_EPS)) * COMPLEX128)
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
    from .operators.engines.encoding import GPU_NUFFT_EPS  # noqa: PLC0415 - plain Python; keeps this module light
    from .operators.engines.nufft_params import nufft_params  # noqa: PLC0415

    d, m, c = len(matrix), n_samples, n_coils
    big = tuple(2 * n for n in matrix)
    fine = math.prod(nufft_params(matrix, GPU_NUFFT_EPS).fine)
    fine2 = math.prod(nufft_params(big, GPU_NUFFT_EPS).fine)
    per_sample = 12 + 8 * d + 4 * d  # the plan's sort buffers and its copy of the trajectory
    group = min(c, NUFFT_MAX_GROUP)
    fhd = m * per_sample + group * fine * COMPLEX64 + c * m * COMPLEX64  # + the weighted samples
    psf = m * (per_sample + 4 * d) + fine2 * COMPLEX64 + math.prod(big) * COMPLEX64
    return {"fhd": int(fixed + fhd), "psf": int(fixed + psf)}


ADVICE = {
    "prewhiten": "reconstruct without prewhitening (--no-prewhiten) or with fewer noise samples",
    "dcf": "take the density weights from the file (--dcf file) or the analytic ramp (--dcf ramp)",
    "coil_maps": ("give the coil maps in the file (--coil-maps file), solve each coil alone (--coil-maps rss) "
                  "or compress the coils first"),
}
"""What to change when a stage of the preparation does not fit; other stages: the problem's size."""


def _prep_stages(matrix: tuple[int, ...], c: int, m: int, *, sense: bool, gpu: bool, workers: int,
                 preparation: Preparation) -> tuple[dict[str, int], int]:
    """Bytes at the peaks of the preparation's stages (inputs included), and the bytes held from then on that
    the later stages do not count (the caller's arrays, the whitened copies). On the GPU only the coil-map
    estimate runs on the device; prewhitening and density weights are host work."""
    d, n_vox = len(matrix), math.prod(matrix)
    estimated = preparation.coil_maps is not None
    base = c * m * COMPLEX64 + m * (d + 1) * FLOAT32 + (c * n_vox * COMPLEX64 if sense and not estimated else 0)
    stages: dict[str, int] = {}
    held = 0 if gpu else preparation.held_bytes
    if not gpu and preparation.noise_samples:
        peak, kept = prep_memory.prewhiten(c, m, preparation.noise_samples, n_vox, preparation.whitened_maps)
        stages["prewhiten"] = base + held + peak
        held += kept - (c * n_vox * COMPLEX64 if estimated and preparation.whitened_maps else 0)  # maps dropped
    if not gpu and preparation.dcf is not None:
        stages["dcf"] = base + held + prep_memory.dcf(preparation.dcf, m, matrix, preparation.extent)
    if estimated:
        m_in = min(m, preparation.centre_samples or m)
        stages["coil_maps"] = base + held + prep_memory.coil_maps(preparation.coil_maps, matrix, c, m_in,
                                                                  0 if gpu else workers)
    return stages, held


def _refusal(what: str, least: int, available: int, stage: str, shape: str, limit: str | None) -> ResourceError:
    """The :class:`ResourceError` of a plan that does not fit: bytes needed and available, what to change."""
    advice = ADVICE.get(stage, "use a smaller matrix, fewer coils or fewer samples")
    source = f" ({limit})" if limit else ""
    return ResourceError(f"problem too large for {what}: needs at least {human_bytes(least)} at its {stage} stage "
                         f"({shape}) but {human_bytes(available)} is available{source}; {advice}, or run where "
                         f"more memory is free")


def _seconds(matrix: tuple[int, ...], n_coils: int, n_samples: int, iterations: int, *, gpu: bool,
             method: str) -> float:
    """The time estimate (rates measured in docs/benchmarks.md)."""
    n_vox = math.prod(matrix)
    grid2 = n_vox * 2 ** len(matrix)
    fft_work = iterations * n_coils * grid2 * max(1.0, math.log2(grid2))
    if gpu and method == "gpu-nufft":
        from .operators.engines.cost import nufft_seconds  # noqa: PLC0415

        return nufft_seconds(tuple(matrix), n_samples, n_coils) + fft_work * GPU_FFT_S
    if gpu:
        return (n_coils * n_vox * n_samples / GPU_TRIPLES_PER_S + grid2 * n_samples / GPU_PAIRS_PER_S
                + fft_work * GPU_FFT_S)
    return (n_coils + 1) * n_samples / CPU_SAMPLES_PER_S + fft_work * CPU_FFT_S


def plan(matrix: tuple[int, ...], n_coils: int, n_samples: int, *, sense: bool, iterations: int,
         available_bytes: int | None, gpu: bool, max_coil_batch: int | None = None,
         what: str = "memory", method: str = "auto", workers: int | None = None,
         preparation: Preparation | None = None, limit: str | None = None) -> Plan:
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
    preparation
        What the preparation computes (:class:`Preparation`): its stages ``prewhiten``, ``dcf`` (host) and
        ``coil_maps`` (on the device) are planned too, and the arrays it keeps count in every later stage.
    limit
        The limit that sets ``available_bytes`` (named in the refusal).

    Raises
    ------
    ResourceError
        Even one coil at a time needs more than ``available_bytes``.
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}: expected one of {', '.join(METHODS)}")
    matrix = tuple(matrix)
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
    workers = cpu_threads() if workers is None else max(1, int(workers))
    stages, held = _prep_stages(matrix, n_coils, n_samples, sense=sense, gpu=gpu, workers=workers,
                                preparation=preparation or Preparation())
    if gpu and method == "gpu-nufft":
        stages.update(_gpu_nufft_stages(matrix, n_coils, n_samples, fixed=fixed))
    if not gpu:
        cpu = _cpu_stages(matrix, n_coils, n_samples, sense=sense, method="exact" if method == "exact" else "nufft",
                          workers=workers)
        stages.update({name: value + held for name, value in cpu.items()})
    batch = n_coils if max_coil_batch is None else max(1, min(n_coils, int(max_coil_batch)))
    if available_bytes is not None:
        budget = int(available_bytes * HEADROOM)
        least = {**stages, "iterations": fixed + held + per_coil}
        stage = max(least, key=least.get)
        if least[stage] > budget:
            shape = f"matrix {list(matrix)}, {n_coils} coils, {n_samples} samples"
            raise _refusal(what, least[stage], available_bytes, stage, shape, limit)
        batch = max(1, min(batch, (budget - fixed - held) // per_coil))
    stages["iterations"] = int(fixed + held + batch * per_coil)
    return Plan(fixed_bytes=int(fixed), per_coil_bytes=int(per_coil), coil_batch=int(batch),
                n_coils=int(n_coils), peak_bytes=int(max(stages.values())), available_bytes=available_bytes,
                estimated_seconds=_seconds(matrix, n_coils, n_samples, iterations, gpu=gpu, method=method),
                stages=stages)
