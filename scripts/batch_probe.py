"""Where the time of one scan goes in a batch worker, alone and beside other workers: a diagnostic for the
multi-GPU batch (not a benchmark). Per scan and stage (load, prepare + reconstruct, write) in

- ``solo``: one process pinned to GPU 0 (no Dask), ``--scans`` scans in a loop;
- ``pair``: one such process per visible GPU at the same time (no Dask);
- ``dask-N``: a local cluster of N GPU workers (``start_local``), the same per-scan function submitted.

Each process also reports its ``CUDA_VISIBLE_DEVICES``, the PCI bus id of its device 0, its CPU affinity and
BLAS threads. Usage: ``python scripts/batch_probe.py OUT.json --scans 16``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def identity() -> dict:
    import cupy

    dev = cupy.cuda.Device(0)
    return {"pid": os.getpid(), "cvd": os.environ.get("CUDA_VISIBLE_DEVICES"), "pci": dev.pci_bus_id,
            "affinity": len(os.sched_getaffinity(0)), "omp": os.environ.get("OMP_NUM_THREADS")}


def one_scan(path: str, out: str) -> dict:
    import mri_recon
    from mri_recon.api import prepare_and_reconstruct
    from mri_recon.io import load_scans
    from mri_recon.io.cache import PsfCache
    from mri_recon.io.writers import write_result

    t0 = time.perf_counter()
    loaded = load_scans(path)
    t1 = time.perf_counter()
    results = [(key, *prepare_and_reconstruct(scan, iterations=30, tol=0.0, device="gpu", method="auto",
                                              psf_cache=PsfCache(os.environ.get("MRI_RECON_CACHE_DIR"))))
               for key, scan in loaded]
    t2 = time.perf_counter()
    write_result(out, results, path)
    t3 = time.perf_counter()
    del mri_recon
    return {"load": t1 - t0, "recon": t2 - t1, "write": t3 - t2, "total": t3 - t0,
            "timings": results[-1][-1].timings, "pid": os.getpid()}


def loop(paths: list[str], folder: str) -> dict:
    rows = [one_scan(p, os.path.join(folder, f"o{os.getpid()}_{i}.h5")) for i, p in enumerate(paths[:2])]  # warm
    began = time.perf_counter()
    rows = [one_scan(p, os.path.join(folder, f"o{os.getpid()}_{i}.h5")) for i, p in enumerate(paths)]
    wall = time.perf_counter() - began
    return {"identity": identity(), "wall": wall, "rows": rows}


def summary(rows: list[dict]) -> dict:
    keys = ["load", "recon", "write", "total"]
    out = {k: statistics.median(r[k] for r in rows) for k in keys}
    for k in rows[0]["timings"]:
        out["t_" + k] = statistics.median(r["timings"][k] for r in rows)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--scans", type=int, default=16)
    parser.add_argument("--child", nargs=2, metavar=("LIST", "FOLDER"))
    parser.add_argument("--no-dask", action="store_true")
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE for the pinned children")
    args = parser.parse_args()
    if args.child:
        paths = json.loads(Path(args.child[0]).read_text())
        result = loop(paths, args.child[1])
        args.out.write_text(json.dumps(result))
        return
    from bench_batch import make_scans

    from mri_recon.arrays.backend import gpu_count

    result: dict = {"gpus": gpu_count(), "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="probe.") as tmp:
        folder = Path(tmp)
        paths = [str(p) for p in make_scans(folder, args.scans, (256, 256), 8)]
        listing = folder / "list.json"
        listing.write_text(json.dumps(paths))

        def children(gpus: list[str]) -> list[dict]:
            procs = []
            for gpu in gpus:
                env = {**os.environ, **dict(e.split("=", 1) for e in args.env), "CUDA_VISIBLE_DEVICES": gpu}
                procs.append((subprocess.Popen([sys.executable, __file__, str(folder / f"c{gpu}.json"), "--child",
                                                str(listing), str(folder)], env=env), folder / f"c{gpu}.json"))
            return [json.loads(path.read_text()) if proc.wait() == 0 else {"failed": proc.returncode}
                    for proc, path in procs]

        gpus = [str(i) for i in range(result["gpus"])]
        for name, chosen in (("solo", gpus[:1]), ("pair", gpus)):
            began = time.perf_counter()
            runs = children(chosen)
            result[name] = [{"identity": r.get("identity"), "wall": r.get("wall"),
                             "scans_per_s": args.scans / r["wall"] if r.get("wall") else None,
                             "median": summary(r["rows"]) if "rows" in r else r} for r in runs]
            result[name + "_elapsed"] = time.perf_counter() - began
            print(name, json.dumps(result[name], indent=1), file=sys.stderr)
        from mri_recon.batch.cluster import start_local

        for count in [] if args.no_dask else sorted({1, len(gpus)}):
            cluster = start_local(count, "gpu")
            try:
                client = cluster.client
                ids = client.run(identity)
                warm = [client.submit(one_scan, p, str(folder / f"w{count}_{i}.h5"), pure=False)
                        for i, p in enumerate(paths[: 2 * count])]
                client.gather(warm)
                began = time.perf_counter()
                futures = [client.submit(one_scan, p, str(folder / f"d{count}_{i}.h5"), pure=False)
                           for i, p in enumerate(paths)]
                rows = client.gather(futures)
                wall = time.perf_counter() - began
                result[f"dask_{count}"] = {"kind": cluster.kind, "identity": ids, "wall": wall,
                                           "scans_per_s": args.scans / wall, "median": summary(rows),
                                           "per_worker": {pid: sum(r["pid"] == pid for r in rows)
                                                          for pid in {r["pid"] for r in rows}}}
                print(f"dask_{count}", json.dumps(result[f"dask_{count}"], indent=1), file=sys.stderr)
            finally:
                cluster.close()
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
