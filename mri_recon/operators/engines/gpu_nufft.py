"""GPU non-uniform FFT: F^H d (type 1), F (type 2) and the Toeplitz PSF, CuPy RawKernels plus cuFFT.

The algorithm and its parameters are those of :mod:`mri_recon.operators.engines.nufft_params` (FINUFFT's ES
kernel, sigma = 2,
w = ceil(log10(1/eps)) + 1); the kernels are ``kernels/nufft.cu`` (its header states the maths and the
``-D`` contract). A :class:`GpuNufft` plan is made once per trajectory: it checks the trajectory, sorts the
samples into bins on the GPU (the only host synchronization: the number of subproblems), and keeps its work
buffers and cuFFT plans, so :meth:`GpuNufft.adjoint` and :meth:`GpuNufft.forward` only enqueue work on the
current stream.

Conventions: voxel j of an axis of size N sits at r = (j - floor(N/2)) / N; the trajectory is float32
``(M, D)`` in cycles per FOV (|k_d| <= N_d); ``adjoint(d)[c, n] = sum_m d[c, m] exp(+i 2 pi k_m . r_n)``
and ``forward(x)[c, m] = sum_n x[c, n] exp(-i 2 pi k_m . r_n)``; complex64 in and out.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...arrays.backend import Device, cupy_module, device_memory, resolve_device
from ...errors import DeviceError, InvalidDataError, SchemaError, TrajectoryUnitsError
from ...kernels import get_kernel
from ..arith import scaled
from ..gpu.fft import CACHE_LIMIT, fft_plan
from .nufft_launch import (
    DEFAULT_BINS,
    DEFAULT_EPS,
    DEFAULT_WARPS,
    GRID_MEMORY_SHARE,
    KERNEL_FILE,
    SCAN_THREADS,
    SHARED_LIMIT,
    SPREAD_METHODS,
    SUBPROBLEM,
    THREADS,
    launch_coils,
    nufft_defines,
    spread_bytes,
    spread_coils,
)
from .nufft_params import NufftParams, nufft_params


def _padded(values: tuple[int, ...]) -> tuple[int, int, int]:
    return tuple(values) + (1,) * (3 - len(values))  # type: ignore[return-value]


def _rows(array: Any, first: int, count: int) -> Any:
    """Rows ``first .. first + count - 1`` of ``array``: the array itself when that is all of it (no view)."""
    return array if first == 0 and count == array.shape[0] else array[first:first + count]


def _require(array: Any, name: str, dtype: str, shape: tuple[int, ...], device: Device) -> None:
    cupy = cupy_module()
    if not isinstance(array, cupy.ndarray):
        raise DeviceError(f"{name} must be a CuPy array on the GPU, found {type(array).__name__}")
    if int(array.device.id) != device.index:
        raise DeviceError(f"{name} lives on gpu:{array.device.id} but the plan is on gpu:{device.index}")
    if array.dtype != np.dtype(dtype) or array.shape != shape:
        raise SchemaError(f"{name} must be {dtype} of shape {shape}, found {array.dtype} {array.shape}")
    if not array.flags.c_contiguous:
        raise SchemaError(f"{name} must be C-contiguous")


class GpuNufft:
    """A NUFFT plan for one trajectory and image size on one GPU.

    Parameters
    ----------
    trajectory
        float32 ``(M, D)`` in cycles per FOV (NumPy or CuPy), D = ``len(matrix)``, |k_d| <= N_d.
    matrix
        Image size ``(N1, N2)`` or ``(N1, N2, N3)``.
    eps
        Relative tolerance of the algorithm (sets the kernel width; 1e-6 gives about 1e-6 in float64 and
        about 2e-6 with the float32 grid).
    device
        ``"gpu"``, ``"gpu:N"``, ``N`` or a :class:`~mri_recon.arrays.backend.Device`; None: the current GPU.
    bins
        Bin size per axis in fine-grid points (tuning; default :data:`DEFAULT_BINS`).
    max_group
        Most coils transformed together (one fine grid each); default: as many as fit
        :data:`GRID_MEMORY_SHARE` of the free memory, at most 8.
    spread, warps
        Spreading method of :data:`SPREAD_METHODS` and warps per block of the "warp" method.
    subproblem, shared_limit
        Most samples per spreading block, most shared memory per spreading block (tuning).
    checked
        The trajectory was validated already (finite, within ``|k_d| <= N_d``), as the pipeline's and the
        public functions' are: skip the plan's own check and its host read-back.
    """

    def __init__(self, trajectory: Any, matrix: tuple[int, ...], *, eps: float = DEFAULT_EPS,
                 device: Device | str | int | None = None, bins: tuple[int, ...] | None = None,
                 max_group: int | None = None, spread: str = "warp", warps: int | None = None,
                 subproblem: int = SUBPROBLEM, shared_limit: int | None = None, checked: bool = False) -> None:
        cupy = cupy_module()
        if cupy is None:
            raise DeviceError("the GPU NUFFT needs CuPy and an NVIDIA GPU (use the CPU path)")
        if device is None:
            device = int(trajectory.device.id) if isinstance(trajectory, cupy.ndarray) else int(
                cupy.cuda.Device().id)
        self.device = resolve_device(device)
        if not self.device.is_gpu:
            raise DeviceError("GpuNufft needs a GPU device, found 'cpu'")
        self.params: NufftParams = nufft_params(matrix, eps)
        self.matrix = self.params.matrix
        self.dim = len(self.matrix)
        if spread not in SPREAD_METHODS:
            raise InvalidDataError(f"unknown spreading method {spread!r}: expected one of {', '.join(SPREAD_METHODS)}")
        self.spread = spread
        self.warps = 0 if spread == "atomic" else int(warps or DEFAULT_WARPS[self.dim])
        if not 0 <= self.warps <= THREADS // 32:
            raise InvalidDataError(f"warps must lie in 1..{THREADS // 32}, found {warps!r}")
        self.bins = _padded(tuple(bins) if bins is not None else DEFAULT_BINS[spread][self.dim][:self.dim])
        if len(self.bins) != 3 or min(self.bins) < 1 or (self.dim == 2 and self.bins[2] != 1):
            raise InvalidDataError(f"bins must be {self.dim} positive sizes, found {bins!r}")
        self.subproblem = int(subproblem)
        self.shared_limit = int(SHARED_LIMIT[self.dim] if shared_limit is None else shared_limit)
        self._kernels: dict[tuple[str, int, bool], Any] = {}
        self._spreaders: dict[tuple[int, bool], tuple[Any, int, int, int]] = {}
        self._size_args = self._sizes()
        with cupy.cuda.Device(self.device.index):
            k = self._trajectory(trajectory, checked)
            self.n_samples = int(k.shape[0])
            self._sort(k)
            ker = np.concatenate([*self.params.deconvolution(), np.ones(3 - self.dim)])
            self._ker = cupy.asarray(ker.astype(np.float32))
            per_coil = 8 * math.prod(self.params.fine)
            if max_group is None:
                free, _ = device_memory(self.device)
                max_group = int(min(8, max(1, GRID_MEMORY_SHARE * free // per_coil)))
            self.max_group = int(max_group)
        self._grids: dict[int, Any] = {}
        self._ffts: dict[tuple[int, ...], Any] = {}  # the cuFFT plans of the grids, held (see _fft)

    # ------------------------------------------------------------------------------------------------
    # setup

    def _trajectory(self, trajectory: Any, checked: bool) -> Any:
        cupy = cupy_module()
        k = cupy.asarray(trajectory)
        if k.ndim != 2 or k.shape[1] != self.dim:
            raise SchemaError(f"trajectory must have shape (M, {self.dim}) for matrix {list(self.matrix)}, "
                              f"found {tuple(k.shape)}")
        if k.shape[0] < 1:
            raise InvalidDataError("there are no samples (M = 0)")
        if k.shape[0] >= 2**31:
            raise InvalidDataError(f"at most 2^31 - 1 samples per plan, found {k.shape[0]}")
        if k.dtype != cupy.float32:
            raise SchemaError(f"trajectory must be float32, found {k.dtype}")
        k = cupy.ascontiguousarray(k)
        if checked:
            return k
        reach = cupy.max(cupy.abs(k), axis=0).get()  # the setup's one check of every value
        if not np.all(np.isfinite(reach)):
            raise InvalidDataError("the trajectory holds NaN or Inf")
        limit = np.asarray(self.matrix, dtype=np.float64)
        if np.any(reach > limit):
            axis = int(np.argmax(reach / limit))
            raise TrajectoryUnitsError(
                f"trajectory axis {axis} reaches |k| = {reach[axis]:g} but matrix axis {axis} has "
                f"{self.matrix[axis]} voxels (limit |k| <= {self.matrix[axis]}, twice Nyquist). Did you scale "
                f"the trajectory correctly? The unit is cycles per field of view (1 / FOV).")
        return k

    def _kernel(self, name: str, coils: int = 1, real: bool = False):
        """The kernel ``name`` compiled for ``coils`` per launch, looked up once per plan (a transform's launches
        then cost no module lookup)."""
        key = (name, coils, real)
        kernel = self._kernels.get(key)
        if kernel is None:
            defines = nufft_defines(self.dim, self.params.width, coils, self.bins, real)
            kernel = self._kernels[key] = get_kernel(KERNEL_FILE, name, defines, self.device)
        return kernel

    def _geometry(self) -> tuple[Any, ...]:
        fine = _padded(self.params.fine)
        nb = [-(-f // b) for f, b in zip(fine, self.bins)]
        scale = [np.float64(f / n) for f, n in zip(fine, _padded(self.matrix))]
        return (*scale, *(np.int32(f) for f in fine), np.int32(nb[1]), np.int32(nb[2])), math.prod(nb)

    def _sort(self, k: Any) -> None:
        """Counting sort of the samples by bin, sorted per-axis (i1, z0), and the subproblem list."""
        cupy = cupy_module()
        m = self.n_samples
        geometry, n_bins = self._geometry()
        blocks = (-(-m // THREADS),)
        bin_of = cupy.empty(m, dtype=cupy.int32)
        rank = cupy.empty(m, dtype=cupy.int32)
        counts = cupy.zeros(n_bins, dtype=cupy.int32)
        self._kernel("mri_recon_nufft_bin_count")(blocks, (THREADS,), (k, np.int64(m), *geometry, bin_of, rank,
                                                                      counts))
        size = self.subproblem
        start, sub_start = cupy.empty(n_bins, dtype=cupy.int32), cupy.empty(n_bins, dtype=cupy.int32)
        found = cupy.empty(1, dtype=cupy.int32)
        self._kernel("mri_recon_nufft_bin_scan")((1,), (SCAN_THREADS,), (counts, np.int32(n_bins), np.int32(size),
                                                                       start, sub_start, found))
        self._perm = cupy.empty(m, dtype=cupy.int32)
        self._first = cupy.empty((self.dim, m), dtype=cupy.int32)
        self._z0 = cupy.empty((self.dim, m), dtype=cupy.float32)
        self._kernel("mri_recon_nufft_bin_scatter")(
            blocks, (THREADS,), (k, np.int64(m), *geometry, bin_of, rank, start, self._perm, self._first,
                                 self._z0))
        total = int(found.get()[0])  # the one host synchronization of a plan
        self._sub_bin, self._sub_first, self._sub_count = (cupy.empty(total, dtype=cupy.int32) for _ in range(3))
        self._kernel("mri_recon_nufft_subproblems")((-(-n_bins // THREADS),), (THREADS,), (
            counts, start, sub_start, np.int32(n_bins), np.int32(size), self._sub_bin, self._sub_first,
            self._sub_count))
        self.n_subproblems = total
        self._geometry_args = geometry

    def _grid(self, group: int) -> Any:
        """The fine grid of ``group`` coils, complex64 ``(group, *fine)``, allocated once."""
        if group not in self._grids:
            self._grids[group] = cupy_module().empty((group, *self.params.fine), dtype=np.complex64)
        return self._grids[group]

    def _fft(self, grid: Any, inverse: bool) -> None:
        """In-place unnormalized FFT over the grid axes of every coil (batched). The plans of grids up to
        :data:`~mri_recon.operators.gpu.fft.CACHE_LIMIT` bytes are also held by this plan, so that a CUDA graph
        of its transforms (:mod:`mri_recon.operators.replay`) never outlives their work areas."""
        cupy = cupy_module()
        from cupy.cuda import cufft  # noqa: PLC0415 - CuPy is optional

        direction = cufft.CUFFT_INVERSE if inverse else cufft.CUFFT_FORWARD
        shape = tuple(grid.shape)
        with cupy.cuda.Device(self.device.index):
            plan = self._ffts.get(shape) or fft_plan(shape, self.device.index)
            if grid.nbytes <= CACHE_LIMIT:
                self._ffts[shape] = plan
            plan.fft(grid, grid, direction)

    def _groups(self, coils: int) -> list[tuple[int, int]]:
        group = min(coils, self.max_group)
        return [(c, min(group, coils - c)) for c in range(0, coils, group)]

    def _sizes(self) -> tuple[np.int32, ...]:
        return (*(np.int32(n) for n in _padded(self.matrix)), *(np.int32(f) for f in _padded(self.params.fine)))

    # ------------------------------------------------------------------------------------------------
    # transforms

    def _spreader(self, coils: int, real: bool) -> tuple[Any, int, int, int]:
        """The spreading launch of ``coils`` coils: (kernel, coils per launch, shared bytes, threads), made once
        (the kernel's shared-memory limit raised for it)."""
        key = (coils, real)
        if key not in self._spreaders:
            step = spread_coils(self.bins, self.params.width, self.dim, coils, real, self.shared_limit, self.warps)
            name = "mri_recon_nufft_spread_warp" if self.warps else "mri_recon_nufft_spread"
            kernel = self._kernel(name, step, real)
            shared = spread_bytes(self.bins, self.params.width, self.dim, step, real, self.warps)
            if kernel.max_dynamic_shared_size_bytes < shared:
                kernel.max_dynamic_shared_size_bytes = shared
            self._spreaders[key] = (kernel, step, shared, 32 * self.warps if self.warps else THREADS)
        return self._spreaders[key]

    def _spread(self, data: Any, grid: Any, coils: int, real: bool) -> None:
        """Add the spread samples of ``coils`` coils (``data`` rows) to ``grid`` (zeroed by the caller)."""
        kernel, step, shared, threads = self._spreader(coils, real)
        _, _, _, n0, n1, n2, nb1, nb2 = self._geometry_args
        for c in range(0, coils, step):
            active = min(step, coils - c)
            kernel((self.n_subproblems,), (threads,),
                   (self._sub_first, self._sub_count, self._sub_bin, self._perm, self._first, self._z0,
                    _rows(data, c, active), np.int64(self.n_samples), np.int32(active),
                    np.float32(self.params.beta), _rows(grid, c, active), n0, n1, n2, nb1, nb2),
                   shared_mem=shared)

    def _deconv_blocks(self, sizes: tuple[int, ...]) -> tuple[int, int]:
        rows = math.prod(sizes[:-1])
        return rows, -(-sizes[-1] // 128)

    def _adjoint_into(self, data: Any, out: Any, real: bool) -> Any:
        cupy = cupy_module()
        coils = data.shape[0]
        deconv = self._kernel("mri_recon_nufft_deconv_adjoint")
        with cupy.cuda.Device(self.device.index):
            stream = cupy.cuda.get_current_stream()
            for c0, group in self._groups(coils):
                grid = self._grid(group)
                cupy.cuda.runtime.memsetAsync(grid.data.ptr, 0, grid.nbytes, stream.ptr)
                self._spread(_rows(data, c0, group), grid, group, real)
                self._fft(grid, inverse=True)
                deconv(self._deconv_blocks(self.matrix), (128,),
                       (grid, _rows(out, c0, group), self._ker, np.int32(group), *self._size_args))
        return out

    def adjoint(self, kspace: Any, *, out: Any | None = None) -> Any:
        """F^H d: complex64 ``(C, M)`` on the plan's GPU -> complex64 ``(C, *matrix)``."""
        cupy = cupy_module()
        coils = int(kspace.shape[0]) if getattr(kspace, "ndim", 0) == 2 else -1
        _require(kspace, "kspace", "complex64", (max(coils, 1), self.n_samples), self.device)
        with cupy.cuda.Device(self.device.index):
            if out is None:
                out = cupy.empty((coils, *self.matrix), dtype=np.complex64)
            _require(out, "out", "complex64", (coils, *self.matrix), self.device)
            return self._adjoint_into(kspace, out, real=False)

    def forward(self, image: Any, *, out: Any | None = None) -> Any:
        """F x: complex64 ``(C, *matrix)`` on the plan's GPU -> complex64 ``(C, M)``."""
        cupy = cupy_module()
        coils = int(image.shape[0]) if getattr(image, "ndim", 0) == self.dim + 1 else -1
        _require(image, "image", "complex64", (max(coils, 1), *self.matrix), self.device)
        with cupy.cuda.Device(self.device.index):
            if out is None:
                out = cupy.empty((coils, self.n_samples), dtype=np.complex64)
            _require(out, "out", "complex64", (coils, self.n_samples), self.device)
            pad = self._kernel("mri_recon_nufft_deconv_forward")
            for c0, group in self._groups(coils):
                grid = self._grid(group)
                pad(self._deconv_blocks(self.params.fine), (128,),
                    (_rows(image, c0, group), grid, self._ker, np.int32(group), *self._size_args))
                self._fft(grid, inverse=False)
                step = launch_coils(group, grid[0].nbytes)
                interp = self._kernel("mri_recon_nufft_interp", step)
                _, _, _, n0, n1, n2, _, _ = self._geometry_args
                for c in range(0, group, step):
                    active = min(step, group - c)
                    interp((-(-self.n_samples // THREADS),), (THREADS,),
                           (self._perm, self._first, self._z0, _rows(grid, c, active), np.int64(self.n_samples),
                            np.int32(active), np.float32(self.params.beta), _rows(out, c0 + c, active),
                            n0, n1, n2))
        return out

    def adjoint_real(self, weights: Any, *, out: Any | None = None) -> Any:
        """sum_m w_m exp(+i 2 pi k_m . r) for real float32 weights ``(M,)`` -> complex64 ``matrix``
        (the spreading adds real values only: half the shared-memory work of :meth:`adjoint`)."""
        cupy = cupy_module()
        _require(weights, "weights", "float32", (self.n_samples,), self.device)
        with cupy.cuda.Device(self.device.index):
            if out is None:
                out = cupy.empty(self.matrix, dtype=np.complex64)
            _require(out, "out", "complex64", self.matrix, self.device)
            self._adjoint_into(weights[None], out[None], real=True)
        return out


def psf(trajectory: Any, weights: Any, matrix: tuple[int, ...], *, eps: float = DEFAULT_EPS,
        device: Device | str | int | None = None, checked: bool = False) -> Any:
    """Toeplitz PSF ``p[j] = sum_m w_m exp(+i 2 pi k_m . (j - N) / N)``, j in [0, 2N) per axis.

    Type 1 with trajectory 2k on matrix 2N. ``weights``: real ``(M,)`` (NumPy or CuPy, made float32).
    Returns complex64 ``2 * matrix`` on the GPU.
    """
    cupy = cupy_module()
    if cupy is None:
        raise DeviceError("the GPU NUFFT needs CuPy and an NVIDIA GPU (use the CPU path)")
    big = tuple(2 * int(n) for n in matrix)
    k = cupy.asarray(trajectory)
    if k.dtype != cupy.float32:
        raise SchemaError(f"trajectory must be float32, found {k.dtype}")
    plan = GpuNufft(scaled(cupy.ascontiguousarray(k), 2.0), big, eps=eps, device=device, checked=checked)
    w = cupy.asarray(weights)
    if w.dtype.kind == "c":
        raise SchemaError("PSF weights must be real, found complex values")
    return plan.adjoint_real(cupy.ascontiguousarray(w, dtype=cupy.float32))
