"""The server's resident memory under hostile clients, against what its limits let the connections hold.

An ``mri-recon serve --device cpu`` process on loopback with the limits given, warmed by one scan; then each
case of tests/hostile_clients.py (idle sockets, large TEXT messages, tiny acquisitions up to the scan limit,
clients that leave mid-message) with ``--clients`` connections at once, and a real client served after each;
last, ``--clients`` real clients at once with a 128^2 8-coil scan each (their reconstructions take turns, the
others' groups wait read as scans).
Measured: the growth of the server's peak RSS (``VmHWM``, restarted before each case) over its RSS before
the case, and of its RSS after, against the case's bound (docs/server.md). Usage: ``python
scripts/server_memory.py [--clients 8] [--max-scan-mib 64] [--max-message-mib 16] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

import hostile_clients as hostile  # noqa: E402
from server_helpers import make_scan  # noqa: E402

from mri_recon import api  # noqa: E402
from mri_recon.io.ismrmrd_write import write_ismrmrd  # noqa: E402
from mri_recon.server.client import read_scan, send_scan  # noqa: E402
from mri_recon.sim.simulate import simulate_scan  # noqa: E402

MIB = 2**20
RECONSTRUCTION_STATE = 16 * MIB
"""What a reconstruction holds beyond its plan's arrays (FFT plans, thread stacks: docs/planner.md)."""


def queued(folder: Path, clients: int) -> tuple[Path, tuple]:
    """A 128^2, 8-coil scan (200 spokes) sent by ``clients`` at once, and what they may hold: each its
    acquisitions read as a scan (:func:`hostile_clients.connection_bound`); and one reconstruction at a time
    (its plan and the library state beside it)."""
    scan = simulate_scan((128, 128), "golden", coils=8, snr=30.0, spokes=200, samples=256, seed=3)
    path = folder / "queued.mrd.h5"
    write_ismrmrd(path, [({}, scan)])
    held = hostile.held_bytes(read_scan(path)[1])
    _, _, plan = api.plan_prepared(scan, device="cpu")
    bound = clients * hostile.connection_bound(held, 0, group_read=True) + plan.peak_bytes + RECONSTRUCTION_STATE
    return path, (lambda a, x, q: hostile.queued_scans(a, path, clients), bound)


def measure(server, address, scan_file: Path, name: str, case) -> dict:
    xml, acquisitions = read_scan(scan_file)
    clients, bound = case
    started = time.perf_counter()
    grown, kept = hostile.peak_growth(server.pid, lambda: clients(address, xml, acquisitions))
    seconds = time.perf_counter() - started
    reply = hostile.served(scan_file, address)
    row = {"case": name, "peak_growth_bytes": grown, "kept_bytes": kept, "bound_bytes": bound,
           "served_after": bool(reply.images and not reply.errors), "seconds": seconds}
    print(f"{name:<18} peak +{grown / MIB:7.1f} MiB  (bound {bound / MIB:7.1f} MiB)  after +{kept / MIB:6.1f} MiB  "
          f"served after: {row['served_after']}  {seconds:.1f} s", flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--max-scan-mib", type=int, default=64)
    parser.add_argument("--max-message-mib", type=int, default=16)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    scan, message = args.max_scan_mib * MIB, args.max_message_mib * MIB
    with tempfile.TemporaryDirectory() as folder:
        scan_file = make_scan(Path(folder) / "scan.mrd.h5", 5)
        server, address = hostile.start_server(Path(folder) / "server.log", "--max-clients", str(args.clients),
                                               "--max-scan-bytes", str(scan), "--max-message-bytes", str(message),
                                               "--idle-timeout", "5", "--header-timeout", "1")
        try:
            send_scan(scan_file, *address)  # warm: every module a reconstruction uses is loaded
            baseline = hostile.memory(server.pid, "VmRSS")
            print(f"server RSS after one scan: {baseline / MIB:.1f} MiB")
            rows = [measure(server, address, scan_file, name, case)
                    for name, case in hostile.cases(args.clients, scan, message).items()]
            path, case = queued(Path(folder), args.clients)
            send_scan(path, *address)  # its reconstruction's modules and plans made once
            rows.append(measure(server, address, path, "queued scans", case))
            end = hostile.memory(server.pid, "VmRSS")
        finally:
            server.terminate()
            server.wait(60)
    report = {"date": time.strftime("%Y-%m-%d"), "cpus": len(os.sched_getaffinity(0)), "python":
              platform.python_version(), "clients": args.clients, "max_scan_bytes": scan, "max_message_bytes": message,
              "baseline_rss_bytes": baseline, "end_rss_bytes": end, "rows": rows}
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
