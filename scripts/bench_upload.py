"""Host-to-device copies of a scan's arrays: CuPy's pageable ``ndarray.set`` against
:class:`mri_recon.arrays.staging.Staging` (pinned buffers filled by several host threads) with 1 to 8 threads and
pieces of 1 to 4 MiB, for 16 MiB (2D 256^2, 8 coils), 100 MiB (3D 128^3, 8 coils) and 400 MiB (512^2, 64 coils,
k-space and maps), and the source pinned in place for one copy (``cudaHostRegister``, the copy, unregistered).
With ``--product``: coil compression on the way up instead (:meth:`Staging.copy_product`, ``(8, 32) @ (32, M)``
complex64, M = 823,296: the 512^2 32-coil scan of issue 46), against the staged copy of the 32 coils, the staged copy
of 8 coils, and the host product alone (one ``np.matmul`` of the whole array, BLAS's own threads).
Wall clock of the copy, device synchronized, median of ``--repeats`` after one warm-up; every
copy checked byte for byte. The host's last-level cache is flushed of the source before each copy, as in a
call, where the scan was read long before.
Usage: python scripts/bench_upload.py OUT.json [--repeats N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from mri_recon.arrays.backend import cupy_module
from mri_recon.arrays.staging import Staging

SIZES_MIB = (16, 100, 400)
OPTIONS = [(t, p) for t in (1, 2, 4, 8) for p in (1, 2, 4)]


def timed(fn, arguments: tuple, repeats: int, sync, evict) -> float:
    """Median wall clock of ``fn(*arguments)``, the host's caches flushed of the source before each (``evict``)."""
    fn(*arguments)
    sync()
    times = []
    for _ in range(repeats):
        evict()
        start = time.perf_counter()
        fn(*arguments)
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def registered_copy(cupy, host: np.ndarray, device) -> None:
    """The source pinned where it lies (``cudaHostRegister``), one direct copy, unpinned: all three timed."""
    runtime = cupy.cuda.runtime
    runtime.hostRegister(host.ctypes.data, host.nbytes, 0)
    try:
        runtime.memcpy(device.data.ptr, host.ctypes.data, host.nbytes, runtime.memcpyHostToDevice)
    finally:
        runtime.hostUnregister(host.ctypes.data)


def product_rows(cupy, repeats: int, sync, evict) -> dict:
    """The compression's product on the way up against the copies it replaces (see the module docstring)."""
    rng = np.random.default_rng(46)
    shape = (32, 823_296)
    host = (rng.standard_normal(shape, np.float32) + 1j * rng.standard_normal(shape, np.float32)).astype(np.complex64)
    matrix = (rng.standard_normal((8, 32)) + 1j * rng.standard_normal((8, 32))).astype(np.complex64)
    expected = matrix @ host
    full, small = cupy.empty(shape, np.complex64), cupy.empty(expected.shape, np.complex64)
    row = {"source_mib": host.nbytes / 2**20, "product_mib": expected.nbytes / 2**20,
           "host_matmul_s": timed(lambda: np.matmul(matrix, host), (), repeats, sync, evict)}
    for threads, piece in OPTIONS:
        stage = Staging(cupy, 0, threads=threads, piece=piece << 20)
        small.fill(np.nan)
        row[f"product_t{threads}_p{piece}_s"] = timed(stage.copy_product, (matrix, host, small), repeats, sync, evict)
        error = float(cupy.linalg.norm(small - cupy.asarray(expected)) / np.linalg.norm(expected))
        if not error < 1e-6:
            raise SystemExit(f"staged product wrong ({error:.1e}): {threads} threads, {piece} MiB pieces")
        if (threads, piece) in ((8, 4), (4, 4)):
            row[f"copy32_t{threads}_p{piece}_s"] = timed(stage.copy, (host, full), repeats, sync, evict)
            row[f"copy8_t{threads}_p{piece}_s"] = timed(stage.copy, (expected, small), repeats, sync, evict)
        stage.pool.shutdown()
    print("   " + " ".join(f"{k[:-2]}={v * 1e3:.2f}" for k, v in row.items() if k.endswith("_s")), flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--product", action="store_true", help="coil compression on the way up (see above)")
    args = parser.parse_args()
    cupy = cupy_module()
    sync = cupy.cuda.get_current_stream().synchronize
    scratch = np.zeros(512 << 20, np.uint8)

    def evict():
        scratch[::64] += 1  # a line of every 64 bytes of 512 MiB: the last-level cache holds none of the source

    if args.product:
        props = cupy.cuda.runtime.getDeviceProperties(0)
        with open(args.out, "w") as f:
            json.dump({"device": props["name"].decode(), "cupy": cupy.__version__,
                       "product": product_rows(cupy, args.repeats, sync, evict)}, f, indent=1)
        return

    rows = []
    for mib in SIZES_MIB:
        host = np.random.default_rng(mib).standard_normal((mib << 20) // 8).astype(np.float64)
        device = cupy.empty(host.shape, host.dtype)
        row = {"mib": mib, "pageable_s": timed(device.set, (host,), args.repeats, sync, evict),
               "registered_s": timed(registered_copy, (cupy, host, device), args.repeats, sync, evict)}
        if not bool((device == cupy.asarray(host)).all()):
            raise SystemExit(f"registered copy wrong: {mib} MiB")
        for threads, piece in OPTIONS:
            stage = Staging(cupy, 0, threads=threads, piece=piece << 20)
            device.fill(np.nan)
            seconds = timed(stage.copy, (host, device), args.repeats, sync, evict)
            if not bool((device == cupy.asarray(host)).all()):
                raise SystemExit(f"staged copy wrong: {mib} MiB, {threads} threads, {piece} MiB pieces")
            row[f"staged_t{threads}_p{piece}_s"] = seconds
            stage.pool.shutdown()
        rows.append(row)
        best = min((v, k) for k, v in row.items() if k.startswith("staged"))
        print(f"{mib} MiB: pageable {row['pageable_s'] * 1e3:.2f} ms ({mib / 1024 / row['pageable_s']:.1f} GiB/s); "
              f"registered in place {row['registered_s'] * 1e3:.2f} ms; "
              f"best staged {best[1]} {best[0] * 1e3:.2f} ms ({mib / 1024 / best[0]:.1f} GiB/s)", flush=True)
        print("   " + " ".join(f"{k[7:-2]}={v * 1e3:.2f}" for k, v in row.items() if k.startswith("staged")),
              flush=True)
    props = cupy.cuda.runtime.getDeviceProperties(0)
    with open(args.out, "w") as f:
        json.dump({"device": props["name"].decode(), "cupy": cupy.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
