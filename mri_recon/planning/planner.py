"""Memory and time planning for a reconstruction, before anything is allocated.

The planner follows the run stage by stage and takes the largest: the preparation (prewhitening, density
weights, coil-map estimates: :mod:`mri_recon.planning.preparation`), F^H d (the samples in double
precision, FINUFFT's oversampled complex128 fine grid per transform in flight, the complex128 images), the
PSF (FINUFFT's fine grid of the 2x grid, about ``(2.5 N)^D * 16`` bytes, and the complex128 PSF), the
kernel spectrum's FFT, and the CG iterations (spectrum, CG vectors and per-coil Toeplitz FFT work). It picks
how many coils go through the Toeplitz operator at once so that the peak fits the memory available; when
even one coil at a time does not fit it raises :class:`~mri_recon.errors.ResourceError` naming the size
needed and the size available, the stage and what to change. The memory available on the host is the least
of MemAvailable, the cgroup's limit and RLIMIT_AS (:func:`~mri_recon.arrays.backend.host_memory_limits`). Measured
against tracemalloc and peak RSS on the CPU in ``docs/planner.md`` (``scripts/measure_planner.py``). The GPU
figures count the device arrays only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..arrays.backend import cpu_threads, host_memory_available, host_memory_limits
from ..errors import ResourceError
from ..operators.engines import Encoding, engine
from . import preparation as prep_memory
from .preparation import Preparation

__all__ = ["Plan", "Preparation", "host_memory_available", "host_memory_limits", "human_bytes", "plan"]

COMPLEX64 = 8
FLOAT32 = 4
HEADROOM = 0.9  # leave 10% for allocator fragmentation and library workspaces


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
    """Bytes held at the peak of each stage: the preparation's ``prewhiten`` and ``dcf`` (CPU only),
    ``compress`` (coil compression) and ``coil_maps`` (when maps are estimated), then ``fhd``, ``psf``,
    ``spectrum`` (CPU only) and ``iterations``."""

    @property
    def batched(self) -> bool:
        return self.coil_batch < self.n_coils


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"


ADVICE = {
    "prewhiten": "reconstruct without prewhitening (--no-prewhiten) or with fewer noise samples",
    "dcf": "take the density weights from the file (--dcf file) or the analytic ramp (--dcf ramp)",
    "compress": "reconstruct without prewhitening (--no-prewhiten) or without coil compression",
    "coil_maps": ("give the coil maps in the file (--coil-maps file), solve each coil alone (--coil-maps rss) "
                  "or compress the coils first (--coil-compress N)"),
}
"""What to change when a stage of the preparation does not fit; other stages: the problem's size."""


def _prep_stages(matrix: tuple[int, ...], c: int, m: int, *, sense: bool, gpu: bool, workers: int,
                 preparation: Preparation) -> tuple[dict[str, int], int]:
    """Bytes at the peaks of the preparation's stages (inputs included), and the bytes held from then on that
    the later stages do not count (the caller's arrays, the whitened copies). On the GPU only the coil
    compression and the coil-map estimate run on the device; prewhitening and density weights are host work, and
    so is a compression applied on the way up (:attr:`Preparation.compress_on_the_way`); one applied after the
    upload holds the receivers' and the virtual coils' k-space, and the centre's Gram matrix, on the device.
    ``c`` is the scan's coils; the stages after coil compression hold the virtual ones."""
    d, n_vox = len(matrix), math.prod(matrix)
    estimated = preparation.coil_maps is not None

    def base(coils: int) -> int:
        return coils * m * COMPLEX64 + m * (d + 1) * FLOAT32 + (coils * n_vox * COMPLEX64 if sense and not estimated
                                                                else 0)

    stages: dict[str, int] = {}
    held = 0 if gpu else preparation.held_bytes
    k = preparation.noise_samples
    n = prep_memory.coils_after(preparation, c)
    if not gpu and k and n == c:
        peak, kept = prep_memory.prewhiten(c, m, k, n_vox, preparation.whitened_maps)
        stages["prewhiten"] = base(c) + held + peak
        held += kept - (c * n_vox * COMPLEX64 if estimated and preparation.whitened_maps else 0)  # maps dropped
    if n < c and gpu and preparation.compress_on_the_way:  # the device receives the virtual coils alone
        c = n
    if n < c:  # whitened and compressed in one product
        maps = sense and not estimated
        stages["compress"] = base(c) + held + prep_memory.compress(  # on a GPU: the centre's Gram there too
            c, n, m, 0 if gpu else k, n_vox, maps, preparation.compress_samples
        ) + preparation.compress_working
        if not gpu:  # the caller's k-space and maps stay, the later stages count the compressed ones instead
            held += base(c) - m * (d + 1) * FLOAT32 + n * k * COMPLEX64
        c = n
    if not gpu and preparation.dcf is not None:
        stages["dcf"] = base(c) + held + prep_memory.dcf(preparation.dcf, m, matrix, preparation.extent)
    if estimated:
        m_in = min(m, preparation.centre_samples or m)
        stages["coil_maps"] = base(c) + held + prep_memory.coil_maps(preparation.coil_maps, matrix, c, m, m_in,
                                                                     0 if gpu else workers)
    return stages, held


def _refusal(what: str, least: int, available: int, stage: str, shape: str, limit: str | None) -> ResourceError:
    """The :class:`ResourceError` of a plan that does not fit: bytes needed and available, what to change."""
    advice = ADVICE.get(stage, "use a smaller matrix, fewer coils or fewer samples")
    source = f" ({limit})" if limit else ""
    return ResourceError(f"problem too large for {what}: needs at least {human_bytes(least)} at its {stage} stage "
                         f"({shape}) but {human_bytes(available)} is available{source}; {advice}, or run where "
                         f"more memory is free")


def plan(matrix: tuple[int, ...], n_coils: int, n_samples: int, *, sense: bool, iterations: int,
         available_bytes: int | None, gpu: bool, max_coil_batch: int | None = None,
         what: str = "memory", method: str | type[Encoding] = "auto", workers: int | None = None,
         preparation: Preparation | None = None, limit: str | None = None) -> Plan:
    """Plan the memory of a reconstruction of ``n_coils`` x ``n_samples`` samples onto ``matrix`` (the stages
    after the preparation's coil compression with its virtual coils: :attr:`Preparation.virtual_coils`).

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
        The engine class, or its name on the device ``gpu`` says (:func:`~mri_recon.operators.engines.engine`:
        ``"auto"``, ``"exact"``, ``"nufft"``, the old ``"gpu"`` and ``"gpu-nufft"``). Its memory model
        (:meth:`~mri_recon.operators.engines.Encoding.stage_bytes`) gives the F^H d and PSF stages, its time
        model the estimate (CPU: FINUFFT's oversampled complex128 grids or the NumPy DFT's blocks; GPU: the
        NUFFT's fine grids, or none for the exact kernels).
    workers
        CPU transforms in flight at once (default: the CPUs this process may use).
    preparation
        What the preparation computes (:class:`Preparation`): its stages ``prewhiten``, ``compress``, ``dcf``
        (host) and ``coil_maps`` (on the device) are planned too, and the arrays it keeps count in every later
        stage;
        its ``trajectory``, when known, goes to the engine's memory model.
    limit
        The limit that sets ``available_bytes`` (named in the refusal).

    Raises
    ------
    ResourceError
        Even one coil at a time needs more than ``available_bytes``.
    """
    kind = engine(method, "gpu" if gpu else "cpu") if isinstance(method, str) else method
    preparation = preparation or Preparation()
    scan_coils, n_coils = n_coils, prep_memory.coils_after(preparation, n_coils)  # after coil compression
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
    stages, held = _prep_stages(matrix, scan_coils, n_samples, sense=sense, gpu=gpu, workers=workers,
                                preparation=preparation)
    work = kind.stage_bytes(matrix, n_coils, n_samples, sense=sense, fixed=fixed, workers=workers,
                            trajectory=preparation.trajectory)
    stages.update({name: value + held for name, value in work.items()})
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
                estimated_seconds=kind.run_seconds(matrix, n_samples, n_coils, iterations),
                stages=stages)
