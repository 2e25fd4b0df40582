"""Soak test of ``mri-recon serve``: N concurrent clients streaming scans for M minutes.

The server runs as its own process (``mri-recon serve --port 0``). Each client has a scan of its own (a small
simulated golden-angle scan, one seed per client) and streams it again and again until the time is up (a
bounded loop: at most ``--max-rounds`` rounds); every image returned is compared bit for bit with that scan's
reference, ``mri-recon reconstruct`` of the file, so an image given to the wrong client or changed shows as a
mismatch. The server's resident memory (VmRSS) is read after the first minute and at the end. Output: JSON
(counts, mismatches, errors, p50/p99/max latency from a group's last acquisition sent to its image received,
RSS) on stdout, or to ``--json``.

    python scripts/server_soak.py --clients 8 --minutes 2 --device cpu --json soak.json
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchtools import child_env, start_server, write_report  # noqa: E402

from mri_recon.io.ismrmrd_write import write_ismrmrd  # noqa: E402
from mri_recon.server.client import send_scan  # noqa: E402
from mri_recon.sim.simulate import simulate_scan  # noqa: E402


def rss_mb(pid: int) -> float:
    """Resident memory of a process in MiB (``VmRSS`` of ``/proc/PID/status``)."""
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+) kB", text).group(1)) / 1024


def make_scans(folder: Path, count: int, matrix: int, coils: int, slices: int) -> list[Path]:
    paths = []
    for i in range(count):
        scans = [({"slice": s}, simulate_scan((matrix, matrix), "golden", coils=coils, snr=30.0,
                                              spokes=matrix, samples=2 * matrix, seed=1000 * i + s))
                 for s in range(slices)]
        paths.append(folder / f"client{i}.mrd.h5")
        write_ismrmrd(paths[-1], scans)
    return paths


def reference(path: Path, device: str) -> list[bytes]:
    """The image data ``mri-recon reconstruct`` writes for ``path`` (one bytes object per image)."""
    import ismrmrd

    out = path.with_suffix(".ref.mrd.h5")
    subprocess.run([sys.executable, "-m", "mri_recon", "reconstruct", str(path), "-o", str(out), "--device", device,
                    "-q"], check=True, env=child_env())
    with ismrmrd.Dataset(str(out), "dataset", create_if_needed=False, mode="r") as dataset:
        return [dataset.read_image("image_0", i).data.tobytes() for i in range(dataset.number_of_images("image_0"))]


def client_loop(index: int, path: Path, want: list[bytes], port: int, deadline: float, max_rounds: int,
                out: dict) -> None:
    stats = {"rounds": 0, "images": 0, "mismatches": 0, "errors": [], "latencies_ms": []}
    while time.time() < deadline and stats["rounds"] < max_rounds:
        try:
            _, reply = send_scan(path, "127.0.0.1", port, timeout=120)
        except Exception as exc:  # counted, the loop goes on
            stats["errors"].append(repr(exc)[:200])
            continue
        stats["rounds"] += 1
        stats["errors"] += reply.errors
        got = [image.data.tobytes() for image in reply.images]
        stats["images"] += len(got)
        stats["mismatches"] += int(got != want)
        stats["latencies_ms"] += reply.latencies_ms
    out[index] = stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--minutes", type=float, default=2.0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--matrix", type=int, default=32)
    parser.add_argument("--coils", type=int, default=4)
    parser.add_argument("--slices", type=int, default=2)
    parser.add_argument("--max-rounds", type=int, default=100000)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        paths = make_scans(Path(tmp), args.clients, args.matrix, args.coils, args.slices)
        wants = [reference(p, args.device) for p in paths]
        server, port = start_server(Path(tmp) / "server.log", args.device, "--max-clients", str(max(16, args.clients)))
        try:
            started = time.time()
            deadline = started + 60 * args.minutes
            results: dict[int, dict] = {}
            threads = [threading.Thread(target=client_loop, args=(i, paths[i], wants[i], port, deadline,
                                                                   args.max_rounds, results))
                       for i in range(args.clients)]
            for t in threads:
                t.start()
            rss_first = None
            while any(t.is_alive() for t in threads):
                if rss_first is None and time.time() - started >= 60:
                    rss_first = rss_mb(server.pid)
                time.sleep(0.5)
            rss_end = rss_mb(server.pid)
            alive = server.poll() is None
        finally:
            server.terminate()
            code = server.wait(120)
            log_lines = (Path(tmp) / "server.log").read_text().splitlines()
    latencies = np.concatenate([np.asarray(r["latencies_ms"], float) for r in results.values()] or [np.zeros(0)])
    report = {
        "clients": args.clients, "minutes": args.minutes, "device": args.device,
        "scan": {"matrix": args.matrix, "coils": args.coils, "slices": args.slices, "spokes": args.matrix,
                 "samples": 2 * args.matrix},
        "rounds": sum(r["rounds"] for r in results.values()),
        "images": sum(r["images"] for r in results.values()),
        "images_expected": sum(r["rounds"] * len(wants[i]) for i, r in results.items()),
        "mismatched_rounds": sum(r["mismatches"] for r in results.values()),
        "errors": [e for r in results.values() for e in r["errors"]][:20],
        "latency_ms": {"p50": float(np.percentile(latencies, 50)) if latencies.size else None,
                       "p99": float(np.percentile(latencies, 99)) if latencies.size else None,
                       "max": float(latencies.max()) if latencies.size else None},
        "server_rss_mb": {"after_1_min": rss_first, "end": rss_end,
                          "end_over_1_min": rss_end / rss_first if rss_first else None},
        "server_alive_at_end": alive, "server_exit_code_after_sigterm": code,
        "server_log_errors": [line for line in log_lines if " ERROR " in line][:20],
    }
    write_report(report, args.json)


if __name__ == "__main__":
    main()
