""":func:`mri_recon.prepare_scan` on the device the solve runs on: the scan goes up once and is prepared there.

:func:`prepare_on_device` makes the choices :func:`~mri_recon.prep.prepare_scan` makes, with the same errors
in the same order, and returns a :class:`DeviceScan` whose big arrays are already on the device, for
:func:`mri_recon.pipeline.reconstruct` (whose upload of an array already there is no copy). What runs where:

- host: the choices, the gradient-delay correction of the trajectory (RING's estimate on spoke pairs, as
  :func:`~mri_recon.prep.prepare_scan` does it) and the field-map pair check; the noise covariance, its
  eigenvalues, Cholesky factor and inverse (``(C, K)`` noise to ``(C, C)``: microseconds, and the same bits
  as the host path) and the whitened noise itself (small, kept for the prepared scan); Pipe-Menon weights
  (:func:`~mri_recon.prep.dcf.pipe_menon`: a convex hull and FINUFFT at eps 1e-4, which the GPU NUFFT would
  not reproduce to float32 rounding).
- device: the k-space and coil maps whitened chunk by chunk once they are up (:mod:`mri_recon.prep.upload`),
  or, compressed to virtual coils (:mod:`mri_recon.prep.compress`: the matrix from the host's k-space centre,
  as on the host, computed on a host thread while the trajectory goes up), whitened and compressed by one
  product ``A W`` that the host threads filling the pinned buffers apply on the way up, so that only the
  virtual coils cross, or, where the memory plan has room for the receivers' k-space on the device
  (``compress_after_upload``), goes up unchanged, and the centre's Gram matrix is computed and ``A W`` applied
  there; geometric compression (one matrix per readout position) is computed while the k-space goes up
  unchanged and applied on the device between FFTs along the readout (the noise on the host); the ramp
  weights (:mod:`mri_recon.prep.device_dcf`), and the checks of what the preparation
  computed (finite whitened k-space and maps; finite, non-negative, not all zero weights): one reduction, one
  read.
  Coil-map estimation and the maps' normalization run later in the pipeline, on the device, as before.

Arrays the scan brought were validated when the :class:`~mri_recon.scan.Scan` was made and are not checked
again. A :class:`DeviceScan` of NumPy arrays (``device`` the CPU) runs the same code in NumPy: the tests
compare it with :func:`~mri_recon.prep.prepare_scan`.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..arrays.backend import Device, blas_on_one_thread, get_xp, to_host
from ..checks.validation import check_field_map_pair
from ..errors import InvalidDataError, SchemaError
from ..kernels import warm_up
from ..operators import arith
from ..operators.reads import NEGATIVE, NOT_FINITE, POSITIVE, Flags
from ..scan import Scan, ScanSizes
from . import check_choices, coil_map_method, extent_record, missing_maps, reader_record
from .compress import Compression, centre_samples, wanted
from .compress_methods import compression_task, one_matrix
from .device_dcf import ramp_weights
from .maps_methods import COIL_MAPS
from .upload import upload, upload_columns


@dataclass(frozen=True, eq=False)
class DeviceScan(ScanSizes):
    """A prepared scan whose k-space, trajectory, weights and coil maps live on one device (CuPy arrays on a
    GPU, NumPy on the CPU); the rest stays on the host. Shapes and dtypes as in :class:`~mri_recon.scan.Scan`,
    already validated."""

    kspace: Any
    """complex64 ``(C, M)`` on the device."""
    trajectory: Any
    """float32 ``(M, D)`` on the device."""
    matrix: tuple[int, ...]
    weights: Any = None
    """float32 ``(M,)`` on the device, or None."""
    coil_maps: Any = None
    """complex64 ``(C, *matrix)`` on the device, or None."""
    field_map: np.ndarray | None = None
    times: np.ndarray | None = None
    noise: np.ndarray | None = None
    """complex64 ``(C, K)`` on the host (whitened when the data are)."""
    ground_truth: np.ndarray | None = None
    attrs: Mapping[str, Any] = field(default_factory=dict)
    source: str = "<memory>"

    def __repr__(self) -> str:
        return (f"DeviceScan(matrix={list(self.matrix)}, coils={self.n_coils}, samples={self.n_samples}, "
                f"on {'gpu' if get_xp(self.kspace) is not np else 'cpu'}, source={self.source!r})")

    def __reduce__(self):
        """Pickled (a Dask batch ships prepared scans to the task that writes them) as the host
        :class:`~mri_recon.scan.Scan`: a process without the GPU can read it back."""
        return _scan_from_fields, (self.to_scan(),)

    def to_scan(self) -> Scan:
        """The same scan on the host, as a validated :class:`~mri_recon.scan.Scan`."""
        arrays = {name: None if getattr(self, name) is None else to_host(getattr(self, name))
                  for name in ("kspace", "trajectory", "weights", "coil_maps")}
        return Scan(matrix=self.matrix, field_map=self.field_map, times=self.times, noise=self.noise,
                    ground_truth=self.ground_truth, attrs=dict(self.attrs), source=self.source, **arrays)


def _scan_from_fields(scan: Scan) -> Scan:
    return scan


def whitening_of(scan: Scan) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(W, L, whitened noise)`` on the host: the whitening matrix, the receiver basis and ``W n``, with
    the errors of :func:`~mri_recon.prep.noise.prewhiten`."""
    from .noise import apply_whitening, whitening_and_basis

    w, basis = whitening_and_basis(scan)
    return w, basis, apply_whitening(w, scan.noise)


def _weights(scan: Scan, dcf: str, trajectory: Any, device: Device, flags: Flags) -> tuple[Any, list[Check]]:
    """The density weights on the device and the checks on them still to read (each with the error it stands
    for)."""
    if dcf == "file" and scan.weights is None:
        raise SchemaError(f"{scan.source}: --dcf file needs a 'weights' dataset, and the scan has none")
    zero = (f"{scan.source}: density compensation '{dcf}' gave all-zero weights (are all samples at k = 0?); "
            f"the image would be zero")
    if dcf == "ramp":
        weights, moving, positive = ramp_weights(trajectory, scan.matrix)
        checks = _weight_checks(flags, weights, scan.source, zero)
        return weights, [(moving, "ramp weights need samples away from k = 0, found all samples at the centre"),
                         (positive, "weights are zero near the centre of k-space: no sample within a few cycles "
                                    "per FOV of k = 0 carries weight"), *checks]
    if dcf == "pipe":
        from .dcf import pipe_menon

        weights = upload(np.asarray(pipe_menon(scan.trajectory, scan.matrix)), device)
        return weights, _weight_checks(flags, weights, scan.source, zero)
    if dcf == "none" or scan.weights is None:
        return None, []
    return upload(scan.weights, device), []  # the scan's own: validated when the scan was made


Check = tuple[Any, str]
"""A check still to read and the error it stands for: a device boolean, or ``(slot, bit, wanted)`` of the
preparation's :class:`~mri_recon.operators.reads.Flags` (the check passes when the bit is set as wanted)."""


def _weight_checks(flags: Flags, weights: Any, source: str, zero: str) -> list[Check]:
    """Checks of computed weights, in the order of the host path: some positive (prepare_scan), finite,
    non-negative (the Scan's validation)."""
    slot = flags.check(weights)
    return [((slot, POSITIVE, True), zero),
            ((slot, NOT_FINITE, False), f"{source}: dataset 'weights' contains NaN or Inf value(s)"),
            ((slot, NEGATIVE, False), f"{source}: weights must be non-negative")]


def _finite(flags: Flags, array: Any, name: str, source: str) -> Check:
    return ((flags.check(array), NOT_FINITE, False),
            f"{source}: dataset '{name}' contains NaN or Inf value(s) after prewhitening")


def _read_checks(flags: Flags, checks: list[Check]) -> None:
    """Read every check (the flags in one transfer, device booleans in another); raise the first failed
    check's error."""
    if not checks:
        return
    bits = flags.read() if flags.count else []
    booleans = [test for test, _ in checks if not isinstance(test, tuple)]
    if booleans:
        xp = get_xp(booleans[0])
        booleans = to_host(xp.stack([xp.asarray(b, dtype=bool).reshape(()) for b in booleans])).tolist()
    values = iter(booleans)
    for test, message in checks:
        ok = bool(bits[test[0]] & test[1]) == test[2] if isinstance(test, tuple) else next(values)
        if not ok:
            raise InvalidDataError(message)


def _rows_up(array: np.ndarray, device: Device, matrix: Any) -> Any:
    """``array`` ``(C, ...)`` on ``device``, multiplied by ``matrix`` ``(N, C)`` over its first axis when given
    (:func:`upload_columns`: a whitening in place on the device, a compression on the host on the way up)."""
    flat = upload_columns(array.reshape(array.shape[0], -1), device, matrix)
    return flat.reshape(flat.shape[0], *array.shape[1:])


def _on_the_way(compression: Compression | None, w: Any, deferred: bool, first: bool) -> tuple[Any, bool]:
    """The matrix the k-space and maps are multiplied by on their way up (None: none), and whether they are
    to be compressed after (:func:`_compressed`): without compression the whitening ``w``; a compression
    computed first (``first``) its one matrix ``A W`` (``w`` where it compresses nothing); else nothing yet."""
    if not deferred:
        return w, False
    if not first:
        return None, True
    product = None if compression is None else compression.product(w)
    if product is not None:
        return product, False
    return (w, False) if compression is None or not compression.compresses else (None, True)


class _CompressionTiming:
    """When and from what a preparation's coil compression is computed, started on the host thread ``pool``: one
    matrix (:func:`~.compress_methods.one_matrix`) from the host's k-space before the k-space goes up, to be applied
    on the way (:attr:`first`); any other from the host's k-space while it goes up unchanged; or, with
    ``after_upload``, one matrix from the uploaded k-space, the centre's samples chosen on the host thread
    meanwhile (its Gram matrix then computed on the device)."""

    def __init__(self, pool: ThreadPoolExecutor, task: Any, scan: Scan, choice: Any, method: str,
                 after_upload: bool) -> None:
        self.deferred = wanted(choice)  # whitened and compressed on the way up (one matrix), or after
        one = self.deferred and one_matrix(choice, method)
        self.after_upload, self.first = one and after_upload, one and not after_upload
        self.task, self.pending = task, None
        if self.deferred and not self.after_upload:
            self.pending = pool.submit(task)
        elif self.after_upload and not isinstance(choice, Compression):
            self.pending = pool.submit(centre_samples, scan.trajectory, scan.n_coils)

    def before_upload(self) -> Compression | None:
        """The compression to apply on the way up (None: none, or not yet known)."""
        return self.pending.result() if self.first else None

    def once_up(self, kspace: Any, before: Compression | None) -> Compression | None:
        """The compression once the k-space is up (``kspace``, as it went up); ``before``: :meth:`before_upload`'s."""
        if self.after_upload:
            return self.task(uploaded=kspace, index=None if self.pending is None else self.pending.result())
        return self.pending.result() if self.deferred and not self.first else before


def _compressed(compression: Compression | None, kspace: Any, maps: Any, trajectory: Any, w: Any) -> tuple:
    """The k-space and maps uploaded unchanged, whitened by ``w`` and compressed (``A W``,
    :meth:`~.compress.Compression.kspace` and ``maps``), or whitened in place where nothing is compressed."""
    if compression is not None and compression.compresses:
        return compression.kspace(kspace, trajectory, w), None if maps is None else compression.maps(maps, w)
    if w is not None:
        matrix = get_xp(kspace).asarray(w.astype(np.complex64))
        kspace = arith.whiten(kspace, matrix)
        if maps is not None:
            maps = arith.whiten(maps.reshape(maps.shape[0], -1), matrix).reshape(maps.shape)
    return kspace, maps


@blas_on_one_thread
def prepare_on_device(scan: Scan, device: Device, *, prewhiten: bool = True, dcf: str = "auto",
                      coil_maps: str = "auto", field_map: str = "correct", gradient_delay: Any = "none",
                      coil_compress: Any = "none", coil_compress_method: str = "svd",
                      compress_after_upload: bool = False) -> tuple[DeviceScan, dict[str, Any]]:
    """:func:`~mri_recon.prep.prepare_scan` with the scan's big arrays uploaded once to ``device`` and prepared
    there (see the module docstring): the same choices, record and errors, the prepared arrays equal to the
    host path's to float32 rounding. Coil compression's matrix comes from the host's k-space centre as on the
    host (:func:`~mri_recon.prep.compress_methods.compression_task`, on a host thread while the trajectory goes
    up); one matrix (SVD) is applied on the host as the k-space and maps go up, a geometric compression on the
    device after they went up unchanged (its matrices computed meanwhile). With ``compress_after_upload`` (the
    memory plan found room for the receivers' k-space on the device) one matrix is applied there too, after the
    k-space went up unchanged: the centre's samples are chosen on a host thread meanwhile and their Gram matrix
    is computed on the device (:func:`~.compress.centre_gram`), so that no product runs on the host. The host's
    BLAS runs on one thread throughout, as on the CPU path: its idle threads wait by spinning after each call,
    on the cores the copies' threads need."""
    from .gradient_delay import correct_gradient_delay

    check_choices(dcf, coil_maps, field_map)
    (scan,), delays = correct_gradient_delay(scan, gradient_delay)  # on the host, before the trajectory goes up
    record: dict[str, Any] = {"prewhitened": False, **delays, **reader_record(scan), **extent_record(scan)}
    attrs, field_values = dict(scan.attrs), (scan.field_map, scan.times)
    if field_map == "correct":
        check_field_map_pair(scan.field_map, scan.times, scan.source)
    elif scan.field_map is not None or scan.times is not None:
        record["field_map"], attrs["field_map_correction"], field_values = "ignored", "ignored", (None, None)
    whiten = prewhiten and scan.noise is not None
    w, basis, noise = whitening_of(scan) if whiten else (None, None, scan.noise)
    ignored = field_values[0] is None and scan.field_map is not None  # compressed as the host's: without the map
    compressed = scan.replace(field_map=None, times=None) if ignored else scan
    task = compression_task(compressed, coil_compress, coil_compress_method, w)  # the choices checked here
    checks: list[Check] = []
    with device.use(), ThreadPoolExecutor(1) as pool:
        timing = _CompressionTiming(pool, task, scan, coil_compress, coil_compress_method, compress_after_upload)
        warm_up(device)  # CuPy's own kernels compiled ahead, for what this run asks of CuPy (kernels.warmup)
        flags = Flags(device.xp)
        trajectory = upload(scan.trajectory, device)
        weights, weight_checks = _weights(scan, dcf, trajectory, device, flags)
        compression = timing.before_upload()
        matrix, after = _on_the_way(compression, w, timing.deferred, timing.first)
        kspace = _rows_up(scan.kspace, device, matrix)
        compression = timing.once_up(kspace, compression)
        name = coil_map_method(scan, coil_maps, scan.n_coils if compression is None else compression.virtual)
        method = COIL_MAPS[name]
        if method.file and scan.coil_maps is None:
            _read_checks(flags, weight_checks)  # the host path raises those first
            raise missing_maps(scan, name)
        maps = _rows_up(scan.coil_maps, device, matrix) if method.file else None
        if after:
            kspace, maps = _compressed(compression, kspace, maps, scan.trajectory, w)
        if w is not None:
            checks += [_finite(flags, kspace, "kspace", scan.source)]
            checks += [_finite(flags, maps, "coil_maps", scan.source)] if maps is not None else []
        _read_checks(flags, checks + weight_checks)
    if compression is not None:
        record.update(compression.record())
        noise = noise if not compression.compresses or scan.noise is None else compression.noise(scan.noise, w)
        basis = compression.basis(basis)
    if whiten:
        attrs["prewhitened"], record["prewhitened"] = True, True
    record["dcf"] = dcf if dcf != "auto" else ("file" if weights is not None else "none")
    record["coil_maps"] = name
    record["estimate_maps"] = name if method.estimated else None
    record["maps_basis"] = None if method.file else basis
    ready = DeviceScan(kspace=kspace, trajectory=trajectory, matrix=scan.matrix, weights=weights, coil_maps=maps,
                       field_map=field_values[0], times=field_values[1], noise=noise,
                       ground_truth=scan.ground_truth, attrs=attrs, source=scan.source)
    return ready, record

